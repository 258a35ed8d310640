"""The functional lane: pytester sessions, scripted engines, stand-in tools, real processes, the directory
target, and the pure tests too slow for the unit lane (simulations, chart rendering). Every test
collected here is marked ``functional``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host
from tests.helpers import lane_sessions

LANE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py reads the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(LANE):
            item.add_marker(pytest.mark.functional)


# What every session a test starts would otherwise pay or wait for:
#  - the measurement locks: the suite's own directory (tests/conftest.py) is shared by all its
#    workers, so a session measuring on /tmp held every other worker's sessions on that disk for
#    whole workloads (test_usertiming's 30 s of rounds); a directory of each test's own keeps a
#    session from waiting on another test's, and the sessions one test starts still share it (the
#    tests of xdist workers and of waiting for locks; a test that sets ENCPERF_LOCK_DIR itself wins);
#  - hypothesis's pytest plugin, which imports hypothesis in each session's terminal summary: about
#    half a subprocess session's start-up CPU; no session a test starts uses hypothesis;
#  - the machine-wide page-cache drop before each round (tests/helpers/lane_sessions.py), here and
#    in the sessions started, in process or not (the repository on their PYTHONPATH to load it).
# pytester clears PYTEST_ADDOPTS when it starts: set after it.
INNER_SESSION_OPTIONS = "-p no:hypothesispytest -p tests.helpers.lane_sessions"
REPOSITORY = LANE.parents[1]


@pytest.fixture(autouse=True)
def sessions_of_this_test_alone(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
    locks = tempfile.mkdtemp(prefix="test-", dir=os.environ.get(host.LOCK_DIR_ENV) or None)  # 0700
    # the test's own monkeypatch: what a test sets after this is undone first
    monkeypatch.setenv(host.LOCK_DIR_ENV, locks)
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_SESSION_OPTIONS)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setattr(host, "drop_page_cache", lane_sessions.drop_own_pages)
    yield
    shutil.rmtree(locks, ignore_errors=True)
