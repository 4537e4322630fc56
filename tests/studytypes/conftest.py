"""Fixtures the types' tests share with the shared layers' tests: a live server's database
(tests/simulate) and hand-made judgments (tests/results)."""

from tests.results.conftest import handmade
from tests.simulate.conftest import live_db

__all__ = ["handmade", "live_db"]
