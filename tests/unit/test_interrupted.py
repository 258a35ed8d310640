"""A run that did not finish is saved as incomplete and is never a baseline unless asked for.

Sessions run in a subprocess with the scripted engine of test_gate (no disks, no root); a
conftest hook interrupts them at the start of their Nth test: SIGTERM sent to the session's own
process, or KeyboardInterrupt raised, or a failure under -x.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_encperf import host
from pytest_encperf.outcome import did_not_finish


@pytest.mark.parametrize(
    ("interrupted", "stopped", "planned", "ran", "lost", "why"),
    [
        ("", "", 16, 16, 0, ""),
        ("by SIGTERM", "", 16, 5, 0, "interrupted by SIGTERM; 5 of 16 tests ran"),
        ("by Ctrl-C", "", 0, 3, 0, "interrupted by Ctrl-C; 3 tests ran"),
        ("", "stop after 1", 16, 4, 0, "stopped early (stop after 1); 4 of 16 tests ran"),
        ("", "stop after 1", 16, 16, 0, ""),  # the last test failed: everything ran
        ("", "", 16, 14, 0, "2 of 16 tests did not run"),
        ("", "", 0, 0, 1, "the results of 1 xdist worker(s) are missing"),
    ],
)  # fmt: skip
def test_what_did_not_finish_means(
    interrupted: str, stopped: str, planned: int, ran: int, lost: int, why: str
) -> None:
    assert did_not_finish(interrupted, stopped, planned, ran, lost) == why


def test_encperf_lock_dir_is_used_only_when_it_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "is_root", lambda: True)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    for given in (str(shared), "relative/locks", str(tmp_path / "missing")):
        monkeypatch.setenv("ENCPERF_LOCK_DIR", given)
        assert host.lock_directory() == Path("/run/encperf")
    link = tmp_path / "link"
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link.symlink_to(private)
    monkeypatch.setenv("ENCPERF_LOCK_DIR", str(link))
    assert host.lock_directory() == Path("/run/encperf")
    monkeypatch.setenv("ENCPERF_LOCK_DIR", str(private))
    assert host.lock_directory() == private
