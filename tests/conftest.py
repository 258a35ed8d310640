"""The repository's own test configuration (not part of the published plugin)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path

# pytester's in-process runs remove from sys.modules what was first imported during them, and
# cryptography's OpenSSL bindings do not survive a second import (AES-XTS then reports itself
# "not supported"): import it here, before any run, so it stays.
import cryptography.hazmat.primitives.ciphers  # noqa: F401

# Likewise numpy, under matplotlib, "cannot load module more than once per process": a pytester
# run that imported matplotlib first (--encperf-html asks for it at start-up) left every later
# run in that process saying that matplotlib is not installed.
# Not in the UML lane's guest (tests/helpers/uml.py), whose tests ask for no chart: there the import
# took 1 to 2.5 s of each boot, and every process the guest's pytest starts (a fork of it) paid for
# the 50 MB it added (issue 26).
if os.environ.get("ENCPERF_IN_UML") != "1":
    with contextlib.suppress(ImportError):
        import matplotlib.figure  # noqa: F401
# And hypothesis: its pytest plugin imports it in every session's terminal summary, so each
# in-process pytester run imported it again, every module rewritten by pytest's assertion hook
# (about 2.5 s a run on the development machine, where 5 empty runs took 13 s; 0.4 s with this).
import hypothesis  # noqa: F401
import pytest

from pytest_encperf import host, mounting
from tests.helpers.workers import suite_workers

pytest_plugins = ["pytester"]

# Started as a background job of a shell without job control (`.ci/run &`), a process inherits
# SIGINT ignored, and so would every session the tests start and then interrupt: they would run
# to the end instead. The tests that send SIGINT test the run's own handling, so give it back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # children exec with SIGINT default


# The suite's results must not depend on what else the machine runs (under -n 2 the other
# worker's tests alone are "others"): no round is busy unless a test asks for the threshold
# (--encperf-busy-threshold on its command line wins over the environment).
BUSY_THRESHOLD_ENV = "ENCPERF_BUSY_THRESHOLD"


# What the suite shares with nothing else on the machine, each a directory of its own made at start
# (xdist workers and the sessions tests start inherit the variables); one given from outside wins.
#  - ENCPERF_LOCK_DIR: the measurement locks (else /run/encperf, which every benchmark waits on);
#  - ENCPERF_DIR (--encperf-dir's twin) and ENCPERF_TEST_DIR (tests.helpers.support.disk_dir):
#    volumes, containers and the run journals (.encperf-runs) that `encperf cleanup` reads, on disk
#    under /var/tmp but never /var/tmp itself;
#  - XDG_STATE_HOME: the list of run directories `encperf cleanup` visits (else ~/.local/state);
#  - ENCPERF_TEST_SHARED: what the sessions of tests measure once for the suite (lane_sessions.py).
PRIVATE_DIRS = {
    host.LOCK_DIR_ENV: ("encperf-test-locks-", None),
    "ENCPERF_DIR": ("encperf-test-runs-", "/var/tmp"),
    "ENCPERF_TEST_DIR": ("encperf-test-disk-", "/var/tmp"),
    "XDG_STATE_HOME": ("encperf-test-state-", None),
    "ENCPERF_TEST_SHARED": ("encperf-test-shared-", None),
}


def pytest_configure(config: pytest.Config) -> None:
    """The suite measures under locks of its own, keeps its runs and their journals in directories
    of its own, and never reads the machine's: a benchmark run beside it (or another checkout's
    suite) neither waits for it nor makes it wait, and neither cleans up after the other."""
    os.environ[BUSY_THRESHOLD_ENV] = "off"
    # The sessions the tests start (hundreds: pytester subprocesses, chaos runs) each import the
    # plugin, every module of it rewritten by pytest's assertion hook; with PYTHONDONTWRITEBYTECODE
    # (set in some shells and CI images) none of that is cached, about 1 s of CPU a session here.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if hasattr(config, "workerinput"):
        return
    for variable, (prefix, parent) in PRIVATE_DIRS.items():
        if os.environ.get(variable):
            continue
        directory = tempfile.mkdtemp(prefix=prefix, dir=parent if parent and os.path.isdir(parent) else None)
        os.environ[variable] = directory  # 0700, this user's
        config.add_cleanup(lambda directory=directory: _remove_unless_mounted(directory))


def _remove_unless_mounted(directory: str) -> None:
    """rmtree would descend into a mount a failed test left behind (the test reports it)."""
    if not mounting.mounts_under(Path(directory)):
        shutil.rmtree(directory, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent where it is (the UML guest)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (the README's test command): see tests/helpers/workers.py."""
    return suite_workers()


# Longest first: pytest-xdist hands tests out in collection order, so the UML lane (one test of
# several minutes, alphabetically near the end) would start when the rest is done and run alone.
LONGEST_FIRST = ("tests/integration/test_uml_lane.py::",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST_FIRST))  # stable: the rest keeps its order
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="integration test: needs root (loop devices, mount)")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)
