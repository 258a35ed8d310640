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

import pytest

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
