"""A simulated next-word crowd over HTTP (:class:`HttpCrowd`, :func:`run_http_crowd`):
the run of :class:`app.simulate.http.CrowdOverHttp` whose annotators pick words.

One post answers a whole HIT: each position's option (the screen slot of the word chosen,
or "none") and its time (``ms{n}``, as the page's script fills it in a browser). Honest
answers come from a :class:`~app.studytypes.nextword.judges.Judge` on the god-view's
items; inattention (random clicks, first-slot clicks, too-fast clicks, spammers, attention
items) from :func:`app.simulate.crowd.deliver`. The run's record (:class:`HttpRun`) keeps
every answer the server acknowledged (a 303 to the next page): assignment, HIT, position,
the shown words, the option posted, the word and its model rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import numpy as np
from sqlalchemy.orm import Session

from app.models import Channel, StudyType
from app.simulate.crowd import Crowd, deliver
from app.simulate.godview import ItemTruth, SimulationError, StudyView
from app.simulate.http import (
    Acknowledged,
    AnnotatorRun,
    CrowdOverHttp,
    Recruit,
    Turn,
    client_ms,
    stopped_by,
)
from app.simulate.page import Page, read_page
from app.studytypes.nextword.judges import Judge, ModelJudge, StandInJudge
from app.studytypes.nextword.queries import Judgments


@dataclass(frozen=True)
class Answered(Acknowledged):
    """One answer the server acknowledged, as the simulator recorded it (page values,
    and the god-view's item, kind, length and model rank)."""

    shown: tuple[str, ...]
    option: int
    word: str | None  # None: "None of the above is plausible"
    rank: int  # model rank of the chosen word, 0 for none
    true_rank: int  # model rank of the item's true next word among the shown, else 0
    client_ms: int
    too_fast: bool
    late: bool

    @property
    def d(self) -> float:
        return 0.0 if self.rank == 1 else 1.0


@dataclass
class HttpRun:
    """A run's record (module docstring)."""

    study: str
    crowd: str
    judge: str
    answers: list[Answered] = field(default_factory=list)
    annotators: list[AnnotatorRun] = field(default_factory=list)
    resent: int = 0  # acknowledged posts sent again on purpose
    retried: int = 0  # requests sent again after a transport error or a 503
    seconds: float = 0.0

    @property
    def hits(self) -> int:
        return len({a.assignment for a in self.answers})

    def judgments(self, kinds: list[str]) -> Judgments:
        """The record as the results functions' columns (annotators by their ids)."""
        a = self.answers
        codes = {k: i for i, k in enumerate(kinds)}
        people = sorted(self.annotators, key=lambda r: r.annotator_id)

        def col(name: str, dtype=np.int64) -> np.ndarray:
            return np.array([getattr(x, name) for x in a], dtype=dtype)

        return Judgments(
            kinds=list(kinds),
            d=np.array([x.d for x in a], float),
            length=col("length"),
            kind=np.array([codes.get(x.kind, -1) for x in a], np.int64),
            annotator=col("annotator_id"),
            hit=col("hit_id"),
            item=col("item_id"),
            option=col("option"),
            choice=col("rank"),
            client_ms=col("client_ms", float),
            too_fast=col("too_fast", bool),
            attention=col("attention", bool),
            true_rank=col("true_rank"),
            annotator_ids=np.array([r.annotator_id for r in people], np.int64),
            annotator_blocked=np.zeros(len(people), bool),
            annotator_exclude_past=np.zeros(len(people), bool),
            annotator_labels=[r.label for r in people],
            annotator_channels=[Channel.local.value] * len(people),
        )

    def summary(self) -> str:
        why = stopped_by(self.annotators)
        return (
            f"SIMULATED crowd ({self.crowd}) over HTTP on {self.study}: "
            f"{len(self.annotators)} simulated annotators did {self.hits} HITs, "
            f"{len(self.answers)} judgments acknowledged ({self.resent} posts resent on "
            f"purpose, {self.retried} retried); stopped: {why or 'none'}; {self.judge}"
        )


@dataclass(kw_only=True)
class HttpCrowd(CrowdOverHttp):
    """A simulated crowd of next-word annotators for one study (see :func:`run_http_crowd`)."""

    crowd: Crowd
    judge: Judge

    def _check(self, view: StudyView) -> None:
        if view.study_type != StudyType.nextword:
            it = f"study {view.slug!r} is a {view.study_type} study"
            raise SimulationError(f"{it}: simulate raters (a RaterJudge) on it")

    def _new_run(self) -> HttpRun:
        return HttpRun(self.view.slug, self.crowd.describe(), self.judge.describe())

    def _newcomer(self, rng: np.random.Generator) -> tuple[int, bool, object]:
        wanted = self._wanted(rng, self.crowd.hetero)
        spammer = bool(rng.random() < self.crowd.spammers)
        return wanted, spammer, self.judge.annotator(rng)

    def _do_hit(self, turn: Turn) -> bool:
        """One post answers the whole HIT, stored (late) even after its lease ran out:
        always submitted."""
        client, page, who, run, state, rng = turn
        form, answers = self._answer(page, who, run, state, rng)
        late = self._post(client, page, form)
        if self._resend_now(rng):
            self._post(client, page, form)  # a double click: acknowledged, stored once
        with self.lock:
            self.run.answers.extend(replace(x, late=late) for x in answers)
        return True

    def _answer(
        self,
        page: Page,
        who: Recruit,
        run: AnnotatorRun,
        state: object,
        rng: np.random.Generator,
    ) -> tuple[dict[str, str], list[Answered]]:
        """The form to post and the record of its answers, one HIT."""
        public_id = page.fields.get("assignment", "")
        truth = self.god.hit(public_id)
        if sorted(truth) != sorted(page.options):
            raise SimulationError(f"the page of {public_id} shows other positions than its HIT")
        positions = sorted(truth)
        items = [truth[p] for p in positions]
        shown = [page.shown(p) for p in positions]
        honest = self.judge.honest(rng, self.crowd, state, items, shown)
        form = dict(page.fields)
        answers = []
        min_ms = self.view.min_ms_per_item
        for n, (item, words) in enumerate(zip(items, shown, strict=True)):
            ranks = np.array([[item.rank(w) for w in words]])
            got = deliver(
                rng,
                self.crowd,
                honest[n : n + 1],
                attention=np.array([item.attention]),
                spammer=np.array([run.spammer]),
                rank_at_slot=ranks,
            )
            option, rank = int(got.option[0]), int(got.choice[0])
            ms = client_ms(rng, bool(got.too_fast[0]), min_ms)
            form[f"o{item.position}"] = str(option)
            form[f"ms{item.position}"] = str(ms)
            answers.append(
                Answered.at(
                    who,
                    public_id,
                    item,
                    shown=tuple(words),
                    option=option,
                    word=words[option] if option < len(words) else None,
                    rank=rank,
                    true_rank=_true_rank(item, words),
                    client_ms=ms,
                    too_fast=ms < min_ms,
                    late=False,
                )
            )
        return form, answers

    def _post(self, client: httpx.Client, page: Page, form: dict[str, str]) -> bool:
        """Post a HIT's form until the server acknowledges it; whether it was late."""
        r = self._send(client, "POST", page.action or "", data=form)
        where = r.headers.get("location", "")
        if r.status_code == 303 and ("n=ok" in where or "n=late" in where):
            return "n=late" in where
        refused = read_page(r)
        raise SimulationError(
            f"the server did not store {form.get('assignment')}: {r.status_code} {refused.text}"
        )


def _true_rank(item: ItemTruth, shown: list[str]) -> int:
    word = item.true_next_word
    return item.rank(word) if word is not None and word in shown else 0


def run_http_crowd(
    base_url: str,
    make_session: Callable[[], Session],
    study_id: int,
    secret_key: str,
    crowd: Crowd,
    judge: Judge,
    **options: Any,
) -> HttpRun:
    """Run a simulated crowd on the study against the server at `base_url` (module
    docstring). `make_session` opens sessions on the server's database: the simulated
    annotators are made through it (each in a transaction of its own, committed) and the
    god-view reads it. `secret_key` signs their invite links, as the server's settings do.
    `options`: :class:`~app.simulate.http.CrowdOverHttp`'s (``seed``, ``max_hits``: the
    assignments submitted in all, None until nobody finds work, ``parallel``,
    ``resend_share``, ``transport``)."""
    server = {"base_url": base_url, "make_session": make_session, "study_id": study_id}
    return HttpCrowd(**server, secret_key=secret_key, crowd=crowd, judge=judge, **options).go()


# -- the type's crowd over HTTP (StudyTypePlugin.http_crowd) ----------------------------

# The options of `ebc simulate-http` that only a ratings study's raters take.
RATER_OPTIONS = ("quality", "consistency", "sd_rater", "sd_rater_kind", "sd_pair", "sd_noise")


def run_crowd(
    base_url: str,
    make_session: Callable[[], Session],
    study_id: int,
    secret_key: str,
    view: StudyView,
    crowd: Crowd,
    given: dict,
    **common,
) -> HttpRun:
    """`ebc simulate-http` on a next-word study: annotators who pick words, P_D the
    stand-in (``judge = "stand-in"``: `true_ebc`, `cgd_data`) or the study's reference model
    (``judge = "reference"``, from ``items.reference``)."""
    flags = [f"--{name.replace('_', '-')}" for name in RATER_OPTIONS]
    wrong = [f for f, n in zip(flags, RATER_OPTIONS, strict=True) if given.get(n) is not None]
    if wrong:
        raise SimulationError(
            f"{view.slug} is a next-word study; these options are for ratings studies "
            "only: " + ", ".join(wrong)
        )
    if given.get("judge") == "reference":
        p_d: Judge = ModelJudge()
    else:
        true_ebc, cgd_data = given.get("true_ebc"), given.get("cgd_data")
        p_d = StandInJudge.calibrated(
            view,
            crowd,
            true_ebc=1.0 if true_ebc is None else true_ebc,
            cgd_data=0.73 if cgd_data is None else cgd_data,
            seed=common.get("seed", 0),
        )
    return run_http_crowd(base_url, make_session, study_id, secret_key, crowd, p_d, **common)


def done(run: HttpRun, slug: str) -> str:
    """The command's last line."""
    return (
        f"their {len(run.answers)} judgments are stored like anyone's; the results of "
        f"{slug} say that they include a simulated crowd's"
    )


__all__ = ["Answered", "HttpCrowd", "HttpRun", "run_http_crowd"]
