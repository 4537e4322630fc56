"""Simulated raters over HTTP, against a running server, through the annotators' own paths:
a ratings study's HITs rated as a person without JavaScript rates them.

The run is :class:`app.simulate.http.CrowdOverHttp`'s: simulated annotators made through
the researcher's invite service (marked ``simulated``, labelled ``simulated-<n>``), their
heavy-tailed activity (:meth:`app.studytypes.ratings.raters.RaterHeterogeneity.activity`) stopped by
the server's cap, requests sent again unchanged after a transport error or a 503, and
their invite links revoked when the run ends (or fails).

One HIT, pair after pair, two steps each, as the page leads (``GET /a/{token}`` shows the
step due): the quality step shows the continuation alone; the rater posts its quality
(the form's hidden fields, ``rating`` one of the scale's points as the page shows them,
``ms`` the time taken); the server stores it, locks it and answers with a 303 to the same
link, whose page now reveals the context and asks for the consistency; its post leads to
the next pair's quality step, and the last pair's consistency submits the assignment (a
303 with ``n=ok`` or ``n=late``). What the rater rates comes from a
:class:`app.studytypes.ratings.judges.RaterJudge` on the god-view's item (its id, kind, length,
attention flag: read from the database, never sent); the form carries only what a
browser's does. A post that fails in transit or with a 503 is sent again unchanged; with
``resend_share`` a share of acknowledged posts is sent a second time on purpose (a double
click): the server answers a repeat of a stored rating with the same value as stored
(nothing written).

The run keeps its own record of every rating the server acknowledged (a 303): one
:class:`RatedPair` per pair, its quality and, once acknowledged, its consistency, with the
times posted. When a lease runs out between two steps the server moves on to another HIT:
the ratings given stay stored and recorded, and the HIT counts as abandoned, not done (it
spends none of ``max_hits``, which counts submitted assignments). Seeded as next-word
runs are: rater ``n`` draws from ``numpy.random.default_rng([seed, n])``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import httpx
import numpy as np

from app.models import StudyType
from app.results.stats.ratings_columns import RatingColumns
from app.simulate.crowd import Crowd
from app.simulate.godview import ItemTruth, SimulationError, StudyView
from app.simulate.http import (
    Acknowledged,
    AnnotatorRun,
    CrowdOverHttp,
    Turn,
    client_ms,
    stopped_by,
)
from app.simulate.page import RATING_PAGE, Page, read_page
from app.studytypes.ratings.judges import RaterJudge
from app.studytypes.ratings.raters import (
    PAPER_CONSISTENCY,
    PAPER_QUALITY,
    Rater,
    RaterHeterogeneity,
)

QUALITY, CONSISTENCY = "quality", "consistency"


@dataclass(frozen=True)
class RatedPair(Acknowledged):
    """One pair rated by one simulated rater, as acknowledged by the server (page values,
    and the god-view's item, kind, length and attention flag)."""

    quality: float
    quality_ms: int
    consistency: float | None = None  # None: the run ended between the pair's two steps
    consistency_ms: int | None = None
    too_fast: bool = False  # either step posted faster than the study's minimum
    late: bool = False  # its assignment was submitted after the lease ran out


@dataclass
class RatingsRun:
    """A ratings run's record (module docstring)."""

    study: str
    raters: str
    ratings: list[RatedPair] = field(default_factory=list)
    annotators: list[AnnotatorRun] = field(default_factory=list)
    submitted: int = 0  # assignments whose last rating was acknowledged
    abandoned: int = 0  # assignments whose lease ran out between two steps
    resent: int = 0  # acknowledged posts sent again on purpose
    retried: int = 0  # requests sent again after a transport error or a 503
    seconds: float = 0.0

    @property
    def hits(self) -> int:
        return self.submitted

    @property
    def steps(self) -> int:
        """Ratings acknowledged (a quality and a consistency per rated pair)."""
        return sum(1 + (r.consistency is not None) for r in self.ratings)

    def columns(self, kinds: list[str], *, scale_max: int, step: float) -> RatingColumns:
        """The record as the results' columns (annotators, HITs, pairs by their ids)."""
        r = self.ratings

        def col(name: str, dtype=np.int64) -> np.ndarray:
            return np.array([getattr(x, name) for x in r], dtype=dtype)

        codes = {k: i for i, k in enumerate(kinds)}
        return RatingColumns(
            kinds=list(kinds),
            annotator=col("annotator_id"),
            hit=col("hit_id"),
            item=col("item_id"),
            length=col("length"),
            kind=np.array([codes.get(x.kind, -1) for x in r], np.int64),
            quality=col("quality", float),
            consistency=np.array(
                [np.nan if x.consistency is None else x.consistency for x in r], float
            ),
            attention=col("attention", bool),
            too_fast=col("too_fast", bool),
            late=col("late", bool),
            scale_max=scale_max,
            step=step,
            simulated=np.ones(len(r), bool),
        )

    def summary(self) -> str:
        why = stopped_by(self.annotators)
        lapsed = f"{self.abandoned} HITs left when their lease ran out; " if self.abandoned else ""
        return (
            f"SIMULATED raters over HTTP on {self.study}: {len(self.annotators)} simulated "
            f"raters did {self.hits} HITs, rated {len(self.ratings)} pairs ({self.steps} "
            f"ratings acknowledged, {self.resent} posts resent on purpose, {self.retried} "
            f"retried); {lapsed}stopped: {why or 'none'}; {self.raters}"
        )


@dataclass(kw_only=True)
class RatersOverHttp(CrowdOverHttp):
    """Simulated raters for one ratings study (see :func:`run_http_raters`)."""

    judge: RaterJudge

    work_page: ClassVar[str] = RATING_PAGE
    records: ClassVar[str] = "ratings"

    def _check(self, view: StudyView) -> None:
        if view.study_type != StudyType.ratings:
            it = f"study {view.slug!r} is a {view.study_type} study"
            raise SimulationError(f"{it}: simulate next-word annotators (a Judge) on it")

    def _new_run(self) -> RatingsRun:
        return RatingsRun(self.view.slug, self.judge.describe())

    def _newcomer(self, rng: np.random.Generator) -> tuple[int, bool, object]:
        wanted = self._wanted(rng, self.judge.raters.hetero.activity())
        rater = self.judge.rater(rng)
        return wanted, rater.spammer, rater

    def _do_hit(self, turn: Turn) -> bool:
        """Rate the HIT's pairs, two steps each, in the order its pages ask for them;
        whether the last step submitted it (False: the lease ran out between two steps)."""
        client, page, who, _, state, rng = turn
        assert isinstance(state, Rater)
        public_id = page.fields.get("assignment", "")
        truth = self.god.hit(public_id)
        rated: dict[int, RatedPair] = {}
        min_ms = self.view.min_ms_per_item
        try:
            while True:
                item = self._due(page, public_id, truth, rated)
                value, fast = self.judge.rate(rng, state, item, page.step)
                ms = client_ms(rng, fast, min_ms)
                form = {**page.fields, "rating": page.point(value), "ms": str(ms)}
                where, done, late = self._post_step(client, page, form)
                if page.step == QUALITY:
                    rated[item.position] = RatedPair.at(
                        who,
                        public_id,
                        item,
                        quality=value,
                        quality_ms=ms,
                        too_fast=ms < min_ms,
                    )
                else:
                    pair = rated[item.position]
                    rated[item.position] = replace(
                        pair,
                        consistency=value,
                        consistency_ms=ms,
                        too_fast=pair.too_fast or ms < min_ms,
                    )
                if self._resend_now(rng):
                    self._post_step(client, page, form)  # a double click: a repeat, no-op
                if done:
                    rated = {p: replace(r, late=late) for p, r in rated.items()}
                    with self.lock:
                        self.run.submitted += 1
                    return True
                page = read_page(self._send(client, "GET", where))
                if page.kind != RATING_PAGE or page.fields.get("assignment") != public_id:
                    # The lease ran out between two steps and the server moved on: the
                    # ratings given stay stored (and recorded); the next HIT starts afresh.
                    with self.lock:
                        self.run.abandoned += 1
                    return False
        finally:
            with self.lock:
                self.run.ratings.extend(rated.values())

    def _due(
        self, page: Page, public_id: str, truth: dict[int, ItemTruth], rated: dict[int, RatedPair]
    ) -> ItemTruth:
        """The pair the page asks about, checked against the run's own record: a quality
        for a pair not rated yet, a consistency for the pair whose quality was just given."""
        if page.status != 200:
            raise SimulationError(f"the page of {public_id} came with a {page.status}: {page.text}")
        item = truth.get(page.position)
        if item is None:
            raise SimulationError(f"the page of {public_id} shows a text that is not in its HIT")
        pair = rated.get(page.position)
        expected = (
            pair is None if page.step == QUALITY else pair is not None and pair.consistency is None
        )
        if not expected:
            raise SimulationError(
                f"the page of {public_id} asks for the {page.step} of text {page.position}, "
                "which the run's record does not expect"
            )
        return item

    def _post_step(
        self, client: httpx.Client, page: Page, form: dict[str, str]
    ) -> tuple[str, bool, bool]:
        """Post one step until the server acknowledges it (a 303): where it leads, whether
        it submitted the assignment, and whether that was late."""
        r = self._send(client, "POST", page.action or "", data=form)
        where = r.headers.get("location", "")
        if r.status_code == 303 and where:
            return where, "n=ok" in where or "n=late" in where, "n=late" in where
        refused = read_page(r)
        raise SimulationError(
            f"the server did not store the {form.get('step')} of text {form.get('position')} "
            f"of {form.get('assignment')}: {r.status_code} {refused.text}"
        )


def run_http_raters(
    base_url: str, make_session, study_id: int, secret_key: str, judge: RaterJudge, **options
) -> RatingsRun:
    """Run simulated raters on the ratings study against the server at `base_url` (module
    docstring; the arguments as :func:`app.studytypes.nextword.http_crowd.run_http_crowd`'s)."""
    server = {"base_url": base_url, "make_session": make_session, "study_id": study_id}
    return RatersOverHttp(**server, secret_key=secret_key, judge=judge, **options).go()


ALL_SDS_ZERO = (
    "--sd-rater, --sd-rater-kind, --sd-pair and --sd-noise are all 0: every rating of a kind "
    "would be the same scale point, so the raters cannot be calibrated to a true mean between "
    "two points; give one of them a positive value"
)
SDS = ("sd_rater", "sd_rater_kind", "sd_pair", "sd_noise")


def _means(text: str | None, option: str, default: tuple[float, float]) -> tuple[float, float]:
    """``"3.4,3.1"``: the true means after data and after model prefixes."""
    if text is None:
        return default
    parts = [p.strip() for p in text.split(",")]
    try:
        data, model = (float(p) for p in parts)
    except ValueError:
        raise SimulationError(
            f"{option} takes two numbers, the data's and the model's mean: e.g. 3.4,3.1"
        ) from None
    return data, model


# -- the type's crowd over HTTP (StudyTypePlugin.http_crowd) ----------------------------


def run_crowd(
    base_url: str,
    make_session,
    study_id: int,
    secret_key: str,
    view: StudyView,
    crowd: Crowd,
    given: dict,
    **common,
) -> RatingsRun:
    """`ebc simulate-http` on a ratings study: raters with chosen true means per kind and
    step (`quality`, `consistency`: ``"DATA,MODEL"``) and spreads (`sd_*`)."""
    wrong = [
        name
        for name, on in (
            ("--judge reference", given.get("judge") == "reference"),
            ("--true-ebc", given.get("true_ebc") is not None),
            ("--cgd-data", given.get("cgd_data") is not None),
            ("an oracle crowd", crowd.base == "oracle"),
            ("position:SHARE", crowd.position > 0),
        )
        if on
    ]
    if wrong:
        raise SimulationError(
            f"{view.slug} is a ratings study, rated by simulated raters; these options "
            f"are for next-word studies only: {', '.join(wrong)} (raters take --quality, "
            "--consistency, --sd-*)"
        )
    hetero = RaterHeterogeneity(**{k: given[k] for k in SDS if given.get(k) is not None})
    try:
        hetero.check()
    except ValueError as exc:  # typer keeps each sd >= 0: left is all four at 0
        raise SimulationError(ALL_SDS_ZERO if hetero.sd_total == 0.0 else str(exc)) from None
    judge = RaterJudge.calibrated(
        view,
        quality=_means(given.get("quality"), "--quality", PAPER_QUALITY),
        consistency=_means(given.get("consistency"), "--consistency", PAPER_CONSISTENCY),
        hetero=hetero,
        noisy=crowd.noisy,
        fast=crowd.fast,
        spammers=crowd.spammers,
        seed=common.get("seed", 0),
    )
    return run_http_raters(base_url, make_session, study_id, secret_key, judge, **common)


def done(run: RatingsRun, slug: str) -> str:
    """The command's last line."""
    return (
        f"their {run.steps} ratings are stored like anyone's, marked as a simulated "
        "crowd's; their links are revoked"
    )


__all__ = [
    "ALL_SDS_ZERO",
    "RatedPair",
    "RatersOverHttp",
    "RatingsRun",
    "run_http_raters",
]
