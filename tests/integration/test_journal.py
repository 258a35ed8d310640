"""The resource journal, dead-run cleanup and the ``encperf cleanup`` command.

Most need no root; the cases with files of another user (chown) do, and skip without it.
Hostile cases: a journal planted by another user, a symbolic link in place of a journal or of
the journal directory, a journal naming /etc (or anything outside its run's own directories), a
foreign pid, a held lock. Each is refused with a message and nothing it names is touched.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_encperf import deadruns, host, journal
from pytest_encperf.resources import Cleanup, Resource
from tests.functional.test_journal import (  # noqa: F401
    BENCH,
    NOBODY,
    dead_pid,
    needs_root,
    released,
    run_dir,
    started,
    victim,
    write_journal,
)


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Journals note their directory in the user's state file: keep the real one out of tests."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


# ------------------------------------------------------------------ the run's own journal


@needs_root
def test_a_journal_directory_of_another_user_is_never_written(tmp_path: Path) -> None:
    runs = tmp_path / journal.RUNS_DIR
    runs.mkdir(mode=0o700)
    os.chown(runs, NOBODY, NOBODY)
    log = journal.Journal(tmp_path)
    Cleanup(log).path(tmp_path / "x")
    assert log.write_error == (
        f"refusing to write the resource journal: {runs} is owned by uid {NOBODY}, not by this user (uid 0)"
    )
    assert list(runs.iterdir()) == []


# ------------------------------------------------------------------ a directory others control


@needs_root
def test_a_dir_owned_by_another_user_stops_a_session_that_would_create_volumes(
    pytester: pytest.Pytester,
) -> None:
    """The reviewer's case: --encperf-dir=/mnt/ssd owned by a desktop user. Its owner could
    rename the run directory and plant symbolic links that the teardown would follow."""
    userdir = pytester.path / "ssd"
    userdir.mkdir()
    os.chown(userdir, NOBODY, NOBODY)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest(f"--encperf-dir={userdir}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --encperf-dir {userdir}: refusing to create volumes there: {userdir} is owned by "
            f"uid {NOBODY}. Whoever can rename or replace a directory on that path can redirect this "
            "run's teardown*Use a directory that only root can change, on the disk you want to "
            f"measure, e.g. `mkdir -m 700 {userdir}/encperf /var/lib/encperf-ssd && mount --bind "
            f"{userdir}/encperf /var/lib/encperf-ssd` and --encperf-dir=/var/lib/encperf-ssd*"
        ]
    )
    assert list(userdir.iterdir()) == [], "something was created in the refused directory"
    inner = userdir / "encperf"  # a directory of root's under it is no better: its parent is not
    inner.mkdir(mode=0o700)
    result = pytester.runpytest(f"--encperf-dir={inner}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{userdir} is owned by uid {NOBODY}*"])


@needs_root
def test_a_journal_directory_another_user_made_first_stops_a_session_that_would_create_volumes(
    pytester: pytest.Pytester,
) -> None:
    """The reviewer's case (m4_squat.py): any local user can ``mkdir /var/tmp/.encperf-runs``
    before root's first run; every root run then went on without a journal, and a SIGKILL left
    its loop devices, mounts, dm targets and secret directories behind."""
    shared = pytester.path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # like /var/tmp
    runs = shared / journal.RUNS_DIR
    runs.mkdir(mode=0o700)
    os.chown(runs, NOBODY, NOBODY)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest(f"--encperf-dir={shared}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --encperf-dir {shared}: refusing to create volumes there: the resource journal "
            f"cannot be written ({runs} is owned by uid {NOBODY}, not by this user (uid 0)). Without "
            "it a run killed outright (SIGKILL, the OOM killer) leaves its loop devices, mounts, "
            f"device-mapper targets and key files behind for good. {runs} was made by uid {NOBODY} "
            f"(nobody), not by this user: look at what it holds and remove it (`ls -la {runs}; rm -r "
            f"{runs}`), or use a directory of your own: `mkdir -m 700 {shared}/encperf-root` (it "
            f"fails if someone made it first) and --encperf-dir={shared}/encperf-root"
        ]
    )
    assert sorted(p.name for p in shared.iterdir()) == [journal.RUNS_DIR], "something was created"
    assert list(runs.iterdir()) == []


# ------------------------------------------------------------------ dead runs: what is released


# ------------------------------------------------------------------ dead runs: what is refused


@needs_root
def test_planted_journal_of_another_user_is_refused(
    tmp_path: Path, victim: Path, released: list[Resource]
) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    path = write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    os.chown(path, NOBODY, NOBODY)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.lines() == [
        f"run pid {pid} ({path.name}): REFUSED journal left alone: "
        f"refusing {path.name}: owned by uid {NOBODY}, not by this user (uid 0)"
    ]
    assert released == [] and run.exists() and path.exists()


@needs_root
def test_journal_directory_of_another_user_is_refused(tmp_path: Path, released: list[Resource]) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    path = write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    os.chown(path.parent, NOBODY, NOBODY)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.lines() == [
        f"{path.parent}: REFUSED not looking at any journal there: "
        f"{path.parent} is owned by uid {NOBODY}, not by this user (uid 0)"
    ]
    assert released == [] and run.exists()


@needs_root
def test_run_directory_of_another_user_is_refused(tmp_path: Path, released: list[Resource]) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    (run / "container.img").write_bytes(b"x")
    os.chown(run, NOBODY, NOBODY)  # someone else's directory under a name like ours
    write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run / "container.img")}])
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == [
        f"path {run / 'container.img'}: {run} is owned by uid {NOBODY}, not by this user (uid 0)"
    ]
    assert released == [] and (run / "container.img").exists()


# ------------------------------------------------------------------ encperf cleanup


# ------------------------------------------------------------------ the state file


@needs_root
def test_as_root_the_state_file_never_follows_a_user_s_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under sudo -E, $HOME and $XDG_STATE_HOME are the user's: root's home comes from the
    password database, and $XDG_STATE_HOME is used only when no other user can change it."""
    user_home = tmp_path / "alice"
    (user_home / ".local" / "state").mkdir(parents=True)
    for path in (user_home, user_home / ".local", user_home / ".local" / "state"):
        os.chown(path, NOBODY, NOBODY)
    root_home = tmp_path / "root"
    root_home.mkdir(mode=0o700)
    root = SimpleNamespace(pw_dir=str(root_home), pw_name="root")
    real = pwd.getpwuid
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: root if uid == 0 else real(uid))
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("XDG_STATE_HOME", str(user_home / ".local" / "state"))
    assert journal.state_file() == root_home / ".local" / "state" / "encperf" / "run-directories"
    journal.remember_directory(tmp_path)
    assert journal.known_directories() == [tmp_path]
    assert list((user_home / ".local" / "state").iterdir()) == []
    own = tmp_path / "own-state"  # root's own $XDG_STATE_HOME (as this test suite sets it) is used
    monkeypatch.setenv("XDG_STATE_HOME", str(own))
    assert journal.state_file() == own / "encperf" / "run-directories"


# ------------------------------------------------------------------ host.run: never waits forever


@pytest.mark.integration
@pytest.mark.parametrize("run_directory", ["gone", "still there"])
def test_a_loop_entry_whose_device_now_backs_another_file_says_so_and_leaves_it(
    tmp_path: Path, released: list[Resource], run_directory: str
) -> None:
    """The device number was reused for someone else's file: it said "already gone"."""
    from tests.helpers.support import loop_device

    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    ours = run / "container.img"
    if run_directory == "gone":
        run.rmdir()
    with loop_device(tmp_path / "someone-elses.img", 1 << 20) as device:
        write_journal(tmp_path, pid, 1.0, [{"kind": "loop", "ident": str(device), "detail": str(ours)}])
        (dead,) = deadruns.release_dead_runs(tmp_path)
        assert host.loop_backing_file(device) == str(tmp_path / "someone-elses.img")
    assert dead.done == [
        f"loop {device}: {device} now belongs to another file ({tmp_path / 'someone-elses.img'}): left alone"
    ]
    assert dead.refused == [] and dead.failed == [] and released == []
    assert "already gone" not in "\n".join(dead.lines())
