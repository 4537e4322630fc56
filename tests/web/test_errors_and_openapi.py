import re
from urllib.parse import urlsplit

import pytest

from app.main import DEFAULT_SECURITY_HEADERS


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_openapi_document_lives_under_api_v1(client):
    r = client.get("/api/v1/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["info"]["title"] == "ebc-judge"
    assert "/api/v1/me" in doc["paths"]
    # Pages are not part of the API document.
    assert "/login" not in doc["paths"] and "/dashboard" not in doc["paths"]


def test_api_errors_are_json(client):
    r = client.get("/api/v1/no-such-thing")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == {"detail": "Not Found", "status": 404}


def test_page_errors_are_friendly_html(client):
    r = client.get("/no-such-page")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert r.template.name == "error.html"
    assert "There is nothing at this address." in r.text


def test_pages_send_protective_headers(client):
    r = client.get("/login")
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"


# --------------------------------------------------------------------------- the API's errors


def _operations(doc):
    for path, item in doc["paths"].items():
        for method, op in item.items():
            yield path, method, op


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_the_document_describes_the_errors_the_api_sends(client):
    doc = client.get("/api/v1/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert set(schemas["ErrorOut"]["required"]) == {"detail", "status"}
    assert set(schemas["ValidationErrorOut"]["required"]) == {"detail", "status", "errors"}
    assert "HTTPValidationError" not in schemas  # FastAPI's shape is not what the app sends
    for path, _method, op in _operations(doc):
        if not path.startswith("/api/v1/") or path == "/api/v1/version":
            continue
        codes = op["responses"]
        for code in ("401", "403", "503"):
            content = codes[code]["content"]
            # JSON even where the route answers CSV, LaTeX or an image.
            assert list(content) == ["application/json"], (path, code, content)
        if op.get("parameters"):
            error = codes["422"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ValidationErrorOut"}, path
        if "{slug}" in path:
            assert "404" in codes, path


def test_the_errors_have_the_documented_shape(client, session):
    from app.auth.service import create_api_token
    from app.models import User
    from tests.hits.factory import make_study

    make_study(session, slug="s1", build=False)
    user = User(username="ada", password_hash="unused", is_admin=True)
    session.add(user)
    session.flush()
    auth = {"Authorization": f"Bearer {create_api_token(session, user, 't').secret}"}
    session.commit()
    r = client.get("/api/v1/me")
    assert r.status_code == 401 and set(r.json()) == {"detail", "status"}
    r = client.get("/api/v1/studies/none/results.csv")  # a CSV route: the error is JSON
    assert r.status_code == 401 and r.headers["content-type"].startswith("application/json")
    r = client.get("/api/v1/studies/s1/results?b=5", headers=auth)
    body = r.json()
    assert r.status_code == 422 and set(body) == {"detail", "status", "errors"}
    assert body["errors"][0]["loc"] == ["query", "b"] and body["errors"][0]["type"]
    assert client.get("/api/v1/studies/none", headers=auth).json()["status"] == 404


@pytest.mark.postgres
def test_what_the_database_refuses_is_a_4xx_not_a_500(backend, settings, connection):
    """Values no edge check caught: a DataError answers 400, a duplicate 409, as JSON under
    /api/v1 and as a page elsewhere; nothing of the driver's message is shown."""
    from fastapi.testclient import TestClient
    from sqlalchemy import text

    from app.main import create_app
    from app.models import User
    from app.web.deps import SessionDep

    app = create_app(settings, bind=connection)

    @app.get("/api/v1/_probe/{what}")
    @app.get("/_probe/{what}")
    def probe(what: str, session: SessionDep) -> dict:
        if what == "nul":
            session.execute(text("SELECT :v"), {"v": "a\x00b"})
        else:
            session.add_all([User(username="twin", password_hash="x") for _ in range(2)])
            session.flush()
        return {}

    with TestClient(app) as c:
        r = c.get("/api/v1/_probe/nul")
        assert r.status_code == 400 and r.json()["status"] == 400
        assert "NUL" not in r.text and "psycopg" not in r.text
        r = c.get("/_probe/nul")
        assert r.status_code == 400 and r.template.name == "error.html"
        r = c.get("/api/v1/_probe/twin")
        assert r.status_code == 409 and "already exists" in r.json()["detail"]
        assert "twin" not in r.text


# --------------------------------------------------------------------------- the docs page


def test_the_docs_page_needs_nothing_but_this_service(client):
    r = client.get("/api/v1/docs")
    assert r.status_code == 200
    # No exception to the policy: everything the page loads is same-origin.
    policy = DEFAULT_SECURITY_HEADERS["Content-Security-Policy"]
    assert r.headers["content-security-policy"] == policy
    sources = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert sources and {urlsplit(s).netloc for s in sources} <= {"", "testserver"}, sources
    assert "<script>" not in r.text  # no inline script
    for source in sources:
        asset = client.get(source)
        assert asset.status_code == 200 and len(asset.content) > 100, source
    bundle = client.get("/api/v1/docs/assets/swagger-ui-bundle.js")
    assert "SwaggerUIBundle" in bundle.text
    assert client.get("/docs/oauth2-redirect").status_code == 404  # no OAuth here


def test_the_docs_page_renders_in_a_browser(tmp_path):
    """Chromium, the app's real CSP: the operations appear and one runs from the page."""
    import socket
    import threading
    import time

    import playwright.sync_api as playwright_api
    import uvicorn

    from app.config import Settings
    from app.main import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ebc.db'}", env="test")
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--headless", "--no-sandbox", "--disable-gpu"],
            )
            page = browser.new_page()
            page.add_init_script(
                "window.__csp = []; document.addEventListener('securitypolicyviolation',"
                " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
            )
            errors: list[str] = []
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("requestfailed", lambda r: errors.append(f"failed: {r.url}"))
            page.goto(f"http://127.0.0.1:{port}/api/v1/docs")
            page.wait_for_selector(".opblock-summary-path", timeout=20_000)
            paths = page.locator(".opblock-summary-path").all_inner_texts()
            assert "/api/v1/studies/{slug}/plan" in [t.replace("\u200b", "") for t in paths]
            page.locator("#operations-api-version_api_v1_version_get").click()
            page.get_by_role("button", name="Try it out").click()
            page.get_by_role("button", name="Execute").click()
            live = page.locator(".live-responses-table")
            live.wait_for(timeout=10_000)
            assert "200" in live.inner_text() and "ebc-judge" in live.inner_text()
            assert page.evaluate("window.__csp") == [] and errors == []
            browser.close()
    finally:
        server.should_exit = True
        thread.join(10)
