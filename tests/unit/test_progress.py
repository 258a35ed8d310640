"""The plan line and the live status line (progress.py and the session's terminal hooks)."""

from __future__ import annotations

from pytest_encperf.model import Measurement
from pytest_encperf.progress import Plan, ProgressLine, format_duration
from pytest_encperf.workloads import CDM
from tests.functional.test_gate import gate, run  # noqa: F401  (the scripted-engine fixture)


def test_durations() -> None:
    assert [format_duration(s) for s in (0.2, 45, 89.5, 90, 3599, 5400, 3 * 3600 + 61)] == [
        "1 s", "45 s", "90 s", "2 min", "60 min", "1 h 30 min", "3 h 02 min",
    ]  # fmt: skip


def test_the_plan_counts_rounds_and_warm_ups_on_both_sides() -> None:
    tests = [(b, w.name) for b in ("fscrypt", "gocryptfs") for w in CDM]
    plan = Plan(tests, rounds=4, runtime=1.5, warmup=1)
    # per test: 2 sides x (4 x 1.5 s + 1 warm-up of at most 1 s) = 14 s; 16 tests
    assert plan.seconds() == 16 * 14 and plan.extra_seconds() == 0
    assert plan.line() == (
        "encperf plan: 2 backends (fscrypt, gocryptfs) x 8 workloads x 4 rounds + 1 warm-up of 1.5 s, "
        "alternating with plain: 16 tests, about 4 min of rounds (making volumes and test files comes on top)"
    )
    # an odd number of rounds is rounded up to whole A B B A blocks, and the plan says so
    odd = Plan(tests, rounds=3, runtime=1.5, warmup=1)
    assert odd.seconds() == plan.seconds()
    assert " x 4 rounds (3 rounded up to whole A B B A blocks) + 1 warm-up of 1.5 s, " in odd.line()
    gated = Plan(tests[:1], rounds=10, runtime=5, warmup=0, steady_budget=60.0, confirm_budget=60.0)
    assert gated.seconds() == 100 and gated.extra_seconds() == 120
    assert gated.line().endswith(
        "about 2 min of rounds, up to 2 min more for steady-state and confirmation rounds "
        "(making volumes and test files comes on top)"
    )
    # a partition: one side per test, and plain (8 workloads) before and after each volume
    partition = Plan(
        tests, rounds=3, runtime=1.0, warmup=1, one_volume_at_a_time=True, workloads_per_volume=8
    )
    assert partition.seconds() == 16 * 4 + 2 * 2 * 8 * 4
    assert "plain before and after each volume" in partition.line()


class Terminal:
    def __init__(self) -> None:
        self.out: list[str] = []

    def write(self, text: str) -> None:
        self.out.append(text)


def measurement(mb_per_s: float) -> Measurement:
    return Measurement("fio", "3", int(mb_per_s * 1e6), 1.0, 1, 1.0, 1.0, 1.0, 0.1, "direct")


def test_the_status_line_shows_the_round_the_speed_and_the_time_left_then_goes() -> None:
    term = Terminal()
    line = ProgressLine(term.write, lambda: 17, lambda: 120, rounds=2, runtime=5.0, warmup=1)
    workload = CDM[0]
    for k, side in enumerate(["plain", "fscrypt", "plain", "fscrypt", "fscrypt", "plain"], start=1):
        line.round_done(workload, "fscrypt", side, measurement(100.0 + k))
    assert term.out[0] == "\n"  # below pytest's line, never over it
    assert (
        term.out[1]
        == "\rencperf: fscrypt SEQ1M-Q8T1-read: round 1 of 6 (warm-up), 101.0 MB/s, about 21 s left\x1b[K"
    )
    assert (
        term.out[3]
        == "\rencperf: fscrypt SEQ1M-Q8T1-read: round 3 of 6 (plain), 103.0 MB/s, about 15 s left\x1b[K"
    )
    assert term.out[-1] == "\rencperf: fscrypt SEQ1M-Q8T1-read: round 6 of 6 (plain), 106.0 MB/s, done\x1b[K"
    line.round_done(workload, "fscrypt", "fscrypt", measurement(99.0))  # a confirmation pair
    assert "round 7 (fscrypt, extra: steady state or confirmation)" in term.out[-1]
    line.clear()
    assert term.out[-1] == "\r\x1b[K\x1b[A\x1b[17C"  # erased; the cursor back at the end of pytest's line
    line.clear()
    assert term.out[-1] == "\r\x1b[K\x1b[A\x1b[17C"  # nothing more once cleared
    short = Terminal()
    quick = ProgressLine(short.write, lambda: 0, lambda: 80, rounds=3, runtime=1.5, warmup=0)
    quick.round_done(workload, "fscrypt", "plain", measurement(1))
    assert short.out == []  # 9 s of rounds: under about 10 s, no status line


# The scripted engine returns at once: a runtime of 5 s makes each workload "long" (2 x 5 s).
