"""SIGKILL at journaled steps, and between a tool's start and its journal entry, then cleanup.

A session of one backend runs in a subprocess with ``ENCPERF_TEST_JOURNAL_DELAY`` (journal.py's
test hook: a sleep before every journal write, which widens the window between a tool's start
and the entry that records it) and is killed with SIGKILL at its Nth journal registration inside
the backend's volume (the plain baseline's come first and are not counted):

* ``before``: inside the delay before the Nth entry is written (what the tool before it made is
  not journaled yet, when it is journaled after its call);
* ``after``: N entries written, then the session goes on and is killed 0-300 ms later, while the
  next tools are running.

A backend with fewer than N registrations is killed when its round starts. Cleanup starts
within 10 ms of the kill (``now``: in this process, within 10 ms of reaping the session, while
the tools its death killed may still be exiting) or a second later (``later``: ``encperf
cleanup``), and must leave nothing: no mount or loop device under the run's directory, no
process carrying the run's mark or of the tools, no file in the run's directory, no secret
directory of the run, nothing VeraCrypt (the stand-in) made. The full cross product (every step
x both places x both cleanup times x every backend) would take an hour here: each backend gets
the representative subset ``POINTS`` (the first eight registrations, alternating place and
cleanup time: every tool's start on the way to a mounted volume is among them).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_encperf import backends, children, deadruns, journal
from tests.helpers import matrix
from tests.helpers.support import still_backs, with_veracrypt_standin
from tests.integration.test_reliability_integration import (
    QUICK,
    base,  # noqa: F401 - fixture
    encperf_cleanup,
    given,  # noqa: F401 - fixture
    journaled,
    leftovers,
    runnable,
    start_paused,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sessions_of_this_test_alone")]

CHAOS_CONFTEST = """
import os, time
from pathlib import Path
from pytest_encperf import journal
from pytest_encperf.engines import native

TARGET = int(os.environ["ENCPERF_CHAOS_STEP"])
WHERE = os.environ["ENCPERF_CHAOS_WHERE"]
CONTROL = Path(os.environ["ENCPERF_CHAOS_CONTROL"])
state = {"ours": False, "count": 0, "current": 0, "paused": False}

def pause(where):
    if state["paused"]:
        return
    state["paused"] = True
    (CONTROL / "paused.tmp").write_text(where)
    (CONTROL / "paused.tmp").rename(CONTROL / "paused")
    deadline = time.monotonic() + 60
    while not (CONTROL / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.005)

original_registered = journal.Journal.registered
original_delay = journal.test_delay

def registered(self, resource, label):
    if "/02-" in resource.ident or "/02-" in resource.detail:
        state["ours"] = True  # the backend's volume (01- is the plain baseline)
    if state["ours"]:
        state["count"] += 1
        state["current"] = state["count"]
    token = original_registered(self, resource, label)
    state["current"] = 0
    if state["ours"] and state["count"] == TARGET and WHERE == "after":
        pause(f"after {resource.kind} {resource.ident}")
    return token

def delay():
    if state["current"] == TARGET and WHERE == "before":
        pause(f"before entry {TARGET}")  # killed here: the entry is not written yet
    original_delay()

journal.Journal.registered = registered
journal.test_delay = delay

original_run = native.NativeEngine.run

def run(self, workload, path, **kwargs):
    if "/02-" in str(path):
        pause("round")  # fewer registrations than TARGET: killed in the round instead
    return original_run(self, workload, path, **kwargs)

native.NativeEngine.run = run
"""

BENCHMARK = """
def test_workload(encperf, encperf_workload):
    encperf.run(encperf_workload)
"""

BACKENDS = ["plain", "fscrypt", "gocryptfs", "encfs", "cryfs", "securefs", "qemu-luks", "veracrypt-cli"]
# (registration, where, cleanup)
POINTS = [
    (1, "before", "now"),
    (2, "after", "later"),
    (3, "before", "later"),
    (4, "after", "now"),
    (5, "before", "now"),
    (6, "after", "later"),
    (7, "before", "later"),
    (8, "after", "now"),
]
DELAY = "0.02"


def start(
    pytester: pytest.Pytester, directory: Path, spec: str, step: int, where: str
) -> subprocess.Popen[bytes]:
    pytester.makepyfile(test_bench=BENCHMARK)
    pytester.makeconftest(CHAOS_CONFTEST)
    env = {
        **os.environ,
        "ENCPERF_CHAOS_STEP": str(step),
        "ENCPERF_CHAOS_WHERE": where,
        "ENCPERF_CHAOS_CONTROL": str(pytester.path),
        journal.TEST_DELAY_VARIABLE: DELAY,
    }
    argv = [
        sys.executable,
        "-m",
        "pytest",
        f"--encperf-dir={directory}",
        f"--encperf-backends={spec}",
        *QUICK,
    ]
    log = (pytester.path / "session.log").open("wb")
    return subprocess.Popen(argv, cwd=pytester.path, env=env, stdout=log, stderr=log)


def marks(directory: Path) -> list[str]:
    found = []
    for path in deadruns.journals(directory):
        mark = json.loads(path.read_text()).get("children")
        if mark:
            found.append(mark)
    return found


JOURNAL_STEPS = matrix.Matrix(BACKENDS, POINTS, [f"{s}-{w}-{c}" for s, w, c in POINTS], per_name=3)


@pytest.mark.parametrize(("name", "step", "where", "when"), JOURNAL_STEPS.params())
def test_sigkill_at_a_journal_step_then_cleanup_leaves_nothing(
    pytester: pytest.Pytester,
    base: Path,
    given: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    step: int,
    where: str,
    when: str,
) -> None:
    spec = runnable(name, base, given, monkeypatch)
    backends.load_all()  # the kinds backends add (cleanup "now" runs in this process)
    proc = start(pytester, base, spec, step, where)
    try:
        deadline = time.monotonic() + 120
        while not (pytester.path / "paused").exists():
            assert proc.poll() is None, "the session ended before it could be killed"
            assert time.monotonic() < deadline, "the session neither reached the step nor ended"
            time.sleep(0.005)
        reached = (pytester.path / "paused").read_text()
        if where == "after" and reached != "round":
            (pytester.path / "go").touch()
            time.sleep(random.uniform(0, 0.3))  # somewhere in the tools after the step
    finally:
        # read before the kill, so that nothing stands between it and the cleanup (an entry
        # written in the last moments is missed here, but what it names is under base, or a
        # process carrying the mark: all checked below)
        recorded = journaled(base)
        run_marks = marks(base)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        dead = time.monotonic()  # reaped: the kill has taken effect
    if when == "now":
        late = time.monotonic() - dead
        runs = deadruns.release_dead_runs(base)
        report = "\n".join(line for run in runs for line in run.lines())
        problems = [line for run in runs for line in run.problem_lines()]
        assert late < 0.01, f"cleanup started {late * 1000:.1f} ms after the kill"
    else:
        time.sleep(1)
        cleanup = encperf_cleanup(base)
        report = cleanup.stdout + cleanup.stderr
        problems = [] if cleanup.returncode == 0 else [report]
    found = leftovers(base, recorded, given, proc.pid)
    found += [
        f"process {m.process.pid} of the run" for mark in run_marks for m in children.marked_processes(mark)
    ]
    print(
        f"chaos-kill {name} step {step} {where} ({reached}), cleanup {when}: "
        f"{len(recorded)} journaled, leftovers {len(found)}"
    )
    print(
        "".join(f"  journaled: {e['kind']} {e['ident']} {e.get('detail', '')}\n" for e in recorded) + report
    )
    assert problems == []
    assert found == []


def test_a_mounted_file_is_unmounted_before_it_is_removed_never_unlinked_busy(
    base: Path,
) -> None:
    """A kill between a FUSE export's mount and its journal entry left the export (a file)
    mounted, with a loop device over it: releasing the file's path entry must take both down
    (unlinking a mount point fails with "Device or resource busy", for ever)."""
    from pytest_encperf import host, mounting, resources

    run = base / f"encperf-{os.getpid()}-chaos"
    run.mkdir(mode=0o700)
    export, source = run / "export.raw", run / "source.img"
    export.touch(mode=0o600)
    with open(source, "wb") as handle:
        handle.truncate(1 << 20)
    subprocess.run(["mount", "--bind", str(source), str(export)], check=True)
    loop = host.attach_loop(export, direct_io=False)
    try:
        assert still_backs(loop.path, export) and still_backs(loop.path, source)  # the same file
        line = resources.release(resources.Resource("path", str(export)))
        assert line == f"removed {export}"
        # by inode too: had the loop device stayed, the kernel would name its file "/" by now
        assert not mounting.is_mounted(export) and not still_backs(loop.path, source)
    finally:
        if still_backs(loop.path, source):  # left by a failure above: ours by its inode
            host.detach_loop(loop.path)
    assert resources.release(resources.Resource("path", str(run))) == f"removed {run}"


# losetup as the VeraCrypt stand-in runs it over its FUSE image, held once the loop device is
# attached (and before the stand-in has noted it): the kill lands there
HELD_LOSETUP = """#!/bin/sh
case "$*" in
*/.veracrypt_aux_mnt*/volume)
    @REAL@ "$@" || exit
    touch "$ENCPERF_CHAOS_CONTROL/losetup-held"
    exec sleep 60;;
esac
exec @REAL@ "$@"
"""


@pytest.mark.parametrize("when", ["now", "later"])
def test_sigkill_after_veracrypts_losetup_attached_a_loop_device_it_never_noted(
    pytester: pytest.Pytester,
    base: Path,
    given: Path,
    monkeypatch: pytest.MonkeyPatch,
    when: str,
) -> None:
    """The chaos leak of issue 23 (veracrypt-cli-2-after-later), made certain: the run dies while
    the veracrypt program's own losetup has attached a loop device over its FUSE image that the
    program has not noted yet (VeraCrypt sends it to its FUSE service after losetup returns), so
    its dismount knows nothing of it and cannot unmount the image under it. The helper itself
    still runs (marked ``:daemons``, like the daemons VeraCrypt leaves): it is ended before
    anything is released, and the loop device detached."""
    if shutil.which("veracrypt") is not None:
        pytest.skip("the real veracrypt is installed: this test drives the stand-in's losetup")
    real = shutil.which("losetup")
    assert real is not None
    for key, value in with_veracrypt_standin(given).items():
        monkeypatch.setenv(key, value)
    shim = given / "bin" / "losetup"
    shim.write_text(HELD_LOSETUP.replace("@REAL@", real))
    shim.chmod(0o755)
    spec = runnable("veracrypt-cli", base, given, monkeypatch)
    backends.load_all()
    proc = start_paused(pytester, base, spec, "none", paused="losetup-held")
    assert proc is not None, "the session never reached veracrypt's losetup"
    recorded = journaled(base)
    run_marks = marks(base)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    if when == "now":
        runs = deadruns.release_dead_runs(base)
        report = "\n".join(line for run in runs for line in run.lines())
        problems = [line for run in runs for line in run.problem_lines()]
    else:
        time.sleep(1)
        cleanup = encperf_cleanup(base)
        report = cleanup.stdout + cleanup.stderr
        problems = [] if cleanup.returncode == 0 else [report]
    found = leftovers(base, recorded, given, proc.pid)
    found += [
        f"process {m.process.pid} of the run" for mark in run_marks for m in children.marked_processes(mark)
    ]
    print(report)
    assert "ended its tool sleep" in report
    assert problems == []
    assert found == []
