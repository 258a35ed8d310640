"""The measuring loop (no volumes): A B B A order, round timestamps, confirmation rounds."""

from __future__ import annotations

import statistics

import pytest

from pytest_encperf.model import Measurement, Result
from pytest_encperf.rounds import MAX_CONFIRM_PAIRS, ConfirmBudget, PairedRounds, measure_rounds
from pytest_encperf.workloads import CDM


class Timeline:
    """A clock that each round advances by one second; the machine drifts linearly with it."""

    def __init__(self, drift_per_round: float = 0.0) -> None:
        self.now = 1000.0
        self.drift = drift_per_round
        self.sides: list[str] = []

    def __call__(self) -> float:
        return self.now

    def side(self, name: str, speed: float):
        def measure(runtime: float) -> Measurement:
            self.sides.append(name)
            value = speed * (1 + self.drift * (self.now - 1000.0))
            self.now += 1.0
            moved = int(value * 1e6)
            return Measurement("t", "1", moved, 1.0, moved, 1.0, 1.0, 1.0, 0.1, "direct")

        return measure


def test_rounds_alternate_abba_and_record_when_they_started() -> None:
    timeline = Timeline()
    pairs = PairedRounds(timeline.side("plain", 100), timeline.side("volume", 50), clock=timeline)
    result = measure_rounds(Result("fscrypt", CDM[0]), pairs, runtime=1.0, rounds=4, warmup=1)
    # one warm-up pair, then plain first in even pairs and the volume first in odd ones
    assert timeline.sides == ["plain", "volume"] + ["plain", "volume", "volume", "plain"] * 2
    starts = [(m.started, "plain") for m in result.baseline_rounds] + [
        (m.started, "vol") for m in result.rounds
    ]
    assert [side for _, side in sorted(starts)] == ["plain", "vol", "vol", "plain"] * 2
    assert result.stop_reason == "4 rounds"


def test_linear_drift_cancels_over_abba_pairs() -> None:
    # the machine gets 1% faster every round: in each pair the side that runs second gains 1%
    timeline = Timeline(drift_per_round=0.01)
    pairs = PairedRounds(timeline.side("plain", 100), timeline.side("volume", 50), clock=timeline)
    result = measure_rounds(Result("fscrypt", CDM[0]), pairs, runtime=1.0, rounds=4)
    ratios = [v.mb_per_s / b.mb_per_s for v, b in zip(result.rounds, result.baseline_rounds, strict=True)]
    assert ratios[0] > 0.5 > ratios[1]  # each pair alone is biased, the other way every time
    assert statistics.fmean(ratios) == pytest.approx(0.5, rel=0.001)


class ScriptedGate:
    """Pending while fewer than ``need`` rounds were measured."""

    def __init__(self, need: int) -> None:
        self.need = need
        self.asked: list[int] = []

    def pending(self, result: Result, extra_possible: int) -> tuple[bool, str]:
        self.asked.append(extra_possible)
        if len(result.rounds) >= self.need:
            return False, ""
        return (True, "undecided") if self.need < 100 else (False, "cannot get there")


def confirm(need: int, budget_seconds: float) -> tuple[Result, ConfirmBudget, ScriptedGate]:
    timeline = Timeline()
    pairs = PairedRounds(timeline.side("plain", 100), timeline.side("volume", 50), clock=timeline)
    gate, budget = ScriptedGate(need), ConfirmBudget(budget_seconds, clock=timeline)
    result = measure_rounds(Result("fscrypt", CDM[0]), pairs, runtime=1.0, rounds=4, gate=gate, budget=budget)
    return result, budget, gate


def test_confirmation_adds_pairs_until_decided_and_says_so() -> None:
    result, budget, gate = confirm(need=5, budget_seconds=60)
    assert (len(result.rounds), result.confirm_rounds) == (6, 2)  # one whole A B B A block
    assert result.stop_reason == "4 rounds + 2 to confirm, decided"
    assert budget.spent == 4.0  # two pairs of one-second rounds
    assert gate.asked == [MAX_CONFIRM_PAIRS, MAX_CONFIRM_PAIRS - 2]


def test_confirmation_stops_when_the_budget_is_spent() -> None:
    result, budget, _ = confirm(need=50, budget_seconds=5)
    assert result.confirm_rounds == 4  # 4 s per block: the second block starts with 1 s left
    assert budget.spent == 8.0
    assert result.stop_reason == "4 rounds + 4 to confirm, confirmation budget spent (undecided)"
    again, _, _ = confirm(need=50, budget_seconds=0.0)
    assert again.stop_reason == "4 rounds, confirmation budget spent (undecided)"


def test_confirmation_is_capped_per_workload() -> None:
    result, _, _ = confirm(need=50, budget_seconds=1000)
    assert result.confirm_rounds == MAX_CONFIRM_PAIRS
    assert result.stop_reason.endswith(
        f"+ {MAX_CONFIRM_PAIRS} to confirm, the most for one workload (undecided)"
    )


def test_a_check_more_rounds_cannot_decide_stops_and_says_so() -> None:
    result, budget, _ = confirm(need=100, budget_seconds=60)
    assert result.stop_reason == "4 rounds, not decidable by more rounds (cannot get there)"
    assert (result.confirm_rounds, budget.spent) == (0, 0.0)


def test_nothing_to_confirm_leaves_the_rounds_alone() -> None:

    result, budget, _ = confirm(need=0, budget_seconds=60)
    assert (result.confirm_rounds, result.stop_reason, budget.spent) == (0, "4 rounds", 0.0)


def test_a_task_on_the_partition_target_is_refused_with_the_way_out() -> None:
    from typing import Any

    from pytest_encperf.roundplan import RoundPlan
    from pytest_encperf.runner import RunError, Runner
    from pytest_encperf.workloads import PROFILES, MiB, with_tree

    nothing: Any = None  # the refusal comes before the engine or a volume is touched
    runner = Runner(nothing, nothing, None, RoundPlan(MiB, 1.0, 1, 1), record=lambda result: None)
    with pytest.raises(RunError, match=r"archive: .*partition target.*container or directory target"):
        runner.run(with_tree(PROFILES["realwork"].workloads[0], MiB, 1))
