"""Fixtures of the results tests: the hand-made study (see tests/factories.py)."""

from __future__ import annotations

import pytest

from tests.factories import HandMade, make_handmade


@pytest.fixture
def handmade(session) -> HandMade:
    return make_handmade(session)
