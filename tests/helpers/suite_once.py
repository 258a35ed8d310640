"""What the suite computes once for all its pytest-xdist workers: the first worker that asks for a
value computes it while the others wait (a lock in the suite's own ENCPERF_TEST_SHARED directory,
tests/conftest.py) and read it back. Only for values that do not depend on the worker that
computes them (a fixed seed, no measurement).

Why: pytest-xdist hands out one test at a time, so the cases of one test file run on every worker,
and a per-process cache (functools.cache) is filled once per worker. The gate's simulations
(tests/functional/test_verdict_simulation.py) took 130 CPU-s in one process and 200 CPU-s spread
over three workers. (``--dist loadgroup``, which would keep a file's tests on one worker, groups
nothing under pytest 9.2 with pytest-xdist 3.8: xdist marks the group in ``item._nodeid``, which
pytest no longer reads.)
"""

from __future__ import annotations

import fcntl
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pytest_encperf import host

SHARED_ENV = "ENCPERF_TEST_SHARED"  # tests/conftest.py: a 0700 directory of the suite's own
# pytest-xdist's id of this run, the same in each of its workers: a value is shared within one run,
# never read back by a later one (the directory is kept when the user sets ENCPERF_TEST_SHARED)
RUN_ENV = "PYTEST_XDIST_TESTRUNUID"
T = TypeVar("T")


def once_for_the_suite(name: str, compute: Callable[[], T]) -> T:
    """``compute()``, or what another worker of this run of the suite computed under ``name``
    (letters, digits, ``.-_``); computed here outside pytest-xdist's workers (nothing to share) or
    where the suite has no private shared directory."""
    if not re.fullmatch(r"[\w.-]+", name):
        raise ValueError(f"not a plain name: {name!r}")
    shared, run = os.environ.get(SHARED_ENV), os.environ.get(RUN_ENV, "")
    if not shared or not host.is_private_directory(shared) or not re.fullmatch(r"\w+", run):
        return compute()
    name = f"{run}-{name}"
    directory = Path(shared)
    lock = host.open_own_file(directory / f"{name}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed, or when this worker dies
        value_file = directory / f"{name}.pickle"
        try:
            fd = host.open_own_file(value_file, os.O_RDONLY)
        except FileNotFoundError:
            value = compute()
            partial = directory / f"{name}.pickle.{os.getpid()}"
            fd = host.open_own_file(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            with os.fdopen(fd, "wb") as handle:
                pickle.dump(value, handle)
            os.replace(partial, value_file)  # whole or not at all, should this worker die writing it
            return value
        with os.fdopen(fd, "rb") as handle:
            found: T = pickle.load(handle)  # our own file in our own 0700 directory
            return found
    finally:
        os.close(lock)
