"""Dashboard: create studies (form or study file), the study page with live progress,
the item browser, the study's actions (precompute, HITs, close, reopen) and who may see
or run it (members). Whoever creates a study owns it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Query, Request, UploadFile, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.datastructures import UploadFile as StarletteUpload

from app.audit.service import study_events
from app.auth.service import get_user, user_by_name
from app.hits.schemas import HitBuildError
from app.models import Study, StudyStatus
from app.precompute.datasets import DatasetError
from app.precompute.service import (
    PrecomputeError,
    active_job,
    job_progress,
    latest_job,
    plan_precompute,
)
from app.simulate.preview import PAGE_LIMITS
from app.studies.forms import FormErrors, config_from_form, form_defaults, form_values
from app.studies.queries import (
    browse_items,
    collection_progress,
    hit_progress,
    hit_summary,
    study_people,
)
from app.studies.samples import create_ratings_of_samples
from app.studies.schemas import StudyConfig
from app.studies.service import (
    MEMBER_ROLES,
    Access,
    StudyError,
    build_and_open,
    close_study,
    config_of,
    create_study,
    parse_config,
    reopen_study,
    save_dataset,
    share_study,
    slug_taken,
    stop_precompute,
    unshare_study,
)
from app.studytypes.registry import study_type_of
from app.validation import INT32_MAX, check_text
from app.web.dashboard_results import samples_response
from app.web.deps import RowId, SessionDep
from app.web.pages import LOGIN, StudyDep, flash, redirect, render, study_url
from app.web.security import (
    CsrfDep,
    ManageStudyDep,
    ShareStudyDep,
    UserDep,
    access_of,
    csrf_token,
)
from app.web.templating import templates

router = APIRouter(prefix="/dashboard/studies", include_in_schema=False, dependencies=LOGIN)

MAX_UPLOAD = 512 * 1024 * 1024  # a dataset file
MAX_STUDY_FILE = 256 * 1024
HITS_SHOWN = 50
LIVE = (StudyStatus.precomputing, StudyStatus.collecting)


def _form_page(
    request: Request, values: dict, errors: dict | None = None, status_code: int = 200
) -> HTMLResponse:
    return render(
        request,
        "study_new.html",
        {"values": values, "errors": errors or {}},
        status_code=status_code,
    )


@router.get("/new", response_class=HTMLResponse)
def new_study(request: Request) -> HTMLResponse:
    return _form_page(request, form_defaults())


def _create(session, user, config: StudyConfig, upload: StarletteUpload | None, data_dir):
    if slug_taken(session, config.slug):
        raise FormErrors({"slug": f"A study named {config.slug!r} already exists."})
    sha = None
    if upload is not None:
        content = upload.file.read(MAX_UPLOAD + 1)
        if len(content) > MAX_UPLOAD:
            raise FormErrors({"dataset_file": "The dataset file is larger than 512 MiB."})
        path, sha = save_dataset(data_dir, config.slug, upload.filename or "", content)
        config = config.model_copy(
            update={"dataset": config.dataset.model_copy(update={"path": str(path)})}
        )
    study = create_study(session, config, created_by=user, by=user, source="form")
    study.dataset_sha256 = sha
    return study


@router.post("", response_class=HTMLResponse, dependencies=[CsrfDep])
async def create_from_form(request: Request, session: SessionDep, user: UserDep):
    form = await request.form()
    # The database is used in the threadpool, like the sync routes (see app/web/annotate.py).
    return await run_in_threadpool(_create_from_form, request, session, user, form)


def _create_from_form(request: Request, session, user, form: FormData):
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    kinds = [k for k in form.getlist("kinds") if isinstance(k, str)]
    upload = form.get("dataset_file")
    upload = upload if isinstance(upload, StarletteUpload) and upload.filename else None
    if upload is not None and not values.get("dataset.path", "").strip():
        values["dataset.path"] = f"upload:{upload.filename}"  # replaced by the stored path
    values["kinds"] = ",".join([*kinds, *values.get("kinds_extra", "").split()])
    try:
        config = config_from_form(values, kinds)
        study = _create(session, user, config, upload, request.app.state.settings.data_dir)
    except FormErrors as exc:
        return _form_page(request, values, exc.errors, 400)
    flash(request, f"Study {study.slug} created. Plan its precompute when you are ready.")
    return redirect(study_url(study))


@router.post("/upload", response_class=HTMLResponse, dependencies=[CsrfDep])
def create_from_file(
    request: Request, session: SessionDep, user: UserDep, study_file: UploadFile
) -> Response:
    text = study_file.file.read(MAX_STUDY_FILE + 1)
    try:
        if len(text) > MAX_STUDY_FILE:
            raise StudyError("the study file is larger than 256 KiB")
        config = parse_config(text.decode("utf-8", "replace"), study_file.filename or "study file")
        study = create_study(session, config, created_by=user, by=user)
    except StudyError as exc:
        return _form_page(request, form_defaults(), {"study_file": str(exc)}, 400)
    flash(request, f"Study {study.slug} created from {study_file.filename}.")
    return redirect(study_url(study))


def _live(request: Request, session, study: Study) -> dict:
    job = latest_job(session, study)
    return {
        "study": study,
        "csrf": csrf_token(request),
        "can_manage": access_of(request) >= Access.manage,
        "active": active_job(session, study) is not None,
        "job": job,
        "precompute": job_progress(session, job) if job else None,
        "collection": collection_progress(session, study),
        "hits": hit_summary(session, study),
    }


@router.get("/{slug}", response_class=HTMLResponse)
def study_page(request: Request, session: SessionDep, study: StudyDep) -> HTMLResponse:
    return render(
        request,
        "study.html",
        {
            **_live(request, session, study),
            "hit_rows": hit_progress(session, study, limit=HITS_SHOWN),
            "hits_shown": HITS_SHOWN,
            "events": study_events(session, study),
            "config": form_values(config_of(study)),
            "access": access_of(request),
            "people": study_people(session, study),
            "roles": list(MEMBER_ROLES),
            # The "simulate before you pay" form (app/web/dashboard_simulate.py runs it).
            "sim": None,
            "sim_values": study_type_of(study).preview.form_values({}),
            "sim_errors": {},
            "sim_limits": PAGE_LIMITS,
        },
    )


@router.get("/{slug}/progress.json")
def progress(request: Request, session: SessionDep, study: StudyDep) -> JSONResponse:
    """The live part of the study page, rendered, for static/dashboard.js to swap in."""
    live = _live(request, session, study)
    html = templates.env.get_template("_study_live.html").render(**live)
    return JSONResponse(
        {"status": study.status.value, "live": study.status in LIVE, "html": html},
        headers={"Cache-Control": "no-store"},
    )


@router.get("/{slug}/items", response_class=HTMLResponse)
def items(
    request: Request,
    session: SessionDep,
    study: StudyDep,
    length: Annotated[int | None, Query(ge=1, le=1000)] = None,
    kind: Annotated[str | None, Query(max_length=64)] = None,
    attention: str | None = None,
    page: Annotated[int, Query(ge=1, le=INT32_MAX)] = 1,
) -> HTMLResponse:
    check_text(kind or "", max_length=64, field="kind")
    flag = {"yes": True, "no": False}.get(attention or "")
    rows, total = browse_items(
        session, study, length=length, kind=kind or None, attention=flag, page=page
    )
    return render(
        request,
        "items.html",
        {
            "study": study,
            "rows": rows,
            "total": total,
            "page": max(page, 1),
            "per_page": 25,
            "filters": {"length": length, "kind": kind or "", "attention": attention or ""},
        },
    )


@router.post("/{slug}/precompute", dependencies=[CsrfDep])
def precompute(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep
) -> RedirectResponse:
    try:
        job = plan_precompute(session, study, by=user)
    except (DatasetError, PrecomputeError) as exc:
        flash(request, str(exc), "error")
        return redirect(study_url(study))
    flash(request, f"Precompute job {job.id} planned: {job.total_items} items. Workers run it.")
    return redirect(study_url(study))


@router.post("/{slug}/precompute/cancel", dependencies=[CsrfDep])
def cancel_precompute(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep
) -> RedirectResponse:
    try:
        job = stop_precompute(session, study, by=user)
    except StudyError as exc:
        flash(request, str(exc), "error")
        return redirect(study_url(study))
    flash(request, f"Precompute job {job.id} cancelled; the items made so far stay.")
    return redirect(study_url(study))


@router.post("/{slug}/hits", dependencies=[CsrfDep])
def build(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep
) -> RedirectResponse:
    try:
        report = build_and_open(session, study, by=user)
    except (StudyError, HitBuildError) as exc:
        flash(request, str(exc), "error")
        return redirect(study_url(study))
    for line in report.lines():
        flash(request, line.strip())
    return redirect(study_url(study))


@router.post("/{slug}/samples/ratings", dependencies=[CsrfDep], response_model=None)
def rate_samples(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    new_slug: Annotated[str, Form(max_length=64)] = "",
) -> Response:
    """A ratings study of the study's forced-prefix samples (`app.studies.samples`)."""
    try:
        made = create_ratings_of_samples(session, study, new_slug.strip(), user, by=user)
    except StudyError as exc:
        return samples_response(request, session, study, str(exc), status.HTTP_400_BAD_REQUEST)
    flash(request, f"Ratings study {made.slug} made from the samples of {study.slug}.")
    return redirect(study_url(made))


@router.post("/{slug}/close", dependencies=[CsrfDep])
def close(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep
) -> RedirectResponse:
    try:
        close_study(session, study, by=user)
    except StudyError as exc:
        flash(request, str(exc), "error")
        return redirect(study_url(study))
    flash(request, "The study is closed: annotators get no more HITs.")
    return redirect(study_url(study))


@router.post("/{slug}/reopen", dependencies=[CsrfDep])
def reopen(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep
) -> RedirectResponse:
    try:
        reopen_study(session, study, by=user)
    except StudyError as exc:
        flash(request, str(exc), "error")
        return redirect(study_url(study))
    flash(request, f"The study is open again ({study.status.value}).")
    return redirect(study_url(study))


@router.post("/{slug}/members", dependencies=[CsrfDep])
def add_member(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ShareStudyDep,
    username: Annotated[str, Form(max_length=64)] = "",
    role: Annotated[str, Form(max_length=16)] = "view",
) -> RedirectResponse:
    check_text(username, max_length=64, field="username")
    member = user_by_name(session, username) if username.strip() else None
    try:
        if member is None:
            raise StudyError(f"There is no user {username.strip()!r}.")
        share_study(session, study, member, role, by=user)
    except StudyError as exc:
        flash(request, str(exc), "error")
        return redirect(study_url(study))
    flash(request, f"{member.username} may now {_ROLE_WORDS[role]} this study.")
    return redirect(study_url(study))


_ROLE_WORDS = {"view": "view", "manage": "view and manage"}


@router.post("/{slug}/members/{user_id}/remove", dependencies=[CsrfDep])
def remove_member(
    request: Request, session: SessionDep, user: UserDep, study: ShareStudyDep, user_id: RowId
) -> RedirectResponse:
    member = get_user(session, user_id)
    try:
        if member is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "There is no such member.")
        unshare_study(session, study, member, by=user)
    except StudyError as exc:
        flash(request, str(exc), "error")
        return redirect(study_url(study))
    flash(request, f"{member.username} no longer has access to this study.")
    return redirect(study_url(study))
