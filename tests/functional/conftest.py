"""The functional lane: pytester sessions, scripted engines, stand-in tools, real processes, the directory
target, and the pure tests too slow for the unit lane (simulations, chart rendering). Every test
collected here is marked ``functional``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

LANE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py reads the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(LANE):
            item.add_marker(pytest.mark.functional)
