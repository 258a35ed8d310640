"""The repository's own test configuration (not part of the published plugin)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile

# pytester's in-process runs remove from sys.modules what was first imported during them, and
# cryptography's OpenSSL bindings do not survive a second import (AES-XTS then reports itself
# "not supported"): import it here, before any run, so it stays.
import cryptography.hazmat.primitives.ciphers  # noqa: F401

# Likewise numpy, under matplotlib, "cannot load module more than once per process": a pytester
# run that imported matplotlib first (--encperf-html asks for it at start-up) left every later
# run in that process saying that matplotlib is not installed.
with contextlib.suppress(ImportError):
    import matplotlib.figure  # noqa: F401
import pytest

from pytest_encperf import host

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


def pytest_configure(config: pytest.Config) -> None:
    """The suite measures under locks of its own, never the machine-wide ones: a benchmark run
    beside it (or another checkout's suite) neither waits for it nor makes it wait. xdist workers
    and the sessions the tests start inherit the variables; a lock directory given from outside
    wins, a busy threshold does not."""
    os.environ[BUSY_THRESHOLD_ENV] = "off"
    if os.environ.get(host.LOCK_DIR_ENV) or hasattr(config, "workerinput"):
        return
    directory = tempfile.mkdtemp(prefix="encperf-test-locks-")  # 0700, this user's
    os.environ[host.LOCK_DIR_ENV] = directory
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="integration test: needs root (loop devices, mount)")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)
