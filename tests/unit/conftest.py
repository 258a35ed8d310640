"""The unit lane: pure tests, no pytester, no subprocess, no root; run first, in well under a minute. Every
test collected here is marked ``unit``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

LANE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py reads the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(LANE):
            item.add_marker(pytest.mark.unit)
