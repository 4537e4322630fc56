"""The SQL of a next-word study's results.

- :func:`load_judgments`: a study's judgments as numpy columns: one query joins
  judgments to their assignment and HIT, one gets the study's items (kind code, length,
  attention flag and the model rank of the true next word, computed by the database;
  reused while the items are unchanged), matched to the judgments in numpy; plus one
  small query for annotators (:func:`app.results.queries.load_annotators`). On PostgreSQL
  each row is packed server-side (:func:`app.results.queries.spec_columns`).
- :func:`load_references`: the worker's divergences between the model and a reference
  model per item (synthetic EB-C), read from ``items.reference`` by the database.
- :func:`iter_judgment_rows`: every judgment with what a re-analysis needs, streamed in
  batches as :func:`app.results.queries.iter_item_rows` streams the items.
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
    SmallInteger,
    Text,
    and_,
    case,
    cast,
    func,
    literal_column,
    select,
)
from sqlalchemy.orm import Session

from app.models import (
    Annotator,
    Assignment,
    Hit,
    HitPosition,
    Item,
    Judgment,
    Study,
)
from app.results.queries import (
    ASSIGNMENT_FLAG_COLUMNS,
    PARTICIPANT_COLUMNS,
    Flagged,
    answer_rows,
    answers_per_cell,
    assignment_flags,
    kind_codes,
    load_annotators,
    select_spec,
    spec_columns,
    stream_rows,
    study_assignments,
)


@dataclass
class Judgments(Flagged):
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
            **self.annotator_columns(),
            assignment_flags=None if self.assignment_flags is None else self.assignment_flags[mask],
            **cols,
        )


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
    cols = spec_columns(session, select_spec(spec).where(shown), spec, parallel=True)
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


def load_judgments(session: Session, study: Study) -> Judgments:
    """All judgments of `study` on shown (not skipped) items, with what every analysis
    needs, as arrays in judgment-id order.

    Two queries: judgments joined to their assignment and HIT (filtered by study), and
    the study's items (kind code, length, attention flag, rank of the true next word),
    the latter reused while the items are unchanged; items are matched to judgments in
    numpy. On PostgreSQL both come packed in one value each (:func:`packed_columns`).
    """
    names = kind_codes(study)
    codes = {k: i for i, k in enumerate(names)}
    asg = study_assignments(study)
    spec = _judgment_spec(session.get_bind().dialect.name, asg)
    stmt = select_spec(spec).join(asg, asg.id == Judgment.assignment_id)
    cols = _split_pairs(spec_columns(session, stmt, spec))
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


def iter_judgment_rows(session: Session, study: Study) -> Iterator[tuple[list[str], list[tuple]]]:
    """Every judgment of `study` with its context: ``(column names, batch of rows)`` in
    judgment-id order.

    Streamed with ``yield_per`` (a server-side cursor on PostgreSQL, SQLite's own cursor
    otherwise): memory stays bounded by one batch whatever the study's size. Values are
    raw (see :func:`raw_columns`): JSON and timestamps as the driver returns them.
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
        *ASSIGNMENT_FLAG_COLUMNS,
        *PARTICIPANT_COLUMNS,
    ]
    stmt = (
        answer_rows(spec, Judgment)
        .outerjoin(
            HitPosition,
            and_(HitPosition.hit_id == Hit.id, HitPosition.position == Judgment.position),
        )
        .where(Hit.study_id == study.id)
        .order_by(Judgment.id)
    )
    yield from stream_rows(session, stmt)


def judgments_per_cell(session: Session, items: Any) -> dict[tuple[int, str], tuple[int, None]]:
    """Per (length, kind) of the items matching `items`, their judgments (every cell: 0
    where none): the study page's collection table."""
    return answers_per_cell(session, items, Judgment)
