"""The suite shares no state with the machine it runs on, and its configuration applies to the
tests alone (tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_encperf import host, journal
from tests.helpers.support import disk_dir

TESTS = Path(__file__).resolve().parents[1]


def test_the_suite_s_configuration_stays_out_of_benchmarks() -> None:
    """At the repository's root, conftest.py applied to ``pytest benchmarks/`` too: the README's
    main job then measured under the suite's private locks, with no busy threshold."""
    assert not (TESTS.parent / "conftest.py").exists()
    assert (TESTS / "conftest.py").is_file()
    assert not (TESTS.parent / "benchmarks" / "conftest.py").exists() or "ENCPERF_BUSY_THRESHOLD" not in (
        TESTS.parent / "benchmarks" / "conftest.py"
    ).read_text(encoding="utf-8")


def test_the_suite_shares_no_directory_with_the_machine() -> None:
    """Locks, run directories (and their journals), disk scratch space and the list of run
    directories ``encperf cleanup`` visits are the suite's own (tests/conftest.py), so a benchmark
    beside it neither waits for it nor cleans up after it."""
    locks = host.lock_directory()
    assert locks != Path("/run/encperf") and host.is_private_directory(str(locks))
    runs = Path(os.environ["ENCPERF_DIR"])
    assert runs != Path("/var/tmp") and host.is_private_directory(str(runs))
    assert Path(disk_dir()) != Path("/var/tmp") and host.is_private_directory(str(disk_dir()))
    state = journal.state_file()
    assert Path(os.environ["XDG_STATE_HOME"]) in state.parents and ".local" not in state.parts
