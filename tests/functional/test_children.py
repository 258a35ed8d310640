"""Child processes die with the run; a dead run's children are found by its mark and ended
before its resources are released (children.py). Real processes, no root."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pytest_encperf import children, deadruns, processes, resources
from tests.functional.test_journal import dead_pid, run_dir, write_journal


def gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if processes.process_start(pid) is None:  # gone, or a zombie nobody reaped yet
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


RUN_A_TOOL = """
import sys, threading
from pytest_encperf import host
threading.Timer(0.5, lambda: None).start()  # a second thread: the death signal follows the caller
print("running", flush=True)
host.run(["sh", "-c", "echo $$ >&2; exec sleep 60"], timeout=120)
"""


def test_a_tool_dies_with_the_run_killed_outright(tmp_path: Path) -> None:
    session = subprocess.Popen(
        [sys.executable, "-c", RUN_A_TOOL], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    try:
        assert session.stdout is not None
        assert session.stdout.readline().strip() == b"running"
        deadline = time.monotonic() + 10
        tool = []
        while not tool and time.monotonic() < deadline:
            tool = [p for p in psutil.Process(session.pid).children() if p.name() == "sleep"]
            time.sleep(0.02)
        assert tool, "host.run did not start the tool"
        assert children._mark_of(tool[0].pid) is not None  # carries the run's mark
    finally:
        session.send_signal(signal.SIGKILL)
        session.wait()
    assert gone(tool[0].pid), "the tool outlived the run that started it"


def test_a_runs_marked_processes_are_found_with_what_they_forked(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 60 & wait"], start_new_session=True, **children.popen_options()
    )  # type: ignore[call-overload]
    spawned.append(proc)
    deadline = time.monotonic() + 5
    found: list[children.Marked] = []
    while len(found) < 2 and time.monotonic() < deadline:
        found = children.marked_processes(children.run_mark())
        time.sleep(0.02)
    names = sorted(m.process.name() for m in found)
    assert names == ["sh", "sleep"]
    ended = children.end([m.process for m in found])
    assert len(ended) == 2
    assert children.marked_processes(children.run_mark()) == []


def marked_sleeper(mark: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["sleep", "60"], env={**os.environ, children.MARK_VARIABLE: mark}, start_new_session=True
    )


def test_a_dead_runs_tools_are_ended_before_its_resources_are_released_and_its_daemons_after(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = dead_pid()
    mark = f"encperf-{pid}-0123abcd"
    tool, daemon = marked_sleeper(mark), marked_sleeper(mark + children.DAEMONS)
    other_run = marked_sleeper(f"encperf-{pid}-ffff")  # another run's: never touched
    spawned += [tool, daemon, other_run]
    order: list[str] = []

    def release(resource: resources.Resource) -> str:
        order.append(f"release: tool {'running' if tool.poll() is None else 'gone'}")
        order.append(f"release: daemon {'running' if daemon.poll() is None else 'gone'}")
        return "released"

    monkeypatch.setitem(resources.KINDS, "path", resources.Kind(release, resources.KINDS["path"].check))
    directory = run_dir(tmp_path, pid)
    path = write_journal(tmp_path, pid, None, [{"kind": "path", "ident": str(directory)}])
    document = json.loads(path.read_text())
    document["children"] = mark
    path.write_text(json.dumps(document))
    [run] = deadruns.release_dead_runs(tmp_path)
    assert order == ["release: tool gone", "release: daemon running"]
    assert any(line.startswith("ended its tool sleep") for line in run.done), run.done
    assert any(line.startswith("ended leftover process sleep") for line in run.done), run.done
    daemon.wait(timeout=5)
    assert other_run.poll() is None


def test_a_dead_runs_malformed_mark_ends_nothing(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    pid = dead_pid()
    stranger = marked_sleeper(f"encperf-{os.getpid()}-0123")  # a mark of another pid: not the run's
    spawned.append(stranger)
    path = write_journal(tmp_path, pid, None, [])
    document = json.loads(path.read_text())
    document["children"] = f"encperf-{os.getpid()}-0123"
    path.write_text(json.dumps(document))
    deadruns.release_dead_runs(tmp_path)
    assert stranger.poll() is None


def marked_session(mark: str, script: str, *args: str) -> subprocess.Popen[bytes]:
    """``sh -c script`` carrying ``mark``, leading a session of its own, as host.run starts a tool."""
    env = {**os.environ, children.MARK_VARIABLE: mark}
    return subprocess.Popen(["sh", "-c", script, "sh", *args], env=env, start_new_session=True)


def test_a_dead_tools_helper_marked_daemons_is_ended_before_release_while_a_daemon_lives_on(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos leak of issue 23: a tool that leaves daemons (``:daemons``, VeraCrypt mapping a
    volume) died with the run while its helper (its ``losetup``) ran on; the helper made its
    resource while the release was under way, after the cleanup had looked. A helper stays in
    the session of the tool that died, a daemon leads one of its own: the helper is ended
    before anything is released, the daemon (and what it forked) lives until then."""
    pid = dead_pid()
    mark = f"encperf-{pid}-0123abcd"
    made = tmp_path / "made-by-the-helper"
    # the tool: forks its helper (which makes its resource a second later) and is gone
    tool = marked_session(mark + children.DAEMONS, '(sleep 1; touch "$1") & exit 0', str(made))
    tool.wait()
    daemon = marked_session(mark + children.DAEMONS, "sleep 60 & wait")  # detached, with a child
    spawned.append(daemon)
    deadline = time.monotonic() + 5
    while len(children.marked_processes(mark)) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)  # the helper's subshell and sleep, the daemon and its sleep
    assert len(children.marked_processes(mark)) == 4
    seen: dict[str, object] = {}

    def release(resource: resources.Resource) -> str:
        running = children.marked_processes(mark)
        seen["sessions"] = {children.session_of(m.process.pid) for m in running}
        seen["count"] = len(running)
        time.sleep(2.0)  # a release that takes a while (VeraCrypt's dismount): the helper's chance
        return "released"

    monkeypatch.setitem(resources.KINDS, "path", resources.Kind(release, resources.KINDS["path"].check))
    directory = run_dir(tmp_path, pid)
    path = write_journal(tmp_path, pid, None, [{"kind": "path", "ident": str(directory)}])
    document = json.loads(path.read_text())
    document["children"] = mark
    path.write_text(json.dumps(document))
    [run] = deadruns.release_dead_runs(tmp_path)
    assert seen == {"sessions": {daemon.pid}, "count": 2}, run.done  # the daemon and its sleep only
    assert any(line.startswith("ended its tool sleep") for line in run.done), run.done
    time.sleep(0.5)
    assert not made.exists(), "the dead tool's helper made its resource after the cleanup had looked"
    assert children.marked_processes(mark) == []  # the daemon, ended after the release
