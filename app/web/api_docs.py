"""/api/v1/docs: Swagger UI served by the app itself.

FastAPI's own docs page loads Swagger UI from a CDN and starts it with an inline script,
which the app's Content-Security-Policy (script-src 'self') blocks, and which needs a
network. Here the script and stylesheet come from the `fastapi-offline` package's copy of
Swagger UI (its static files only), the page is a template, and app/static/api-docs.js
starts the UI: everything same-origin, so the default policy holds unchanged.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from app.web.templating import templates

DOCS_PATH = "/api/v1/docs"
ASSETS_PATH = f"{DOCS_PATH}/assets"

router = APIRouter(include_in_schema=False)


def swagger_ui_dir() -> Path:
    """Swagger UI's files as fastapi-offline ships them (found without importing it)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("fastapi-offline is not installed: pip install 'fastapi-offline>=1.7'")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


@router.get(DOCS_PATH, response_class=HTMLResponse)
def docs(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "api_docs.html",
        {"openapi_url": request.app.openapi_url, "assets": ASSETS_PATH},
    )


def install(app: FastAPI) -> None:
    app.mount(ASSETS_PATH, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui")
    app.include_router(router)
