"""A simulated crowd over HTTP, against a running server, through the annotators' own paths.

Each simulated annotator is made through the researcher's invite service (marked
``simulated``, labelled ``simulated-<n>``, its id), follows its invite link, and takes HITs as a
person does: ``GET /a/{token}`` (which claims or resumes a lease), reads the HIT form from
the HTML (its action, hidden fields, and each position's shown words in screen order),
chooses, and posts the form as a browser without JavaScript does, with a time per item in
``ms{n}`` (the page's script fills it in a browser). It goes on until its heavy-tailed
activity is spent (:class:`app.simulate.crowd.Heterogeneity`: the simulator never applies
the cap itself, so the server's cap is what stops a busy annotator), the server says it
has reached the cap, or there is no work left. Leases, caps, the page, the submission code
and the results are exactly those people go through. When the run ends (or fails), its
annotators' invite links are revoked: nobody works as a simulated annotator afterwards.

What an annotator sees comes from the page only; what P_D needs beyond it (the model's
rank of a shown word, an item's kind, ``items.reference``) comes from the simulator's
god-view of the database (:mod:`app.simulate.godview`), never from the page, and is never
sent. Honest answers come from a :class:`~app.studytypes.nextword.judges.Judge`; inattention (random
clicks, first-slot clicks, too-fast clicks, spammers, attention items) from
:func:`app.simulate.crowd.deliver`. Too-fast answers report a time under the study's
minimum per item; the others a log-normal time around 4 s (as a next-word study's
simulation, :mod:`app.studytypes.nextword.simulation`).

The run keeps its own record of every answer the server acknowledged (a 303 to the next
page): assignment, HIT, position, the shown words, the option posted, the word and its
model rank. A post that fails in transit or with a 503 is sent again unchanged (the server
stores a repeat once); with ``resend_share`` a share of acknowledged posts is sent a
second time on purpose (a double click). Seeded: annotator ``n`` draws from
``numpy.random.default_rng([seed, n])``, so with ``parallel = 1`` a run on the same
server state repeats itself; with ``parallel > 1`` annotators work at once (leases and
caps under concurrency), and which HITs each gets, hence its answers, depends on timing.

:class:`CrowdOverHttp` is the run every study type's simulated crowd shares (a
next-word study's: ``app.studytypes.nextword.http_crowd``; a ratings study's raters:
``app.studytypes.ratings.http_crowd``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Self

import httpx
import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.admin import invite, revoke_invite
from app.annotation.identities import invite_token
from app.audit.service import CLI
from app.db import begin_write, unit_of_work
from app.models import Annotator, Study, StudyStatus
from app.simulate.crowd import Heterogeneity
from app.simulate.godview import GodView, ItemTruth, SimulationError, StudyView
from app.simulate.page import HIT_PAGE, Page, read_page

RETRIES = 5  # sends of one request that failed in transit or with a 503

# -- the record -------------------------------------------------------------------------


@dataclass(frozen=True)
class Acknowledged:
    """Who answered which item, as the server acknowledged it: the simulated annotator,
    the assignment (page values) and the god-view's item, kind, length and attention flag;
    the common head of a run's records (:class:`Answered`, and a ratings run's pairs)."""

    annotator: str
    annotator_id: int
    assignment: str
    hit_id: int
    position: int
    item_id: int
    length: int
    kind: str
    attention: bool

    @classmethod
    def at(cls, who: Recruit, assignment: str, item: ItemTruth, **rest: Any) -> Self:
        """The record of `who`'s answer to `item` in `assignment`, with the rest of its
        fields."""
        return cls(
            annotator=who.label,
            annotator_id=who.annotator_id,
            assignment=assignment,
            hit_id=item.hit_id,
            position=item.position,
            item_id=item.item_id,
            length=item.length,
            kind=item.kind,
            attention=item.attention,
            **rest,
        )


@dataclass
class AnnotatorRun:
    label: str
    annotator_id: int
    wanted: int  # HITs its activity asks for (taken: submitted or abandoned)
    done: int = 0  # HITs submitted
    abandoned: int = 0  # HITs whose lease ran out before they were submitted
    stopped: str = ""  # activity, budget, or the server's message kind (cap_reached, ...)
    spammer: bool = False


def stopped_by(annotators: list[AnnotatorRun]) -> str:
    """How many annotators stopped for each reason: ``"3 by activity, 1 by cap_reached"``."""
    stops: dict[str, int] = {}
    for r in annotators:
        stops[r.stopped] = stops.get(r.stopped, 0) + 1
    return ", ".join(f"{n} by {k}" for k, n in sorted(stops.items()))


# -- simulated annotators ---------------------------------------------------------------


@dataclass(frozen=True)
class Recruit:
    annotator_id: int
    label: str
    path: str  # the invite link's path, /a/{token}


def simulated_annotator(session: Session, study: Study, secret_key: str) -> Recruit:
    """A new simulated annotator of `study`, made by the researcher's invite service (and
    audited as the CLI's), marked simulated and labelled ``simulated-<n>``, `n` its
    annotator id: unique even when two runs recruit at once (a count of those made
    before is not, under PostgreSQL's read committed). Flushes."""
    (made,) = invite(session, study, 1, "simulated", by=CLI)
    made.simulated = True
    made.label = f"simulated-{made.id}"
    session.flush()
    return Recruit(made.id, made.label or "", f"/a/{invite_token(secret_key, made)}")


# -- the run ----------------------------------------------------------------------------


class _Budget:
    """Assignments left to take (None: no limit), shared by the annotators."""

    def __init__(self, n: int | None) -> None:
        self.left = n
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            if self.left is None:
                return True
            if self.left <= 0:
                return False
            self.left -= 1
            return True

    def give_back(self) -> None:
        with self.lock:
            if self.left is not None:
                self.left += 1

    def empty(self) -> bool:
        with self.lock:
            return self.left is not None and self.left <= 0


class Turn(NamedTuple):
    """An annotator at work on one HIT: the HTTP client, the HIT's first page, who, their
    run's record, their judge's state and their random draws."""

    client: httpx.Client
    page: Page
    who: Recruit
    run: AnnotatorRun
    state: object
    rng: np.random.Generator


@dataclass(kw_only=True)
class CrowdOverHttp:
    """What every simulated crowd over HTTP shares (module docstring): recruiting simulated
    annotators, the budget of assignments, requests sent again after a transport error or a
    503, and their links closed when the run ends. A subclass does one HIT
    (:meth:`_do_hit`) on the page it expects (``work_page``) and keeps its own record
    (``self.run``: ``annotators``, ``resent``, ``retried``, ``seconds``, and its answers'
    records in the list named ``records``, kept in a fixed order)."""

    base_url: str
    make_session: Callable[[], Session]
    study_id: int
    secret_key: str
    seed: int = 0
    max_hits: int | None = None  # assignments submitted in all (None: until no work)
    parallel: int = 1  # annotators at work at once
    resend_share: float = 0.0
    max_annotators: int = 10_000
    timeout: float = 30.0
    transport: httpx.BaseTransport | None = None  # httpx's default (tests: a lossy one)

    work_page: ClassVar[str] = HIT_PAGE
    records: ClassVar[str] = "answers"  # the run's list of acknowledged answers

    def __post_init__(self) -> None:
        self.god = GodView(self.make_session, self.study_id)
        self.view: StudyView = self.god.study()
        self._check(self.view)
        self.budget = _Budget(self.max_hits)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.next_ordinal = 0
        self.recruited: list[int] = []  # annotator ids, whose links die with the run
        self.run = self._new_run()

    # -- what a subclass says -----------------------------------------------------------

    def _check(self, view: StudyView) -> None:
        """Refuse a study this crowd does not fit (another type's: `SimulationError`)."""
        raise NotImplementedError

    def _new_run(self) -> Any:
        raise NotImplementedError

    def _newcomer(self, rng: np.random.Generator) -> tuple[int, bool, object]:
        """A new annotator's draws: the HITs its activity asks for, whether it is a
        spammer, and its judge's state."""
        raise NotImplementedError

    def _do_hit(self, turn: Turn) -> bool:
        """Do the HIT whose first page is ``turn.page``, recording what the server
        acknowledged; whether it was submitted (False: its lease ran out midway and the
        server moved on, the HIT abandoned)."""
        raise NotImplementedError

    def _sort(self) -> None:
        """Put the run's records in a fixed order: by annotator, assignment, position."""
        key = lambda x: (x.annotator_id, x.assignment, x.position)  # noqa: E731
        getattr(self.run, self.records).sort(key=key)

    # -- the run ------------------------------------------------------------------------

    def go(self) -> Any:
        with unit_of_work(self.make_session) as session:
            status = session.get(Study, self.study_id).status
        if status is not StudyStatus.collecting:
            raise SimulationError(
                f"study {self.view.slug!r} is {status.value}, not collecting: open it first"
            )
        started = time.perf_counter()
        n = max(1, self.parallel)
        try:
            # One client (its connection pool is thread-safe) for the annotators at work.
            with (
                httpx.Client(
                    base_url=self.base_url,
                    follow_redirects=False,
                    timeout=self.timeout,
                    transport=self.transport,
                ) as client,
                ThreadPoolExecutor(n) as pool,
            ):
                for f in [pool.submit(self._recruit_loop, client) for _ in range(n)]:
                    f.result()
        finally:
            self._close_links()
        self.run.seconds = time.perf_counter() - started
        self._sort()
        self.run.annotators.sort(key=lambda r: r.annotator_id)
        return self.run

    def _close_links(self) -> None:
        """The run is over (or failed): its annotators' invite links stop working, through
        the researcher's revoke service (audited as the CLI's), so that nobody works as a
        simulated annotator afterwards. Their judgments are kept."""
        if not self.recruited:
            return
        with unit_of_work(self.make_session) as session:
            begin_write(session)
            for annotator in session.scalars(
                select(Annotator)
                .where(Annotator.id.in_(self.recruited), Annotator.invite_nonce.is_not(None))
                .order_by(Annotator.id)
            ):
                revoke_invite(session, annotator, by=CLI)

    def _recruit_loop(self, client: httpx.Client) -> None:
        while not self.stop.is_set() and not self.budget.empty():
            with self.lock:
                ordinal = self.next_ordinal
                if ordinal >= self.max_annotators:
                    return
                self.next_ordinal += 1
                with unit_of_work(self.make_session) as session:
                    begin_write(session)  # SQLite: a writer from the start, as the server
                    study = session.get(Study, self.study_id)
                    who = simulated_annotator(session, study, self.secret_key)
                self.recruited.append(who.annotator_id)
            try:
                worked = self._annotate(client, who, np.random.default_rng([self.seed, ordinal]))
            except Exception:
                self.stop.set()
                raise
            if worked.done == 0 and worked.stopped not in ("activity", "budget"):
                self.stop.set()  # a newcomer finds nothing to do: the work is done

    def _annotate(
        self, client: httpx.Client, who: Recruit, rng: np.random.Generator
    ) -> AnnotatorRun:
        """One annotator's HITs until its activity is spent, the budget is, or the server
        gives it no work. The budget (``max_hits``) counts submitted assignments only: a
        HIT abandoned when its lease ran out midway gives its share back (what it posted
        stays stored) and is not ``done``; it spends the annotator's activity, which
        counts the HITs it takes."""
        wanted, spammer, state = self._newcomer(rng)
        run = AnnotatorRun(who.label, who.annotator_id, wanted, spammer=spammer)
        with self.lock:
            self.run.annotators.append(run)
        run.stopped = "activity"
        self._consent(client, who)
        while run.done + run.abandoned < wanted:
            if not self.budget.take():
                run.stopped = "budget"
                break
            page = read_page(self._send(client, "GET", who.path))
            if page.kind != self.work_page:
                self.budget.give_back()
                if page.status >= 400:
                    raise SimulationError(f"{who.path}: {page.status} {page.text}")
                run.stopped = page.kind
                break
            if self._do_hit(Turn(client, page, who, run, state, rng)):
                run.done += 1
            else:
                run.abandoned += 1
                self.budget.give_back()
        return run

    def _consent(self, client: httpx.Client, who: Recruit) -> None:
        """A study with a consent text sends its link to the consent page first: the
        simulated annotator agrees there, as a person would (issue 33)."""
        first = self._send(client, "GET", who.path)
        where = first.headers.get("location", "")
        if first.status_code == 303 and where.endswith("/consent"):
            agreed = self._send(client, "POST", where, data={"agree": "yes"})
            if agreed.status_code != 303:
                raise SimulationError(f"{where}: {agreed.status_code} {agreed.text[:200]}")

    def _wanted(self, rng: np.random.Generator, h: Heterogeneity) -> int:
        """HITs a new annotator's heavy-tailed activity asks for."""
        return max(1, math.ceil(h.activity_min * (1.0 + rng.pareto(h.activity_tail))))

    def _resend_now(self, rng: np.random.Generator) -> bool:
        """Send an acknowledged post a second time (a double click)? Counted when so."""
        if rng.random() >= self.resend_share:
            return False
        with self.lock:
            self.run.resent += 1
        return True

    def _send(self, client: httpx.Client, method: str, url: str, **kw) -> httpx.Response:
        """One request, sent again unchanged after a transport error or a 503 (a resend
        stores nothing twice: the server's contract)."""
        for attempt in range(RETRIES):
            try:
                r = client.request(method, url, **kw)
            except httpx.TransportError:
                if attempt == RETRIES - 1:
                    raise
            else:
                if r.status_code != 503 or attempt == RETRIES - 1:
                    return r
            with self.lock:
                self.run.retried += 1
            time.sleep(min(2.0, 0.1 * 2**attempt))
        raise AssertionError("unreachable")


def client_ms(rng: np.random.Generator, too_fast: bool, min_ms: int) -> int:
    """The time an answer reports (``ms``, as the page's script fills it in a browser):
    under the study's minimum for a too-fast click, else log-normal around 4 s."""
    if too_fast and min_ms > 0:
        return int(rng.uniform(0.1, 0.9) * min_ms)
    return round(math.exp(rng.normal(math.log(4000.0), 0.5)))


__all__ = [
    "Acknowledged",
    "AnnotatorRun",
    "CrowdOverHttp",
    "Recruit",
    "client_ms",
    "simulated_annotator",
    "stopped_by",
]
