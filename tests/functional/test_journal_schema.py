"""A malformed journal, or a bad cleanup lock, is refused and reported, never a traceback; files
and directories encperf makes have their mode whatever the umask.

The journal reader (journalschema.read) gets arbitrary bytes, arbitrary JSON and mutations of
valid journals (hypothesis): it returns a checked journal or refuses, and raises nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import cli, deadruns, journal, journalschema
from tests.functional.test_journal import NOBODY, dead_pid, needs_root, run_dir, write_journal
from tests.unit.test_journal import private_state  # noqa: F401
from tests.unit.test_journal_schema import DEEP, _matches, literal, plant  # noqa: F401


def journal_text(directory: Path, pid: int, entry: object) -> str:
    return json.dumps(
        {"version": 3, "pid": pid, "started": 1.0, "directory": str(directory), "resources": [entry]}
    )


def bad_journals(directory: Path) -> tuple[int, int, int]:
    """Three malformed journals beside each other: "id": "x", a null entry, 200,000 "["; their pids."""
    string_id, null_entry, deep = dead_pid(), dead_pid(), dead_pid()
    entry = {"id": "x", "kind": "path", "ident": str(directory / f"encperf-{string_id}-x1")}
    plant(directory, string_id, journal_text(directory, string_id, entry))
    plant(directory, null_entry, journal_text(directory, null_entry, None))
    plant(directory, deep, DEEP)
    return string_id, null_entry, deep


# ------------------------------------------------------------------ malformed journals, end to end


def test_malformed_journals_are_refused_and_the_good_one_beside_them_released(tmp_path: Path) -> None:
    pid = dead_pid()
    good = run_dir(tmp_path, pid)
    write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(good)}])
    string_id, null_entry, deep = bad_journals(tmp_path)
    found = {run.pid: run for run in deadruns.release_dead_runs(tmp_path)}
    assert found[pid].done == [f"removed {good}"] and not good.exists()
    assert found[string_id].refused == [
        "journal left alone: resources[0].id must be a whole number from 1 to 2147483647"
    ]
    assert found[null_entry].refused == ["journal left alone: resources[0] must be an object, not null"]
    assert found[deep].refused == ["journal left alone: not a journal (nested too deeply)"]
    # refused journals are left where they are, never rewritten
    assert (tmp_path / journal.RUNS_DIR / f"run-{deep}-bad.json").read_text() == DEEP


def test_encperf_cleanup_refuses_malformed_journals_releases_the_good_one_and_exits_1(tmp_path: Path) -> None:
    pid = dead_pid()
    good = run_dir(tmp_path, pid)
    write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(good)}])
    string_id, null_entry, deep = bad_journals(tmp_path)
    script = Path(sys.executable).parent / "encperf"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_encperf.cli"]
    proc = subprocess.run([*argv, "cleanup", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert f"run pid {pid} (run-{pid}-beef.json): removed {good}" in lines
    for pid_, why in [
        (string_id, "resources[0].id must be a whole number from 1 to 2147483647"),
        (null_entry, "resources[0] must be an object, not null"),
        (deep, "not a journal (nested too deeply)"),
    ]:
        assert f"run pid {pid_} (run-{pid_}-bad.json): REFUSED journal left alone: {why}" in lines
    assert "refused 3 journal(s) or resource(s) (not released)" in proc.stderr
    assert not good.exists()


def test_a_session_beside_malformed_journals_prints_the_refusals_and_runs(pytester: pytest.Pytester) -> None:
    """Used to end every later session in that directory in INTERNALERROR (exit 3)."""
    string_id, null_entry, deep = bad_journals(pytester.path)
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest(f"--encperf-dir={pytester.path}", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.assert_outcomes(passed=1)
    head = "encperf: cleanup of dead runs: run pid"
    refused = "REFUSED journal left alone"
    expected = [
        f"{head} {string_id} (run-{string_id}-bad.json): {refused}: resources[0].id must be a whole number *",
        f"{head} {null_entry} (run-{null_entry}-bad.json): {refused}: resources[0] must be an object, not *",
        f"{head} {deep} (run-{deep}-bad.json): {refused}: not a journal (nested too deeply)",
    ]
    lines = result.stdout.lines
    assert all(any(_matches(line, pattern) for line in lines) for pattern in expected), lines
    assert "INTERNALERROR" not in result.stdout.str()


def test_a_journal_larger_than_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    pid = dead_pid()
    path = plant(tmp_path, pid, "")
    os.truncate(path, journalschema.MAX_BYTES + 1)  # sparse: nothing to read but its size
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == [
        f"journal left alone: not a journal (larger than {journalschema.MAX_BYTES} bytes)"
    ]


# ------------------------------------------------------------------ a bad cleanup lock


def _symlink(lock: Path) -> None:
    lock.symlink_to("/etc/passwd")


def _fifo(lock: Path) -> None:
    os.mkfifo(lock, 0o600)


def _loose_mode(lock: Path) -> None:
    lock.touch(mode=0o644)
    lock.chmod(0o644)


def _directory(lock: Path) -> None:
    lock.mkdir(mode=0o700)


def _other_owner(lock: Path) -> None:
    lock.touch(mode=0o600)
    os.chown(lock, NOBODY, NOBODY)


BAD_LOCKS = [
    pytest.param(_symlink, "it is a symbolic link", id="symlink"),
    pytest.param(_fifo, "not a regular file", id="fifo"),
    pytest.param(_loose_mode, "mode 0644, not 0600", id="mode"),
    pytest.param(_directory, "Is a directory", id="directory"),
    pytest.param(_other_owner, "owned by uid 65534, not by this user (uid 0)", id="owner", marks=needs_root),
]


@pytest.fixture
def bad_lock(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    runs = tmp_path / journal.RUNS_DIR
    runs.mkdir(mode=0o700)
    request.param(runs / ".lock")
    yield runs / ".lock"


def _lock_refusal(lock: Path, why: str) -> str:
    return f"{lock.parent}: REFUSED not looking at any journal there: {lock}: {why}"


@pytest.mark.parametrize(("bad_lock", "why"), BAD_LOCKS, indirect=["bad_lock"])
def test_a_bad_cleanup_lock_is_refused_by_encperf_cleanup(
    bad_lock: Path, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    (line,) = out.splitlines()
    assert line == _lock_refusal(bad_lock, why)
    assert "refused 1 journal(s)" in err
    assert run.exists(), "nothing is released without the lock"


@pytest.mark.parametrize(("bad_lock", "why"), BAD_LOCKS, indirect=["bad_lock"])
def test_a_bad_cleanup_lock_is_refused_in_a_session_s_header(
    bad_lock: Path, why: str, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest(f"--encperf-dir={bad_lock.parent.parent}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert f"encperf: cleanup of dead runs: {_lock_refusal(bad_lock, why)}" in result.stdout.lines


# ------------------------------------------------------------------ modes, whatever the umask


KILLED_RUN = """
import os, sys
from pathlib import Path
from pytest_encperf import journal, resources, secretdirs, trust
os.umask(int(sys.argv[2], 8))
directory = Path(sys.argv[1])
log = journal.Journal(directory)
run = secretdirs.private_directory(resources.Cleanup(log), directory)  # as a session does
volume = trust.make_private_dir(run / "01-plain")
resources.Cleanup(log).path(volume / "container.img")
print(run, flush=True)
os._exit(0)  # like SIGKILL: no teardown, the journal stays
"""


@pytest.mark.parametrize("mask", ["0277", "0000"])
def test_a_run_killed_under_any_umask_is_released_by_the_next_cleanup(tmp_path: Path, mask: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(tmp_path), mask], capture_output=True, text=True, check=True
    )
    run = Path(proc.stdout.strip())
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert (dead.refused, dead.failed) == ([], [])
    assert dead.done == [f"{run / '01-plain' / 'container.img'}: already gone", f"removed {run}"]
    assert not run.exists()


# ------------------------------------------------------------------ the schema


# ------------------------------------------------------------------ properties


# any character, with those that matter to a path (NUL, "/", ".") made common
