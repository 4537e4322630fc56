"""Prolific through its REST API (https://docs.prolific.com/api-reference), with httpx.

One of our studies is one Prolific study. `prepare` creates it as a draft whose
`external_study_url` is our entry URL (`/p/{slug}` with the study's entry key and
Prolific's `{{%PROLIFIC_PID%}}`, `{{%STUDY_ID%}}`, `{{%SESSION_ID%}}` placeholders) and
whose completion code is the one our last page shows; `publish` moves it to ACTIVE
(once, whatever the number of units); a participant's Prolific *submission* (its id is
the `SESSION_ID` our entry stores) is what we approve, reject and bonus.

A place is one participant. By default a participant does one HIT, so places = the
assignments wanted; with `hits_per_participant` > 1 one submission covers a bundle of
HITs (our page keeps offering HITs and shows the completion code from the first
one on), the reward per place is the bundle's and places are `places_for(...)`.

Rules of the provider interface (app.crowd.base) as Prolific allows them:

- every failure is a `CrowdError` carrying Prolific's own message; 429 and 5xx are
  retried with exponential backoff (honouring `Retry-After`) a bounded number of times;
- approve and reject are idempotent on Prolific's side; a transition refused because the
  submission is already in the state asked for is reported as `AlreadyDone`;
- a bonus is two calls (set up a bulk bonus payment, then pay it) and Prolific's pay call
  is *not* idempotent, so it is never retried once it may have reached Prolific (only a
  429 or a connection that was never made is retried). The caller's request token makes
  a retried bonus in this provider reuse its set-up payment and never pay twice; a pay
  call whose outcome is unknown is refused again (`retryable=False`, `maybe_done=True`)
  until someone checks the submission's bonuses (`submission_bonuses_cents`). That state
  lives in this object only; across processes the ledger (`app.crowd.ledger`) keeps the
  promise: a bonus whose earlier attempt may have been paid is finished as done when
  Prolific lists it, and refused for a manual check when it does not;
- creating the draft study (POST /studies/) is not idempotent, so it is never retried once
  it may have reached Prolific; a publish run that may have made one before (interrupted,
  or its answer lost) finds it by its internal name, which carries the posting's key
  (`find_prepared`), instead of making a second study;
- Prolific's API has no block call: `block`/`unblock` raise `Unsupported` saying what to
  do instead; the ledger blocks the participant here (their entries are refused) and
  records that Prolific was not told;
- the API token is a secret: it is sent only in the `Authorization` header and appears
  in no message, log line or repr.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from app.crowd.base import (
    AlreadyDone,
    CostEstimate,
    CrowdError,
    PlatformSubmission,
    PostingSpec,
    UnitToPublish,
    Unsupported,
)
from app.crowd.platforms.prolific.api import (
    REJECTION_MESSAGE_MIN,
    BonusSetup,
    BulkBonusPayment,
    CompletionCode,
    CreateStudy,
    ProlificError,
    RejectionCategory,
    SelectedRange,
    Study,
    StudyFilter,
    StudyPage,
    Submission,
    SubmissionPage,
    SubmissionTransition,
    Transition,
    WorkspaceBalance,
    prolific_id,
)
from app.crowd.platforms.prolific.client import DEFAULT_API_URL, ProlificClient, Retry
from app.crowd.platforms.prolific.entry import PLACEHOLDERS
from app.crowd.platforms.prolific.fees import DEFAULT_FEE_RATE, price

log = logging.getLogger(__name__)

# Submission statuses that are not (yet) work handed in: a participant still in the study.
_IN_PROGRESS = {"ACTIVE", "RESERVED"}
_MAX_PAGES = 200  # of a listing of the workspace's studies


def internal_name(spec: PostingSpec) -> str:
    """The study's internal name on Prolific: the slug and the posting's key, which
    `find_prepared` looks for."""
    return f"ebc {spec.study_slug}" + (f" {spec.key}" if spec.key else "")


def _cents_text(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


# -- the provider -------------------------------------------------------------------


class ProlificProvider:
    """`CrowdProvider` for Prolific. Holds no database state and never commits."""

    name = "prolific"
    bonuses_listed_at_once = False  # a bulk bonus is paid asynchronously

    def __init__(
        self,
        token: str,
        *,
        api_url: str = DEFAULT_API_URL,
        environment: str = "production",
        workspace_id: str | None = None,
        fee_rate: float = DEFAULT_FEE_RATE,
        hits_per_participant: int = 1,
        **http: Any,
    ) -> None:
        """`http`: how the client talks to Prolific (`ProlificClient`'s retries, backoff,
        timeout, transport and sleep)."""
        if not token:
            raise CrowdError("No Prolific API token: set EBC_PROLIFIC_API_TOKEN.")
        if hits_per_participant < 1:
            raise CrowdError("hits_per_participant must be at least 1")
        self.environment = environment
        self.workspace_id = workspace_id
        self.fee_rate = fee_rate
        self.hits_per_participant = hits_per_participant
        self._api = ProlificClient(token, api_url=api_url, **http)
        self._published: set[str] = set()
        # Bonuses by the caller's request token: the set-up payment made for it, and
        # whether its pay call went through (True) or may have (None: outcome unknown).
        self._bonus_setups: dict[str, str] = {}
        self._bonus_paid: dict[str, bool | None] = {}

    @classmethod
    def from_settings(cls, settings: Any, **options: Any) -> ProlificProvider:
        """A provider from `app.config.Settings` (token, URL, workspace, fee rate)."""
        secret = settings.prolific_api_token
        if secret is None or not secret.get_secret_value():
            raise CrowdError("No Prolific API token: set EBC_PROLIFIC_API_TOKEN.")
        return cls(
            secret.get_secret_value(),
            api_url=settings.prolific_api_url,
            workspace_id=settings.prolific_workspace_id,
            fee_rate=settings.prolific_fee_rate,
            **options,
        )

    def __repr__(self) -> str:  # never the token
        return f"ProlificProvider(api_url={self._api.base_url!r})"

    def close(self) -> None:
        self._api.close()

    # -- money before publishing ------------------------------------------------------

    def estimate_cost(
        self, spec: PostingSpec, assignments: int, *, bonus_cents: int = 0
    ) -> CostEstimate:
        """Prolific's charge at this workspace's fee rate: `price` (no call to Prolific)."""
        return price(
            spec,
            assignments,
            fee_rate=self.fee_rate,
            hits_per_participant=self.hits_per_participant,
            bonus_cents=bonus_cents,
        )

    def balance_cents(self) -> int | None:
        """The workspace's available balance (its currency's cents), if a workspace is set."""
        if not self.workspace_id:
            return None
        path = f"workspaces/{prolific_id(self.workspace_id, 'workspace')}/balance/"
        balance = self._api.get(path, WorkspaceBalance)
        return balance.available_balance

    # -- publishing ---------------------------------------------------------------------

    def study_body(self, spec: PostingSpec) -> CreateStudy:
        """The draft study for `spec` (checked: placeholders, completion code, places)."""
        missing = [p for p in PLACEHOLDERS if p not in spec.entry_url]
        if missing:
            raise CrowdError(
                "The study URL for Prolific must carry Prolific's placeholders "
                f"{', '.join(missing)}: give it the Prolific URL from the study's annotators page "
                "(participant, study and session parameters)."
            )
        if not spec.completion_code:
            raise CrowdError(
                "Prolific needs a completion code: set the study's Prolific completion code "
                "(channels.prolific.completion_code), the code its last page shows."
            )
        if spec.places < 1:
            raise CrowdError(
                "Prolific needs the number of places (participants) wanted: "
                "places_for(assignments, hits_per_participant)."
            )
        q = spec.qualifications
        if q.locales:
            raise CrowdError(
                "Prolific selects countries with its own filter choices, not ISO codes: "
                "remove the locale requirement and set the country filter on the draft study "
                "in Prolific before publishing."
            )
        if q.masters:
            raise CrowdError("Prolific has no Masters qualification: unset it for Prolific.")
        filters = []
        # The publish form's approval rate, else the study file's prescreener.
        rate = q.min_approval_rate
        if rate is None:
            rate = spec.prescreeners.get("min_approval_rate")
        if rate is not None:
            filters.append(
                StudyFilter(
                    filter_id="approval_rate",
                    selected_range=SelectedRange(lower=rate, upper=100),
                )
            )
        if q.min_approved is not None:
            filters.append(
                StudyFilter(
                    filter_id="approval_numbers",
                    selected_range=SelectedRange(lower=q.min_approved),
                )
            )
        filters += prescreen_filters(spec)
        return CreateStudy(
            name=spec.title,
            internal_name=internal_name(spec),
            description=spec.description or spec.title,
            external_study_url=spec.entry_url,
            completion_codes=[CompletionCode(code=spec.completion_code)],
            total_available_places=spec.places,
            estimated_completion_time=max(1, spec.minutes_estimate * self.hits_per_participant),
            reward=spec.reward_cents * self.hits_per_participant,
            filters=filters,
        )

    def prepare(self, spec: PostingSpec) -> str:
        """Create the draft study; its Prolific id. Not idempotent, so retried only when
        the request never reached Prolific (a timeout or a 5xx may have made it)."""
        body = self.study_body(spec)
        study = self._api.send("POST", "studies/", body, Study, retry=Retry.UNSAFE)
        return prolific_id(study.id, "study")

    def find_prepared(self, spec: PostingSpec) -> str | None:
        """The study an interrupted `prepare` made (GET /studies/, every page): the one
        whose internal name is this posting's (`internal_name`), a live one first."""
        name = internal_name(spec)
        found: list[Study] = []
        path: str | None = "studies/"
        for _ in range(_MAX_PAGES):
            if path is None:
                break
            page = self._api.get(path, StudyPage)
            found += [s for s in page.results if s.internal_name == name]
            more = page.links.next.href if page.links and page.links.next else None
            base = self._api.base_url
            path = more.removeprefix(base) if more and more.startswith(base) else None
        if len(found) > 1:
            log.warning("%d Prolific studies are named %r", len(found), name)
        found.sort(key=lambda s: s.status == "UNPUBLISHED")
        return prolific_id(found[0].id, "study") if found else None

    def publish(self, external_id: str, spec: PostingSpec, unit: UnitToPublish) -> str:
        """Publish the study (once: every unit is a HIT of the same Prolific study)."""
        study_id = prolific_id(external_id, "study")
        if study_id in self._published:
            return study_id
        status = self._api.get(f"studies/{study_id}/", Study).status
        if status == "UNPUBLISHED":
            self._api.send("POST", f"studies/{study_id}/transition/", Transition(action="PUBLISH"))
        elif status == "PAUSED":
            self._api.send("POST", f"studies/{study_id}/transition/", Transition(action="START"))
        elif status not in {"ACTIVE", "PUBLISHING", "SCHEDULED"}:
            raise ProlificError(
                f"The Prolific study {study_id} is {status}: it takes no more participants "
                "(increase its places in Prolific or publish a new posting).",
                code=status,
            )
        self._published.add(study_id)
        return study_id

    def submissions(
        self, external_id: str, unit_external_ids: Sequence[str]
    ) -> Iterator[PlatformSubmission]:
        """Every submission handed in or reviewed (all pages; not those still in progress)."""
        study_id = prolific_id(external_id, "study")
        offset, limit = 0, 100
        while True:
            page = self._api.get(
                f"studies/{study_id}/submissions/",
                SubmissionPage,
                params={"limit": limit, "offset": offset},
            )
            for s in page.results:
                if s.status in _IN_PROGRESS or not s.participant_id:
                    continue
                yield PlatformSubmission(
                    external_assignment_id=s.id,
                    external_worker_id=s.participant_id,
                    external_hit_id=s.study_id or study_id,
                    status=s.status,
                    submitted_at=s.completed_at,
                )
            offset += len(page.results)
            count = page.meta.count if page.meta else None
            more = page.links.next.href if page.links and page.links.next else None
            if not page.results or (count is not None and offset >= count):
                return
            if count is None and page.links is not None and not more:
                return

    # -- reviewing and paying ---------------------------------------------------------

    def approve(self, external_assignment_id: str, *, feedback: str | None = None) -> None:
        """Approve a submission (pays its reward). Prolific sends no approval message."""
        self._review(external_assignment_id, SubmissionTransition(action="APPROVE"), "APPROVED")

    def reject(
        self,
        external_assignment_id: str,
        *,
        feedback: str,
        category: RejectionCategory | str = RejectionCategory.OTHER,
    ) -> None:
        """Reject a submission with the message (≥ 100 characters) and category Prolific
        requires; the message is sent to the participant."""
        message = (feedback or "").strip()
        if len(message) < REJECTION_MESSAGE_MIN:
            raise CrowdError(
                f"Prolific requires a rejection message of at least {REJECTION_MESSAGE_MIN} "
                f"characters explaining the reason to the participant ({len(message)} given)."
            )
        try:
            reason = RejectionCategory(category)
        except ValueError:
            names = ", ".join(c.value for c in RejectionCategory)
            raise CrowdError(f"Unknown Prolific rejection category {category!r}: {names}") from None
        body = SubmissionTransition(action="REJECT", message=message, rejection_category=reason)
        self._review(external_assignment_id, body, "REJECTED")

    def _review(self, submission_id: str, body: SubmissionTransition, target: str) -> None:
        path = f"submissions/{prolific_id(submission_id, 'submission')}/transition/"
        try:
            self._api.send("POST", path, body)
        except ProlificError as exc:
            if exc.status is None or not 400 <= exc.status < 500 or exc.status == 429:
                raise
            try:
                current = self.submission(submission_id).status
            except CrowdError:
                raise exc from None
            if current == target:
                raise AlreadyDone(
                    f"Prolific submission {submission_id} is already {target}", code=current
                ) from exc
            if current == "PROCESSING":
                raise ProlificError(
                    f"Prolific is still processing a review of {submission_id}: sync later ({exc})",
                    status=exc.status,
                    code=current,
                    retryable=True,
                ) from exc
            raise

    def submission(self, submission_id: str) -> Submission:
        return self._api.get(f"submissions/{prolific_id(submission_id, 'submission')}/", Submission)

    def submission_bonuses_cents(self, submission_id: str) -> list[int]:
        """The bonuses Prolific has paid on a submission (to reconcile an unknown outcome)."""
        return [round(b) for b in self.submission(submission_id).bonus_payments or []]

    def bonus(self, worker: str, work: str, cents: int, *, reason: str, request_token: str) -> None:
        """Pay `cents` on a submission: set up a bulk bonus payment, then pay it.

        `request_token` makes the call idempotent here: a retry with the same token reuses
        the set-up payment and, once paid, is `AlreadyDone`. Prolific shows no reason to
        the participant with a bonus (`reason` is kept by the caller's ledger).
        """
        if cents <= 0:
            raise CrowdError("A bonus must be a positive amount.")
        if not request_token:
            raise CrowdError("A bonus needs the caller's request token.")
        paid = self._bonus_paid.get(request_token, False)
        if paid:
            raise AlreadyDone(f"bonus {request_token} was already paid on Prolific")
        if paid is None:
            raise ProlificError(
                f"The Prolific payment of bonus {request_token} may have gone through: check "
                f"the submission's bonuses on Prolific before paying it again.",
                retryable=False,
                maybe_done=True,
            )
        sub = self.submission(work)
        if sub.participant_id and sub.participant_id != worker:
            raise CrowdError(f"Prolific submission {work} belongs to another participant.")
        if not sub.study_id:
            raise CrowdError(f"Prolific did not say which study {work} is in.")
        setup_id = self._bonus_setups.get(request_token)
        if setup_id is None:
            body = BonusSetup(
                study_id=prolific_id(sub.study_id, "study"),
                csv_bonuses=f"{sub.id},{_cents_text(cents)}\n",
            )
            setup = self._api.send(
                "POST", "submissions/bonus-payments/", body, BulkBonusPayment, retry=Retry.SAFE
            )
            setup_id = self._bonus_setups[request_token] = prolific_id(setup.id, "bonus payment")
        self._bonus_paid[request_token] = None  # from here on the outcome may be unknown
        try:
            self._api.send("POST", f"bulk-bonus-payments/{setup_id}/pay/", None, retry=Retry.UNSAFE)
        except ProlificError as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                self._bonus_paid[request_token] = False  # refused: nothing was paid
                raise
            raise ProlificError(
                f"The Prolific payment of bonus {request_token} may have gone through ({exc}): "
                "check the submission's bonuses on Prolific before paying it again.",
                status=exc.status,
                code=exc.code,
                retryable=False,
                maybe_done=True,
            ) from exc
        self._bonus_paid[request_token] = True

    def block(self, external_worker_id: str, *, reason: str) -> None:
        raise Unsupported(
            "Prolific's API has no block call, so Prolific was not told. To keep the "
            "participant out of your future Prolific studies, add their participant id to "
            "a 'Custom Blocklist' screener, or report them to Prolific support.",
            code="Unsupported",
        )

    def unblock(self, external_worker_id: str, *, reason: str) -> None:
        raise Unsupported(
            "Prolific's API has no block call to undo, so Prolific was not told: remove "
            "the participant's id from any 'Custom Blocklist' screener in Prolific.",
            code="Unsupported",
        )

    def expire(self, external_id: str, unit_external_ids: Sequence[str]) -> None:
        """Stop the study: no new participants; those in progress may still submit."""
        study_id = prolific_id(external_id, "study")
        status = self._api.get(f"studies/{study_id}/", Study).status
        if status in {"ACTIVE", "PAUSED", "SCHEDULED", "PUBLISHING"}:
            self._api.send("POST", f"studies/{study_id}/transition/", Transition(action="STOP"))
        self._published.discard(study_id)


# The study file's prescreeners (`channels.prolific.prescreeners`) as Prolific's select
# filters, by its filter ids. Prolific's filters are `filter_id` with `selected_values`
# (select) or `selected_range` (range), listed with their choice ids by GET
# /api/v1/filters/: https://docs.prolific.com/api-reference/filters (overview) and
# https://docs.prolific.com/api-reference/filters/get-filters (the list). Those pages show
# no language, country or approval filter by id; these ids (and `approval_rate`,
# `approval_numbers` above) are the ones Prolific's list returns as public API clients send
# them, checked 2026-11-28: confirm them with GET /api/v1/filters/ before a paid study.
PRESCREEN_FILTERS = {
    "first_languages": "first-language",
    "fluent_languages": "fluent-languages",
    "countries": "current-country-of-residence",
}
# Prolific's filter that keeps out the participants of earlier Prolific studies (the
# "exclude participants from other studies" screener of
# https://researcher-help.prolific.com/en/article/0f7944): their Prolific study ids. Not
# `previous_studies`: https://docs.prolific.com/api-reference/filters/get-filters lists that
# one as the "Previous Studies AllowList", which admits only those studies' participants.
PREVIOUS_STUDIES_FILTER = "previous_studies_blocklist"


def prescreen_filters(spec: PostingSpec) -> list[StudyFilter]:
    """The select filters of the study's prescreeners and the earlier studies it excludes
    (`spec.exclude_units`: their Prolific study ids), in the study-creation body's shape."""
    out = []
    for key, filter_id in PRESCREEN_FILTERS.items():
        values = [str(v) for v in spec.prescreeners.get(key) or ()]
        if values:
            out.append(StudyFilter(filter_id=filter_id, selected_values=values))
    if spec.exclude_units:
        out.append(
            StudyFilter(filter_id=PREVIOUS_STUDIES_FILTER, selected_values=list(spec.exclude_units))
        )
    return out
