"""Liveness and readiness probes for load balancers and compose."""

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.migrate import current_revisions

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is up and reaches its database")
def healthz(request: Request) -> JSONResponse:
    try:
        with request.app.state.sessionmaker() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:  # any database failure makes the probe red
        return JSONResponse({"status": "error", "database": str(exc)[:200]}, status_code=503)
    return JSONResponse({"status": "ok", "database": "ok"})


@router.get("/readyz", summary="The database schema is at this release's migration head")
def readyz(request: Request) -> JSONResponse:
    try:
        with request.app.state.sessionmaker() as session:
            current = current_revisions(session.connection())
    except Exception as exc:
        return JSONResponse({"status": "error", "database": str(exc)[:200]}, status_code=503)
    expected = request.app.state.migration_heads
    if current != expected:
        return JSONResponse(
            {"status": "migrating", "current": sorted(current), "expected": sorted(expected)},
            status_code=503,
        )
    return JSONResponse({"status": "ok", "schema": sorted(current)})
