"""The life-cycle gate's false-alarm rate and power, by simulation with a stated noise model.

The paired and plain checks' simulation, with the noise model fitted to the measured noise, is in
tests/functional/test_verdict_simulation.py. tests/helpers/simulation.py (the runner's loop with a
simple model) is kept for ``python benchmarks/gate_bars.py simulate``.
"""

from __future__ import annotations

import math
import random

import pytest

from pytest_encperf.gate import ALPHA, judge, parse_rules
from pytest_encperf.lifecycledata import LIFECYCLE_STEPS
from pytest_encperf.model import RunData

RUNS = 2000


# ----------------------------------------------------------------------------- life cycles
#
# Noise model of life-cycle timings: each backend x step has its own per-cycle spread, log-normal
# with a coefficient of variation drawn from 10-30%; each run moves each backend's steps as a
# whole by a log-normal factor (sd RUN_SD: the run's conditions, shared by its cycles: load, CPU
# frequency, the disk's state); 2% of the cycles are outliers, 3x their time (a neighbour's
# burst, a journal commit). Four backends x five steps, every step gated by the README's example
# rule lifecycle:50%: a family of 20 checks, judged against the spread of the saved runs (the
# reference and HISTORY_RUNS - 1 before it). A slowdown of 2x the threshold (100% slower: twice
# the time) hits gocryptfs's mount in the checking run.

LIFECYCLE_BACKENDS = ("plain", "fscrypt", "gocryptfs", "qemu-luks")
LIFECYCLE_RULES = "lifecycle:50%"
HISTORY_RUNS = 5  # --encperf-history's default
# measured (seed 5, 300 runs): 2.3%, 27.7%, 35.7%. A step has no built-in prior: 5 runs' spread
# alone, with its 4 degrees of freedom bounding the check's (verdict.estimate), decides little at
# the family's 1%; a runner's own prior of the step (--encperf-noise) adds to it
# (tests/functional/test_gate.py)
POWER_ALL, POWER_ONE_5, POWER_ONE_10 = 0.01, 0.20, 0.28


def lifecycle_run(
    rng: random.Random,
    label: str,
    cycles: int,
    cvs: dict[tuple[str, str], float],
    run_sd: float,
    slowed: float = 1.0,
) -> RunData:
    lifecycle: dict[str, dict[str, list[float]]] = {}
    for backend in LIFECYCLE_BACKENDS:
        run_level = rng.gauss(0, run_sd)
        for step in LIFECYCLE_STEPS:
            sd = math.sqrt(math.log(1 + cvs[(backend, step)] ** 2))
            level = run_level + math.log(slowed if (backend, step) == ("gocryptfs", "mount") else 1)
            lifecycle.setdefault(backend, {})[step] = [
                math.exp(level + rng.gauss(0, sd)) * (3 if rng.random() < 0.02 else 1) for _ in range(cycles)
            ]
    return RunData(label, (), {"size": str(64 * 2**20), "target": "container"}, {}, lifecycle)


def lifecycle_failure_rate(
    seed: int, runs: int, cycles: int, rules: str, run_sd: float, slowed: float = 1.0
) -> float:
    rng = random.Random(seed)
    failed = 0
    for _ in range(runs):
        cvs = {(b, s): rng.uniform(0.10, 0.30) for b in LIFECYCLE_BACKENDS for s in LIFECYCLE_STEPS}
        saved = [lifecycle_run(rng, f"saved {i}", cycles, cvs, run_sd) for i in range(HISTORY_RUNS)]
        current = lifecycle_run(rng, "this run", cycles, cvs, run_sd, slowed)
        failed += judge(current, saved[0], parse_rules(rules), history=saved).failed
    return failed / runs


@pytest.mark.parametrize(("cycles", "run_sd"), [(3, 0.05), (5, 0.15), (10, 0.25), (3, 0.25)])
def test_unchanged_life_cycles_fail_at_most_alpha_of_the_time(cycles: int, run_sd: float) -> None:
    rate = lifecycle_failure_rate(seed=4, runs=400, cycles=cycles, rules=LIFECYCLE_RULES, run_sd=run_sd)
    print(f"A/A life cycles, {cycles} cycles, runs moved by sd {run_sd:.0%}: {rate:.2%} of 400 runs failed")
    assert rate <= ALPHA


@pytest.mark.parametrize(
    ("cycles", "rules", "power"),
    [
        (10, LIFECYCLE_RULES, POWER_ALL),  # every step of four backends: Holm over 20 checks
        (5, "gocryptfs:lifecycle-mount:50%", POWER_ONE_5),  # one step gated: a family of one
        (10, "gocryptfs:lifecycle-mount:50%", POWER_ONE_10),
    ],
)
def test_a_mount_twice_as_slow_is_caught(cycles: int, rules: str, power: float) -> None:
    rate = lifecycle_failure_rate(seed=5, runs=300, cycles=cycles, rules=rules, run_sd=0.05, slowed=2.0)
    print(f"gocryptfs mount 2x slower, {cycles} cycles, {rules}: caught in {rate:.1%} of 300 runs")
    assert rate >= power
