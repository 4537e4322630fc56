"""Annotator pages besides a HIT's (issue 33): the consent page, accepted once before the
first HIT, and the end-of-study comment, for invite and Prolific links and for MTurk.

Each route parses its request, makes one call to app.annotation.pages in one transaction
(`app.web.annotate.transaction`), and renders what it returned; the headers are the HIT
pages' (framing, no referrer, no caching). A HIT page without consent redirects here
(`app.web.annotate`); a post of answers without it is refused (403).
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.annotation.identities import read_invite_token
from app.annotation.pages import (
    ConsentView,
    accept_invite_consent,
    accept_mturk_consent,
    invite_comment,
    invite_consent,
    mturk_comment,
    mturk_consent,
)
from app.web.annotate import (
    LINK_HEADERS,
    enrolment,
    mturk_headers,
    mturk_ids,
    read_form,
    transaction,
)
from app.web.templating import templates

router = APIRouter(include_in_schema=False)

COMMENT_UNSAVED = "Your comment was not saved \u2014 press Send again in a few seconds."
COMMENT_SAVED = "Thank you: your comment was saved."


def consent_page(
    request: Request, view: ConsentView, action: str, hidden: dict[str, str], headers: dict
) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "annotate/consent.html",
        {"view": view, "action": action, "hidden": hidden},
        headers=headers,
    )


@router.get("/a/{token}/consent", response_class=HTMLResponse)
async def invite_consent_page(request: Request, token: str):
    ref = read_invite_token(request.app.state.settings.secret_key, token)
    return await transaction(
        request,
        invite_consent,
        (ref,),
        lambda view: consent_page(request, view, f"/a/{token}/consent", {}, LINK_HEADERS),
    )


@router.post("/a/{token}/consent")
async def invite_consent_post(request: Request, token: str) -> RedirectResponse:
    ref = read_invite_token(request.app.state.settings.secret_key, token)
    form = await read_form(request)
    return await transaction(
        request,
        accept_invite_consent,
        (ref, form),
        lambda _: RedirectResponse(
            f"/a/{token}?n=consent", status.HTTP_303_SEE_OTHER, LINK_HEADERS
        ),
        resend=form,
    )


@router.post("/a/{token}/comment")
async def invite_comment_post(request: Request, token: str) -> RedirectResponse:
    ref = read_invite_token(request.app.state.settings.secret_key, token)
    form = await read_form(request)
    return await transaction(
        request,
        invite_comment,
        (ref, form),
        lambda _: RedirectResponse(
            f"/a/{token}?n=comment", status.HTTP_303_SEE_OTHER, LINK_HEADERS
        ),
        resend=form,
        unsaved=COMMENT_UNSAVED,
    )


@router.get("/mturk/{slug}/consent", response_class=HTMLResponse)
async def mturk_consent_page(request: Request, slug: str):
    ids = mturk_ids(request.query_params)
    action = f"/mturk/{quote(slug)}/consent"
    return await transaction(
        request,
        mturk_consent,
        (slug, ids, enrolment(request)),
        lambda view: consent_page(request, view, action, ids, mturk_headers()),
    )


@router.post("/mturk/{slug}/consent")
async def mturk_consent_post(request: Request, slug: str) -> RedirectResponse:
    form = await read_form(request)
    query = urlencode({**mturk_ids(form), "n": "consent"})
    return await transaction(
        request,
        accept_mturk_consent,
        (slug, form, enrolment(request)),
        lambda _: RedirectResponse(
            f"/mturk/{quote(slug)}?{query}", status.HTTP_303_SEE_OTHER, mturk_headers()
        ),
        resend=form,
    )


@router.post("/mturk/{slug}/comment", response_class=HTMLResponse)
async def mturk_comment_post(request: Request, slug: str):
    form = await read_form(request)

    def render(_: bool) -> Response:
        return templates.TemplateResponse(
            request,
            "annotate/message.html",
            {"kind": "commented", "work": None, "ch": None, "notice": COMMENT_SAVED},
            headers=mturk_headers(),
        )

    return await transaction(
        request,
        mturk_comment,
        (slug, form),
        render,
        resend=form,
        unsaved=COMMENT_UNSAVED,
    )
