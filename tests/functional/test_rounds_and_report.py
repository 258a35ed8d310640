"""Rounds (warm-up, steady state), the honesty fields and how the report shows them."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.fakes import mounted


def test_daemon_pids_come_from_registered_processes(tmp_path: Path) -> None:
    volume = mounted(tmp_path, "vol")
    assert volume.daemon_pids == ()
    volume.volume.mounted.push("stop", lambda: None)  # "other" resources are not daemons
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    volume.volume.mounted.process(proc)
    try:
        assert volume.daemon_pids == (proc.pid,)
        assert volume.observe().daemon_pids == (proc.pid,)
    finally:
        volume.volume.mounted.release()
    assert proc.poll() is not None


def test_daemon_pids_count_a_daemon_registered_before_it_started(tmp_path: Path) -> None:
    """FUSE daemons are registered by the mark they will carry (children.py): their CPU time
    still counts in the daemon column."""
    import subprocess

    from pytest_encperf import children

    volume = mounted(tmp_path, "vol")
    call = children.new_call()
    started = volume.volume.mounted.daemon(call, "/usr/bin/sleep")
    proc = subprocess.Popen(["sleep", "30"], **children.popen_options(daemons=True, call=call))  # type: ignore[call-overload]
    started.append(proc)
    try:
        assert volume.daemon_pids == (proc.pid,)
    finally:
        volume.volume.mounted.release()
    assert proc.poll() is not None
