import re

import pytest
from pydantic import ValidationError

from app.config import DEV_SECRET_KEY, ROOT, Settings


def test_defaults_are_the_embedded_sqlite_database(monkeypatch):
    for var in ("DATABASE_URL", "EBC_DATABASE_URL", "EBC_ENV", "EBC_SECRET_KEY"):
        monkeypatch.delenv(var, raising=False)
    s = Settings(_env_file=None)
    assert s.database_url == "sqlite:///./var/ebc.db" and s.is_sqlite
    assert s.env == "development"


def test_database_url_is_read_bare_or_prefixed(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://x@h/db")
    assert Settings(_env_file=None).database_url == "postgresql+psycopg://x@h/db"
    monkeypatch.setenv("EBC_DATABASE_URL", "postgresql+psycopg://y@h/db")
    assert Settings(_env_file=None).database_url == "postgresql+psycopg://y@h/db"


def test_production_refuses_development_secrets():
    pg = "postgresql+psycopg://x@h/db"
    with pytest.raises(ValidationError, match="EBC_SECRET_KEY"):
        Settings(_env_file=None, env="production", database_url=pg)
    with pytest.raises(ValidationError, match="EBC_SECRET_KEY"):
        Settings(_env_file=None, env="production", database_url=pg, secret_key="short")
    with pytest.raises(ValidationError, match="DATABASE_URL"):
        Settings(_env_file=None, env="production", secret_key="k" * 40)
    ok = Settings(_env_file=None, env="production", database_url=pg, secret_key="k" * 40)
    assert ok.secret_key != DEV_SECRET_KEY


def _table_rows(path) -> str:
    return "\n".join(
        line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("|")
    )


def test_every_setting_is_documented_in_docs_configuration():
    table = _table_rows(ROOT / "docs" / "configuration.md")
    for name in Settings.model_fields:
        env = "DATABASE_URL" if name == "database_url" else f"EBC_{name.upper()}"
        assert re.search(rf"^\| `{env}` \|", table, re.M), (
            f"{env} is missing from docs/configuration.md's settings table"
        )


def test_every_worker_option_is_documented_in_docs_configuration():
    from app.cli.docs import command_tree

    table = _table_rows(ROOT / "docs" / "configuration.md")
    tree = command_tree()
    for command in (tree.commands["worker"], tree.commands["precompute"]):
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                assert re.search(rf"^\| `{param.opts[0]}`", table, re.M), (
                    f"{command.name} {param.opts[0]} is missing from docs/configuration.md"
                )
