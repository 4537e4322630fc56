"""Liveness and readiness probes for load balancers and compose.

A failure answers 503 with a generic reason: the driver's message (host names, user
names, server versions) goes to the log, not to whoever can reach the probe.
"""

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import text

from app.migrate import current_revisions

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)
UNAVAILABLE = {"status": "error", "database": "unavailable"}


class HealthOut(BaseModel):
    status: str = Field(description="ok, or error")
    database: str = Field(description="ok, or unavailable")


class ReadyOut(BaseModel):
    status: str = Field(description="ok; migrating or error with 503")
    schema_: list[str] | None = Field(None, alias="schema", description="revisions at head")
    current: list[str] | None = Field(None, description="the database's revisions (migrating)")
    expected: list[str] | None = Field(None, description="this release's heads (migrating)")
    database: str | None = Field(None, description="unavailable (error)")


@router.get(
    "/healthz",
    summary="The process is up and reaches its database",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "the database is unavailable"}},
)
def healthz(request: Request) -> JSONResponse:
    try:
        with request.app.state.sessionmaker() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:  # any database failure makes the probe red
        log.error("healthz: database unavailable: %s", exc)
        return JSONResponse(UNAVAILABLE, status_code=503)
    return JSONResponse({"status": "ok", "database": "ok"})


@router.get(
    "/readyz",
    summary="The database schema is at this release's migration head",
    response_model=ReadyOut,
    responses={
        503: {"model": ReadyOut, "description": "the database is unavailable or not migrated"}
    },
)
def readyz(request: Request) -> JSONResponse:
    try:
        with request.app.state.sessionmaker() as session:
            current = current_revisions(session.connection())
    except Exception as exc:
        log.error("readyz: database unavailable: %s", exc)
        return JSONResponse(UNAVAILABLE, status_code=503)
    expected = request.app.state.migration_heads
    if current != expected:
        return JSONResponse(
            {"status": "migrating", "current": sorted(current), "expected": sorted(expected)},
            status_code=503,
        )
    return JSONResponse({"status": "ok", "schema": sorted(current)})
