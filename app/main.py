"""The FastAPI application factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Connection
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import __version__
from app.annotation.content import HIT_CACHE, HitCache
from app.annotation.errors import AnnotationError
from app.config import PACKAGE, Environment, Settings
from app.db import build_engine, make_sessionmaker
from app.migrate import head_revisions
from app.results.stats.power import PlanError
from app.validation import BadInput
from app.web import (
    annotate,
    annotate_participants,
    api,
    api_docs,
    api_results,
    dashboard,
    dashboard_annotators,
    dashboard_crowd,
    dashboard_results,
    dashboard_simulate,
    dashboard_studies,
    dashboard_users,
    health,
)
from app.web.security import LoginRequired
from app.web.templating import templates

API_PREFIX = "/api/v1"

# Pages are server-rendered with a little first-party script: nothing else may run.
DEFAULT_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
# Researcher pages and the API show secrets (invite links, new API tokens and passwords,
# link CSVs): no browser or proxy may keep a copy of any of their responses.
NO_STORE_PREFIXES = ("/dashboard", API_PREFIX + "/", "/login", "/logout")
HSTS = "max-age=31536000"


def create_app(settings: Settings | None = None, *, bind: Connection | None = None) -> FastAPI:
    """Build the app. The engine is made in the lifespan, never at import.

    `bind` hands over an open connection instead (tests run each case inside a
    transaction that is rolled back; sessions then commit to savepoints).
    """
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.migration_heads = head_revisions()
        # Annotator requests that use the database at once, per process (app.web.annotate).
        app.state.db_limiter = anyio.CapacityLimiter(settings.db_pool_size)
        # Each app keeps its own caches, tied to its database: the immutable content of
        # HITs (the domain's) and their rendered texts (the annotator pages').
        info = {HIT_CACHE: HitCache()}
        app.state.hit_html = HitCache()
        if bind is not None:
            app.state.sessionmaker = make_sessionmaker(
                bind, join_transaction_mode="create_savepoint", info=info
            )
            yield
            return
        engine = build_engine(settings, web=True)
        app.state.engine = engine
        app.state.sessionmaker = make_sessionmaker(engine, info=info)
        try:
            yield
        finally:
            engine.dispose()

    app = FastAPI(
        title="ebc-judge",
        version=__version__,
        summary="Exposure bias (EB-C) of language models with human next-word judgments.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        # Swagger UI is served by app.web.api_docs from local files (FastAPI's page needs a
        # CDN and an inline script, which the Content-Security-Policy refuses).
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    openapi = app.openapi  # FastAPI's, which caches the document it makes

    def documented() -> dict:
        made = app.openapi_schema is None
        schema = openapi()
        return api_results.document_refusals(schema) if made else schema

    app.openapi = documented  # type: ignore[method-assign]
    # Checking every template file on disk per render only helps while editing them.
    templates.env.auto_reload = settings.env is Environment.development
    app.add_middleware(
        SessionMiddleware,
        secret_key=settings.secret_key,
        session_cookie="ebc_session",
        max_age=settings.session_max_age,
        same_site="lax",
        https_only=settings.base_url.startswith("https://"),
    )

    app.add_middleware(SecurityHeaders, hsts=settings.base_url.startswith("https://"))
    if settings.trusted_proxies:
        # Outermost: the client address is the proxy's report only when a trusted proxy
        # sent it (login throttling keys on it); from anyone else X-Forwarded-For is ignored.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    app.mount("/static", StaticFiles(directory=PACKAGE / "static"), name="static")
    # The annotator pages come first: the router tries routes in order, and these are
    # the ones a crowd hits at high rates (no other route matches their paths).
    app.include_router(annotate.router)
    app.include_router(annotate_participants.router)
    app.include_router(health.router)
    api_docs.install(app)
    app.include_router(api.router)
    app.include_router(dashboard.router)
    app.include_router(dashboard.pages)
    app.include_router(dashboard_users.router)
    app.include_router(dashboard_studies.router)
    app.include_router(dashboard_annotators.router)
    app.include_router(dashboard_crowd.router)
    app.include_router(dashboard_results.router)
    app.include_router(dashboard_simulate.router)
    app.add_exception_handler(AnnotationError, annotate.annotation_error)
    _install_error_handlers(app)
    return app


class SecurityHeaders:
    """Adds DEFAULT_SECURITY_HEADERS to every response that does not set its own.

    A plain ASGI middleware: Starlette's `@app.middleware("http")` costs a task
    group and memory streams per request, a fifth of the annotator hot path.
    A route that sets its own CSP decides its framing with frame-ancestors
    (annotator pages in iframes, MTurk), so X-Frame-Options is left off there.
    Dashboard and API responses are never cached (NO_STORE_PREFIXES); with an https
    base URL every response carries HSTS.
    """

    def __init__(self, app: ASGIApp, *, hsts: bool = False) -> None:
        self.app = app
        self.hsts = hsts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        no_store = scope["path"].startswith(NO_STORE_PREFIXES)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                own_csp = "content-security-policy" in headers
                for name, value in DEFAULT_SECURITY_HEADERS.items():
                    if not (own_csp and name == "X-Frame-Options"):
                        headers.setdefault(name, value)
                if no_store:
                    headers["Cache-Control"] = "no-store"
                if self.hsts:
                    headers["Strict-Transport-Security"] = HSTS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith(API_PREFIX)


log = logging.getLogger(__name__)
# Seconds a client should wait before trying again when the database is unavailable.
RETRY_AFTER = "30"


def _error(
    request: Request,
    status_code: int,
    message: str,
    headers: dict[str, str] | None = None,
    errors: list[dict] | None = None,
) -> Response:
    """The error answer: JSON under /api/v1 (`errors` as a 422 lists them), else a page."""
    if _wants_json(request):
        body: dict = {"detail": message, "status": status_code}
        if errors is not None:
            body["errors"] = errors
        return JSONResponse(body, status_code=status_code, headers=headers)
    return templates.TemplateResponse(
        request,
        "error.html",
        {"status_code": status_code, "message": message},
        status_code=status_code,
        headers=headers,
    )


def _unique_violation(exc: IntegrityError) -> bool:
    orig = exc.orig
    return getattr(orig, "sqlstate", None) == "23505" or "UNIQUE constraint failed" in str(orig)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(LoginRequired)
    async def login_required(request: Request, _exc: LoginRequired) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={target}", status.HTTP_303_SEE_OTHER)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = getattr(exc, "headers", None)
        if _wants_json(request):
            return JSONResponse(
                {"detail": exc.detail, "status": exc.status_code},
                status_code=exc.status_code,
                headers=headers,
            )
        return templates.TemplateResponse(
            request,
            "error.html",
            {"status_code": exc.status_code, "message": _friendly(exc)},
            status_code=exc.status_code,
            headers=headers,
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        if _wants_json(request):
            errors = [
                {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
            ]
            return JSONResponse(
                {"detail": "invalid request", "status": 422, "errors": errors}, status_code=422
            )
        return templates.TemplateResponse(
            request,
            "error.html",
            {"status_code": 400, "message": "The request was incomplete or malformed."},
            status_code=400,
        )

    # What no edge check caught still answers 4xx when the client's input is at fault, and
    # 503 when the database is away or too slow: never a 500 with a driver's message.
    @app.exception_handler(BadInput)
    async def bad_input(request: Request, exc: BadInput) -> Response:
        return _error(request, 400, str(exc))

    @app.exception_handler(DataError)
    async def data_error(request: Request, exc: DataError) -> Response:
        # The driver's message only: the statement's parameters may hold secrets.
        log.warning(
            "%s %s: database refused a value: %s", request.method, request.url.path, exc.orig
        )
        return _error(
            request,
            400,
            "A value in the request cannot be stored: too long, out of range, or with "
            "characters that are not allowed.",
        )

    @app.exception_handler(IntegrityError)
    async def integrity_error(request: Request, exc: IntegrityError) -> Response:
        if not _unique_violation(exc):
            raise exc  # a broken invariant of ours: a server error
        return _error(
            request, 409, "This conflicts with something that already exists; reload and retry."
        )

    @app.exception_handler(OperationalError)
    @app.exception_handler(PoolTimeout)
    async def database_unavailable(request: Request, exc: Exception) -> Response:
        reason = getattr(exc, "orig", None) or exc
        log.error("%s %s: database unavailable: %s", request.method, request.url.path, reason)
        return _error(
            request,
            503,
            "The database is unavailable or too slow right now; try again in a minute.",
            headers={"Retry-After": RETRY_AFTER},
        )

    @app.exception_handler(PlanError)
    async def plan_error(request: Request, exc: PlanError) -> Response:
        errors = [{"loc": ["query", exc.param], "msg": exc.reason, "type": "plan_infeasible"}]
        return _error(request, 422, exc.reason, errors=errors)


def _friendly(exc: StarletteHTTPException) -> str:
    if exc.status_code == 404:
        return "There is nothing at this address."
    if exc.status_code == 405:
        return "This page cannot be used that way."
    return str(exc.detail)
