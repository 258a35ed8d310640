"""A pytest plugin for the sessions the functional lane's tests start (tests/functional/conftest.py
loads it in each, through PYTEST_ADDOPTS): the page-cache drop before each round evicts the
measured file's own pages, not every clean page of the machine.

As root, host.drop_page_cache also syncs and writes /proc/sys/vm/drop_caches, about a second a
call beside a busy machine, paid before every round of every engine, timed function and real-work
task: most of what these sessions spent. Their rounds are of a directory target or a scripted
engine, none asserts a speed, and each round's own file still leaves the cache; the integration
lane keeps the machine-wide drop.

PYTEST_DONT_REWRITE: the outer session imported this module already; an in-process session that
loads it again must not warn that it cannot rewrite it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_encperf import host


def drop_own_pages(path: Path | None = None) -> bool:
    """host.drop_page_cache without the machine-wide part: the file's pages go (synced first), and
    the round counts as dropped, as a root session's would."""
    host.drop_file_pages(path)
    return True


def pytest_configure(config: pytest.Config) -> None:
    previous = host.drop_page_cache  # an in-process session's: the outer test's, given back at its end
    host.drop_page_cache = drop_own_pages
    config.add_cleanup(lambda: setattr(host, "drop_page_cache", previous))
