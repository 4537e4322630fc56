"""The only SQL of the results module.

- :func:`load_judgments`: a study's judgments as numpy columns: one query joins
  judgments to their assignment and HIT, one gets the study's items (kind code, length,
  attention flag and the model rank of the true next word, computed by the database;
  reused while the items are unchanged), matched to the judgments in numpy; plus one
  small query for annotators. On PostgreSQL each row is packed server-side into one
  fixed-width bytea and all rows into one value, read with one ``numpy.frombuffer``
  (no Python object per value). Other databases (SQLite) fetch tuples.
- :func:`load_references`: the worker's divergences between the model and a reference
  model per item (synthetic EB-C), read from ``items.reference`` by the database.
- :func:`iter_judgment_rows`, :func:`iter_item_rows`: every field a re-analysis needs,
  streamed in batches (``yield_per``: a server-side cursor on PostgreSQL), so an export
  runs in constant memory.
- :func:`study_counts`, :func:`provenance_examples`: small figures for the study page and
  the provenance manifest.
- :func:`load_continuations`, :func:`latest_score`, :func:`iter_sample_rows`: a ratings
  study's continuations (EB-M's input), its stored scores, and the samples' export.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    Integer,
    Select,
    SmallInteger,
    String,
    Text,
    and_,
    case,
    cast,
    func,
    literal_column,
    select,
    type_coerce,
)
from sqlalchemy.orm import Session, aliased

from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
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


@dataclass
class Judgments:
    """One entry per judgment, in judgment-id order.

    ``choice`` is the model rank of the chosen word, 1 for the top-1 … k, and 0 for
    "None of the above" (the stats module's coding); ``option`` is the screen slot
    (0..k-1 a word, k "none"); ``true_rank`` the model rank (1..k) of the item's true
    next word when it is among the choices, else 0. ``kind`` is a code into ``kinds``
    (-1 for a kind the study does not list). Per-annotator columns are indexed like
    ``annotator_ids``.
    """

    kinds: list[str]
    d: np.ndarray
    length: np.ndarray
    kind: np.ndarray
    annotator: np.ndarray
    hit: np.ndarray
    item: np.ndarray
    option: np.ndarray
    choice: np.ndarray
    client_ms: np.ndarray  # NaN where the client sent nothing
    too_fast: np.ndarray
    attention: np.ndarray
    true_rank: np.ndarray
    annotator_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    annotator_blocked: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    annotator_exclude_past: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    annotator_labels: list[str] = field(default_factory=list)
    annotator_channels: list[str] = field(default_factory=list)
    # Per annotator: made by a simulated crowd (`annotators.simulated`), not a person.
    annotator_simulated: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    # Per judgment, its assignment's flags (FLAG_* bits: kept work that may not count);
    # None: no flags known (judgments made up in tests).
    assignment_flags: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.d.shape[0])

    @property
    def top1_is_true(self) -> np.ndarray:
        return self.true_rank == 1

    @property
    def attention_correct(self) -> np.ndarray:
        """Per judgment: the answer an attention item expects, its top-1 (the exclusion
        rules read this; a rating's is a quality of at most the scale's fifth)."""
        return self.choice == 1

    @property
    def simulated(self) -> np.ndarray:
        """Per judgment: its annotator is simulated."""
        if not self.annotator_simulated.any():
            return np.zeros(len(self), bool)
        return np.isin(self.annotator, self.annotator_ids[self.annotator_simulated])

    def flagged(self, flag: int) -> np.ndarray:
        """Which judgments' assignments carry `flag` (a FLAG_* bit)."""
        if self.assignment_flags is None:
            return np.zeros(len(self), bool)
        return (self.assignment_flags & flag) != 0

    def take(self, mask: np.ndarray) -> Judgments:
        """The judgments where ``mask`` holds (annotator columns unchanged)."""
        cols = {
            name: getattr(self, name)[mask]
            for name in (
                "d",
                "length",
                "kind",
                "annotator",
                "hit",
                "item",
                "option",
                "choice",
                "client_ms",
                "too_fast",
                "attention",
                "true_rank",
            )
        }
        return Judgments(
            kinds=self.kinds,
            annotator_ids=self.annotator_ids,
            annotator_blocked=self.annotator_blocked,
            annotator_exclude_past=self.annotator_exclude_past,
            annotator_labels=self.annotator_labels,
            annotator_channels=self.annotator_channels,
            annotator_simulated=self.annotator_simulated,
            assignment_flags=None if self.assignment_flags is None else self.assignment_flags[mask],
            **cols,
        )


# Columns as (name, SQL expression, SQL type to cast to, numpy type of the binary field).
def _judgment_spec(dialect: str = "sqlite", asg: Any = Assignment) -> list[tuple]:
    """Judgment columns; ``asg``: where the assignment's columns come from (the model, or
    an alias of a subquery of it)."""
    if dialect == "postgresql":
        # Two 32-bit values in each 64-bit one: on PostgreSQL the per-row packing costs
        # by the value, so 4 per judgment instead of 7 (see _split_pairs).
        return [
            ("id_item", _pair(Judgment.id, Judgment.item_id), BigInteger, ">i8"),
            (
                "annotator_hit",
                _pair(asg.annotator_id, asg.hit_id),
                BigInteger,
                ">i8",
            ),
            (
                "flags_ms",
                _pair(_flags(asg), func.coalesce(Judgment.client_ms, -1)),
                BigInteger,
                ">i8",
            ),
            ("d", Judgment.d, Float, ">f8"),
        ]
    return [
        ("id", Judgment.id, Integer, ">i4"),
        ("item", Judgment.item_id, Integer, ">i4"),
        ("annotator", asg.annotator_id, Integer, ">i4"),
        ("hit", asg.hit_id, Integer, ">i4"),
        # Screen slot, model rank + 1 (0: none) and the too-fast flag in one integer:
        # one column fewer to pack and ship per judgment.
        ("flags", _flags(asg), Integer, ">i4"),
        ("d", Judgment.d, Float, ">f8"),
        ("client_ms", func.coalesce(Judgment.client_ms, -1), Integer, ">i4"),
    ]


def _pair(high, low):
    """``high << 32 | (low & 0xFFFFFFFF)`` for two 32-bit integer expressions."""
    low32 = cast(low, BigInteger).bitwise_and(0xFFFFFFFF)
    return cast(high, BigInteger).bitwise_lshift(literal_column("32")).bitwise_or(low32)


_PAIRS = {"id_item": ("id", "item"), "annotator_hit": ("annotator", "hit")}
_PAIRS["flags_ms"] = ("flags", "client_ms")


def _split_pairs(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Undo :func:`_pair`: the high and the (signed) low 32 bits of each paired column."""
    out = {}
    for name, col in cols.items():
        if name in _PAIRS:
            high, low = _PAIRS[name]
            out[high] = col >> 32
            out[low] = (col & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        else:
            out[name] = col
    return out


# Assignment flags (kept work that may not count; the results' exclusion rules).
FLAG_OVER_CAP = 1  # a late answer past the annotator's cap
FLAG_EXTRA_REPLICA = 2  # a late answer past the HIT's replicas
FLAG_AFTER_BLOCK = 4  # sent after the annotator was blocked
FLAG_UNVERIFIED = 8  # MTurk work not yet confirmed through the MTurk API
_ASSIGNMENT_FLAGS = (
    ("over_cap", FLAG_OVER_CAP),
    ("extra_replica", FLAG_EXTRA_REPLICA),
    ("after_block", FLAG_AFTER_BLOCK),
    ("unverified", FLAG_UNVERIFIED),
)


def assignment_flags(asg: Any = Assignment):
    """The assignment's FLAG_* bits in one integer (under 16)."""
    packed = None
    for name, bit in _ASSIGNMENT_FLAGS:
        term = bit * cast(getattr(asg, name), Integer)
        packed = term if packed is None else packed + term
    return packed


def _flags(asg: Any = Assignment):
    """option (< 16, top_k <= 10) | (chosen_rank + 1) << 4 | too_fast << 12
    | the assignment's flags << 13, in one integer (under 2**17)."""
    return (
        Judgment.option
        + 16 * (func.coalesce(Judgment.chosen_rank, -1) + 1)
        + 4096 * cast(Judgment.too_fast, Integer)
        + 8192 * assignment_flags(asg)
    )


def _unpack_flags(
    flags: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(option, choice, too_fast, assignment flags)`` from the packed column; ``choice``
    is the model rank (1-based) of the chosen word, 0 for none."""
    flags = flags.astype(np.int64)
    too_fast = ((flags >> 12) & 1).astype(bool)
    return flags & 15, (flags >> 4) & 255, too_fast, (flags >> 13) & 15


def _item_spec(codes: dict[str, int], top_k: int, dialect: str) -> list[tuple]:
    pg = dialect == "postgresql"
    return [
        ("id", Item.id, Integer, ">i4"),
        ("length", Item.length, Integer, ">i4"),
        ("kind", case(codes, value=Item.kind, else_=-1), SmallInteger, ">i2"),
        ("attention", Item.is_attention, Boolean, "?"),
        ("true_rank", _true_rank_sql(top_k, prefilter=pg), SmallInteger, ">i2"),
    ]


# Printable ASCII that every JSON writer leaves unescaped (no quote, backslash or slash,
# none of the <>& that HTML-safe encoders escape; no %, which the driver doubles): a true
# next word made only of these appears verbatim in the JSON text of `choices` whenever
# it is one of the words.
_PLAIN_WORD = "^[-A-Za-z0-9 ,.;:!?'@#$*()_+=|~]*$"


def _true_rank_sql(top_k: int, *, prefilter: bool = False):
    """Model rank (1-based) of the item's true next word among its first `top_k` choices,
    else 0: ``CASE WHEN choices[0].word = true_next_word THEN 1 ...`` (portable JSON
    paths; a set-returning JSON function per item costs several times more).

    With ``prefilter`` (PostgreSQL): each ``->`` on a ``json`` value parses the whole
    text, so up to `top_k` parses per item dominate the load. A plain word (see
    ``_PLAIN_WORD``) that does not occur in the text of ``choices`` cannot be one of the
    choices: rank 0 from one substring search, no parse. Any other word, or one that
    does occur, takes the exact JSON comparison.
    """
    word = Item.true_next_word
    whens = [(Item.choices[r]["word"].as_string() == word, r + 1) for r in range(top_k)]
    if not prefilter:
        return case((word.is_(None), 0), *whens, else_=0)
    absent = and_(
        func.strpos(cast(Item.choices, Text), word) == 0,
        word.regexp_match(_PLAIN_WORD),
    )
    return case((word.is_(None), 0), (absent, 0), *whens, else_=0)


def _select(spec: list[tuple]) -> Select:
    return select(*(cast(expr, t).label(name) for name, expr, t, _ in spec))


def _columns(
    session: Session, stmt: Select, spec: list[tuple], *, parallel: bool = False
) -> dict[str, np.ndarray]:
    """Run `stmt` and return its columns as numpy arrays (native byte order)."""
    if session.get_bind().dialect.name == "postgresql":
        return _packed_columns(session, stmt, spec, parallel=parallel)
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
# Planner costs for a parallel scan (see _packed_columns), restored after the query.
_PARALLEL_COSTS = {"parallel_setup_cost": "0", "parallel_tuple_cost": "0"}


def _packed_columns(
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


# Item columns per study, reused while the study's items are unchanged. Items are made
# once (choices, true next word, kind and length never change); what can change is
# which are skipped and which are attention items, and new items can be added: the key
# (count, largest id, attention count, latest creation time of the shown items, and the
# study's own creation time against reused ids) catches all of these.
_ITEM_CACHE: OrderedDict[tuple, dict[str, np.ndarray]] = OrderedDict()
_ITEM_CACHE_SIZE = 8
_cache_lock = threading.Lock()


def _item_columns(session: Session, study: Study, codes: dict[str, int]) -> dict[str, np.ndarray]:
    shown = and_(Item.study_id == study.id, Item.skip_reason.is_(None))
    count = func.count(Item.id)
    state = session.execute(
        select(
            count, func.max(Item.id), count.filter(Item.is_attention), func.max(Item.created_at)
        ).where(shown)
    ).one()
    key = (session.connection().engine.url.render_as_string(), study.id, str(study.created_at))
    key += (tuple(codes), int(study.top_k), *(str(v) for v in state))
    with _cache_lock:
        if key in _ITEM_CACHE:
            _ITEM_CACHE.move_to_end(key)
            return _ITEM_CACHE[key]
    spec = _item_spec(codes, int(study.top_k), session.get_bind().dialect.name)
    cols = _columns(session, _select(spec).where(shown), spec, parallel=True)
    order = np.argsort(cols["id"], kind="stable")
    cols = {k: v[order] for k, v in cols.items()}
    with _cache_lock:
        _ITEM_CACHE[key] = cols
        while len(_ITEM_CACHE) > _ITEM_CACHE_SIZE:
            _ITEM_CACHE.popitem(last=False)
    return cols


def clear_item_cache() -> None:
    with _cache_lock:
        _ITEM_CACHE.clear()


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
            *(getattr(Assignment, name) for name, _ in _ASSIGNMENT_FLAGS),
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


def load_judgments(session: Session, study: Study) -> Judgments:
    """All judgments of `study` on shown (not skipped) items, with what every analysis
    needs, as arrays in judgment-id order.

    Two queries: judgments joined to their assignment and HIT (filtered by study), and
    the study's items (kind code, length, attention flag, rank of the true next word),
    the latter reused while the items are unchanged; items are matched to judgments in
    numpy. On PostgreSQL both come packed in one value each (:func:`_packed_columns`).
    """
    names = kind_codes(study)
    codes = {k: i for i, k in enumerate(names)}
    asg = study_assignments(study)
    spec = _judgment_spec(session.get_bind().dialect.name, asg)
    stmt = _select(spec).join(asg, asg.id == Judgment.assignment_id)
    cols = _split_pairs(_columns(session, stmt, spec))
    items = _item_columns(session, study, codes)
    order = np.argsort(cols["id"], kind="stable")
    if not np.array_equal(order, np.arange(order.size)):
        cols = {k: v[order] for k, v in cols.items()}
    at = np.searchsorted(items["id"], cols["item"])
    at_ok = np.minimum(at, max(items["id"].size - 1, 0))
    found = (at < items["id"].size) & (items["id"][at_ok] == cols["item"]) if at.size else at > 0
    if not found.all():  # judgments on skipped items are left out
        cols = {k: v[found] for k, v in cols.items()}
        at_ok = at_ok[found]
    annotators = load_annotators(session, study)
    option, choice, too_fast, flags = _unpack_flags(cols["flags"])
    client_ms = cols["client_ms"].astype(float)
    return Judgments(
        kinds=names,
        d=cols["d"].astype(float),
        length=items["length"][at_ok].astype(np.int64),
        kind=items["kind"][at_ok].astype(np.int64),
        annotator=cols["annotator"].astype(np.int64),
        hit=cols["hit"].astype(np.int64),
        item=cols["item"].astype(np.int64),
        option=option,
        choice=choice,
        client_ms=np.where(client_ms >= 0, client_ms, np.nan),
        too_fast=too_fast,
        attention=items["attention"][at_ok].astype(bool),
        true_rank=items["true_rank"][at_ok].astype(np.int64),
        **annotators.columns(),
        assignment_flags=flags,
    )


# --------------------------------------------------------------------------- synthetic

# The worker's per-item divergences (items.reference), in the stats module's METRICS order.
REFERENCE_PATHS = (("token", "tv"), ("token", "js"), ("token", "gd"), ("word_gd",))


@dataclass
class References:
    """A study's shown, non-attention items with the worker's divergences between P_M and
    the reference model P_D (``items.reference``): one entry per item, in item-id order.

    ``values`` is ``n x 4`` (token ``tv``, ``js``, ``gd``, then ``word_gd``), NaN where the
    item has no value yet (precompute under way, or made before the study had a reference
    model). ``models`` and ``methods`` are the distinct ``reference_model`` and ``method``
    strings the items record.
    """

    kinds: list[str]
    item: np.ndarray
    length: np.ndarray
    kind: np.ndarray
    values: np.ndarray
    models: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.item.shape[0])

    @property
    def computed(self) -> np.ndarray:
        """Which items have any value."""
        return np.isfinite(self.values).any(axis=1)


def load_references(session: Session, study: Study) -> References:
    """The divergences of every shown, non-attention item of `study` (see `References`):
    the values read from the JSON by the database (portable JSON paths), one row per item,
    and the distinct model names and methods in one small aggregate."""
    names = kind_codes(study)
    codes = {k: i for i, k in enumerate(names)}
    shown = and_(
        Item.study_id == study.id, Item.skip_reason.is_(None), Item.is_attention.is_(False)
    )
    paths = [
        Item.reference[path if len(path) > 1 else path[0]].as_float() for path in REFERENCE_PATHS
    ]
    rows = session.execute(
        select(Item.id, Item.length, case(codes, value=Item.kind, else_=-1), *paths)
        .where(shown)
        .order_by(Item.id)
    ).all()
    table = np.array(
        [[float("nan") if v is None else float(v) for v in row] for row in rows], dtype=float
    ).reshape(len(rows), 3 + len(REFERENCE_PATHS))
    model = Item.reference["reference_model"].as_string()
    method = Item.reference["method"].as_string()
    named = session.execute(
        select(model, method).where(shown, model.is_not(None)).group_by(model, method)
    ).all()
    return References(
        kinds=names,
        item=table[:, 0].astype(np.int64),
        length=table[:, 1].astype(np.int64),
        kind=table[:, 2].astype(np.int64),
        values=table[:, 3:],
        models=sorted({m for m, _ in named}),
        methods=sorted({x for _, x in named if x}),
    )


# --------------------------------------------------------------------------- exports


def _raw(col, kind: str):
    """A column fetched without SQLAlchemy's per-value processing (the export converts):
    strings for JSON, enums and timestamps, integers for booleans. Exports touch every
    value of millions of rows; the processors would cost several times the query."""
    return type_coerce(col, Integer if kind == "bool" else String).label(col.key)


def _raw_columns(spec) -> list:
    return [_raw(col, kind) if kind else col for col, kind in spec]


def _stream(session: Session, stmt: Select) -> Iterator[tuple[list[str], list[tuple]]]:
    # Per statement: Connection.execution_options() would change the connection for good.
    result = session.connection().execute(stmt.execution_options(yield_per=BATCH))
    keys = list(result.keys())
    for part in result.partitions():
        yield keys, part


def iter_judgment_rows(session: Session, study: Study) -> Iterator[tuple[list[str], list[tuple]]]:
    """Every judgment of `study` with its context: ``(column names, batch of rows)`` in
    judgment-id order.

    Streamed with ``yield_per`` (a server-side cursor on PostgreSQL, SQLite's own cursor
    otherwise): memory stays bounded by one batch whatever the study's size. Values are
    raw (see :func:`_raw`): JSON and timestamps as the driver returns them.
    """
    spec = [
        (Judgment.id.label("judgment_id"), None),
        (Hit.id.label("hit_id"), None),
        (Hit.index.label("hit_index"), None),
        (Hit.is_overlap.label("hit_is_overlap"), "bool"),
        (Judgment.position, None),
        (HitPosition.choice_order, "json"),
        (Item.id.label("item_id"), None),
        (Item.kind, None),
        (Item.length, None),
        (Item.is_attention, "bool"),
        (Item.choices, "json"),
        (Item.true_next_word, None),
        (Judgment.option, None),
        (Judgment.chosen_rank, None),
        (Judgment.chosen_word, None),
        (Judgment.d, None),
        (Annotator.id.label("annotator_id"), None),
        (Annotator.label.label("annotator_label"), None),
        (Annotator.channel, "enum"),
        (Annotator.external_id.label("worker_id"), None),
        (Annotator.blocked.label("annotator_blocked"), "bool"),
        (Annotator.exclude_past.label("annotator_exclude_past"), "bool"),
        (Annotator.simulated.label("simulated"), "bool"),
        (Assignment.public_id.label("assignment"), None),
        (Assignment.external_assignment_id, None),
        (Assignment.external_hit_id, None),
        (Assignment.external_session_id, None),
        (Assignment.status.label("assignment_status"), "enum"),
        (Assignment.review_status, "enum"),
        (Assignment.leased_at, "time"),
        (Assignment.page_served_at, "time"),
        (Assignment.submitted_at, "time"),
        (Judgment.created_at.label("judged_at"), "time"),
        (Judgment.client_ms, None),
        (Judgment.too_fast, "bool"),
        (Judgment.late, "bool"),
        # Kept work that may not count (see app.results.exclusions.exclusion_mask).
        (Assignment.over_cap, "bool"),
        (Assignment.extra_replica, "bool"),
        (Assignment.after_block, "bool"),
        (Assignment.unverified, "bool"),
    ]
    stmt = (
        select(*_raw_columns(spec))
        .join(Assignment, Assignment.id == Judgment.assignment_id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .join(Item, Item.id == Judgment.item_id)
        .join(Annotator, Annotator.id == Assignment.annotator_id)
        .outerjoin(
            HitPosition,
            and_(HitPosition.hit_id == Hit.id, HitPosition.position == Judgment.position),
        )
        .where(Hit.study_id == study.id)
        .order_by(Judgment.id)
    )
    yield from _stream(session, stmt)


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
        select(*_raw_columns(spec))
        .outerjoin(HitPosition, HitPosition.item_id == Item.id)
        .outerjoin(Hit, Hit.id == HitPosition.hit_id)
        .where(Item.study_id == study.id)
        .order_by(Item.id)
    )
    yield from _stream(session, stmt)


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


# --------------------------------------------------------------------------- continuations


@dataclass(frozen=True)
class Continuation:
    """A shown item of a ratings study with its continuation (EB-M's input): ``line`` is
    the dataset line its prompt (and a data kind's prefix) came from, from its provenance."""

    item_id: int
    length: int
    kind: str
    index: int
    prompt: str | None
    words: str
    true_next_word: str | None
    continuation: str
    line: int | None
    data_continuation: str | None  # data-line kinds: the worker's record of the line's words


def load_continuations(session: Session, study: Study) -> list[Continuation]:
    """Every shown (not skipped), non-attention item of `study` that has a continuation,
    by length, kind and index."""
    line = Item.provenance["line"].as_integer()
    recorded = Item.provenance["data_continuation"].as_string()
    rows = session.execute(
        select(
            Item.id,
            Item.length,
            Item.kind,
            Item.index,
            Item.prompt,
            Item.words,
            Item.true_next_word,
            Item.continuation,
            line,
            recorded,
        )
        .where(
            Item.study_id == study.id,
            Item.skip_reason.is_(None),
            Item.is_attention.is_(False),
            Item.continuation.is_not(None),
        )
        .order_by(Item.length, Item.kind, Item.index)
    ).all()
    return [Continuation(*row) for row in rows]


def latest_score(session: Session, study: Study, name: str) -> StudyScore | None:
    """The newest stored scores `name` of `study` (the current ones), or None."""
    return session.scalars(
        select(StudyScore)
        .where(StudyScore.study_id == study.id, StudyScore.name == name)
        .order_by(StudyScore.computed_at.desc(), StudyScore.id.desc())
        .limit(1)
    ).first()


def iter_sample_rows(session: Session, study: Study) -> Iterator[tuple[list[str], list[tuple]]]:
    """Every item of `study` with a continuation (skipped and attention ones flagged):
    the prefix-switching samples, streamed like :func:`iter_item_rows`."""
    spec = [
        (Item.id.label("item_id"), None),
        (Item.kind, None),
        (Item.length, None),
        (Item.index, None),
        (Item.is_attention, "bool"),
        (Item.skip_reason, None),
        (Item.prompt, None),
        (Item.words, None),
        (Item.continuation, None),
    ]
    stmt = (
        select(*_raw_columns(spec))
        .where(Item.study_id == study.id, Item.continuation.is_not(None))
        .order_by(Item.id)
    )
    yield from _stream(session, stmt)
