"""The integration lane: root: real loop devices, mounts, kernel features and tools; the UML lane. Every
test collected here is marked ``integration``.
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
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def sessions_of_this_test_alone(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """The functional lane's fixture (tests/helpers/lane_sessions.py), for the files that ask for it
    (``pytest.mark.usefixtures``): their tests' sessions measure under locks of their own (not
    waiting for the other xdist worker's rounds and key derivations), without hypothesis's plugin,
    and drop the measured file's own pages, not the machine's; the gocryptfs ceiling (``gocryptfs
    -speed``, about 8 s) is measured once for the suite. What they assert is not about the
    machine-wide drop nor a speed; the files that test the drop (test_host_integration and others)
    keep it."""
    with lane_sessions.sessions_of_this_test_alone(request, monkeypatch, gocryptfs_once=True):
        yield
