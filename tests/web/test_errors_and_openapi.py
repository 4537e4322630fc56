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
