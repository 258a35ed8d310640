"""A pytest plugin for the sessions a test starts (loaded in each through PYTEST_ADDOPTS by
:func:`sessions_of_this_test_alone`, which the functional lane's tests and the integration files
that ask for it use): the page-cache drop before each round evicts the measured file's own pages,
not every clean page of the machine.

As root, host.drop_page_cache also syncs and writes /proc/sys/vm/drop_caches, about a second a
call beside a busy machine, paid before every round of every engine, timed function and real-work
task: most of what these sessions spent. Their rounds are of a directory target or a scripted
engine, none asserts a speed, and each round's own file still leaves the cache; the integration
files whose claims are not about the drop use it too (see
tests/integration/conftest.py::sessions_of_this_test_alone), the rest keeps the machine-wide drop.

In the integration files that ask for it, each gocryptfs cipher ceiling (``gocryptfs -speed``, its
own benchmark: about 8 s a session that measured gocryptfs) is also measured once for the suite
and read back by the sessions after (GOCRYPTFS_SPEEDS_ENV, ``measure_gocryptfs_once``): still the
real gocryptfs's figures on this machine.

PYTEST_DONT_REWRITE: the outer session imported this module already; an in-process session that
loads it again must not warn that it cannot rewrite it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_encperf import ceiling, host

# What every session a test starts would otherwise pay or wait for:
#  - the measurement locks: the suite's own directory (tests/conftest.py) is shared by all its
#    workers, so a session measuring on /tmp held every other worker's sessions on that disk for
#    whole workloads (test_usertiming's 30 s of rounds; in the integration lane, a CryFS volume's
#    key derivation held the other worker's rounds for as long); a directory of each test's own keeps
#    a session from waiting on another test's, and the sessions one test starts still share it (the
#    tests of xdist workers and of waiting for locks; a test that sets ENCPERF_LOCK_DIR itself wins);
#  - hypothesis's pytest plugin, which imports hypothesis in each session's terminal summary: about
#    0.2 s of a subprocess session's start-up CPU; no session a test starts uses hypothesis;
#  - the machine-wide page-cache drop before each round (drop_own_pages), here and in the sessions
#    started, in process or not (the repository on their PYTHONPATH to load this module).
INNER_SESSION_OPTIONS = "-p no:hypothesispytest -p tests.helpers.lane_sessions"
REPOSITORY = Path(__file__).resolve().parents[2]
# A file of the suite's own (tests/conftest.py's ENCPERF_TEST_SHARED) with the gocryptfs ceilings
# measured so far, by the gocryptfs binary that measured them; unset (the functional lane, whose
# stand-ins script their own -speed): each session measures its own.
GOCRYPTFS_SPEEDS_ENV = "ENCPERF_TEST_GOCRYPTFS_SPEEDS"


def drop_own_pages(path: Path | None = None) -> bool:
    """host.drop_page_cache without the machine-wide part: the file's pages go (synced first), and
    the round counts as dropped, as a root session's would."""
    host.drop_file_pages(path)
    return True


def measure_gocryptfs_once(
    measure: Callable[[str, float], ceiling.Ceiling], known: Path
) -> Callable[[str, float], ceiling.Ceiling]:
    """ceiling.measure that takes a ``gocryptfs:`` cipher's figure from ``known`` when this gocryptfs
    measured it already, and adds it there when not (a cipher not measured is asked again)."""

    def measure_or_read(cipher: str, seconds: float = 0.3) -> ceiling.Ceiling:
        binary = shutil.which("gocryptfs")
        if not cipher.startswith("gocryptfs:") or binary is None:
            return measure(cipher, seconds)
        key = f"{os.path.realpath(binary)} {cipher}"
        figures: dict[str, Any] = {}  # key -> [MB/s, how]
        with contextlib.suppress(OSError, ValueError):
            fd = host.open_own_file(known, os.O_RDONLY)  # ours, 0600, not through a link
            with os.fdopen(fd) as handle:
                figures = json.load(handle)
        if key in figures:
            mb_per_s, how = figures[key]
            return ceiling.Ceiling(cipher, float(mb_per_s), str(how))
        found = measure(cipher, seconds)
        if found.mb_per_s:
            figures[key] = [found.mb_per_s, found.how]
            partial = known.with_name(f"{known.name}.{os.getpid()}")
            fd = host.open_own_file(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            with os.fdopen(fd, "w") as handle:
                json.dump(figures, handle)
            os.replace(partial, known)  # whole, for a session reading it at the same time
        return found

    return measure_or_read


def pytest_configure(config: pytest.Config) -> None:
    previous = host.drop_page_cache  # an in-process session's: the outer test's, given back at its end
    host.drop_page_cache = drop_own_pages
    config.add_cleanup(lambda: setattr(host, "drop_page_cache", previous))
    known = os.environ.get(GOCRYPTFS_SPEEDS_ENV)
    if known:
        measure = ceiling.measure
        ceiling.measure = measure_gocryptfs_once(measure, Path(known))
        config.add_cleanup(lambda: setattr(ceiling, "measure", measure))


@contextlib.contextmanager
def sessions_of_this_test_alone(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, *, gocryptfs_once: bool = False
) -> Iterator[None]:
    """The body of the lanes' fixtures of that name: this test's sessions, and the test itself,
    measure under locks of their own and drop only the measured file's pages (INNER_SESSION_OPTIONS);
    ``gocryptfs_once``: their gocryptfs ceilings are measured once for the suite (GOCRYPTFS_SPEEDS_ENV).
    pytester clears PYTEST_ADDOPTS when it starts: set after it."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
    locks = tempfile.mkdtemp(prefix="test-", dir=os.environ.get(host.LOCK_DIR_ENV) or None)  # 0700
    # the test's own monkeypatch: what a test sets after this is undone first
    monkeypatch.setenv(host.LOCK_DIR_ENV, locks)
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_SESSION_OPTIONS)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setattr(host, "drop_page_cache", drop_own_pages)
    shared = os.environ.get("ENCPERF_TEST_SHARED")
    if gocryptfs_once and shared and host.is_private_directory(shared):
        known = Path(shared) / "gocryptfs-speeds.json"
        monkeypatch.setenv(GOCRYPTFS_SPEEDS_ENV, str(known))
        monkeypatch.setattr(ceiling, "measure", measure_gocryptfs_once(ceiling.measure, known))
    try:
        yield
    finally:
        shutil.rmtree(locks, ignore_errors=True)
