"""gate.SortedRuns: verdicts that share the cells of the same saved runs (the simulation of
tests/functional/test_verdict_simulation judges several checking runs against each set of saved
runs) decide exactly as verdicts that sort every run afresh."""

from __future__ import annotations

import random

from pytest_encperf.gate import SortedRuns, judge, parse_rules
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.workloads import CDM
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)

BACKENDS = ("gocryptfs", "fscrypt")


def measurement(mb_per_s: float, block_size: int, volume_block: int | None) -> Measurement:
    moved = int(mb_per_s * 1e6)
    return Measurement(
        "fake", "1", moved, 1.0, moved // block_size, 1.0, 2.0, 3.0, 0.1, "direct", volume_block=volume_block
    )


def run(rng: random.Random, label: str, rounds: int, slower: float = 1.0, blocks: int = 1) -> RunData:
    results = []
    for backend in BACKENDS:
        for workload in CDM[:4]:
            result = Result(backend, workload)
            for index in range(rounds):
                block = index % blocks if blocks > 1 else None
                plain = 1000.0 * rng.lognormvariate(0, 0.02)
                ratio = 0.5 * rng.lognormvariate(0, 0.02) * (slower if backend == "gocryptfs" else 1)
                result.baseline_rounds.append(measurement(plain, workload.block_size, block))
                result.rounds.append(measurement(plain * ratio, workload.block_size, block))
            results.append(result)
    return RunData(label, tuple(results), {"size": "1"})


def test_verdicts_sharing_the_saved_runs_cells_decide_as_verdicts_that_sort_them_afresh() -> None:
    rng, rules = random.Random(3), parse_rules("10%")
    for saved, blocks in ((1, 1), (1, 4), (3, 1), (5, 2)):
        history = [run(rng, f"saved{i}", 8, blocks=blocks) for i in range(saved)]
        checking = [run(rng, "now", 4, slower) for slower in (1.0, 0.95, 0.8, 0.5)]
        shared = SortedRuns()
        for now in checking:
            against = history if saved > 1 else ()
            alone = judge(now, history[0], rules, history=against)
            together = judge(now, history[0], rules, history=against, sorted_runs=shared)
            assert repr(together) == repr(alone)
            assert {check.status for check in alone.checks} != {""}


def test_a_run_is_sorted_once_and_kept_by_identity() -> None:
    rng = random.Random(4)
    first, twin = run(rng, "saved", 4), run(rng, "saved", 4)
    shared = SortedRuns()
    assert shared(first) is shared(first)
    assert shared(twin) is not shared(first)  # an equal run is another run: its own cells
