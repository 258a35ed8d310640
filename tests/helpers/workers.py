"""How many pytest-xdist workers ``-n auto`` starts for this suite (tests/conftest.py)."""

from __future__ import annotations

import os

# One worker more than the CPUs this process may use: with one a CPU the suite kept them 74% busy
# (the functional and integration lanes, 2 cores, a clean clone: 671 s), its tests waiting on
# scripted tools' sleeps, FUSE round trips and the sessions they start. With three workers on those
# 2 cores they were 86% busy (602 s, and 674 s in a run where every file took about 10% longer);
# four: 590 s, 89% busy.
EXTRA_WORKERS = 1


def suite_workers() -> int | None:
    """The number of workers for ``-n auto``; None where PYTEST_XDIST_AUTO_NUM_WORKERS says it
    (pytest-xdist's own hook reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + EXTRA_WORKERS
