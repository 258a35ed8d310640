"""The gate's false-alarm rate and power, by simulation with a stated noise model.

Each simulated run measures 8 workloads (CrystalDiskMark's default set) x 2 encrypted backends,
each paired with plain, through the real measuring loop (runner.measure_rounds: A B B A order,
confirmation rounds against the budget) and the real gate (compare.Gate, compare.judge) at
``--encperf-fail=10%`` and default settings: 3 rounds per side, 1.5 s rounds, a 60 s
confirmation budget. The reference is a saved baseline of the same model with 10 rounds per side
(the default when saving, ``--encperf-save-rounds``), drawn afresh for every simulated run.

Noise model (all multiplicative, log-normal):
- within a run, every round of every side: CV 5%;
- whole-run drift common to both sides of a run (a neighbour, a warmer disk): sd 10%;
- run-level noise of each encrypted backend alone (its daemon's placement, its cache state):
  sd 2%, common to all its workloads in that run.
A slowdown multiplies one encrypted backend's rounds (every workload, like a CPU quota on its
daemon) in the checking run.

Measured with these seeds (2,000 runs each): A/A 0.25% of runs with any failing check; a 20%
slowdown caught in 99.8% of runs; 15% in 90.4%. The README quotes these figures.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from pytest_encperf.compare import Gate, expected_family_size, judge, parse_rules
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.runner import ConfirmBudget, PairedRounds, measure_rounds
from pytest_encperf.workloads import CDM, Workload

ROUND_CV = 0.05
RUN_DRIFT_SD = 0.10
ENCRYPTED_RUN_SD = 0.02
BACKENDS = ("enc-a", "enc-b")
RUNTIME = 1.5  # seconds per round, the default
OVERHEAD = 0.2  # seconds between rounds (file preparation, cache drop) charged to the budget
CHECKING_ROUNDS, REFERENCE_ROUNDS, BUDGET = 3, 10, 60.0
SETTINGS = {"size": "268435456", "runtime": "1.5", "target": "container"}
RULES = parse_rules("10%")
RUNS = 2000
PLAIN_MB_S = {workload.name: 200.0 * (1 + i) for i, workload in enumerate(CDM)}  # each its own speed


class Clock:
    """Simulated time: each round advances it by its runtime, so the budget counts real rounds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def measurement(mb_per_s: float, workload: Workload, clock: Clock) -> Measurement:
    clock.now += RUNTIME + OVERHEAD
    moved = mb_per_s * 1e6 * RUNTIME
    return Measurement(
        engine="simulated", engine_version="1", bytes=int(moved), seconds=RUNTIME,
        ios=int(moved // workload.block_size), lat_p50_us=1.0, lat_p99_us=1.0, lat_p999_us=1.0,
        cpu_seconds=0.1, io_mode="direct",
    )  # fmt: skip


class Model:
    """One run's draw of the noise model; ``side`` gives the round generator of each side."""

    def __init__(self, rng: random.Random, slowdown: float = 1.0) -> None:
        self.rng = rng
        self.drift = math.exp(rng.gauss(0, RUN_DRIFT_SD))
        self.encrypted = {b: math.exp(rng.gauss(0, ENCRYPTED_RUN_SD)) for b in BACKENDS}
        self.encrypted["enc-a"] *= slowdown
        self.clock = Clock()

    def value(self, workload: Workload, backend: str | None) -> float:
        plain = PLAIN_MB_S[workload.name]
        factor = 0.5 * self.encrypted[backend] if backend else 1.0  # encrypted: half of plain
        return plain * factor * self.drift * math.exp(self.rng.gauss(0, ROUND_CV))

    def side(self, workload: Workload, backend: str | None) -> Callable[[float], Measurement]:
        return lambda runtime: measurement(self.value(workload, backend), workload, self.clock)


def reference_run(rng: random.Random) -> RunData:
    """A saved baseline: its rounds, drawn straight from the model (not the code under test)."""
    model = Model(rng)
    results = []
    for backend in BACKENDS:
        for workload in CDM:
            result = Result(backend, workload)
            for _ in range(REFERENCE_ROUNDS):
                result.baseline_rounds.append(model.side(workload, None)(RUNTIME))
                result.rounds.append(model.side(workload, backend)(RUNTIME))
            results.append(result)
    return RunData("reference", tuple(results), SETTINGS)


def checking_run(rng: random.Random, reference: RunData, slowdown: float) -> tuple[RunData, float]:
    """A checking run through the real loop and gate; returns it and the budget it spent."""
    model = Model(rng, slowdown)
    size = expected_family_size(BACKENDS, CDM, RULES, (), reference)
    gate = Gate(reference, tuple(RULES), (), SETTINGS, size)
    budget = ConfirmBudget(BUDGET, clock=model.clock)
    results = []
    for backend in BACKENDS:
        for workload in CDM:
            pairs = PairedRounds(model.side(workload, None), model.side(workload, backend), clock=model.clock)
            result = Result(backend, workload)
            measure_rounds(result, pairs, runtime=RUNTIME, rounds=CHECKING_ROUNDS, gate=gate, budget=budget)
            results.append(result)
    return RunData("now", tuple(results), SETTINGS), budget.spent


def failure_rate(seed: int, slowdown: float) -> tuple[float, float, float]:
    """(share of runs whose verdict failed, mean budget spent, largest budget spent)."""
    rng = random.Random(seed)
    failed, spent = 0, []
    for _ in range(RUNS):
        reference = reference_run(rng)
        now, seconds = checking_run(rng, reference, slowdown)
        verdict = judge(now, reference, RULES)
        failed += verdict.failed
        spent.append(seconds)
    return failed / RUNS, sum(spent) / RUNS, max(spent)


def test_a_a_runs_fail_at_most_one_percent_of_the_time() -> None:
    rate, mean_spent, _ = failure_rate(seed=1, slowdown=1.0)
    print(f"A/A: {rate:.2%} of {RUNS} runs failed; confirmation used {mean_spent:.1f} s on average")
    assert rate <= 0.01
    assert mean_spent < 15  # an unchanged run rarely needs confirmation rounds


@pytest.mark.parametrize(("slowdown", "power"), [(0.80, 0.95), (0.85, 0.80)])
def test_a_slowdown_of_the_encrypted_side_is_caught(slowdown: float, power: float) -> None:
    rate, mean_spent, most = failure_rate(seed=2, slowdown=slowdown)
    print(f"{1 - slowdown:.0%} slower: caught in {rate:.1%} of {RUNS} runs; budget {mean_spent:.1f} s mean")
    assert rate >= power
    assert most <= BUDGET + 2 * (RUNTIME + OVERHEAD)  # the pair running when the budget ran out
