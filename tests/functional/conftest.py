"""The functional lane: pytester sessions, scripted engines, stand-in tools, real processes, the directory
target, and the pure tests too slow for the unit lane (simulations, chart rendering). Every test
collected here is marked ``functional``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import lane_sessions

LANE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py reads the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(LANE):
            item.add_marker(pytest.mark.functional)


@pytest.fixture(autouse=True)
def sessions_of_this_test_alone(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Each test's sessions measure under locks of their own, without hypothesis's plugin and
    without the machine-wide page-cache drop (tests/helpers/lane_sessions.py)."""
    with lane_sessions.sessions_of_this_test_alone(request, monkeypatch):
        yield
