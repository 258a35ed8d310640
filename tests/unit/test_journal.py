"""The resource journal, dead-run cleanup and the ``encperf cleanup`` command.

Most need no root; the cases with files of another user (chown) do, and skip without it.
Hostile cases: a journal planted by another user, a symbolic link in place of a journal or of
the journal directory, a journal naming /etc (or anything outside its run's own directories), a
foreign pid, a held lock. Each is refused with a message and nothing it names is touched.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import pwd
import re
from pathlib import Path

import pytest

from pytest_encperf import cli, deadruns, host, journal, resources
from pytest_encperf.backends.dmcrypt import mapping_name
from pytest_encperf.resources import Cleanup, Resource
from tests.functional.test_journal import NOBODY, released, run_dir, started, this_process, write_journal  # noqa: F401


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Journals note their directory in the user's state file: keep the real one out of tests."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


# ------------------------------------------------------------------ the run's own journal


def test_journal_follows_registrations_and_releases(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path)
    cleanup = Cleanup(log)
    assert not log.path.exists(), "a run that holds nothing writes no journal"
    (tmp_path / "a").mkdir()
    cleanup.path(tmp_path / "a")
    cleanup.push("in-memory only", lambda: None)  # "other": nothing a later process could do
    data = json.loads(log.path.read_text())
    assert data["pid"] == os.getpid()
    assert data["start"] == this_process().as_json() and "started" not in data
    assert data["directory"] == str(tmp_path)
    assert [(r["kind"], r["ident"]) for r in data["resources"]] == [("path", str(tmp_path / "a"))]
    assert oct(log.path.stat().st_mode & 0o777) == "0o600"
    assert oct(log.path.parent.stat().st_mode & 0o777) == "0o700"
    cleanup.release()
    assert json.loads(log.path.read_text())["resources"] == []
    log.close()
    assert not log.path.exists()


def test_failed_release_stays_in_the_journal(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path)
    cleanup = Cleanup(log)

    def broken() -> None:
        raise OSError("device busy")

    cleanup.push("detach", broken, Resource("loop", "/dev/loop99", str(tmp_path / "img")))
    with pytest.raises(host.HostError, match="detach: device busy"):
        cleanup.release()
    log.close()
    assert [r["ident"] for r in json.loads(log.path.read_text())["resources"]] == ["/dev/loop99"]


def test_cleanups_report_to_the_installed_observer(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path)
    resources.install_observer(log)
    try:
        cleanup = Cleanup()  # as a backend's Volume makes it: no observer passed
        cleanup.path(tmp_path / "x")
    finally:
        resources.remove_observer(log)
    Cleanup().path(tmp_path / "after")  # made after the run: not journaled
    assert [r["ident"] for r in log.resources] == [str(tmp_path / "x")]


def test_a_journal_that_cannot_be_written_never_stops_registration_or_release(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path / "gone")  # its directory does not exist: every write fails
    cleanup = Cleanup(log)
    released = []
    cleanup.push("detach", lambda: released.append("loop"), Resource("loop", "/dev/loop99", "x"))
    cleanup.release()
    assert released == ["loop"]
    assert log.write_error is not None and "could not write the resource journal" in log.write_error


def test_an_observer_that_raises_never_stops_registration_or_release() -> None:
    class Broken:
        def registered(self, resource: Resource, label: str) -> object:
            raise RuntimeError("boom")

        def released(self, token: object) -> None:
            raise RuntimeError("boom")

    cleanup = Cleanup(Broken())
    done = []
    cleanup.push("x", lambda: done.append("x"), Resource("path", "/nonexistent/x"))
    cleanup.release()
    assert done == ["x"]


# ------------------------------------------------------------------ a directory others control


# ------------------------------------------------------------------ dead runs: what is released


def test_live_run_is_never_touched(tmp_path: Path, released: list[Resource]) -> None:
    run = run_dir(tmp_path, os.getpid())
    path = write_journal(tmp_path, os.getpid(), this_process(), [{"kind": "path", "ident": str(run)}])
    assert deadruns.release_dead_runs(tmp_path) == []
    assert run.exists() and path.exists() and released == []


def test_reused_pid_counts_as_dead(tmp_path: Path) -> None:
    run = run_dir(tmp_path, os.getpid())
    reused = dataclasses.replace(this_process(), ticks=this_process().ticks - 1000)
    write_journal(tmp_path, os.getpid(), reused, [{"kind": "path", "ident": str(run)}])
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.done == [f"removed {run}"]


def test_a_stepped_clock_does_not_make_a_live_run_look_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, released: list[Resource]
) -> None:
    """The reviewer's case (h3_clock.py): chrony's makestep, a VM resumed or ``date -s`` moves
    the boot time the kernel reports, and with it psutil's create_time of every process."""
    import psutil._pslinux

    log = journal.Journal(tmp_path)
    run = tmp_path / f"encperf-{os.getpid()}-live"
    run.mkdir(mode=0o700)
    cleanup = Cleanup(log)
    cleanup.path(run)  # this process is the live run
    boot_time = psutil._pslinux.boot_time
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: boot_time() + 2.0)  # stepped by 2 s
    assert deadruns.release_dead_runs(tmp_path) == []
    assert run.exists() and log.path.exists() and released == []
    cleanup.release()
    log.close()


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


# ------------------------------------------------------------------ dead runs: what is refused


def test_a_run_s_dm_names_carry_its_pid_and_the_token_its_journal_records(tmp_path: Path) -> None:
    first, second = mapping_name(), mapping_name()
    token = resources.run_token()
    assert re.fullmatch(resources.TOKEN_PATTERN, token) and resources.run_token() == token
    assert first.startswith(f"encperf-{os.getpid()}-{token}-") and first != second
    log = journal.Journal(tmp_path)
    Cleanup(log).dm(first)
    assert json.loads(log.path.read_text())["token"] == token
    with pytest.raises(host.HostError, match="not closing dm target 'cryptroot': not a name a run makes"):
        resources.release(Resource("dm", "cryptroot"))  # never closed by the run's own teardown either


# ------------------------------------------------------------------ encperf cleanup


def test_cli_rejects_a_missing_directory(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["cleanup", "--dir", "/nonexistent/encperf"])
    assert exc.value.code == 2
    assert "does not exist or is not a directory" in capsys.readouterr().err


# ------------------------------------------------------------------ the state file


def test_the_state_file_is_not_made_through_a_symbolic_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (state / "encperf").symlink_to(elsewhere)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    with pytest.raises(OSError, match=f"{state / 'encperf'} is a symbolic link"):
        journal.remember_directory(tmp_path)
    assert list(elsewhere.iterdir()) == []
    (state / "encperf").unlink()
    (state / "encperf").mkdir(mode=0o700)
    (elsewhere / "run-directories").write_text(f"{tmp_path}\n")
    (state / "encperf" / "run-directories").symlink_to(elsewhere / "run-directories")
    assert journal.known_directories() == []  # a link in place of the file is not read
    log = journal.Journal(tmp_path)
    Cleanup(log).path(tmp_path / "x")  # the journal is written all the same; the note is not
    assert log.path.exists() and (elsewhere / "run-directories").read_text() == f"{tmp_path}\n"


# ------------------------------------------------------------------ host.run: never waits forever


def test_the_safety_page_states_the_cleanup_lock_timeout_the_code_uses() -> None:
    safety = (Path(__file__).resolve().parents[2] / "docs" / "explanation" / "safety.md").read_text()
    match = re.search(r"A cleanup waits for that lock (\d+) s at most", safety)
    assert match is not None and float(match[1]) == journal.LOCK_TIMEOUT
    default = inspect.signature(deadruns.release_dead_runs).parameters["lock_timeout"].default
    assert default == journal.LOCK_TIMEOUT


@pytest.mark.parametrize("made_by", ["root", "nobody"])
def test_a_symbolic_link_in_place_of_the_journal_directory_is_called_one(
    tmp_path: Path, made_by: str
) -> None:
    """Whoever made it, the refusal says it is a link (it said "made by uid 0 (root), not by this
    user" of root's own link)."""
    if made_by == "nobody" and os.geteuid() != 0:
        pytest.skip("needs root (a link of another user)")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    runs = shared / journal.RUNS_DIR
    runs.symlink_to(elsewhere)
    if made_by == "nobody":
        os.lchown(runs, NOBODY, NOBODY)
    owner = f"uid {os.lstat(runs).st_uid} ({pwd.getpwuid(os.lstat(runs).st_uid).pw_name})"
    refusal = journal.directory_refusal(shared)
    assert refusal is not None
    assert (
        f"{runs} is a symbolic link to {elsewhere} (made by {owner}), and the journal is never reached "
        f"through one: remove the link (`rm {runs}`; what it points to stays), or use a directory of your "
        f"own: `mkdir -m 700 {shared}/encperf-"
    ) in refusal
    assert "not by this user" not in refusal
    assert list(elsewhere.iterdir()) == []


def test_a_file_in_place_of_the_journal_directory_is_said_to_be_no_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    (shared / journal.RUNS_DIR).write_text("")
    refusal = journal.directory_refusal(shared)
    assert refusal is not None and f"{shared / journal.RUNS_DIR} is not a directory (made by uid" in refusal
    assert "not by this user" not in refusal


def test_the_sessions_safety_net_keeps_what_may_rest_on_a_failed_release(tmp_path: Path) -> None:
    """release_leftovers (what a Volume lost half-way through create left registered) follows the
    rule of Cleanup.release: newest first, what may rest on a failed release stays in the journal."""
    done: list[str] = []

    def release_of(resource: Resource) -> str:
        if resource.ident.startswith("/stuck"):
            raise host.HostError(f"{resource.ident}: busy")
        done.append(resource.ident)
        return "released"

    resources.register_kind("test-stack", release_of, footprint=lambda r: tuple(r.ident.split("+")))
    try:
        log = journal.Journal(tmp_path)
        for ident in ("/work/other.img", "/work/c.img", "/dev/loop9+/work/c.img", "/stuck/mnt+/dev/loop9"):
            log.registered(Resource("test-stack", ident), f"release {ident}")
        failed = log.release_leftovers()
        assert done == ["/work/other.img"]
        assert failed == [
            "test-stack /stuck/mnt+/dev/loop9: /stuck/mnt+/dev/loop9: busy",
            "test-stack /dev/loop9+/work/c.img: kept for encperf cleanup, it may rest on "
            "test-stack /stuck/mnt+/dev/loop9",
            "test-stack /work/c.img: kept for encperf cleanup, it may rest on "
            "test-stack /dev/loop9+/work/c.img",
        ]
        assert [r["ident"] for r in log.resources] == [
            "/work/c.img",
            "/dev/loop9+/work/c.img",
            "/stuck/mnt+/dev/loop9",
        ]
    finally:
        del resources.KINDS["test-stack"]
