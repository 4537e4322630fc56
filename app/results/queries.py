"""The results' SQL that every study type shares (each type's own is in its package:
``app.studytypes.nextword.queries``, ``app.studytypes.ratings.queries``).

- :func:`kind_codes`: the kind codes the statistics count by; :func:`study_assignments`
  and :func:`assignment_flags`: the assignments a study's answers (judgments, ratings) join
  to, with the flags of kept work that may not count (:class:`Flagged` reads them);
  :func:`load_annotators`: what the exclusion rules and the quality tables read about each
  annotator.
- :func:`select_spec` and :func:`spec_columns`: a column spec run as numpy columns. On
  PostgreSQL each row is packed server-side into one fixed-width bytea and all rows into one
  value, read with one ``numpy.frombuffer`` (no Python object per value); other databases
  (SQLite) fetch tuples.
- :func:`raw_columns` and :func:`stream_rows`: every field a re-analysis needs, streamed in
  batches (``yield_per``: a server-side cursor on PostgreSQL), so an export runs in
  constant memory; :func:`iter_item_rows` for every study's items.
- :func:`study_counts`, :func:`provenance_examples`: small figures for the study page and
  the provenance manifest; :func:`latest_score`: a study's newest stored scores.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import (
    Integer,
    Select,
    String,
    cast,
    func,
    select,
    type_coerce,
)
from sqlalchemy.orm import Session, aliased

from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    ForcedSample,
    Hit,
    HitPosition,
    Item,
    Judgment,
    Study,
    StudyScore,
)

# Kind codes: data and model first (the stats module's DATA_KIND, MODEL_KIND).
FIXED_KINDS = ("data", "model")
ATTENTION_KIND = "attention"  # researcher-supplied attention items (app.hits.service)
BATCH = 2000  # rows per fetch of a streamed export


def kind_codes(study: Study) -> list[str]:
    """Kind names by code: ``data`` 0, ``model`` 1, the study's other kinds, ``attention``."""
    others = [k for k in study.kinds if k not in FIXED_KINDS and k != ATTENTION_KIND]
    return [*FIXED_KINDS, *others, ATTENTION_KIND]


@dataclass(kw_only=True)
class Flagged:
    """What the exclusion rules read of a study's answers beside the answers themselves:
    per answer its assignment's flags (``assignment_flags``, ``FLAG_*`` bits; None: none
    known, as for answers made up in tests), and per annotator (indexed like
    ``annotator_ids``) whether blocked, whether their past work is excluded, their label,
    channel, and whether a simulated crowd made them (``annotators.simulated``), not a
    person. Mixed into each type's columns (judgments, ratings); keyword-only, after the
    type's own columns."""

    assignment_flags: np.ndarray | None = None
    annotator_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    annotator_blocked: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    annotator_exclude_past: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    annotator_labels: list[str] = field(default_factory=list)
    annotator_channels: list[str] = field(default_factory=list)
    annotator_simulated: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    @staticmethod
    def simulated_annotators(ids: np.ndarray) -> dict[str, Any]:
        """The per-annotator columns of a made-up crowd with these ``ids``: none blocked or
        excluded, labelled ``simulated-<id>`` on the channel ``simulated``."""
        return {
            "annotator_ids": ids,
            "annotator_blocked": np.zeros(ids.size, bool),
            "annotator_exclude_past": np.zeros(ids.size, bool),
            "annotator_labels": [f"simulated-{i}" for i in ids],
            "annotator_channels": ["simulated"] * ids.size,
        }

    def flagged(self, flag: int) -> np.ndarray:
        """Which answers' assignments carry `flag` (a FLAG_* bit)."""
        if self.assignment_flags is None:
            return np.zeros(len(self), bool)
        return (self.assignment_flags & flag) != 0

    def annotator_columns(self) -> dict[str, Any]:
        """The per-annotator columns, by name (to carry them over to a subset)."""
        return {name: getattr(self, name) for name in ANNOTATOR_COLUMNS}


ANNOTATOR_COLUMNS = (
    "annotator_ids",
    "annotator_blocked",
    "annotator_exclude_past",
    "annotator_labels",
    "annotator_channels",
    "annotator_simulated",
)


# Assignment flags (kept work that may not count; the results' exclusion rules).
FLAG_OVER_CAP = 1  # a late answer past the annotator's cap
FLAG_EXTRA_REPLICA = 2  # a late answer past the HIT's replicas
FLAG_AFTER_BLOCK = 4  # sent after the annotator was blocked
FLAG_UNVERIFIED = 8  # MTurk work not yet confirmed through the MTurk API
ASSIGNMENT_FLAGS = (
    ("over_cap", FLAG_OVER_CAP),
    ("extra_replica", FLAG_EXTRA_REPLICA),
    ("after_block", FLAG_AFTER_BLOCK),
    ("unverified", FLAG_UNVERIFIED),
)


def assignment_flags(asg: Any = Assignment):
    """The assignment's FLAG_* bits in one integer (under 16)."""
    packed = None
    for name, bit in ASSIGNMENT_FLAGS:
        term = bit * cast(getattr(asg, name), Integer)
        packed = term if packed is None else packed + term
    return packed


# Columns as (name, SQL expression, SQL type to cast to, numpy type of the binary field).
def select_spec(spec: list[tuple]) -> Select:
    return select(*(cast(expr, t).label(name) for name, expr, t, _ in spec))


def spec_columns(
    session: Session, stmt: Select, spec: list[tuple], *, parallel: bool = False
) -> dict[str, np.ndarray]:
    """Run `stmt` and return its columns as numpy arrays (native byte order)."""
    if session.get_bind().dialect.name == "postgresql":
        return packed_columns(session, stmt, spec, parallel=parallel)
    rows = session.connection().execute(stmt).all()
    table = np.array(rows, dtype=np.float64).reshape(len(rows), len(spec))
    out = {}
    for k, (name, _, _, t) in enumerate(spec):
        out[name] = table[:, k].astype(np.dtype(t).newbyteorder("="))
    return out


_SEND = {
    ">i8": "int8send",
    ">i4": "int4send",
    ">i2": "int2send",
    ">f8": "float8send",
    "?": "boolsend",
}
# Planner costs for a parallel scan (see packed_columns), restored after the query.
_PARALLEL_COSTS = {"parallel_setup_cost": "0", "parallel_tuple_cost": "0"}


def packed_columns(
    session: Session, stmt: Select, spec: list[tuple], *, parallel: bool = False
) -> dict[str, np.ndarray]:
    """PostgreSQL: each row packed server-side into one fixed-width bytea of big-endian
    values (``int4send(a) || float8send(b) || ...``), all rows aggregated into one bytea
    (``string_agg``), fetched in binary and read with one ``numpy.frombuffer`` as a
    structured array: one row crosses the wire, not one message per judgment (a
    row-per-message COPY costs seconds in the driver for 450,000 rows), and one
    aggregate call per row instead of one per column.

    JIT compilation is turned off for the transaction: for this plain scan-and-join it
    costs more than the query. The packing runs in a subquery that is not flattened
    (``OFFSET 0``), so with ``parallel`` the per-row work (the items' JSON) runs in
    parallel workers below the Gather; the planner, which costs a JSON operator like an
    addition, is told that workers and their tuples are cheap for this one query (the
    settings are put back after it). Rows then come in any order: callers sort by id.
    """
    conn = session.connection()
    sql = str(stmt.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    row = " || ".join(f"{_SEND[t]}(s.{name})" for name, _, _, t in spec)
    dtype = np.dtype([(name, t) for name, _, _, t in spec])
    raw = conn.connection.driver_connection
    with raw.cursor(binary=True) as cur:
        cur.execute("SET LOCAL jit = off")
        before = {}
        if parallel:
            for name, value in _PARALLEL_COSTS.items():
                before[name] = cur.execute(f"SELECT current_setting('{name}')").fetchone()[0]
                cur.execute(f"SELECT set_config('{name}', '{value}', true)")
        query = (
            f"SELECT count(*), string_agg(p.r, ''::bytea) "
            f"FROM (SELECT {row} AS r FROM ({sql}) AS s OFFSET 0) AS p"
        )
        n, buf = cur.execute(query).fetchone()
        for name, value in before.items():  # (after an error, the rollback restores them)
            cur.execute("SELECT set_config(%s, %s, true)", (name, value))
    rows = np.frombuffer(buf or b"", dtype=dtype)
    if rows.size != n:
        raise RuntimeError(f"{rows.size} packed rows for {n} rows")
    return {name: rows[name].astype(np.dtype(t).newbyteorder("=")) for name, _, _, t in spec}


def study_assignments(study: Study) -> Any:
    """The study's assignments (id, annotator, HIT, status and the flags of kept work that
    may not count) as an alias of `Assignment` over a subquery: what judgments and ratings
    join to.

    The study's assignments first (with their HITs), then the judgments (or ratings)
    against that one table: one hash probe per row instead of two. OFFSET 0 keeps the
    planner from flattening the subquery and joining every row to all assignments first.
    """
    sub = (
        select(
            Assignment.id,
            Assignment.annotator_id,
            Assignment.hit_id,
            Assignment.status,
            *(getattr(Assignment, name) for name, _ in ASSIGNMENT_FLAGS),
        )
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(Hit.study_id == study.id)
        .offset(0)
        .subquery("a")
    )
    return aliased(Assignment, sub)


@dataclass(frozen=True)
class Annotators:
    """A study's annotators in id order: what the exclusion rules and the quality tables
    read about each (their work is matched to them by ``ids``)."""

    ids: np.ndarray
    blocked: np.ndarray
    exclude_past: np.ndarray
    labels: list[str]
    channels: list[str]
    simulated: np.ndarray

    def columns(self) -> dict[str, Any]:
        """As the ``annotator_*`` fields of `Judgments` (and of the ratings' columns)."""
        return {
            "annotator_ids": self.ids,
            "annotator_blocked": self.blocked,
            "annotator_exclude_past": self.exclude_past,
            "annotator_labels": self.labels,
            "annotator_channels": self.channels,
            "annotator_simulated": self.simulated,
        }


def load_annotators(session: Session, study: Study) -> Annotators:
    """Every annotator of `study`, one small query; a label is the researcher's name for
    them, else the platform's id, else ``annotator <id>``."""
    rows = (
        session.connection()
        .execute(
            select(
                Annotator.id,
                Annotator.blocked,
                Annotator.exclude_past,
                Annotator.label,
                Annotator.external_id,
                Annotator.channel,
                Annotator.simulated,
            )
            .where(Annotator.study_id == study.id)
            .order_by(Annotator.id)
        )
        .all()
    )
    return Annotators(
        ids=np.array([a[0] for a in rows], dtype=np.int64),
        blocked=np.array([bool(a[1]) for a in rows], dtype=bool),
        exclude_past=np.array([bool(a[2]) for a in rows], dtype=bool),
        labels=[a[3] or a[4] or f"annotator {a[0]}" for a in rows],
        channels=[getattr(a[5], "value", str(a[5])) for a in rows],
        simulated=np.array([bool(a[6]) for a in rows], dtype=bool),
    )


# --------------------------------------------------------------------------- exports


def _raw(col, kind: str):
    """A column fetched without SQLAlchemy's per-value processing (the export converts):
    strings for JSON, enums and timestamps, integers for booleans. Exports touch every
    value of millions of rows; the processors would cost several times the query."""
    return type_coerce(col, Integer if kind == "bool" else String).label(col.key)


def raw_columns(spec) -> list:
    return [_raw(col, kind) if kind else col for col, kind in spec]


def stream_rows(session: Session, stmt: Select) -> Iterator[tuple[list[str], list[tuple]]]:
    # Per statement: Connection.execution_options() would change the connection for good.
    result = session.connection().execute(stmt.execution_options(yield_per=BATCH))
    keys = list(result.keys())
    for part in result.partitions():
        yield keys, part


# The assignment's flags of kept work that may not count, as export columns (see
# app.results.exclusions.exclusion_mask).
ASSIGNMENT_FLAG_COLUMNS = [(getattr(Assignment, name), "bool") for name, _ in ASSIGNMENT_FLAGS]
# The participant's side of an answer (issue 33): its HIT's comment and the assignment's page
# signals, made per item by `app.annotation.participants.with_page_signals`.
PARTICIPANT_COLUMNS = [
    (Assignment.comment.label("hit_comment"), None),
    (Assignment.page_signals, "json"),
]


def answer_rows(spec: list[tuple], answers: Any) -> Select:
    """``select(*raw_columns(spec))`` of the answers in `answers` (the judgments' or the
    ratings' model) joined to their assignment, HIT, item and annotator: an export's rows
    before its study's filter and order."""
    return (
        select(*raw_columns(spec))
        .join(Assignment, Assignment.id == answers.assignment_id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .join(Item, Item.id == answers.item_id)
        .join(Annotator, Annotator.id == Assignment.annotator_id)
    )


def answers_per_cell(
    session: Session, items: Any, answers: Any, *, complete: Any = None
) -> dict[tuple[int, str], tuple[int, int | None]]:
    """Per (length, kind) of the items matching `items`, their answers (rows of `answers`,
    the judgments' or the ratings' model) and, with `complete`, how many have that column
    set (a rating's consistency): every cell, ``(0, 0 or None)`` where none. The study
    page's collection table."""
    counts = select(Item.length, Item.kind, func.count(answers.id))
    if complete is not None:
        counts = counts.add_columns(func.count(complete))
    counts = counts.join(answers, answers.item_id == Item.id)
    rows = session.execute(counts.where(items).group_by(Item.length, Item.kind))
    none = (0, None if complete is None else 0)
    found = {(r[0], r[1]): (r[2], r[3] if complete is not None else None) for r in rows}
    return defaultdict(lambda: none, found)


def iter_item_rows(session: Session, study: Study) -> Iterator[tuple[list[str], list[tuple]]]:
    """Every item of `study` (skipped ones included, with their reason) and where it is
    shown: ``(column names, batch of rows)`` in item-id order, streamed like
    :func:`iter_judgment_rows`."""
    spec = [
        (Item.id.label("item_id"), None),
        (Item.kind, None),
        (Item.length, None),
        (Item.index, None),
        (Item.is_attention, "bool"),
        (Item.skip_reason, None),
        (Item.prompt, None),
        (Item.source, None),
        (Item.words, None),
        (Item.true_next_word, None),
        (Item.choices, "json"),
        (Hit.id.label("hit_id"), None),
        (Hit.index.label("hit_index"), None),
        (HitPosition.position, None),
        (HitPosition.choice_order, "json"),
        (Item.provenance, "json"),
    ]
    stmt = (
        select(*raw_columns(spec))
        .outerjoin(HitPosition, HitPosition.item_id == Item.id)
        .outerjoin(Hit, Hit.id == HitPosition.hit_id)
        .where(Item.study_id == study.id)
        .order_by(Item.id)
    )
    yield from stream_rows(session, stmt)


def study_counts(session: Session, study: Study) -> dict[str, int]:
    """Items, HITs, assignments and judgments of a study, in one query."""
    sid = study.id

    def count(stmt) -> Any:
        return stmt.scalar_subquery()

    row = session.execute(
        select(
            count(
                select(func.count(Item.id)).where(
                    Item.study_id == sid, Item.skip_reason.is_(None), Item.is_attention.is_(False)
                )
            ).label("items"),
            count(
                select(func.count(Item.id)).where(
                    Item.study_id == sid, Item.skip_reason.is_(None), Item.is_attention.is_(True)
                )
            ).label("attention_items"),
            count(
                select(func.count(Item.id)).where(
                    Item.study_id == sid, Item.skip_reason.is_not(None)
                )
            ).label("skipped_items"),
            count(select(func.count(Hit.id)).where(Hit.study_id == sid)).label("hits"),
            count(
                select(func.count(Assignment.id))
                .join(Hit, Hit.id == Assignment.hit_id)
                .where(Hit.study_id == sid, Assignment.status == AssignmentStatus.submitted)
            ).label("assignments_submitted"),
            count(
                select(func.count(Judgment.id))
                .join(Assignment, Assignment.id == Judgment.assignment_id)
                .join(Hit, Hit.id == Assignment.hit_id)
                .where(Hit.study_id == sid)
            ).label("judgments"),
            count(select(func.count(Annotator.id)).where(Annotator.study_id == sid)).label(
                "annotators"
            ),
        )
    ).one()
    return {k: int(v or 0) for k, v in row._mapping.items()}


def provenance_examples(session: Session, study: Study) -> dict[str, dict[str, Any]]:
    """The provenance record of the first item of each kind (how items were made)."""
    first = (
        select(func.min(Item.id))
        .where(Item.study_id == study.id)
        .group_by(Item.kind, Item.is_attention)
    )
    rows = session.execute(
        select(Item.kind, Item.is_attention, Item.provenance)
        .where(Item.id.in_(first))
        .order_by(Item.id)
    ).all()
    return {(f"{k} (attention)" if att and k != ATTENTION_KIND else k): p for k, att, p in rows}


def latest_score(session: Session, study: Study, name: str) -> StudyScore | None:
    """The newest stored scores `name` of `study` (the current ones), or None."""
    return session.scalars(
        select(StudyScore)
        .where(StudyScore.study_id == study.id, StudyScore.name == name)
        .order_by(StudyScore.computed_at.desc(), StudyScore.id.desc())
        .limit(1)
    ).first()


def forced_samples(session: Session, study: Study) -> list[ForcedSample]:
    """The study's forced-prefix samples (issue 34), by length, kind and index."""
    return list(
        session.scalars(
            select(ForcedSample)
            .where(ForcedSample.study_id == study.id)
            .order_by(ForcedSample.length, ForcedSample.kind, ForcedSample.index)
        )
    )
