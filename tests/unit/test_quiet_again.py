"""--encperf-quiet-wait after the counted rounds: a whole A B B A block with a busy round is
dropped and measured again once the machine is quiet, within the workload's quiet-wait time, and
never more blocks than were counted."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from pytest_encperf.model import Measurement, Result
from pytest_encperf.rounds import PairedRounds, QuietAgain, measure_rounds
from pytest_encperf.workloads import CDM


class Script:
    """Scripted rounds: the volume's MB/s in order, and whether each round (either side, in the
    order measured) was busy."""

    def __init__(self, busy: list[bool]) -> None:
        self.busy: Iterator[bool] = iter(busy + [False] * 100)
        self.count = 0

    def round(self, mb_per_s: float) -> Measurement:
        self.count += 1
        moved = int(mb_per_s * 1e6)
        # the engine version carries the round's place in the order measured
        measured = Measurement("t", str(self.count), moved, 1.0, moved, 1.0, 1.0, 1.0, 0.1, "direct")
        return dataclasses.replace(measured, busy=next(self.busy))

    def pairs(self) -> PairedRounds:
        return PairedRounds(lambda runtime: self.round(100.0), lambda runtime: self.round(50.0))


class Waits:
    """A quiet wait that is quiet after ``seconds`` (or never, when None), recording each limit."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.limits: list[float] = []

    def __call__(self, limit: float) -> float:
        self.limits.append(limit)
        return limit if self.seconds is None or self.seconds >= limit else self.seconds


def measure(busy: list[bool], waits: Waits, limit: float = 30.0, rounds: int = 4) -> Result:
    script = Script(busy)
    return measure_rounds(
        Result("gocryptfs", CDM[0]), script.pairs(), runtime=1.0, rounds=rounds,
        quiet_again=QuietAgain(waits, limit),
    )  # fmt: skip


def test_a_busy_block_is_dropped_whole_and_measured_again_after_quiet() -> None:
    # 4 pairs = 2 blocks; the third round measured (pair 1's volume round) was busy
    result = measure([False, False, True], Waits(2.0))
    assert len(result.rounds) == len(result.baseline_rounds) == 4
    assert result.busy_rounds == 0
    assert result.busy_remeasured == 2
    assert result.quiet_wait == 2.0
    # the first block went whole: the rounds kept are the second block's and the new one's, and
    # A B B A order holds (plain first in each block's first pair)
    assert [m.engine_version for m in result.baseline_rounds] == ["5", "8", "9", "12"]
    assert [m.pair_position for m in result.baseline_rounds] == [1, 2, 1, 2]
    assert result.stop_reason == "4 rounds, 2 busy pairs measured again after quiet"


def test_nothing_busy_measures_nothing_again_and_never_waits() -> None:
    waits = Waits(1.0)
    result = measure([], waits)
    assert (result.busy_remeasured, result.quiet_wait, waits.limits) == (0, 0.0, [])
    assert result.stop_reason == "4 rounds"


def test_a_machine_that_stays_busy_keeps_its_busy_rounds_and_says_so() -> None:
    waits = Waits(None)
    result = measure([True] * 8, waits, limit=5.0)
    assert result.busy_rounds == 8 and result.busy_remeasured == 0
    assert waits.limits == [5.0] and result.quiet_wait == 5.0
    assert result.stop_reason == "4 rounds, busy pairs kept (not quiet within 5 s)"


def test_the_quiet_wait_time_is_shared_by_every_wait_of_the_workload() -> None:
    waits = Waits(3.0)
    result = measure([True] * 16, waits, limit=8.0, rounds=8)
    # waited 3 s, then 3 s, then 2 s left: not quiet in time, the rest of the busy rounds stay
    assert waits.limits == [8.0, 5.0, 2.0]
    assert result.busy_remeasured == 4
    assert result.stop_reason.endswith("4 busy pairs measured again after quiet (not quiet within 8 s)")


def test_never_more_blocks_are_measured_again_than_were_counted() -> None:
    # every round busy until the replacement blocks; quiet after 1 s each time
    result = measure([True] * 40, Waits(1.0), limit=100.0)
    assert result.busy_remeasured == 4  # 2 counted blocks: at most 2 measured again
    assert result.stop_reason.endswith("(as many as were counted)")


def test_measuring_a_block_again_drops_it_whole_and_adds_a_new_block_in_a_b_b_a_order() -> None:
    script = Script([])
    pairs = script.pairs()
    result = Result("gocryptfs", CDM[0])
    for _ in range(6):  # 3 blocks, rounds 1-12 in the order measured
        pairs.add(result, 1.0)
    pairs.measure_block_again(result, 2, 1.0)  # the second block (rounds 5-8)
    # the rounds stay in the order they ran: the first and third blocks, then the new one
    assert [m.engine_version for m in result.baseline_rounds] == ["1", "4", "9", "12", "13", "16"]
    assert [m.engine_version for m in result.rounds] == ["2", "3", "10", "11", "14", "15"]
    assert [m.pair_position for m in result.baseline_rounds] == [1, 2] * 3
    assert [m.pair_position for m in result.rounds] == [2, 1] * 3


@pytest.mark.parametrize("first", [1, 6, -2])
def test_only_a_whole_block_of_the_rounds_is_measured_again(first: int) -> None:
    script = Script([])
    pairs = script.pairs()
    result = Result("gocryptfs", CDM[0])
    for _ in range(6):
        pairs.add(result, 1.0)
    with pytest.raises(ValueError, match=f"pair {first} does not start a whole block of 6 pairs"):
        pairs.measure_block_again(result, first, 1.0)
    assert len(result.rounds) == len(result.baseline_rounds) == 6 and script.count == 12
