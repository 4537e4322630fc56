from app.db import build_engine
from app.main import create_app
from app.migrate import upgrade


def test_healthz_and_readyz_on_a_migrated_database(client):
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "database": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_readyz_is_red_until_the_database_is_migrated(empty_db):
    from fastapi.testclient import TestClient

    app = create_app(empty_db.settings())
    with TestClient(app) as c:
        assert c.get("/healthz").status_code == 200  # reachable...
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["status"] == "migrating"  # ...but not ready
        engine = build_engine(empty_db.settings())
        with engine.begin() as conn:
            upgrade(conn)
        engine.dispose()
        assert c.get("/readyz").status_code == 200


def test_healthz_is_red_when_the_database_is_unreachable(tmp_path):
    from fastapi.testclient import TestClient

    from app.config import Settings

    bad = Settings(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none", env="test")
    with TestClient(create_app(bad)) as c:
        r = c.get("/healthz")
    assert r.status_code == 503 and r.json()["status"] == "error"
