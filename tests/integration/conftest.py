"""The integration lane: root: real loop devices, mounts, kernel features and tools; the UML lane. Every
test collected here is marked ``integration``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

LANE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py reads the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(LANE):
            item.add_marker(pytest.mark.integration)
