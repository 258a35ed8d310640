"""resources.py: one release function per resource kind, for live teardown and dead-run cleanup
alike; the safe-path checks a dead run's journal is held to; secret directories in RAM."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_encperf import deadruns, host, journal, processes, resources
from pytest_encperf.resources import Cleanup, Resource
from tests.unit.test_resources import RecordingObserver


def test_live_teardown_and_dead_run_cleanup_use_the_same_function_in_the_same_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, Resource]] = []
    monkeypatch.setitem(resources.KINDS, "probe", resources.KINDS["path"])
    resources.register_kind("probe", lambda r: calls.append(("released", r)) or f"released {r.ident}")
    made = [Resource("probe", str(tmp_path / f"encperf-1-x/{n}")) for n in ("a", "b", "c")]

    live = Cleanup()
    for resource in made:
        live.add(resource)
    live.release()
    in_live = list(calls)
    calls.clear()

    proc = subprocess.Popen(["true"])
    proc.wait()
    log = journal.Journal(tmp_path)
    log.pid = proc.pid  # as if written by the (now dead) process
    log.path = log.path.with_name(f"run-{proc.pid}-beef.json")
    (tmp_path / f"encperf-{proc.pid}-x").mkdir(mode=0o700)
    dead_cleanup = Cleanup(log)
    for resource in made:
        dead_cleanup.add(Resource("probe", resource.ident.replace("encperf-1-", f"encperf-{proc.pid}-")))
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.failed == [] and dead.refused == []
    assert [r.ident for _, r in in_live] == [m.ident for m in reversed(made)]
    assert [r.ident.replace(f"encperf-{proc.pid}-", "encperf-1-") for _, r in calls] == [
        m.ident for m in reversed(made)
    ]
    resources.KINDS.pop("probe")


def test_process_release_stops_ours_and_leaves_a_reused_pid_alone() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        resource = resources.process_resource(proc.pid)
        assert isinstance(resource.started, processes.ProcessStart)
        earlier = dataclasses.replace(resource.started, ticks=resource.started.ticks - 100)
        reused = Resource("process", resource.ident, resource.detail, earlier)
        assert "is another process now" in resources.release(reused)
        assert proc.poll() is None
        assert resources.release(resource) == f"stopped sleep (pid {proc.pid})"
        assert proc.wait(timeout=5) is not None
        assert resources.release(resource) == f"sleep (pid {proc.pid}): not running any more"
    finally:
        proc.kill()
        proc.wait()


def test_a_daemon_gets_its_wait_to_exit_by_itself_before_sigterm() -> None:
    # exits 0 by itself after 0.3 s; SIGTERM would end it with -15
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    cleanup = Cleanup()
    cleanup.process(proc, wait=5)
    cleanup.release()
    assert proc.returncode == 0


def test_machine_lock_refuses_a_symlink_and_times_out(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.touch(mode=0o600)
    (tmp_path / "link.lock").symlink_to(target)
    with pytest.raises(OSError), host.machine_lock(tmp_path / "link.lock", timeout=0.1):
        pass
    lock = tmp_path / "a.lock"
    with host.machine_lock(lock, timeout=0.1):
        code = (
            "import sys; from pathlib import Path; from pytest_encperf import host\n"
            "with host.machine_lock(Path(sys.argv[1]), timeout=0.2): pass"
        )
        start = time.monotonic()
        other = subprocess.run([sys.executable, "-c", code, str(lock)], capture_output=True, text=True)
        assert time.monotonic() - start < 10
    assert other.returncode == 1
    assert f"LockTimeout: lock {lock} is held by pid {os.getpid()} for more than 0.2 s" in other.stderr


def test_a_daemon_is_registered_before_it_starts_and_stopped_by_its_mark() -> None:
    from pytest_encperf import children

    observer = RecordingObserver()
    cleanup = Cleanup(observer)
    call = children.new_call()
    started = cleanup.daemon(call, "/usr/bin/sleep", wait=0.0)
    assert [ident for ident, _ in observer.seen] == [call]
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True, **children.popen_options(call=call))  # type: ignore[call-overload]
    started.append(proc)
    deadline = time.monotonic() + 5
    while not children.marked_processes(call) and time.monotonic() < deadline:
        time.sleep(0.02)
    cleanup.release()
    assert proc.poll() is not None  # stopped and reaped
