"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Connection
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__
from app.annotation.service import HIT_CACHE, AnnotationError, HitContentCache
from app.config import PACKAGE, Environment, Settings
from app.db import build_engine, make_sessionmaker
from app.migrate import head_revisions
from app.web import (
    annotate,
    api,
    dashboard,
    dashboard_annotators,
    dashboard_results,
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
        # Each app keeps its own cache of immutable HIT content, tied to its database.
        info = {HIT_CACHE: HitContentCache()}
        if bind is not None:
            app.state.sessionmaker = make_sessionmaker(
                bind, join_transaction_mode="create_savepoint", info=info
            )
            yield
            return
        engine = build_engine(settings)
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
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
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

    app.add_middleware(SecurityHeaders)
    app.mount("/static", StaticFiles(directory=PACKAGE / "static"), name="static")
    # The annotator pages come first: the router tries routes in order, and these are
    # the ones a crowd hits at high rates (no other route matches their paths).
    app.include_router(annotate.router)
    app.include_router(health.router)
    app.include_router(api.router)
    app.include_router(dashboard.router)
    app.include_router(dashboard.pages)
    app.include_router(dashboard_users.router)
    app.include_router(dashboard_studies.router)
    app.include_router(dashboard_annotators.router)
    app.include_router(dashboard_results.router)
    app.add_exception_handler(AnnotationError, annotate.annotation_error)
    _install_error_handlers(app)
    return app


class SecurityHeaders:
    """Adds DEFAULT_SECURITY_HEADERS to every response that does not set its own.

    A plain ASGI middleware: Starlette's `@app.middleware("http")` costs a task
    group and memory streams per request, a fifth of the annotator hot path.
    A route that sets its own CSP decides its framing with frame-ancestors
    (annotator pages in iframes, MTurk), so X-Frame-Options is left off there.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                own_csp = "content-security-policy" in headers
                for name, value in DEFAULT_SECURITY_HEADERS.items():
                    if not (own_csp and name == "X-Frame-Options"):
                        headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith(API_PREFIX)


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


def _friendly(exc: StarletteHTTPException) -> str:
    if exc.status_code == 404:
        return "There is nothing at this address."
    if exc.status_code == 405:
        return "This page cannot be used that way."
    return str(exc.detail)
