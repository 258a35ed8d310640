"""The gate's false-alarm rate and power, by simulation with a stated noise model.

The model and the simulated run are in tests/simulation.py: 8 workloads x 2 encrypted backends
against a fresh 10-round reference, ``--encperf-fail=10%``, defaults otherwise, through the real
measuring loop and verdict. Noise (log-normal): rounds CV 5%; each run as a whole 10% (sd), both
sides; a linear drift during the run (about 5% over a run); each encrypted backend's run-level
ratio 2% (sd). A slowdown multiplies one encrypted backend's rounds in the checking run (every
workload, like a CPU quota on its daemon).

The false-alarm rate rests on that 2%: the rounds of one run cannot show it, and the p-value's
margin (half the threshold) absorbs it. ``python benchmarks/gate_bars.py simulate`` measures the
same model under other assumptions (3%, 4%, one slowed workload, histories).
"""

from __future__ import annotations

import math
import random

import pytest

from pytest_encperf.compare import ALPHA, MIN_LIFECYCLE_CYCLES, judge, parse_rules
from pytest_encperf.model import LIFECYCLE_STEPS, RunData
from tests.simulation import BUDGET, OVERHEAD, RUNTIME, Scenario, failure_rate

RUNS = 2000


def test_a_a_runs_fail_at_most_one_percent_of_the_time() -> None:
    rates = failure_rate(seed=1, runs=RUNS, scenario=Scenario())
    print(f"A/A: {rates.failed:.2%} of {RUNS} runs failed; confirmation: {rates.mean_spent:.1f} s on average")
    assert rates.failed <= 0.01
    assert rates.mean_spent < 15  # an unchanged run rarely needs confirmation rounds


def test_with_a_history_unchanged_runs_still_fail_at_most_one_percent_of_the_time() -> None:
    # plain's absolute throughput is gated too now, against the spread of the saved runs
    rates = failure_rate(seed=3, runs=RUNS, scenario=Scenario(saved=3))
    print(f"A/A with 3 saved runs: {rates.failed:.2%} of {RUNS} runs failed")
    assert rates.failed <= 0.01


@pytest.mark.parametrize(("slowdown", "power"), [(0.80, 0.95), (0.85, 0.80)])
def test_a_slowdown_of_the_encrypted_side_is_caught(slowdown: float, power: float) -> None:
    rates = failure_rate(seed=2, runs=RUNS, scenario=Scenario(slowdown=slowdown))
    print(
        f"{1 - slowdown:.0%} slower: caught in {rates.failed:.1%} of {RUNS} runs ({rates.mean_spent:.0f} s)"
    )
    assert rates.failed >= power
    assert rates.most_spent <= BUDGET + 2 * (RUNTIME + OVERHEAD)  # the pair running when it ran out


# ----------------------------------------------------------------------------- life cycles
#
# Noise model of life-cycle timings: each backend x step has its own per-cycle spread, log-normal
# with a coefficient of variation drawn from 10-30%; each run moves each step as a whole by a
# log-normal factor (sd 5%, the run's conditions); 2% of the cycles are outliers, 3x their time
# (a neighbour's burst, a journal commit). Four backends x five steps, every step gated by the
# README's example rule lifecycle:50%: a family of 20 checks. A slowdown of 2x the threshold
# (100% slower: twice the time) hits gocryptfs's mount in the checking run.

LIFECYCLE_BACKENDS = ("plain", "fscrypt", "gocryptfs", "qemu-luks")
LIFECYCLE_RULES = "lifecycle:50%"


def lifecycle_run(
    rng: random.Random, label: str, cycles: int, cvs: dict[tuple[str, str], float], slowed: float = 1.0
) -> RunData:
    lifecycle: dict[str, dict[str, list[float]]] = {}
    for backend in LIFECYCLE_BACKENDS:
        for step in LIFECYCLE_STEPS:
            sd = math.sqrt(math.log(1 + cvs[(backend, step)] ** 2))
            level = rng.gauss(0, 0.05) + math.log(slowed if (backend, step) == ("gocryptfs", "mount") else 1)
            lifecycle.setdefault(backend, {})[step] = [
                math.exp(level + rng.gauss(0, sd)) * (3 if rng.random() < 0.02 else 1) for _ in range(cycles)
            ]
    return RunData(label, (), {"size": str(64 * 2**20), "target": "container"}, {}, lifecycle)


def lifecycle_failure_rate(seed: int, runs: int, cycles: int, rules: str, slowed: float = 1.0) -> float:
    rng = random.Random(seed)
    failed = 0
    for _ in range(runs):
        cvs = {(b, s): rng.uniform(0.10, 0.30) for b in LIFECYCLE_BACKENDS for s in LIFECYCLE_STEPS}
        reference = lifecycle_run(rng, "reference", cycles, cvs)
        current = lifecycle_run(rng, "this run", cycles, cvs, slowed)
        failed += judge(current, reference, parse_rules(rules)).failed
    return failed / runs


@pytest.mark.parametrize("cycles", [3, 5, 10])
def test_unchanged_life_cycles_fail_at_most_alpha_of_the_time(cycles: int) -> None:
    rate = lifecycle_failure_rate(seed=4, runs=1000, cycles=cycles, rules=LIFECYCLE_RULES)
    print(f"A/A life cycles, {cycles} cycles: {rate:.2%} of 1000 runs failed")
    assert rate <= min(ALPHA, 0.01)


@pytest.mark.parametrize(
    ("cycles", "rules", "power"),
    [
        (10, LIFECYCLE_RULES, 0.70),  # every step of four backends: Holm over 20 checks
        (5, "gocryptfs:lifecycle-mount:50%", 0.70),  # one step gated: a family of one
        (10, "gocryptfs:lifecycle-mount:50%", 0.90),
    ],
)
def test_a_mount_twice_as_slow_is_caught(cycles: int, rules: str, power: float) -> None:
    rate = lifecycle_failure_rate(seed=5, runs=300, cycles=cycles, rules=rules, slowed=2.0)
    print(f"gocryptfs mount 2x slower, {cycles} cycles, {rules}: caught in {rate:.1%} of 300 runs")
    assert rate >= power


def test_with_fewer_than_the_minimum_cycles_nothing_can_fail() -> None:
    rate = lifecycle_failure_rate(
        seed=6, runs=100, cycles=MIN_LIFECYCLE_CYCLES - 1, rules=LIFECYCLE_RULES, slowed=10.0
    )
    assert rate == 0.0
