"""A run that did not finish is saved as incomplete and is never a baseline unless asked for.

Sessions run in a subprocess with the scripted engine of test_gate (no disks, no root); a
conftest hook interrupts them at the start of their Nth test: SIGTERM sent to the session's own
process, or KeyboardInterrupt raised, or a failure under -x.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_encperf import cli, host, journal, storage
from pytest_encperf.benchmarkentries import measured
from pytest_encperf.gate import EXIT_REGRESSION
from pytest_encperf.volumes import INTERRUPTED_LOCK_WAIT, Volumes
from tests.functional.test_gate import CONFTEST, LOW_NOISE, SCRIPTED_BENCHMARK

INTERRUPTING_CONFTEST = (
    CONFTEST
    + """
import signal

started = []


def pytest_runtest_setup(item):
    started.append(item.nodeid)
    if len(started) != int(os.environ.get("INTERRUPT_AT", "0")):
        return
    how = os.environ.get("INTERRUPT_BY", "")
    if how == "SIGTERM":
        os.kill(os.getpid(), signal.SIGTERM)  # as CI cancelling the job
        time.sleep(30)  # the signal arrives first
    if how == "SIGINT":
        os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C, or `kill -INT` from another shell
        time.sleep(10)  # the signal arrives first, unless it is ignored
        raise AssertionError("SIGINT was ignored")
    if how == "fail":
        raise AssertionError("this test fails")
    raise KeyboardInterrupt
"""
)


@pytest.fixture
def interruptible(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_bench=SCRIPTED_BENCHMARK)
    pytester.makeconftest(INTERRUPTING_CONFTEST)
    monkeypatch.setenv("SCRIPTED_NOISE", LOW_NOISE)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def session(
    pytester: pytest.Pytester, *args: str, backends: str = "fakecrypt", **env: str
) -> pytest.RunResult:
    """A session in a subprocess (a signal must reach a process of its own): 2 tests per backend.
    Its measurement locks are its own (ENCPERF_LOCK_DIR): it never waits for other runs."""
    locks = pytester.path / "locks"
    locks.mkdir(mode=0o700, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENCPERF_LOCK_DIR", str(locks))
        for key, value in env.items():
            mp.setenv(key, value)
        return pytester.runpytest_subprocess(
            "--encperf-target=directory",
            f"--encperf-backends={backends}",
            f"--encperf-dir={pytester.path}",
            f"--encperf-storage={pytester.path / '.encperf'}",
            "--encperf-size=1MiB",
            "--encperf-rounds=3",
            "--encperf-warmup=0",
            "-k",
            "Q8T1",
            "-p",
            "no:cacheprovider",
            *args,
        )


def saved(pytester: pytest.Pytester) -> list[storage.SavedRun]:
    return storage.list_runs(pytester.path / ".encperf")


def leftovers(directory: Path) -> list[str]:
    """What a run left in its --encperf-dir: its private directories (volumes) and its journal."""
    journals = directory / journal.RUNS_DIR
    left = [path.name for path in directory.glob("encperf-*-*")]
    return left + [path.name for path in journals.glob("*run-*")] if journals.is_dir() else left


def encperf(pytester: pytest.Pytester, *args: str) -> int:
    return cli.main(["--storage", str(pytester.path / ".encperf"), *args])


def test_a_run_stopped_by_sigterm_is_saved_incomplete_and_never_the_baseline(
    interruptible: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped = session(interruptible, "--encperf-save=base", INTERRUPT_AT="2", INTERRUPT_BY="SIGTERM")
    assert stopped.ret == pytest.ExitCode.INTERRUPTED
    why = "interrupted by SIGTERM; 1 of 2 tests ran"
    stopped.stdout.fnmatch_lines(
        [f"*saved as incomplete ({why}): the name base and latest will not pick it, base! will*"]
    )
    stopped.stdout.fnmatch_lines(["cipher ceiling: not measured: the run was interrupted (eff. empty)"])
    (run,) = saved(interruptible)
    assert run.incomplete == why
    document = json.loads(run.path.read_text())
    assert document["encperf"]["incomplete"] == why  # pytest-benchmark's shape otherwise
    assert {"machine_info", "commit_info", "datetime", "version", "benchmarks"} <= document.keys()
    assert len(measured(document["benchmarks"])) == 1  # and plain's side of it

    assert encperf(interruptible, "list") == 0
    assert f"0001_base.json  {document['datetime']}" in capsys.readouterr().out
    assert encperf(interruptible, "list") == 0
    assert f"1 results  fakecrypt  INCOMPLETE: {why}" in capsys.readouterr().out

    # --encperf-compare=base: not used, and the gate says why
    gated = session(interruptible, "--encperf-compare=base", "--encperf-fail=10%", "--encperf-save=next")
    assert gated.ret == pytest.ExitCode.OK
    gated.stdout.fnmatch_lines(
        [
            "*no reference run to compare with: no complete saved run matches 'base' in *: 1 matching run(s) "
            f"incomplete, not used (the newest: */0001_base.json ({why})); to compare with it anyway, "
            "ask for base!; nothing was gated*"
        ]
    )
    assert "new in this run" not in gated.stdout.str()
    strict = session(interruptible, "--encperf-compare=base", "--encperf-fail=10%", "--encperf-strict")
    assert strict.ret == EXIT_REGRESSION  # as any missing baseline under --encperf-strict
    assert session(interruptible, "--encperf-compare=base", "--encperf-strict").ret == pytest.ExitCode.OK

    # base!: asked for, used, and said
    asked = session(interruptible, "--encperf-compare=base!", "--encperf-fail=10%")
    assert asked.ret == pytest.ExitCode.OK
    asked.stdout.fnmatch_lines(
        [f"*warning: */0001_base.json ({why}) is incomplete: used because 'base!' asks for it*"]
    )
    assert "no reference run to compare with" not in asked.stdout.str()

    # encperf compare: the same rules
    assert encperf(interruptible, "compare", "base", "next", "--fail", "10%") == 1
    assert "no complete saved run matches 'base'" in capsys.readouterr().err
    assert encperf(interruptible, "compare", "base!", "next", "--fail", "10%") == 0
    out = capsys.readouterr().out
    assert f"warning: {run.machine_id}/0001_base.json ({why}) is incomplete" in out
    assert encperf(interruptible, "show", "1") == 0
    assert f"INCOMPLETE: {why}\n" in capsys.readouterr().out


def test_keyboard_interrupt_in_a_test_and_a_stop_under_x_are_incomplete(
    interruptible: pytest.Pytester,
) -> None:
    result = session(interruptible, "--encperf-save=base", INTERRUPT_AT="2", INTERRUPT_BY="raise")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result = session(
        interruptible, "--encperf-save=base", "-x", backends="fakecrypt,othercrypt",
        INTERRUPT_AT="2", INTERRUPT_BY="fail",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result = session(interruptible, "--encperf-save=base", INTERRUPT_AT="2", INTERRUPT_BY="fail")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # every test ran, one failed: complete
    result = session(interruptible, "--encperf-save=base")
    assert result.ret == pytest.ExitCode.OK
    assert [run.incomplete for run in saved(interruptible)] == [
        "interrupted by Ctrl-C; 1 of 2 tests ran",
        "stopped early (stopping after 1 failures); 2 of 4 tests ran",
        "",
        "",
    ]
    assert storage.resolve(interruptible.path / ".encperf", "base", None)[0].number == 4


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in the processes started meanwhile, as a shell without job control starts its
    background jobs (`setsid bash -c 'pytest benchmarks/' &`): exec keeps an ignored signal ignored."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_run_started_with_sigint_ignored_is_stopped_by_it_and_tears_down(
    interruptible: pytest.Pytester,
) -> None:
    """The run gives an ignored SIGINT back Python's handler when it starts (stopsignals), so Ctrl-C
    or `kill -INT` stops it as it stops any run: torn down, saved as incomplete."""
    with sigint_ignored():
        stopped = session(interruptible, "--encperf-save=base", INTERRUPT_AT="2", INTERRUPT_BY="SIGINT")
    assert stopped.ret == pytest.ExitCode.INTERRUPTED, stopped.stdout.str()
    assert "SIGINT was ignored" not in stopped.stdout.str()
    (run,) = saved(interruptible)
    assert run.incomplete == "interrupted by Ctrl-C; 1 of 2 tests ran"
    assert leftovers(interruptible.path) == []


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_after_an_interrupt_the_teardown_waits_3_s_in_all_for_a_lock_and_says_whose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    monkeypatch.setenv("ENCPERF_LOCK_DIR", str(locks))
    assert host.lock_directory() == locks
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(locks / host.MEASURE_LOCK)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        teardown = SimpleNamespace(_interrupted_wait_left=INTERRUPTED_LOCK_WAIT, interrupt_notes=[])
        started = time.monotonic()
        with Volumes.teardown_lock(teardown, None, shared=True):  # type: ignore[arg-type]
            first = time.monotonic() - started
        with Volumes.teardown_lock(teardown, None, shared=True):  # type: ignore[arg-type]
            second = time.monotonic() - started - first
    finally:
        other.kill()
        other.wait()
    assert INTERRUPTED_LOCK_WAIT <= first < INTERRUPTED_LOCK_WAIT + 1
    assert second < 0.5  # the 3 s are for the whole teardown
    assert teardown.interrupt_notes == [f"interrupted: did not wait for pid {other.pid}'s measurement lock"]
