"""The resource journal, dead-run cleanup and the ``encperf cleanup`` command.

Most need no root; the cases with files of another user (chown) do, and skip without it.
Hostile cases: a journal planted by another user, a symbolic link in place of a journal or of
the journal directory, a journal naming /etc (or anything outside its run's own directories), a
foreign pid, a held lock. Each is refused with a message and nothing it names is touched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_encperf import cli, deadruns, footprints, host, journal, processes, resources, secretdirs
from pytest_encperf.processes import ProcessStart
from pytest_encperf.resources import Cleanup, Resource

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (files of another user)")


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Journals note their directory in the user's state file: keep the real one out of tests."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> list[Resource]:
    """Every resource a release function is called for (refused ones must never be here)."""
    calls: list[Resource] = []
    real = resources.release

    def recording(resource: Resource) -> str:
        calls.append(resource)
        return real(resource)

    monkeypatch.setattr(resources, "release", recording)
    return calls


def started(pid: int) -> ProcessStart:
    start = processes.process_start(pid)
    assert start is not None, f"pid {pid} is not running"
    return start


def this_process() -> ProcessStart:
    return started(os.getpid())


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def run_dir(directory: Path, pid: int) -> Path:
    """A run directory of run ``pid`` as a session makes it (0700, ours)."""
    path = directory / f"encperf-{pid}-x1"
    path.mkdir(mode=0o700)
    return path


def write_journal(
    directory: Path,
    pid: int,
    started: ProcessStart | float | None,
    entries: list[dict[str, Any]],
    *,
    mode: int = 0o600,
    token: str | None = None,
) -> Path:
    """A journal as a run writes it (a float start: as journals before format 3 did; ``token``:
    its run token, which journals before the token did not record)."""
    runs = directory / journal.RUNS_DIR
    runs.mkdir(mode=0o700, exist_ok=True)
    path = runs / f"run-{pid}-beef.json"
    numbered = [{"id": i + 1, "label": "", "detail": "", **r} for i, r in enumerate(entries)]
    document = {
        "version": 3 if isinstance(started, ProcessStart) else 2,
        "pid": pid,
        **journal.start_json(started),
        **({"token": token} if token is not None else {}),
        "directory": str(directory),
        "resources": numbered,
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle)
    os.chmod(path, mode)
    return path


# ------------------------------------------------------------------ the run's own journal


def test_process_entries_record_pid_start_time_and_executable(tmp_path: Path) -> None:
    log = journal.Journal(tmp_path)
    proc = subprocess.Popen(["sleep", "30"])
    try:
        cleanup = Cleanup(log)
        cleanup.process(proc)
        (entry,) = log.resources
        assert entry["kind"] == "process" and entry["ident"] == str(proc.pid)
        assert entry["start"] == started(proc.pid).as_json()
        assert entry["detail"] == os.path.realpath(
            subprocess.check_output(["which", "sleep"], text=True).strip()
        )
        cleanup.release()
        assert proc.returncode is not None, "the daemon was neither stopped nor reaped"
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ a directory others control

BENCH = "def test_w(encperf_volume):\n    pass\n"


def test_a_dir_others_may_write_without_the_sticky_bit_is_refused_with_the_remedy(
    pytester: pytest.Pytester,
) -> None:
    shared = pytester.path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest(f"--encperf-dir={shared}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*{shared} is writable by other users.*make {shared} sticky like /var/tmp (`chmod +t {shared}`)*"]
    )
    assert list(shared.iterdir()) == []
    shared.chmod(0o1777)  # sticky: others can no longer rename what the run makes in it
    assert journal.directory_refusal(shared) is None


def test_a_symbolic_link_in_place_of_the_journal_directory_stops_the_session(
    pytester: pytest.Pytester,
) -> None:
    shared = pytester.path / "tmp"
    shared.mkdir()
    elsewhere = pytester.path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (shared / journal.RUNS_DIR).symlink_to(elsewhere)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest(f"--encperf-dir={shared}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*the resource journal cannot be written ({shared / journal.RUNS_DIR} is a symbolic link*"]
    )
    assert list(elsewhere.iterdir()) == []


def test_a_journal_directory_of_ours_with_a_loose_mode_is_refused_with_the_remedy(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / journal.RUNS_DIR).mkdir(mode=0o755)
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest(f"--encperf-dir={pytester.path}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*has mode 0755, not 0700)*Make it private: `chmod 700 *`"])


def test_a_session_that_creates_no_volume_is_not_refused(pytester: pytest.Pytester) -> None:
    shared = pytester.path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / journal.RUNS_DIR).symlink_to(pytester.path)
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest(f"--encperf-dir={shared}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)  # refused for volumes only: every pytest start is not
    result.stdout.fnmatch_lines(["encperf: cleanup of dead runs: *REFUSED not looking at any journal there*"])


# ------------------------------------------------------------------ dead runs: what is released


def test_dead_run_is_released_newest_first_and_its_journal_removed(tmp_path: Path) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    (run / "01-plain").mkdir()
    (run / "01-plain" / "container.img").write_bytes(b"x")
    daemon = subprocess.Popen(["sleep", "30"])
    path = write_journal(
        tmp_path,
        pid,
        123.0,
        [
            {"kind": "path", "ident": str(run)},
            {"kind": "path", "ident": str(run / "01-plain" / "container.img")},
            {"kind": "process", "ident": str(daemon.pid), "detail": processes.executable(daemon.pid),
             "start": started(daemon.pid).as_json()},
            {"kind": "mount", "ident": str(run / "01-plain" / "mnt")},
        ],
    )  # fmt: skip
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert daemon.wait(timeout=5) is not None
    assert (dead.failed, dead.refused) == ([], [])
    assert dead.done == [
        f"{run / '01-plain' / 'mnt'}: not mounted any more",
        f"stopped sleep (pid {daemon.pid})",
        f"removed {run / '01-plain' / 'container.img'}",
        f"removed {run}",
    ]
    assert not run.exists() and not path.exists()


def test_secret_directory_on_the_ram_file_system_is_removed(tmp_path: Path) -> None:
    pid = dead_pid()
    secret = Path(secretdirs.secret_base()) / f"encperf-{pid}-s1"
    secret.mkdir(mode=0o700)
    (secret / "password").write_bytes(b"benchmark-password")
    try:
        write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(secret)}])
        (dead,) = deadruns.release_dead_runs(tmp_path)
        assert dead.done == [f"removed {secret}"]
        assert not secret.exists()
    finally:
        if secret.exists():
            (secret / "password").unlink()
            secret.rmdir()


def test_a_run_of_an_earlier_boot_is_dead_and_its_pids_name_nothing_of_its(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    earlier_boot = dataclasses.replace(this_process(), boot="00000000-0000-0000-0000-000000000000")
    run = run_dir(tmp_path, os.getpid())  # the same pid, alive now: another boot's run all the same
    daemon = dataclasses.replace(started(sleeper.pid), boot=earlier_boot.boot)
    entries = [
        {"kind": "path", "ident": str(run)},
        {"kind": "process", "ident": str(sleeper.pid), "detail": processes.executable(sleeper.pid),
         "start": daemon.as_json()},
    ]  # fmt: skip
    write_journal(tmp_path, os.getpid(), earlier_boot, entries)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.done == [f"sleep (pid {sleeper.pid}): not running any more", f"removed {run}"]
    assert sleeper.poll() is None, "a process of this boot was taken for the earlier boot's daemon"


def test_a_journal_of_another_pid_namespace_is_left_alone(tmp_path: Path, released: list[Resource]) -> None:
    """A pid names another process in another pid namespace (a container sharing /var/tmp)."""
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    elsewhere = dataclasses.replace(this_process(), pidns=processes.pid_namespace() + 1)
    path = write_journal(tmp_path, pid, elsewhere, [{"kind": "path", "ident": str(run)}])
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == [
        f"journal left alone: its pid is counted in another pid namespace (pid:[{elsewhere.pidns}]; "
        f"this process is in pid:[{processes.pid_namespace()}]), so whether it still runs cannot be "
        "told from here"
    ]
    assert released == [] and run.exists() and path.exists()


def test_a_process_entry_of_another_pid_namespace_is_refused(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], released: list[Resource]
) -> None:
    pid = dead_pid()
    other = dataclasses.replace(started(sleeper.pid), pidns=processes.pid_namespace() + 1)
    entry = {"kind": "process", "ident": str(sleeper.pid), "detail": processes.executable(sleeper.pid)}
    write_journal(tmp_path, pid, this_process(), [{**entry, "start": other.as_json()}])
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == [
        f"process {sleeper.pid}: pid {sleeper.pid}: its pid is counted in another pid namespace"
        f" (pid:[{other.pidns}]; this process is in pid:[{processes.pid_namespace()}]), so whether "
        "it still runs cannot be told from here"
    ]
    assert released == [] and sleeper.poll() is None


def test_journals_before_format_3_are_still_read(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], released: list[Resource]
) -> None:
    """They recorded psutil's wall-clock start time ("started"); compared as they were."""
    live = run_dir(tmp_path, sleeper.pid)
    wall = processes._wall_clock_start(sleeper.pid)
    write_journal(tmp_path, sleeper.pid, wall, [{"kind": "path", "ident": str(live)}])
    assert deadruns.release_dead_runs(tmp_path) == []  # alive: never touched
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.done == [f"removed {run}"] and live.exists()


def test_malformed_start_leaves_the_journal_alone(tmp_path: Path, released: list[Resource]) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    path = write_journal(tmp_path, pid, None, [{"kind": "path", "ident": str(run)}])
    document = {key: value for key, value in json.loads(path.read_text()).items() if key != "started"}
    path.write_text(json.dumps({**document, "start": {"ticks": "12", "boot": 1}}))
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == ["journal left alone: start must have whole ticks and pidns and a boot id"]
    assert released == [] and run.exists()


def test_unknown_kind_is_kept_and_so_is_everything_older(tmp_path: Path) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    path = write_journal(
        tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}, {"kind": "teleporter", "ident": "t1"}]
    )
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.failed == ["teleporter t1: no way to release a 'teleporter' resource"]
    # the directory may hold what the unknown resource still uses: kept for a later cleanup
    assert run.exists()
    assert [r["ident"] for r in json.loads(path.read_text())["resources"]] == ["t1", str(run)]


def test_a_failed_release_keeps_what_it_may_rest_on_and_releases_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stuck(resource: Resource) -> str:
        raise host.HostError("still busy")

    monkeypatch.setitem(
        resources.KINDS, "stuck", resources.Kind(stuck, lambda r, s: None, lambda r: (r.ident,))
    )
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    (run / "a").mkdir(mode=0o700)
    (run / "b").mkdir(mode=0o700)
    (run / "b" / "under-b").write_text("")
    path = write_journal(
        tmp_path,
        pid,
        1.0,
        [
            {"kind": "path", "ident": str(run)},
            {"kind": "path", "ident": str(run / "a")},
            {"kind": "path", "ident": str(run / "b")},
            {"kind": "stuck", "ident": str(run / "a" / "volume")},
            {"kind": "path", "ident": str(run / "b" / "under-b")},
        ],
    )
    (dead,) = deadruns.release_dead_runs(tmp_path)
    volume = run / "a" / "volume"
    assert dead.failed == [f"stuck {volume}: still busy"]
    assert dead.kept == [
        f"path {run / 'a'}: stuck {volume} is not released and may rest on it",
        f"path {run}: stuck {volume} is not released and may rest on it",
    ]
    # released: what is newer than the failure, and what is older but independent of it
    assert not (run / "b").exists() and (run / "a").exists()
    left = [r["ident"] for r in json.loads(path.read_text())["resources"]]
    assert left == [str(volume), str(run / "a"), str(run)]


def test_what_a_kept_resource_rests_on_is_kept_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a loop device over a file kept: the file's directory is kept, the failure is named
    def stuck(resource: Resource) -> str:
        raise host.HostError("still busy")

    def on(resource: Resource) -> footprints.Footprint:
        return (resource.ident, resource.detail)

    monkeypatch.setitem(resources.KINDS, "stuck", resources.Kind(stuck, lambda r, s: None, on))
    monkeypatch.setitem(resources.KINDS, "layer", resources.Kind(stuck, lambda r, s: None, on))
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    write_journal(
        tmp_path,
        pid,
        1.0,
        [
            {"kind": "path", "ident": str(run)},
            {"kind": "layer", "ident": "/dev/fake0", "detail": str(run / "image")},
            {"kind": "stuck", "ident": "/dev/fake1", "detail": "/dev/fake0"},
        ],
    )
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.failed == ["stuck /dev/fake1: still busy"]
    assert dead.kept == [
        "layer /dev/fake0: stuck /dev/fake1 is not released and may rest on it",
        f"path {run}: layer /dev/fake0 is not released and may rest on it",
    ]
    assert run.exists()


def test_dry_run_changes_nothing(tmp_path: Path, released: list[Resource]) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    path = write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    (dead,) = deadruns.release_dead_runs(tmp_path, dry_run=True)
    assert dead.done == [f"would release path {run}"]
    assert run.exists() and path.exists() and released == []


def test_half_written_journal_of_a_dead_writer_is_removed(tmp_path: Path) -> None:
    runs = tmp_path / journal.RUNS_DIR
    runs.mkdir(mode=0o700)
    pid = dead_pid()
    stale = runs / f".run-{pid}-abcd.json.{pid}.tmp"
    live = runs / f".run-{os.getpid()}-abcd.json.{os.getpid()}.tmp"
    stale.write_text("{")
    live.write_text("{")
    assert deadruns.release_dead_runs(tmp_path) == []
    assert not stale.exists() and live.exists()


# ------------------------------------------------------------------ dead runs: what is refused


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A directory outside every run directory, as a hostile journal would name it."""
    path = tmp_path / "victim"
    path.mkdir()
    (path / "precious").write_text("keep me")
    return path


def test_journal_readable_by_others_is_refused(tmp_path: Path, released: list[Resource]) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    path = write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}], mode=0o644)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == [f"journal left alone: refusing {path.name}: mode 0644, not 0600"]
    assert released == [] and run.exists()


def test_symlinked_journal_is_refused(tmp_path: Path, released: list[Resource]) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    real = write_journal(elsewhere, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    runs = tmp_path / journal.RUNS_DIR
    runs.mkdir(mode=0o700)
    link = runs / real.name
    link.symlink_to(real)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.lines() == [f"run pid {pid} ({link.name}): REFUSED journal left alone: it is a symbolic link"]
    assert released == [] and run.exists() and real.exists()


def test_symlinked_journal_directory_is_refused(tmp_path: Path, released: list[Resource]) -> None:
    pid = dead_pid()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    run = run_dir(elsewhere, pid)
    write_journal(elsewhere, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    (tmp_path / "d").mkdir(mode=0o700)
    link = tmp_path / "d" / journal.RUNS_DIR
    link.symlink_to(elsewhere / journal.RUNS_DIR)
    (dead,) = deadruns.release_dead_runs(tmp_path / "d")
    assert dead.refused == [f"not looking at any journal there: {link} is a symbolic link or not a directory"]
    assert released == [] and run.exists()


TOKEN = "0123456789abcdef"


def test_a_dead_run_s_dm_name_must_carry_its_pid_and_run_token(
    tmp_path: Path, released: list[Resource]
) -> None:
    """pids are reused: ``encperf-<pid>-N`` of a dead run may be a live run's mapping now. Only a
    name with the dead run's own random token is closed; an older journal, which recorded no
    token, cannot tell its names from another run's, and has them refused."""
    pid = dead_pid()
    ours = f"encperf-{pid}-{TOKEN}-0"
    others = [f"encperf-{pid}-0", f"encperf-{pid}-fedcba9876543210-0", f"{ours}x", "cryptroot"]
    entries = [{"kind": "dm", "ident": name} for name in [ours, *others]]
    write_journal(tmp_path, pid, 1.0, entries, token=TOKEN)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert [r.ident for r in released] == [ours]
    assert dead.done == [f"dm {ours}: not active any more"]
    assert sorted(dead.refused) == sorted(
        f"dm {name}: dm target {name!r} is not one of this run's (encperf-{pid}-{TOKEN}-N)" for name in others
    )
    released.clear()
    write_journal(tmp_path, pid, 1.0, [{"kind": "dm", "ident": f"encperf-{pid}-0"}])  # no token
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == [
        f"dm encperf-{pid}-0: dm target 'encperf-{pid}-0': cannot tell it is this run's (its journal, "
        "of an older version, records no run token, and the pid may be another run's now)"
    ]
    # not one a run writes: the whole journal is refused (journalschema)
    for token, why in (("not-hex", "look like [0-9a-f]{16}"), (7, "be a string")):
        write_journal(tmp_path, pid, 1.0, [{"kind": "dm", "ident": f"encperf-{pid}-0"}])
        path = deadruns.journals(tmp_path)[0]
        path.write_text(json.dumps({**json.loads(path.read_text()), "token": token}))
        (dead,) = deadruns.release_dead_runs(tmp_path)
        assert dead.refused == [f"journal left alone: token must {why}"]
        path.unlink()
    assert released == []


def test_journal_naming_etc_and_other_outside_paths_is_refused(
    tmp_path: Path, victim: Path, released: list[Resource]
) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    (run / "link").symlink_to("/etc")
    other_run = run_dir(tmp_path, pid + 1)
    entries = [
        {"kind": "path", "ident": "/etc"},
        {"kind": "path", "ident": str(victim)},
        {"kind": "path", "ident": f"{run}/../victim"},
        {"kind": "path", "ident": str(run / "link" / "passwd")},
        {"kind": "path", "ident": str(other_run)},
        {"kind": "mount", "ident": "/"},
        {"kind": "loop", "ident": "/dev/loop0", "detail": "/etc/fstab"},
        {"kind": "loop", "ident": "/dev/sda", "detail": str(run / "container.img")},
        {"kind": "dm", "ident": "cryptroot"},
    ]
    path = write_journal(tmp_path, pid, 1.0, entries, token=TOKEN)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    bases = " or ".join(f"{b}/encperf-{pid}-*" for b in [tmp_path, *secretdirs.secret_bases()])
    assert dead.refused == [
        f"dm cryptroot: dm target 'cryptroot' is not one of this run's (encperf-{pid}-{TOKEN}-N)",
        "loop /dev/sda: /dev/sda is not a loop device",
        f"loop /dev/loop0: /etc/fstab is outside the run's own directories ({bases})",
        f"mount /: / is outside the run's own directories ({bases})",
        f"path {other_run}: {other_run} is outside the run's own directories ({bases})",
        f"path {run / 'link' / 'passwd'}: {run / 'link'} is not a directory",
        f"path {run}/../victim: '{run}/../victim' is not a normalised absolute path",
        f"path {victim}: {victim} is outside the run's own directories ({bases})",
        f"path /etc: /etc is outside the run's own directories ({bases})",
    ]
    assert released == [] and dead.done == []
    assert (victim / "precious").read_text() == "keep me" and other_run.exists() and run.exists()
    assert not path.exists(), "refused entries are reported once, then dropped from our own journal"


def test_directory_writable_by_others_is_refused(tmp_path: Path, released: list[Resource]) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable without the sticky bit: anyone can swap what is in it
    pid = dead_pid()
    run = run_dir(shared, pid)
    write_journal(shared, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    (dead,) = deadruns.release_dead_runs(shared)
    assert dead.refused == [
        f"not looking at any journal there: {shared}: not safe to use ({shared} is writable by other users)"
    ]
    assert released == [] and run.exists()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


def test_foreign_pid_is_refused_and_left_running(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], released: list[Resource]
) -> None:
    pid = dead_pid()
    exe = processes.executable(sleeper.pid)
    start = started(sleeper.pid)
    earlier = dataclasses.replace(start, ticks=start.ticks - 50)
    entries = [
        {"kind": "process", "ident": str(sleeper.pid), "detail": exe, "start": earlier.as_json()},
        {"kind": "process", "ident": str(sleeper.pid), "detail": "/usr/sbin/sshd", "start": start.as_json()},
        {"kind": "process", "ident": str(sleeper.pid), "detail": exe},  # no start time recorded
    ]
    write_journal(tmp_path, pid, 1.0, entries)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == [
        f"process {sleeper.pid}: process {sleeper.pid}: no start time and executable recorded, "
        "cannot tell it is the run's",
        f"process {sleeper.pid}: pid {sleeper.pid} now runs {exe}, not /usr/sbin/sshd",
        f"process {sleeper.pid}: pid {sleeper.pid} is another process now ({exe}, started "
        f"{start.ticks} clock ticks after boot, not {start.ticks - 50})",
    ]
    assert released == [] and sleeper.poll() is None, "a process the run did not start was touched"


def hold(lock: Path) -> subprocess.Popen[str]:
    """Another process holding ``lock`` (flock), as a hung or hostile session would."""
    code = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"  # noqa: E501
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_held_lock_times_out_with_a_message_naming_its_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], released: list[Resource]
) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    lock = tmp_path / journal.RUNS_DIR / ".lock"
    lock.touch(mode=0o600)
    holder = hold(lock)
    try:
        start = time.monotonic()
        (dead,) = deadruns.release_dead_runs(tmp_path, lock_timeout=0.3)
        assert time.monotonic() - start < 5
        assert dead.lines() == [
            f"{lock.parent}: FAILED the cleanup lock {lock} is held by pid {holder.pid} for more than "
            "0.3 s: gave up waiting; dead runs there were not released"
        ]
        assert released == [] and run.exists()
    finally:
        holder.kill()
        holder.wait()
    (dead,) = deadruns.release_dead_runs(tmp_path, lock_timeout=0.3)
    assert dead.done == [f"removed {run}"]


# ------------------------------------------------------------------ encperf cleanup


def test_cli_cleanup_prints_what_it_released(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    write_journal(tmp_path, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 0
    assert f"run pid {pid} (run-{pid}-beef.json): removed {run}" in capsys.readouterr().out
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 0
    assert "nothing left behind by dead runs" in capsys.readouterr().out


def test_cli_cleanup_fails_when_something_cannot_be_released(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_journal(tmp_path, dead_pid(), 1.0, [{"kind": "teleporter", "ident": "t1"}])
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 1
    assert "could not release 1 resource(s) or journal(s)" in capsys.readouterr().err


def test_cli_cleanup_reports_refusals_and_fails(
    tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = dead_pid()
    write_journal(
        tmp_path, pid, 1.0, [{"kind": "path", "ident": "/etc"}, {"kind": "path", "ident": str(victim)}]
    )
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert (
        f"run pid {pid} (run-{pid}-beef.json): REFUSED path /etc: /etc is outside the run's own directories"
        in out
    )
    assert "refused 2 journal(s) or resource(s) (not released)" in err
    assert (victim / "precious").exists()


def test_cli_is_installed_as_a_command(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "encperf"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_encperf.cli"]
    proc = subprocess.run([*argv, "cleanup", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "nothing left behind" in proc.stdout


def test_cleanup_without_dir_finds_every_directory_runs_journaled_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("ENCPERF_DIR", str(tmp_path))  # the default: nothing there
    elsewhere = tmp_path / "ssd"
    elsewhere.mkdir()
    log = journal.Journal(elsewhere)
    Cleanup(log).path(elsewhere / "x")  # first write notes the directory
    Cleanup(log).path(elsewhere / "y")
    assert journal.known_directories() == [elsewhere]
    assert (tmp_path / "state" / "encperf" / "run-directories").read_text() == f"{elsewhere}\n"
    pid = dead_pid()
    run = run_dir(elsewhere, pid)
    write_journal(elsewhere, pid, 1.0, [{"kind": "path", "ident": str(run)}])
    assert cli.main(["cleanup"]) == 0
    assert f"run pid {pid} (run-{pid}-beef.json): removed {run}" in capsys.readouterr().out


# ------------------------------------------------------------------ the state file


def test_a_fifo_in_place_of_the_state_file_does_not_hang_cleanup(tmp_path: Path) -> None:
    """A FIFO (made by whoever controls $XDG_STATE_HOME under sudo -E) used to block the read."""
    state = tmp_path / "state"
    (state / "encperf").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    os.mkfifo(state / "encperf" / "run-directories", 0o600)
    env = {**os.environ, "XDG_STATE_HOME": str(state), "ENCPERF_DIR": str(tmp_path)}
    code = "from pytest_encperf import cli; raise SystemExit(cli.main(['cleanup']))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "nothing left behind by dead runs" in proc.stdout


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


def test_a_tool_runs_in_the_working_directory_it_is_given(tmp_path: Path) -> None:
    """``cwd``: where cryptsetup reencrypt writes its temporary header (the volume's work directory)."""
    assert host.run(["pwd"], cwd=tmp_path).strip() == str(tmp_path)
    assert host.run(["pwd"]).strip() == os.getcwd()


def test_errors_show_secrets_and_stdin_as_placeholders() -> None:
    with pytest.raises(host.HostError) as failed:
        host.run(["sh", "-c", 'echo "bad password $(cat)" >&2; exit 2', "tool", "--password=hunter22"],
                 input=b"s3cret-from-stdin\n", secrets=["hunter22"])  # fmt: skip
    message = str(failed.value)
    assert "hunter22" not in message and "s3cret-from-stdin" not in message
    assert "--password=<secret>" in message and message.endswith("exit 2: bad password <secret>")


def test_a_signal_during_teardown_waits_until_it_is_done() -> None:
    import signal

    steps = []
    with pytest.raises(KeyboardInterrupt, match="deferred until teardown finished"), host.signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        steps.append("released the rest")
    assert steps == ["released the rest"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_entries_below_a_run_directory_that_is_gone_are_not_acted_on(
    tmp_path: Path, released: list[Resource]
) -> None:
    # removed with the run directory (the newer entry), then the name is free in a shared
    # directory: whoever makes it again (with a link to /etc inside) must not steer the release
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    path = write_journal(
        tmp_path,
        pid,
        1.0,
        [{"kind": "path", "ident": str(run / "link" / "shadow")}, {"kind": "path", "ident": str(run)}],
    )
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.done == [f"removed {run}", f"path {run / 'link' / 'shadow'}: already gone"]
    assert [r.ident for r in released] == [str(run)] and not path.exists()


def test_a_session_says_in_its_header_what_it_refused_to_release(pytester: pytest.Pytester) -> None:
    pid = dead_pid()
    write_journal(pytester.path, pid, 1.0, [{"kind": "path", "ident": "/etc"}])
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest(f"--encperf-dir={pytester.path}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    head = f"encperf: cleanup of dead runs: run pid {pid} (run-{pid}-beef.json)"
    result.stdout.fnmatch_lines([f"{head}: REFUSED path /etc: /etc is outside the run's own directories*"])
    assert Path("/etc/passwd").exists()


def test_a_socket_in_place_of_a_journal_is_said_to_be_no_regular_file(
    tmp_path: Path, released: list[Resource]
) -> None:
    """Opening a socket fails with "No such device or address", which said nothing useful."""
    import socket

    pid = dead_pid()
    runs = tmp_path / journal.RUNS_DIR
    runs.mkdir(mode=0o700)
    name = f"run-{pid}-{'0' * 16}.json"
    listener = socket.socket(socket.AF_UNIX)
    runs_fd = os.open(runs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listener.bind(f"/proc/self/fd/{runs_fd}/{name}")  # the socket path limit is 108 bytes
    finally:
        os.close(runs_fd)
    try:
        (dead,) = deadruns.release_dead_runs(tmp_path)
    finally:
        listener.close()
    assert dead.refused == ["journal left alone: it is a socket, not a regular file"]
    assert released == [] and (runs / name).exists()


def test_a_fifo_in_place_of_a_journal_is_said_to_be_no_regular_file(
    tmp_path: Path, released: list[Resource]
) -> None:
    pid = dead_pid()
    runs = tmp_path / journal.RUNS_DIR
    runs.mkdir(mode=0o700)
    os.mkfifo(runs / f"run-{pid}-{'0' * 16}.json", 0o600)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.refused == ["journal left alone: it is a named pipe (FIFO), not a regular file"]
