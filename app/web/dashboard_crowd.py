"""Dashboard: a study's Crowd page (issue 13): publish on MTurk, Prolific or the local
channel (invite links: bookkeeping only, `app.crowd.platforms.local`) with the cost estimate and the
balance shown first, sync, each assignment's payment state, bulk
approval (in batches: a click reviews `APPROVE_BATCH`, the next continues) and bonuses
with a preview. The same crowd services as `ebc crowd`.

The drivers own their units of work (a ledger row is committed before each platform
call), so they get the app's session factory; the request's own session only reads, and
a POST that runs a driver ends its read transaction first (`_release`: its pooled
connection is not held for the run). Platform calls are made in the request: bounded by
the provider's retries, and a platform's error is shown on the page (nothing is lost:
the ledger has the call).

Viewers see the page; previews (they read the account's balance) and every POST need
manage access. Production moves real money: it needs its setting (EBC_MTURK_PRODUCTION;
Prolific has no sandbox) and the study's slug typed into the confirmation.

What differs between platforms comes from the registry (`app.crowd.registry`): the tabs,
labels, environments, money's sign and what the forms show (`Target.caps`); a platform's
notice on its Crowd page is its own template (`crowd/platforms/<name>/_notice.html`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Literal, cast
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from app.crowd.audience import audience
from app.crowd.base import CrowdError, CrowdProvider
from app.crowd.bonuses import MAX_BONUSES, bonus_plan, pay_bonuses
from app.crowd.common import (
    CrowdServiceError,
    paced,
    provider_for,
    resolved_options,
)
from app.crowd.overview import crowd_overview
from app.crowd.payments import approve_all, balance, preview_approve_all, reject
from app.crowd.platform import Capabilities, Platform
from app.crowd.publishing import estimate, publish
from app.crowd.registry import DEFAULT, PLATFORMS, page_default, page_order
from app.crowd.sync import sync
from app.models import Study
from app.studies.service import Access
from app.validation import Line, Text
from app.web.crowd_forms import PublishFields, bonus_lines, form_values
from app.web.deps import SessionDep
from app.web.pages import LOGIN, StudyDep, flash, redirect, render, study_url
from app.web.security import CsrfDep, ManageStudyDep, UserDep, access_of
from app.web.templating import templates

router = APIRouter(prefix="/dashboard/studies", include_in_schema=False, dependencies=LOGIN)

# HITs published per click: each is a paced platform call (EBC_CROWD_CALLS_PER_SECOND),
# and a request should end in well under a minute; the next click publishes the rest.
PUBLISH_BATCH = 50
# Assignments reviewed per click of a bulk approval, for the same reason.
APPROVE_BATCH = 50
# Repeated form fields (assignments, bonus lines) taken at most: past it a request is
# malformed; the services refuse more than they take at a time with their own message.
MAX_LIST = 1000
# What `?provider=` and `?environment=` take: the registry's platforms and environments.
ProviderName = Literal[tuple(PLATFORMS)]  # type: ignore[valid-type]
EnvironmentName = Literal[  # type: ignore[valid-type]
    tuple(dict.fromkeys(e for p in PLATFORMS.values() for e in p.caps.environments))
]


@dataclass(frozen=True)
class Target:
    """The platform and environment a Crowd page and its forms act on (query string)."""

    provider: str
    environment: str

    @property
    def platform(self) -> Platform:
        return PLATFORMS[self.provider]

    @property
    def caps(self) -> Capabilities:
        return self.platform.caps

    @property
    def label(self) -> str:
        if len(self.caps.environments) == 1:  # one environment: its name says nothing
            return self.platform.label
        return f"{self.platform.label} {self.environment}"

    @property
    def live(self) -> bool:
        return self.environment == "production"

    def url(self, study: Study, suffix: str = "") -> str:
        query = urlencode({"provider": self.provider, "environment": self.environment})
        return study_url(study, f"/crowd{suffix}?{query}")


def crowd_target(
    provider: ProviderName = cast(ProviderName, DEFAULT),
    environment: EnvironmentName | None = None,
) -> Target:
    platform = PLATFORMS[provider]
    if environment is not None and environment not in platform.caps.environments:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, platform.environment_refused(environment))
    return Target(provider, environment or platform.caps.environments[0])


def tabs() -> list[Target]:
    """Every platform and environment a Crowd page can show, those crowds use today first
    (`page_order`)."""
    return [Target(p.name, e) for p in page_order() for e in p.caps.environments]


@dataclass(frozen=True)
class ChannelState:
    """A platform as the Crowd page lists it: its tab, and why it is off (None: on)."""

    tab: Target
    off: str | None


def channel_states(request: Request, study: Study) -> list[ChannelState]:
    settings = request.app.state.settings
    return [ChannelState(t, t.platform.off_reason(study, settings, t.environment)) for t in tabs()]


TargetDep = Annotated[Target, Depends(crowd_target)]


@contextmanager
def _client(request: Request, target: Target, hits_per_participant: int = 1):
    """The platform's client; refused (4xx page) where settings do not allow it.
    `hits_per_participant`: the bundle (`Capabilities.bundles`), which publishing needs (it
    prices places)."""
    try:
        made = provider_for(
            request.app.state.settings,
            target.provider,
            target.environment,
            hits_per_participant=hits_per_participant,
            sessions=_sessions(request),
        )
    except CrowdServiceError as exc:
        raise HTTPException(exc.status_code, exc.message) from exc
    try:
        yield made
    finally:
        close = getattr(made, "close", None)
        if close is not None:
            close()


def crowd_provider(request: Request, target: TargetDep) -> Iterator[CrowdProvider]:
    with _client(request, target) as made:
        yield made


# Declared after the study in handlers: a viewer is refused (403) before any provider.
ProviderDep = Annotated[CrowdProvider, Depends(crowd_provider)]


# -- parsing ----------------------------------------------------------------------------


def _confirmed(study: Study, target: Target, confirm: str) -> None:
    """Production moves real money: the study's slug, typed, or nothing is done."""
    if target.live and confirm.strip() != study.slug:
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST,
            f"{target.label} moves real money: type the study's name ({study.slug}) into the "
            "confirmation field to go ahead. Nothing was done.",
        )


# -- rendering and acting ----------------------------------------------------------------


def money(cents: int | None, target: Target) -> str:
    if cents is None:
        return "-"
    sign = "-" if cents < 0 else ""
    # MTurk charges in US dollars; Prolific in the workspace's currency (no sign).
    unit = target.caps.currency
    return f"{sign}{unit}{abs(cents) // 100:,}.{abs(cents) % 100:02d}"


def _page(request: Request, template: str, study: Study, target: Target, **context) -> HTMLResponse:
    settings = request.app.state.settings
    return render(
        request,
        template,
        {
            "study": study,
            "target": target,
            "can_manage": access_of(request) >= Access.manage,
            "money": lambda cents: money(cents, target),
            # Whether this server may act there (else the platform's notice says why).
            "ready": target.platform.ready(settings, target.environment),
            **context,
        },
    )


def _balance(made: CrowdProvider) -> tuple[int | None, str | None]:
    """The account's balance, or the platform's error as a message (never a 500)."""
    try:
        return balance(made), None
    except CrowdError as exc:
        return None, str(exc)


def _refused(request: Request, exc: CrowdServiceError) -> HTMLResponse:
    """The service refused (4xx: nothing was changed), with its own message whatever the
    status (the app's page for a 404 says only that there is nothing at the address)."""
    return templates.TemplateResponse(
        request,
        "error.html",
        {"status_code": exc.status_code, "message": exc.message},
        status_code=exc.status_code,
    )


@dataclass(frozen=True)
class Done:
    """A driver's report as a notice, and the page to show it on (None: the Crowd page)."""

    notice: str
    then: str | None = None


def _act(
    request: Request, study: Study, target: Target, action: Callable[[], str | Done]
) -> Response:
    """Run a driver: its report as a notice on the Crowd page, or the platform's error.

    A request the service refuses (4xx: nothing was changed) answers an error page. A
    platform's failure is shown with its message; what was done before it stays done
    and the failed call stays in the ledger, retried with its token next time.
    """
    then = None
    try:
        done = action()
        done = done if isinstance(done, Done) else Done(done)
        flash(request, done.notice)
        then = done.then
    except CrowdServiceError as exc:
        return _refused(request, exc)
    except CrowdError as exc:
        flash(request, f"{target.label} refused or failed: {exc}", "error")
    return redirect(then or target.url(study))


def _sessions(request: Request):
    return request.app.state.sessionmaker


def _release(session: Session) -> None:
    """End the request's read transaction (it read the user and the study, which stay
    loaded) and give its connection back to the pool before a driver's run."""
    session.close()


# -- the page ---------------------------------------------------------------------------


@router.get("/{slug}/crowd", response_class=HTMLResponse)
def crowd_page(
    request: Request, session: SessionDep, study: StudyDep, target: TargetDep
) -> HTMLResponse:
    if "provider" not in request.query_params:  # the channel the study enables, Prolific first
        opened = page_default(study)
        target = crowd_target(opened.name, study_environment(opened, study))
    overview = crowd_overview(session, study, target.provider, target.environment)
    return _page(
        request,
        "crowd_study.html",
        study,
        target,
        overview=overview,
        values=form_values(overview.posting, study, target.provider),
        max_bonuses=MAX_BONUSES,
        tabs=tabs(),
        channels=channel_states(request, study),
        audience=audience(session, study, target.platform),
    )


def study_environment(made: Platform, study: Study) -> str:
    """The environment the study file points the platform at, if the page has that tab."""
    wanted = made.study_environment(study)
    return wanted if wanted in made.caps.environments else made.caps.environments[0]


# -- publishing -------------------------------------------------------------------------


@router.get("/{slug}/crowd/publish", response_class=HTMLResponse)
def publish_preview(
    request: Request,
    session: SessionDep,
    study: ManageStudyDep,
    target: TargetDep,
    fields: Annotated[PublishFields, Query()],
) -> HTMLResponse:
    options = fields.options(study, target.provider)
    with _client(request, target, fields.bundle()) as made:
        try:
            cost = estimate(session, request.app.state.settings, study, made, options)
            asked = resolved_options(study, options, made)
        except CrowdServiceError as exc:
            return _refused(request, exc)
        funds, funds_error = _balance(made)
    return _page(
        request,
        "crowd_publish.html",
        study,
        target,
        cost=cost,
        asked=asked,
        balance=funds,
        balance_error=funds_error,
        fields=fields.model_dump(),
        batch=PUBLISH_BATCH,
    )


def _published(report, target: Target) -> str:
    done = f"{report.published} HITs published on {target.label} now; {report.total} there in all."
    if report.reopened:
        done += f" {report.reopened} expired HITs reopened: they take new work again."
    rest = f" {report.pending} still to publish: publish again." if report.pending else ""
    return " ".join([done + rest, *report.warnings])


@router.post("/{slug}/crowd/publish", dependencies=[CsrfDep])
def publish_now(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    target: TargetDep,
    fields: Annotated[PublishFields, Form()],
    confirm: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    _confirmed(study, target, confirm)
    options = fields.options(study, target.provider)
    settings = request.app.state.settings
    _release(session)
    with _client(request, target, fields.bundle()) as made:

        def run() -> str:
            # Unpaced calls (local: bookkeeping only) are made all in one click.
            report = publish(
                _sessions(request), settings, study.slug, made, options, by=user,
                limit=PUBLISH_BATCH if paced(made) else None,
            )  # fmt: skip
            return _published(report, target)

        return _act(request, study, target, run)


# -- sync -------------------------------------------------------------------------------


def _synced(report) -> str:
    flagged = len(report.flagged)
    kept_out = report.sandbox_kept_out
    return (
        f"Synced: {report.listed} submissions listed, {report.confirmed} confirmed now, "
        f"{report.reviewed} reviews taken, {report.recovered} recovered, {flagged} flagged"
        + (" (see below)." if flagged else ".")
        + (
            f" {kept_out} sandbox assignments left unconfirmed: the study is in production, "
            "where sandbox work never counts."
            if kept_out
            else ""
        )
    )


@router.post("/{slug}/crowd/sync", dependencies=[CsrfDep])
def sync_now(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    target: TargetDep,
    made: ProviderDep,
) -> Response:
    settings = request.app.state.settings
    _release(session)
    return _act(
        request,
        study,
        target,
        lambda: _synced(sync(_sessions(request), settings, study.slug, made, by=user)),
    )


# -- bulk approval ----------------------------------------------------------------------


@router.get("/{slug}/crowd/approve", response_class=HTMLResponse)
def approve_preview(
    request: Request,
    study: ManageStudyDep,
    target: TargetDep,
    made: ProviderDep,
    apply_exclusions: bool = False,
) -> HTMLResponse:
    try:
        plan = preview_approve_all(
            _sessions(request), study.slug, made, apply_exclusions=apply_exclusions
        )
    except CrowdServiceError as exc:
        return _refused(request, exc)
    return _page(request, "crowd_approve.html", study, target, plan=plan, batch=APPROVE_BATCH)


@router.post("/{slug}/crowd/approve", dependencies=[CsrfDep])
def approve_now(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    target: TargetDep,
    made: ProviderDep,
    approve: Annotated[list[Line(64)], Form(default_factory=list, max_length=MAX_LIST)],
    reject: Annotated[list[Line(64)], Form(default_factory=list, max_length=MAX_LIST)],
    apply_exclusions: Annotated[bool, Form()] = False,
    reject_feedback: Annotated[Text(2000), Form()] = "",
    feedback: Annotated[Text(1000), Form()] = "",
    confirm: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    """The reviews the preview's form carries (its first `APPROVE_BATCH`), no others."""
    _confirmed(study, target, confirm)
    settings = request.app.state.settings
    _release(session)

    def run() -> Done:
        report = approve_all(
            _sessions(request),
            settings,
            study.slug,
            made,
            approvals_seen=approve,
            rejections_seen=reject,
            apply_exclusions=apply_exclusions,
            reject_feedback=reject_feedback,
            feedback=feedback.strip() or None,
            by=user,
            limit=APPROVE_BATCH,
        )
        done = (
            f"Approved {report.approved}, rejected {report.rejected} on {target.label}; "
            f"{report.already} had been done before."
        )
        if not report.left:
            return Done(done)
        # The preview of what is left, whose confirmation continues (nothing twice).
        query = "&apply_exclusions=true" if apply_exclusions else ""
        return Done(
            f"{done} {report.left} left: confirm again to continue.",
            target.url(study, "/approve") + query,
        )

    return _act(request, study, target, run)


@router.post("/{slug}/crowd/reject", dependencies=[CsrfDep])
def reject_flagged(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    target: TargetDep,
    made: ProviderDep,
    submission: Annotated[Line(64), Form()],
    feedback: Annotated[Text(2000), Form()] = "",
    category: Annotated[Line(32), Form()] = "",
    confirm: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    """Reject one submission a sync flagged and we never stored (else the platform pays
    it), by the platform's id, as the bulk approval's preview lists them."""
    _confirmed(study, target, confirm)
    _release(session)

    def run() -> str:
        outcome = reject(
            _sessions(request), study.slug, made, submission, feedback=feedback,
            category=category or None, by=user,
        )  # fmt: skip
        return f"Rejected {submission} on {target.label}" + (
            "." if outcome.made else " before: nothing was done now."
        )

    return _act(request, study, target, run)


# -- bonuses ----------------------------------------------------------------------------


@router.get("/{slug}/crowd/bonus", response_class=HTMLResponse)
def bonus_preview(
    request: Request,
    session: SessionDep,
    study: ManageStudyDep,
    target: TargetDep,
    made: ProviderDep,
    assignment: Annotated[list[Line(64)], Query(default_factory=list, max_length=MAX_LIST)],
    amount_cents: Annotated[int, Query(ge=1, le=100_000)] = 1,
    reason: Annotated[Text(1000), Query()] = "",
) -> HTMLResponse:
    settings = request.app.state.settings
    try:
        plan = bonus_plan(session, settings, study, made, assignment, amount_cents, reason)
    except CrowdServiceError as exc:
        return _refused(request, exc)
    funds, funds_error = _balance(made)
    return _page(
        request,
        "crowd_bonus.html",
        study,
        target,
        plan=plan,
        balance=funds,
        balance_error=funds_error,
    )


@router.post("/{slug}/crowd/bonus", dependencies=[CsrfDep])
def bonus_now(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    target: TargetDep,
    made: ProviderDep,
    bonus: Annotated[list[Line(80)], Form(default_factory=list, max_length=MAX_LIST)],
    amount_cents: Annotated[int, Form(ge=1, le=100_000)] = 1,
    reason: Annotated[Text(1000), Form()] = "",
    confirm: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    _confirmed(study, target, confirm)
    lines = bonus_lines(bonus)
    settings = request.app.state.settings
    _release(session)

    def run() -> str:
        report = pay_bonuses(
            _sessions(request), settings, study.slug, made, lines, amount_cents,
            reason=reason, by=user,
        )  # fmt: skip
        return (
            f"Paid {report.paid} bonuses of {money(amount_cents, target)} on {target.label}; "
            f"{report.already} had been paid before."
        )

    return _act(request, study, target, run)
