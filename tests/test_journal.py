"""The resource journal, dead-run cleanup and the ``encperf cleanup`` command (no root needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_encperf import cli, host, journal


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Journals note their directory in the user's state file: keep the real one out of tests."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def write_journal(directory: Path, pid: int, started: float | None, resources: list[dict]) -> Path:
    runs = directory / journal.RUNS_DIR
    runs.mkdir(exist_ok=True)
    path = runs / f"run-{pid}-test.json"
    entries = [{"id": i + 1, "label": "", "detail": "", **r} for i, r in enumerate(resources)]
    path.write_text(json.dumps({"version": 1, "pid": pid, "started": started, "resources": entries}))
    return path


def test_journal_follows_registrations_and_releases(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path)
    cleanup = host.Cleanup(log)
    assert not log.path.exists(), "a run that holds nothing writes no journal"
    (tmp_path / "a").mkdir()
    cleanup.path(tmp_path / "a")
    cleanup.push("in-memory only", lambda: None)  # "other": nothing a later process could do
    data = json.loads(log.path.read_text())
    assert data["pid"] == os.getpid()
    assert data["started"] == journal.process_start_time(os.getpid())
    assert [(r["kind"], r["ident"]) for r in data["resources"]] == [("path", str(tmp_path / "a"))]
    assert oct(log.path.stat().st_mode & 0o777) == "0o600"
    cleanup.release()
    assert json.loads(log.path.read_text())["resources"] == []
    log.close()
    assert not log.path.exists()


def test_failed_release_stays_in_the_journal(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path)
    cleanup = host.Cleanup(log)

    def broken() -> None:
        raise OSError("device busy")

    cleanup.push("detach", broken, host.Resource("loop", "/dev/loop99", str(tmp_path / "img")))
    with pytest.raises(host.HostError, match="detach: device busy"):
        cleanup.release()
    log.close()
    assert [r["ident"] for r in json.loads(log.path.read_text())["resources"]] == ["/dev/loop99"]


def test_cleanups_report_to_the_installed_observer(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path)
    host.install_observer(log)
    try:
        cleanup = host.Cleanup()  # as a backend's Volume makes it: no observer passed
        cleanup.path(tmp_path / "x")
    finally:
        host.remove_observer(log)
    host.Cleanup().path(tmp_path / "after")  # made after the run: not journaled
    assert [r["ident"] for r in log.resources] == [str(tmp_path / "x")]


def test_process_entries_record_the_start_time(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path)
    proc = subprocess.Popen(["sleep", "30"])
    try:
        host.Cleanup(log).process(proc)
        (entry,) = log.resources
        assert entry["kind"] == "process" and entry["detail"] == "sleep"
        assert entry["started"] == journal.process_start_time(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_dead_run_is_released_in_order_and_journal_removed(tmp_path: Path) -> None:
    run_dir = tmp_path / "encperf-1-abc"
    (run_dir / "01-plain").mkdir(parents=True)
    stray = tmp_path / "stray.img"
    stray.write_bytes(b"x")
    daemon = subprocess.Popen(["sleep", "30"])
    path = write_journal(
        tmp_path,
        dead_pid(),
        123.0,
        [
            {"kind": "path", "ident": str(run_dir)},
            {"kind": "path", "ident": str(stray)},
            {"kind": "process", "ident": str(daemon.pid), "detail": "sleep",
             "started": journal.process_start_time(daemon.pid)},
            {"kind": "mount", "ident": str(run_dir / "01-plain" / "mnt")},
        ],
    )  # fmt: skip
    (dead,) = journal.release_dead_runs(tmp_path)
    assert daemon.wait(timeout=5) is not None
    assert dead.failed == []
    assert dead.done == [
        f"{run_dir / '01-plain' / 'mnt'}: not mounted any more",
        f"stopped sleep (pid {daemon.pid})",
        f"removed {stray}",
        f"removed {run_dir}",
    ]
    assert not run_dir.exists() and not stray.exists() and not path.exists()


def test_live_run_is_never_touched(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    path = write_journal(
        tmp_path, os.getpid(), journal.process_start_time(os.getpid()), [{"kind": "path", "ident": str(keep)}]
    )
    assert journal.release_dead_runs(tmp_path) == []
    assert keep.exists() and path.exists()


def test_reused_pid_counts_as_dead(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    started = journal.process_start_time(os.getpid())
    assert started is not None
    write_journal(tmp_path, os.getpid(), started - 1000, [{"kind": "path", "ident": str(gone)}])
    (dead,) = journal.release_dead_runs(tmp_path)
    assert dead.done == [f"removed {gone}"]


def test_process_whose_pid_was_reused_is_left_alone(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "30"])
    try:
        write_journal(
            tmp_path,
            dead_pid(),
            1.0,
            [{"kind": "process", "ident": str(other.pid), "detail": "sleep", "started": 1.0}],
        )
        (dead,) = journal.release_dead_runs(tmp_path)
        assert dead.done == [f"sleep (pid {other.pid}): not running any more"]
        assert other.poll() is None, "a process that only shares the pid was killed"
    finally:
        other.kill()
        other.wait()


def test_unknown_kind_is_kept_and_reported(tmp_path: Path) -> None:
    path = write_journal(tmp_path, dead_pid(), 1.0, [{"kind": "teleporter", "ident": "t1"}])
    (dead,) = journal.release_dead_runs(tmp_path)
    assert dead.failed == ["teleporter t1: no way to release a 'teleporter' resource"]
    assert [r["ident"] for r in json.loads(path.read_text())["resources"]] == ["t1"]


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    path = write_journal(tmp_path, dead_pid(), 1.0, [{"kind": "path", "ident": str(keep)}])
    (dead,) = journal.release_dead_runs(tmp_path, dry_run=True)
    assert dead.done == [f"would release path {keep}"]
    assert keep.exists() and path.exists()


def test_release_order_is_the_reverse_of_creation_even_for_stacks() -> None:
    # qemu-luks: container file, daemon exporting it, the export's mount, a loop device on the
    # exported file, ext4 on that loop device
    entries = [
        {"id": 1, "kind": "path"},
        {"id": 2, "kind": "process"},
        {"id": 3, "kind": "mount"},
        {"id": 4, "kind": "loop"},
        {"id": 5, "kind": "mount"},
        {"id": 6, "kind": "fscrypt-key"},
    ]
    order = [e["id"] for e in journal.release_order(entries)]
    assert order == [6, 5, 4, 3, 2, 1]
    assert order.index(4) < order.index(3) < order.index(2)  # loop off the export before it goes


def test_path_removal_refuses_to_delete_through_a_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "run"
    target.mkdir()
    monkeypatch.setattr(host, "mounts_under", lambda p: [target / "mnt"])
    cleanup = host.Cleanup()
    cleanup.path(target)
    with pytest.raises(host.HostError, match=r"not removing .*still mounted"):
        cleanup.release()
    assert target.exists()


def test_cli_cleanup_prints_what_it_released(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    pid = dead_pid()
    write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(gone)}])
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 0
    assert f"run pid {pid} (run-{pid}-test.json): removed {gone}" in capsys.readouterr().out
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 0
    assert "nothing left behind by dead runs" in capsys.readouterr().out


def test_cli_cleanup_fails_when_something_cannot_be_released(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_journal(tmp_path, dead_pid(), 1.0, [{"kind": "teleporter", "ident": "t1"}])
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 1
    assert "1 resource(s) could not be released" in capsys.readouterr().err


def test_cli_rejects_a_missing_directory(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["cleanup", "--dir", "/nonexistent/encperf"])
    assert exc.value.code == 2
    assert "does not exist or is not a directory" in capsys.readouterr().err


def test_cli_is_installed_as_a_command(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "encperf"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_encperf.cli"]
    proc = subprocess.run([*argv, "cleanup", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "nothing left behind" in proc.stdout


# ------------------------------------------------------------------ host.run: never waits forever


def test_hung_tool_is_killed_after_the_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(host.HostError, match=r"sleep 30: no answer after 0.3 s \(killed; waiting for input"):
        host.run(["sleep", "30"], timeout=0.3)
    assert time.monotonic() - start < 5


def test_timeout_also_kills_what_the_tool_started() -> None:
    # the grandchild keeps stdout open: without killing the process group, run() would wait for it
    start = time.monotonic()
    with pytest.raises(host.HostError, match="no answer after"):
        host.run(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.3)
    assert time.monotonic() - start < 5


def test_password_prompt_gets_end_of_file_not_a_terminal() -> None:
    with pytest.raises(host.HostError, match="exit 1"):
        host.run(["sh", "-c", "read -r secret || exit 1; echo got"], timeout=5)
    assert host.run(["cat"], input=b"from stdin") == "from stdin"


def test_a_signal_during_teardown_waits_until_it_is_done() -> None:
    import signal

    steps = []
    with pytest.raises(KeyboardInterrupt, match="deferred until teardown finished"), host.signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        steps.append("released the rest")
    assert steps == ["released the rest"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_private_dir_is_0700_in_memory_and_removed_with_its_cleanup() -> None:
    cleanup = host.Cleanup()
    private = host.PrivateDir.create(cleanup)
    secret = private.write_secret("key", b"s3cret")
    assert oct(private.path.stat().st_mode & 0o777) == "0o700"
    assert oct(secret.stat().st_mode & 0o777) == "0o600"
    if os.access("/dev/shm", os.W_OK):
        assert private.path.parent == Path("/dev/shm")
    assert cleanup.resources == [host.Resource("path", str(private.path))]
    cleanup.release()
    assert not private.path.exists()


def test_a_journal_that_cannot_be_written_never_stops_registration_or_release(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path / "gone")  # its directory does not exist: every write fails
    cleanup = host.Cleanup(log)
    released = []
    cleanup.push("detach", lambda: released.append("loop"), host.Resource("loop", "/dev/loop99", "x"))
    cleanup.release()
    assert released == ["loop"]
    assert log.write_error is not None and "could not write the resource journal" in log.write_error


def test_an_observer_that_raises_never_stops_registration_or_release() -> None:
    class Broken:
        def registered(self, resource: host.Resource, label: str) -> object:
            raise RuntimeError("boom")

        def released(self, token: object) -> None:
            raise RuntimeError("boom")

    cleanup = host.Cleanup(Broken())
    released = []
    cleanup.push("x", lambda: released.append("x"), host.Resource("path", "/nonexistent/x"))
    cleanup.release()
    assert released == ["x"]


def test_half_written_journal_of_a_dead_writer_is_removed(tmp_path: Path) -> None:
    runs = tmp_path / journal.RUNS_DIR
    runs.mkdir()
    pid = dead_pid()
    stale = runs / f".run-{pid}-abcd.json.{pid}.tmp"
    live = runs / f".run-{os.getpid()}-abcd.json.{os.getpid()}.tmp"
    stale.write_text("{")
    live.write_text("{")
    assert journal.release_dead_runs(tmp_path) == []
    assert not stale.exists() and live.exists()


def test_cleanup_without_dir_finds_every_directory_runs_journaled_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("ENCPERF_DIR", str(tmp_path))  # the default: nothing there
    elsewhere = tmp_path / "ssd"
    elsewhere.mkdir()
    log = journal.Journal(elsewhere)
    host.Cleanup(log).path(elsewhere / "x")  # first write notes the directory
    host.Cleanup(log).path(elsewhere / "y")
    assert journal.known_directories() == [elsewhere]
    assert (tmp_path / "state" / "encperf" / "run-directories").read_text() == f"{elsewhere}\n"
    gone = elsewhere / "gone"
    gone.mkdir()
    pid = dead_pid()
    write_journal(elsewhere, pid, 1.0, [{"kind": "path", "ident": str(gone)}])
    assert cli.main(["cleanup"]) == 0
    assert f"run pid {pid} (run-{pid}-test.json): removed {gone}" in capsys.readouterr().out
