"""The plan line and the live status line (progress.py and the session's terminal hooks)."""

from __future__ import annotations

import fcntl
import os
import pty
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.functional.test_gate import gate, run  # noqa: F401  (the scripted-engine fixture)

# The scripted engine returns at once: a runtime of 5 s makes each workload "long" (2 x 5 s).
LONG = ("--encperf-runtime=5", "--encperf-warmup=0")


def test_the_plan_is_printed_after_collection_and_nothing_else_when_not_a_terminal(
    gate: pytest.Pytester,
) -> None:
    result = run(gate, *LONG, rounds=1)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "collected 8 items / 6 deselected / 2 selected",
            "encperf plan: 1 backend (fakecrypt) x 2 workloads x 2 rounds (1 rounded up to whole A B B A "
            "blocks) of 5 s, alternating with plain: 2 tests, about 40 s of rounds (making volumes and test "
            "files comes on top)",
        ]
    )
    assert "round 1 of" not in result.stdout.str() and "\x1b" not in result.stdout.str()
    quiet = run(gate, *LONG, "-q", rounds=1)
    assert "encperf plan: 1 backend" in quiet.stdout.str()  # the plan stays, even with -q


def on_a_terminal(pytester: pytest.Pytester, *args: str, watch: Callable[[str], None] | None = None) -> str:
    """Run pytest (the scripted benchmark) with its output on a pseudo-terminal; what it showed."""
    master, slave = pty.openpty()
    env = {
        **os.environ,
        "TERM": "xterm",
        "COLUMNS": "160",
        "SCRIPTED_NOISE": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("GITHUB_STEP_SUMMARY", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--encperf-target=directory",
         "--encperf-backends=fakecrypt", f"--encperf-dir={pytester.path}", "--encperf-size=1MiB",
         "--encperf-rounds=1", "-k", "SEQ1M-Q8T1-read", *LONG, *args],
        cwd=pytester.path, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env,
    )  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
        if watch is not None:  # told what was shown so far
            watch(b"".join(chunks).decode(errors="replace"))
    os.close(master)
    assert process.wait(timeout=60) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def test_on_a_terminal_a_long_workload_shows_a_live_line_and_q_keeps_it_quiet(
    gate: pytest.Pytester,
) -> None:
    shown = on_a_terminal(gate)
    # 1 round asked: one whole A B B A block, plain first and last
    assert "\rencperf: fakecrypt SEQ1M-Q8T1-read: round 1 of 4 (plain), 100.0 MB/s, about " in shown
    assert "\rencperf: fakecrypt SEQ1M-Q8T1-read: round 4 of 4 (plain), 100.0 MB/s, done\x1b[K" in shown
    assert "\r\x1b[K\x1b[A" in shown  # erased before pytest writes the outcome
    assert "passed" in shown
    quiet = on_a_terminal(gate, "-q")
    assert "round 1 of" not in quiet and "\x1b[A" not in quiet


def test_on_a_terminal_the_plan_and_the_status_line_name_the_measurement_the_run_waits_for(
    gate: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    monkeypatch.setenv("ENCPERF_LOCK_DIR", str(locks))
    holder = os.open(locks / "measure.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # this test is "another measurement" ...
    released, once = threading.Event(), threading.Lock()

    def release(shown: str = "") -> None:  # ... until the run says it waits (at most 60 s)
        with once:
            if not released.is_set() and (not shown or "waiting for another measurement" in shown):
                released.set()
                os.close(holder)

    timer = threading.Timer(60.0, release)
    timer.start()
    try:
        shown = on_a_terminal(gate, watch=release)
    finally:
        timer.cancel()
        release()
    me = f"pid {os.getpid()} ("
    assert f"encperf plan: another measurement holds the machine now ({me}" in shown
    assert f"\rencperf: waiting for another measurement to finish: {me}" in shown
    assert "round 1 of 4 (plain)" in shown and "passed" in shown
