"""Who may do what, on every route: each of the app's routes, asked by every kind of caller.

The routes come from `app.routes`, so a new route cannot be forgotten: one without an
entry in EXPECTED fails the test, and so does an entry whose route is gone. Every
request runs inside a savepoint that is rolled back, so each one meets the same state;
a refused write (401, 403, 404 to anything but GET) must leave every table as it was.

Callers: nobody; an annotator of this study and one of another study (their invite
token as a bearer, which opens annotator pages only); a revoked credential (a revoked
API token, and a revoked invite link on the annotator pages); researchers who are
strangers to the study, its viewer, its manager, its owner, and an administrator (each
with a live session and an API token). Researchers send their own CSRF token, so what
is tested is who they are, not the form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

import pytest
from sqlalchemy import select

from app.annotation.admin import revoke_invite
from app.annotation.identities import invite_token
from app.auth.service import create_api_token, hash_password, revoke_api_token
from app.models import Base, Judgment, StudyMember, User
from app.studies.schemas import RESERVED_SLUGS
from tests.hits.factory import annotator, make_study
from tests.hits.ratings_factory import make_ratings_study
from tests.web.accounts import PASSWORD, csrf_of, login

try:  # FastAPI >= 0.16x flattens included routers lazily
    from fastapi.routing import iter_route_contexts
except ImportError:  # pragma: no cover
    iter_route_contexts = None

ANON, ANN, ANN_OTHER, REVOKED = "anonymous", "annotator", "annotator_other", "revoked"
STRANGER, VIEWER, MANAGER, OWNER, ADMIN = "stranger", "viewer", "manager", "owner", "admin"
RESEARCHERS = (STRANGER, VIEWER, MANAGER, OWNER, ADMIN)
CALLERS = (ANON, ANN, ANN_OTHER, REVOKED, *RESEARCHERS)


def _policy(outsiders: dict[str, int], **researchers: int) -> dict[str, int]:
    """Expected statuses: `outsiders` for the callers without a researcher's session or
    live token, then one status per researcher (a single `all=` for every one)."""
    every = researchers.pop("all", None)
    out = dict(outsiders)
    for r in RESEARCHERS:
        out[r] = researchers.get(r, every)
    assert None not in out.values()
    return out


# Callers who are not researchers, as the dashboard (login redirect; an annotator's token
# is refused outright) and the API (401; 403 for an annotator's token) answer them.
PAGE_OUT = {ANON: 303, ANN: 403, ANN_OTHER: 403, REVOKED: 303}
API_OUT = {ANON: 401, ANN: 403, ANN_OTHER: 403, REVOKED: 401}
NO_CSRF = {ANON: 403, ANN: 403, ANN_OTHER: 403, REVOKED: 403}  # no session, so no token


def _everyone(code: int) -> dict[str, int]:
    return dict.fromkeys(CALLERS, code)


SIGNED_IN = _policy(PAGE_OUT, all=200)
ADMIN_ONLY = _policy(PAGE_OUT, all=403, admin=200)
ADMIN_ONLY_POST = _policy(PAGE_OUT, all=403, admin=303)
STUDY_VIEW = _policy(PAGE_OUT, stranger=404, viewer=200, manager=200, owner=200, admin=200)
STUDY_SECRET = _policy(PAGE_OUT, stranger=404, viewer=403, manager=200, owner=200, admin=200)
STUDY_MANAGE = _policy(PAGE_OUT, stranger=404, viewer=403, manager=303, owner=303, admin=303)
STUDY_SHARE = _policy(PAGE_OUT, stranger=404, viewer=403, manager=403, owner=303, admin=303)
API_SIGNED_IN = _policy(API_OUT, all=200)
API_STUDY = _policy(API_OUT, stranger=404, viewer=200, manager=200, owner=200, admin=200)
# Annotator pages: the link (or the platform's ids) in the URL is the credential, and a
# researcher's session or token changes nothing there; see `_annotator_route`.
LINK = "link"

EXPECTED: dict[tuple[str, str], dict[str, int] | str] = {
    ("GET", "/"): _everyone(303),
    ("GET", "/login"): _everyone(200),
    ("POST", "/login"): _policy(NO_CSRF, all=400),  # researchers: CSRF ok, fields missing
    ("POST", "/logout"): _policy(NO_CSRF, all=303),
    ("GET", "/healthz"): _everyone(200),
    ("GET", "/readyz"): _everyone(200),
    ("GET", "/api/v1/version"): _everyone(200),
    ("GET", "/api/v1/openapi.json"): _everyone(200),
    ("GET", "/api/v1/docs"): _everyone(200),
    ("GET", "/api/v1/me"): API_SIGNED_IN,
    ("GET", "/api/v1/studies"): API_SIGNED_IN,
    ("GET", "/api/v1/studies/{slug}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results/diagnostics"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results/diagnostics.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results/recovery"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results/recovery.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/forced_samples"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/forced_samples.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results.csv"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results.tex"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/plot.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/judgments.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/items.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/annotators.csv"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results/ebm.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results/ebm_gap.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/samples.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/results/ratings_table.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/ratings.{fmt}"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/manifest.json"): API_STUDY,
    ("GET", "/api/v1/studies/{slug}/plan"): API_STUDY,
    ("GET", "/dashboard"): SIGNED_IN,
    ("GET", "/dashboard/users"): ADMIN_ONLY,
    ("POST", "/dashboard/users"): _policy(PAGE_OUT, all=403, admin=400),  # no username
    ("POST", "/dashboard/users/{user_id}/password"): ADMIN_ONLY,
    ("POST", "/dashboard/users/{user_id}/active"): ADMIN_ONLY_POST,
    ("GET", "/dashboard/tokens"): SIGNED_IN,
    ("POST", "/dashboard/tokens"): _policy(PAGE_OUT, all=400),  # no name
    # One's own tokens only: the owner's token, so everybody else finds none.
    ("POST", "/dashboard/tokens/{token_id}/revoke"): _policy(PAGE_OUT, all=404, owner=303),
    ("GET", "/dashboard/studies/new"): SIGNED_IN,
    ("POST", "/dashboard/studies"): _policy(PAGE_OUT, all=400),  # an empty form
    ("POST", "/dashboard/studies/upload"): _policy(PAGE_OUT, all=400),  # no file
    ("GET", "/dashboard/studies/{slug}"): STUDY_VIEW,
    ("GET", "/dashboard/studies/{slug}/progress.json"): STUDY_VIEW,
    ("GET", "/dashboard/studies/{slug}/items"): STUDY_VIEW,
    ("POST", "/dashboard/studies/{slug}/precompute"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/precompute/cancel"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/hits"): STUDY_MANAGE,
    # The matrix's study asks for no forced-prefix samples: nothing to rate.
    ("POST", "/dashboard/studies/{slug}/samples/ratings"): _policy(
        PAGE_OUT, stranger=404, viewer=403, manager=400, owner=400, admin=400
    ),
    ("POST", "/dashboard/studies/{slug}/close"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/reopen"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/members"): STUDY_SHARE,
    ("POST", "/dashboard/studies/{slug}/members/{user_id}/remove"): STUDY_SHARE,
    ("GET", "/dashboard/studies/{slug}/annotators"): STUDY_VIEW,
    ("POST", "/dashboard/studies/{slug}/annotators/invite"): STUDY_MANAGE,
    ("GET", "/dashboard/studies/{slug}/annotators/links.csv"): STUDY_SECRET,
    ("POST", "/dashboard/studies/{slug}/annotators/{annotator_id}/block"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/annotators/{annotator_id}/unblock"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/annotators/{annotator_id}/cap"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/annotators/{annotator_id}/revoke"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/annotators/{annotator_id}/reissue"): STUDY_MANAGE,
    ("POST", "/dashboard/studies/{slug}/cap"): STUDY_MANAGE,
    ("GET", "/dashboard/studies/{slug}/results"): STUDY_VIEW,
    ("GET", "/dashboard/studies/{slug}/results/{name}"): STUDY_VIEW,
    ("GET", "/dashboard/studies/{slug}/samples"): STUDY_VIEW,
    # Simulate before you pay: it changes nothing, so viewers may run it too.
    ("GET", "/dashboard/studies/{slug}/simulate"): STUDY_VIEW,
    # The Crowd page; its previews and actions need manage access. s1 has no reward, its
    # MTurk channel is off and it was never published, so the service refuses each one
    # before any platform call: no reward (400), channel off (409), no posting (404).
    ("GET", "/dashboard/studies/{slug}/crowd"): STUDY_VIEW,
    ("GET", "/dashboard/studies/{slug}/crowd/publish"): _policy(
        PAGE_OUT, stranger=404, viewer=403, manager=400, owner=400, admin=400
    ),
    ("POST", "/dashboard/studies/{slug}/crowd/publish"): _policy(
        PAGE_OUT, stranger=404, viewer=403, manager=409, owner=409, admin=409
    ),
    ("POST", "/dashboard/studies/{slug}/crowd/sync"): _policy(
        PAGE_OUT, stranger=404, viewer=403, manager=404, owner=404, admin=404
    ),
    ("GET", "/dashboard/studies/{slug}/crowd/approve"): _policy(
        PAGE_OUT, stranger=404, viewer=403, manager=404, owner=404, admin=404
    ),
    ("POST", "/dashboard/studies/{slug}/crowd/approve"): _policy(
        PAGE_OUT, stranger=404, viewer=403, manager=404, owner=404, admin=404
    ),
    ("GET", "/dashboard/studies/{slug}/crowd/bonus"): _policy(  # no assignment, no reason
        PAGE_OUT, stranger=404, viewer=403, manager=400, owner=400, admin=400
    ),
    ("POST", "/dashboard/studies/{slug}/crowd/bonus"): _policy(
        PAGE_OUT, stranger=404, viewer=403, manager=400, owner=400, admin=400
    ),
    ("POST", "/dashboard/studies/{slug}/crowd/reject"): _policy(  # no submission id
        PAGE_OUT, stranger=404, viewer=403, manager=400, owner=400, admin=400
    ),
    ("GET", "/a/{token}"): LINK,
    ("POST", "/a/{token}/submit"): LINK,
    ("POST", "/a/{token}/return"): LINK,
    ("GET", "/p/{slug}"): LINK,
    ("GET", "/mturk/{slug}"): LINK,
    ("POST", "/mturk/{slug}/submit"): LINK,
    # Issue 33: the consent page (none in these studies: 404) and the end-of-study comment.
    ("GET", "/a/{token}/consent"): LINK,
    ("POST", "/a/{token}/consent"): LINK,
    ("POST", "/a/{token}/comment"): LINK,
    ("GET", "/mturk/{slug}/consent"): LINK,
    ("POST", "/mturk/{slug}/consent"): LINK,
    ("POST", "/mturk/{slug}/comment"): LINK,
}
# Path parameters other than the study and the annotator's link (see `_url`).
FORMATS = {"plot.{fmt}": "svg", "ebm_gap.{fmt}": "svg"}
# A ratings study's downloads (a next-word study has none: 404 to everyone) are asked of
# the ratings study r1, owned and shared as s1 is.
RATINGS_ONLY = (
    "/results/ebm.{fmt}", "/results/ebm_gap.{fmt}", "/samples.{fmt}", "/ratings.{fmt}",
    "/ratings_table.{fmt}",
)  # fmt: skip


def _routes(app) -> list[tuple[str, str]]:
    routes = iter_route_contexts(app.routes) if iter_route_contexts else app.routes
    out = []
    for r in routes:
        methods = getattr(r, "methods", None)
        path = getattr(r, "path", None)
        if not methods or path is None:
            continue  # mounts (/static)
        out += [(m, path) for m in sorted(methods - {"HEAD"})]
    return out


@cache
def password_hash() -> str:
    return hash_password(PASSWORD)


@dataclass
class Caller:
    name: str
    cookie: str | None = None  # the session cookie's value
    csrf: str = ""
    bearer: str | None = None
    link: str | None = None  # the invite token put in /a/{token}
    user: User | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class World:
    callers: dict[str, Caller]
    params: dict[str, str]


@pytest.fixture
def world(client, session, settings) -> World:
    study = make_study(session, slug="s1", lengths=(10,), per_cell=5)
    other = make_study(session, slug="s2", lengths=(10,), per_cell=5)
    users = {}
    for name in RESEARCHERS:
        users[name] = User(username=name, password_hash=password_hash(), is_admin=name == ADMIN)
        session.add(users[name])
    session.flush()
    ratings = make_ratings_study(session, slug="r1", per_cell=5)
    study.created_by_id = ratings.created_by_id = users[OWNER].id
    other.created_by_id = users[STRANGER].id  # the stranger owns another study
    for shared in (study, ratings):
        session.add(StudyMember(study_id=shared.id, user_id=users[VIEWER].id, role="view"))
        session.add(StudyMember(study_id=shared.id, user_id=users[MANAGER].id, role="manage"))
    ann, ann_other = annotator(session, study, "ann"), annotator(session, other, "ann2")
    gone = annotator(session, study, "gone")
    gone_link = invite_token(settings.secret_key, gone)
    revoke_invite(session, gone)
    tokens = {name: create_api_token(session, users[name], "t") for name in RESEARCHERS}
    revoked = create_api_token(session, users[OWNER], "old")
    revoke_api_token(session, revoked.token)
    session.commit()

    link = invite_token(settings.secret_key, ann)
    callers = {
        ANON: Caller(ANON, link="not-a-link"),
        ANN: Caller(ANN, bearer=link, link=link),
        ANN_OTHER: Caller(
            ANN_OTHER,
            bearer=invite_token(settings.secret_key, ann_other),
            link=invite_token(settings.secret_key, ann_other),
        ),
        REVOKED: Caller(REVOKED, bearer=revoked.secret, link=gone_link),
    }
    for name in RESEARCHERS:
        assert login(client, name).status_code == 303
        cookie = client.cookies["ebc_session"]
        csrf = csrf_of(client.get("/dashboard").text)
        client.cookies.clear()
        # A researcher who opens an annotator's link sees what the annotator sees.
        callers[name] = Caller(name, cookie, csrf, tokens[name].secret, link=link, user=users[name])
    params = {
        "slug": "s1",
        "user_id": str(users[VIEWER].id),
        "token_id": str(tokens[OWNER].token.id),
        "annotator_id": str(ann.id),
        "name": "results.csv",
        "fmt": "csv",
    }
    return World(callers, params)


def _url(path: str, params: dict[str, str], caller: Caller) -> str:
    for suffix, fmt in FORMATS.items():
        if path.endswith(suffix):
            params = {**params, "fmt": fmt}
    if path.endswith(RATINGS_ONLY):
        params = {**params, "slug": "r1"}
    values = {**params, "token": caller.link or "not-a-link"}
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: values[m.group(1)], path)


def _send(client, method: str, url: str, caller: Caller):
    client.cookies.clear()
    if caller.cookie:
        client.cookies.set("ebc_session", caller.cookie)
    headers = {"Authorization": f"Bearer {caller.bearer}"} if caller.bearer else {}
    data = {"csrf_token": caller.csrf} if method == "POST" and caller.csrf else None
    try:
        return client.request(method, url, headers=headers, data=data, follow_redirects=False)
    finally:
        client.cookies.clear()


def _snapshot(connection) -> dict[str, list[tuple]]:
    """Every row of every table (the test's data is small)."""
    return {
        name: [tuple(r) for r in connection.execute(select(t).order_by(*t.primary_key.columns))]
        for name, t in sorted(Base.metadata.tables.items())
    }


def _judgments(connection) -> int:
    return len(connection.execute(select(Judgment.id)).all())


def _isolated(connection, session, send, *args):
    """One request against the fixture's state, rolled back afterwards."""
    savepoint = connection.begin_nested()
    try:
        return send(*args)
    finally:
        savepoint.rollback()
        session.expire_all()


def _checked_request(client, connection, method, path, world, caller, before):
    """The answer, and whether a refused write changed any table."""
    r = _send(client, method, _url(path, world.params, caller), caller)
    wrote = method != "GET" and r.status_code in (401, 403, 404) and _snapshot(connection) != before
    return r, wrote


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_every_route_has_an_expected_answer(client):
    routes = set(_routes(client.app))
    assert not routes - set(EXPECTED), f"routes missing from EXPECTED: {routes - set(EXPECTED)}"
    assert not set(EXPECTED) - routes, f"stale entries in EXPECTED: {set(EXPECTED) - routes}"


def test_the_authorization_matrix(client, session, connection, world):
    before = _snapshot(connection)
    failures = []
    for method, path in _routes(client.app):
        expected = EXPECTED[(method, path)]
        if expected == LINK:
            failures += _annotator_route(client, session, connection, world, method, path)
            continue
        for name in CALLERS:
            caller = world.callers[name]
            r, wrote = _isolated(
                connection,
                session,
                _checked_request,
                client,
                connection,
                method,
                path,
                world,
                caller,
                before,
            )
            where = f"{method} {path} as {name}"
            if r.status_code != expected[name]:
                failures.append(f"{where}: {r.status_code}, not {expected[name]}")
            if wrote:
                failures.append(f"{where}: refused ({r.status_code}) but wrote")
            redirected = r.status_code == 303 and name in (ANON, REVOKED)
            if redirected and path.startswith("/dashboard"):
                assert r.headers["location"].startswith("/login?next="), where
    assert _snapshot(connection) == before
    assert not failures, "\n".join(failures)


def _counted_request(client, connection, method, url, caller):
    """The answer, and how many judgments it stored."""
    before = _judgments(connection)
    r = _send(client, method, url, caller)
    return r, _judgments(connection) - before


def _annotator_route(client, session, connection, world, method, path) -> list[str]:
    """The link in the URL decides; a researcher's cookie or bearer adds nothing.

    GET /a/{token}: a live link opens the page (its own study's), a made-up or revoked
    one is not found. The other annotator routes are asked without their form or
    platform ids, so everyone is refused the same way and no judgment is stored.
    """
    failures = []
    for name in CALLERS:
        caller = world.callers[name]
        url = _url(path, world.params, caller)
        bare = Caller("bare", link=caller.link)

        r, written = _isolated(
            connection, session, _counted_request, client, connection, method, url, caller
        )
        bare_status = _isolated(connection, session, _send, client, method, url, bare).status_code
        where = f"{method} {path} as {name}"
        if r.status_code != bare_status:
            failures.append(f"{where}: {r.status_code} with credentials, {bare_status} without")
        if written:
            failures.append(f"{where}: stored {written} judgments")
        if r.status_code >= 500:
            failures.append(f"{where}: {r.status_code}")
        if path == "/a/{token}":
            live = caller.link not in ("not-a-link", world.callers[REVOKED].link)
            if r.status_code != (200 if live else 404):
                failures.append(f"{where}: {r.status_code} for a {'live' if live else 'dead'} link")
        elif not 400 <= r.status_code < 500:
            failures.append(f"{where}: {r.status_code}, not a refusal")
    return failures


def test_a_study_one_may_not_see_looks_like_no_study(client, session, connection, world):
    """Existence is not revealed: the stranger's answer for s1 is the one for a made-up slug."""
    stranger = world.callers[STRANGER]
    for path in ("/dashboard/studies/{s}", "/api/v1/studies/{s}", "/dashboard/studies/{s}/close"):
        method = "POST" if path.endswith("close") else "GET"
        hidden = _send(client, method, path.format(s="s1"), stranger)
        missing = _send(client, method, path.format(s="nope"), stranger)
        assert hidden.status_code == missing.status_code == 404
        assert hidden.text.replace("s1", "X") == missing.text.replace("nope", "X")


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_reserved_slugs_cover_every_route_beside_a_slug(client):
    """A literal segment where another route has {slug} (e.g. /dashboard/studies/new beside
    /dashboard/studies/{slug}) is a slug no study may take."""
    paths = {p for _, p in _routes(client.app)}
    needed = set()
    for path in paths:
        parts = path.strip("/").split("/")
        for i, part in enumerate(parts):
            if part != "{slug}":
                continue
            for other in paths:
                o = other.strip("/").split("/")
                if len(o) > i and o[:i] == parts[:i] and not o[i].startswith("{"):
                    needed.add(o[i])
    assert {"new", "upload"} <= needed
    assert needed <= RESERVED_SLUGS, needed - RESERVED_SLUGS
