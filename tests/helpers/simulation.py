"""A simulated CI gate: the real measuring loop and verdict, rounds drawn from a noise model.

Shared by tests/functional/test_compare_simulation.py (the rates the gate must meet) and
``benchmarks/gate_bars.py simulate`` (the same model under other assumptions).

Each simulated run measures 8 workloads (CrystalDiskMark's default set) x 2 encrypted backends,
each paired with plain, through the real measuring loop (rounds.measure_rounds: A B B A order,
confirmation rounds against the budget) and the real gate (gate.Gate, gate.judge) at
``--encperf-fail=10%`` and default settings: 3 rounds per side, 1.5 s rounds, a 60 s
confirmation budget. Saved runs (the reference first) come from the same model with 10 rounds
per side (the default when saving, ``--encperf-save-rounds``), drawn afresh for every run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_encperf.gate import Gate, expected_family_size, judge, parse_rules
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.rounds import ConfirmBudget, PairedRounds, measure_rounds
from pytest_encperf.workloads import CDM, Workload

BACKENDS = ("enc-a", "enc-b")
RUNTIME = 1.5  # seconds per round, the default
OVERHEAD = 0.2  # seconds between rounds (file preparation, cache drop) charged to the budget
CHECKING_ROUNDS, REFERENCE_ROUNDS, BUDGET = 3, 10, 60.0
SETTINGS = {"size": "268435456", "runtime": "1.5", "target": "container"}
RULES = parse_rules("10%")
PLAIN_MB_S = {workload.name: 200.0 * (1 + i) for i, workload in enumerate(CDM)}  # each its own speed


@dataclass(frozen=True)
class NoiseModel:
    """All multiplicative, log-normal (standard deviations of the log)."""

    round_cv: float = 0.05  # every round of every side, within a run
    run_drift: float = 0.10  # the whole run, both sides (a neighbour, a warmer disk)
    slope: float = 0.0003  # a linear drift during the run, per second (about 5% over a run)
    encrypted_run: float = 0.02  # each encrypted backend alone, all its workloads, per run


@dataclass(frozen=True)
class Scenario:
    slowdown: float = 1.0  # multiplies enc-a's rounds in the checking run ...
    workloads: tuple[str, ...] = field(default_factory=lambda: tuple(w.name for w in CDM))  # ... of these
    saved: int = 1  # saved runs: the reference and older ones (3 or more make a history)


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


class Run:
    """One run's draw of the noise model; ``side`` gives the round generator of each side."""

    def __init__(self, rng: random.Random, noise: NoiseModel, scenario: Scenario | None = None) -> None:
        self.rng, self.noise, self.scenario = rng, noise, scenario
        self.drift = math.exp(rng.gauss(0, noise.run_drift))
        self.slope = rng.gauss(0, noise.slope)
        self.encrypted = {b: math.exp(rng.gauss(0, noise.encrypted_run)) for b in BACKENDS}
        self.clock = Clock()

    def value(self, workload: Workload, backend: str | None) -> float:
        factor = 1.0
        if backend:  # encrypted: half of plain, times this run's noise (and the slowdown)
            factor = 0.5 * self.encrypted[backend]
            scenario = self.scenario
            if scenario and backend == "enc-a" and workload.name in scenario.workloads:
                factor *= scenario.slowdown
        during = 1 + self.slope * self.clock.now
        noise = math.exp(self.rng.gauss(0, self.noise.round_cv))
        return PLAIN_MB_S[workload.name] * factor * self.drift * during * noise

    def side(self, workload: Workload, backend: str | None) -> Callable[[float], Measurement]:
        return lambda runtime: measurement(self.value(workload, backend), workload, self.clock)


def saved_run(rng: random.Random, noise: NoiseModel) -> RunData:
    """A saved baseline: its rounds, drawn straight from the model (not the code under test)."""
    run = Run(rng, noise)
    results = []
    for backend in BACKENDS:
        for workload in CDM:
            result = Result(backend, workload)
            for _ in range(REFERENCE_ROUNDS):
                result.baseline_rounds.append(run.side(workload, None)(RUNTIME))
                result.rounds.append(run.side(workload, backend)(RUNTIME))
            results.append(result)
    return RunData("reference", tuple(results), SETTINGS)


def checking_run(
    rng: random.Random, noise: NoiseModel, scenario: Scenario, reference: RunData
) -> tuple[RunData, float]:
    """A checking run through the real loop and gate; returns it and the budget it spent."""
    run = Run(rng, noise, scenario)
    size = expected_family_size(BACKENDS, CDM, RULES, (), reference)
    gate = Gate(reference, tuple(RULES), (), SETTINGS, size)
    budget = ConfirmBudget(BUDGET, clock=run.clock)
    results = []
    for backend in BACKENDS:
        for workload in CDM:
            pairs = PairedRounds(run.side(workload, None), run.side(workload, backend), clock=run.clock)
            result = Result(backend, workload)
            measure_rounds(result, pairs, runtime=RUNTIME, rounds=CHECKING_ROUNDS, gate=gate, budget=budget)
            results.append(result)
    return RunData("now", tuple(results), SETTINGS), budget.spent


@dataclass(frozen=True)
class Rates:
    failed: float  # share of runs whose verdict failed
    mean_spent: float  # confirmation budget spent, seconds
    most_spent: float


def failure_rate(seed: int, runs: int, scenario: Scenario, noise: NoiseModel | None = None) -> Rates:
    noise = noise or NoiseModel()
    rng = random.Random(seed)
    failed, spent = 0, []
    for _ in range(runs):
        saved = [saved_run(rng, noise) for _ in range(scenario.saved)]
        now, seconds = checking_run(rng, noise, scenario, saved[0])
        verdict = judge(now, saved[0], RULES, history=saved if scenario.saved > 1 else ())
        failed += verdict.failed
        spent.append(seconds)
    return Rates(failed / runs, sum(spent) / runs, max(spent))
