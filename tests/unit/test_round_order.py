"""Order effects: the gate checks that the rounds a check compares are whole A B B A blocks, from
the pair positions each saved round records (Measurement.pair_position), and says so when a check
used an unbalanced order (this run's or the reference's), instead of deciding on it silently."""

from __future__ import annotations

import dataclasses

from pytest_encperf.gate import PASS, judge, overhead_checks, parse_rules
from pytest_encperf.gate.cells import cells_of
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.workloads import CDM
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)

WORKLOAD = next(w for w in CDM if w.name == "SEQ1M-Q8T1-read")
UNBALANCED = "2 pairs with plain first and 1 with the backend first: not whole A B B A blocks"


def measurement(mb_per_s: float, position: int | None) -> Measurement:
    moved = int(mb_per_s * 1e6)
    return Measurement(
        "fake", "1", moved, 1.0, moved // WORKLOAD.block_size, 1.0, 2.0, 3.0, 0.1, "direct",
        pair_position=position,
    )  # fmt: skip


def run(label: str, ratios: list[float], recorded: bool = True, busy: int | None = None) -> RunData:
    """gocryptfs at ``ratios`` x plain (1000 MB/s) in A B B A order: plain first in even pairs;
    ``busy``: that pair's backend round was busy (the gate leaves the pair out)."""
    plain, volume = [], []
    for index, ratio in enumerate(ratios):
        first = index % 2 == 0
        plain.append(measurement(1000.0, (1 if first else 2) if recorded else None))
        round_ = measurement(1000.0 * ratio, (2 if first else 1) if recorded else None)
        volume.append(dataclasses.replace(round_, busy=index == busy))
    return RunData(label, (Result("gocryptfs", WORKLOAD, volume, plain),), {"size": "1"})


STEADY = [0.500, 0.502, 0.499, 0.501, 0.500, 0.498, 0.501, 0.500]


def test_whole_blocks_in_both_runs_leave_no_order_note() -> None:
    verdict = judge(run("now", STEADY[:4]), run("reference", STEADY), parse_rules("10%"))
    assert verdict.checks and all(check.order == "" for check in verdict.checks)
    assert not [note for note in verdict.notes if "A B B A" in note]


def test_a_reference_of_odd_pairs_is_named_in_the_check_and_the_notes() -> None:
    verdict = judge(run("now", STEADY[:4]), run("reference", STEADY[:3]), parse_rules("10%"))
    paired = next(check for check in verdict.checks if check.backend == "gocryptfs")
    assert paired.status == PASS  # still decided, never silently
    assert paired.order.startswith(f"the reference: {UNBALANCED}")
    assert f"the reference: {UNBALANCED}" in paired.reason
    assert any(note.startswith("gocryptfs SEQ1M-Q8T1-read throughput (pass): the reference: 2 pairs")
               for note in verdict.notes)  # fmt: skip


def test_a_busy_pair_left_out_of_this_run_unbalances_its_order() -> None:
    now = run("now", STEADY[:4], busy=3)  # the gate leaves the busy pair out: 2 plain-first, 1 not
    verdict = judge(now, run("reference", STEADY), parse_rules("10%"))
    paired = next(check for check in verdict.checks if check.backend == "gocryptfs")
    assert paired.order == f"this run: {UNBALANCED}, so an order effect does not cancel"


def test_a_run_saved_before_the_order_was_recorded_is_not_questioned() -> None:
    verdict = judge(run("now", STEADY[:4]), run("reference", STEADY[:3], recorded=False), parse_rules("10%"))
    assert all(check.order == "" for check in verdict.checks)


def test_the_in_run_overhead_check_and_plains_cell_check_the_order_too() -> None:
    odd = run("now", STEADY[:3])
    (check,) = overhead_checks(odd.results, parse_rules("60%"))
    assert check.order.startswith(f"this run: {UNBALANCED}")
    plain = cells_of(odd.results)[("plain", WORKLOAD.name)]
    assert plain.order_problem is not None and plain.order_problem.startswith(UNBALANCED)
