"""The simulated crowd's live-server tests: a migrated database of their own, served by uvicorn
on 127.0.0.1 (both backends)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from app.cli.server import background_server
from app.config import Settings
from app.db import build_engine, make_sessionmaker


@dataclass
class LiveDb:
    """A migrated database that commits for real; `serve()` starts the web app on it."""

    settings: Settings
    engine: Engine
    sm: sessionmaker

    @contextmanager
    def serve(self) -> Iterator[str]:
        """The web app on this database, for the block; yields its base URL."""
        with background_server(self.settings) as base:
            yield base


@pytest.fixture
def live_db(migrated_copy) -> Iterator[LiveDb]:
    settings = migrated_copy.settings()
    engine = build_engine(settings)
    try:
        yield LiveDb(settings, engine, make_sessionmaker(engine))
    finally:
        engine.dispose()
