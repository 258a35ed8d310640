"""Busy rounds (Measurement.busy) in the reports and in the gate: every table flags a cell whose
rounds were busy, the gate decides from the quiet rounds only, replaces busy ones while its
budget lasts and otherwise leaves the check UNDECIDED: machine busy (which --encperf-strict
fails); a scripted session with a faked busy reading shows it in the summary and the JSON."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_encperf.gate import MACHINE_BUSY, PASS, Gate, judge, parse_rules, quiet_rounds
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.report import (
    charts,
    check_table,
    detail_table,
    markdown_report,
    summary_table,
    verdict_header,
    verdict_report,
)
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)
from tests.unit.test_compare import SEQ_READ, SETTINGS, result, spread


def busy(measurement: Measurement, others: float = 0.9) -> Measurement:
    return dataclasses.replace(measurement, busy=True, others_cpu_s=others, steal_s=0.0, cpu_pressure_s=0.3)


def with_busy(res: Result, volume: set[int] = frozenset(), plain: set[int] = frozenset()) -> Result:  # type: ignore[assignment]
    res.rounds = [busy(m) if i in volume else m for i, m in enumerate(res.rounds)]
    res.baseline_rounds = [busy(m) if i in plain else m for i, m in enumerate(res.baseline_rounds)]
    return res


def test_a_busy_round_takes_its_pair_out_of_the_gates_samples() -> None:
    res = with_busy(result("fscrypt", SEQ_READ, [50, 40, 51, 49], [100, 100, 100, 100]), {1}, {3})
    kept, plain, dropped = quiet_rounds(res.rounds, res.baseline_rounds)
    assert [m.mb_per_s for m in kept] == [50, 51] and len(plain) == 2 and dropped == 4
    assert res.busy_rounds == 2
    # the partition target's plain rounds are not paired: each busy round goes alone
    kept, plain, dropped = quiet_rounds(res.rounds, res.baseline_rounds[:3], before_after=True)
    assert len(kept) == 3 and len(plain) == 3 and dropped == 1


def test_the_gate_decides_from_the_quiet_rounds_only() -> None:
    reference = RunData("ref", (result("fscrypt", SEQ_READ, spread(50, 10), spread(100, 10)),), SETTINGS)
    # a busy pair made the backend look 40% slower; the three quiet pairs show no change
    now = with_busy(result("fscrypt", SEQ_READ, [50.0, 30.0, 50.05, 49.95], [100.0] * 4), {1})
    (check,) = [
        c
        for c in judge(RunData("now", (now,), SETTINGS), reference, parse_rules("10%")).checks
        if c.backend == "fscrypt"
    ]
    assert check.status == PASS and check.rounds == (3, 10) and check.busy == 2
    assert check.change_percent == pytest.approx(0.0, abs=0.2)
    assert "3/10, 2 busy left out" in check_table([check])
    # the same rounds, not flagged: the busy pair moves the estimate
    flagged_off = result("fscrypt", SEQ_READ, [50.0, 30.0, 50.05, 49.95], [100.0] * 4)
    (plain_check,) = [
        c for c in judge(RunData("now", (flagged_off,), SETTINGS), reference, parse_rules("10%")).checks
        if c.backend == "fscrypt"
    ]  # fmt: skip
    assert plain_check.rounds == (4, 10)


def test_all_rounds_busy_leave_the_check_undecided_and_strict_fails() -> None:
    reference = RunData("ref", (result("fscrypt", SEQ_READ, spread(50, 10), spread(100, 10)),), SETTINGS)
    now = with_busy(result("fscrypt", SEQ_READ, [30.0, 31.0, 29.0], [100.0] * 3), {0, 1, 2})
    current = RunData("now", (now,), SETTINGS)
    verdict = judge(current, reference, parse_rules("10%"))
    (check,) = [c for c in verdict.checks if c.backend == "fscrypt"]
    assert check.status == MACHINE_BUSY == "UNDECIDED: machine busy"
    assert (
        "all 6 rounds of this run were measured while processes outside the run used more than"
        in check.reason
    )
    assert not verdict.failed  # not a regression ...
    assert any("UNDECIDED: machine busy" in item for item in verdict.incomplete)
    assert "2 undecided: machine busy" in verdict_header(verdict)  # plain's check too
    lines = verdict_report(verdict)
    assert (
        "line",
        "yellow",
        f"encperf: {MACHINE_BUSY}: fscrypt SEQ1M-Q8T1-read throughput: {check.reason}",
    ) in lines
    strict = judge(current, reference, parse_rules("10%"), strict=True)
    assert strict.failed  # ... but --encperf-strict fails: the gate could not check it
    # --encperf-max-overhead alike
    overhead = judge(current, None, [], parse_rules("50%"), strict=True)
    assert [c.status for c in overhead.checks] == [MACHINE_BUSY] and overhead.failed


def test_too_few_quiet_rounds_to_reach_significance_are_undecided_because_of_the_machine() -> None:
    reference = RunData("ref", (result("fscrypt", SEQ_READ, spread(50, 10), spread(100, 10)),), SETTINGS)
    # 12% worse in the one quiet pair, which alone cannot decide it against 10%
    now = with_busy(result("fscrypt", SEQ_READ, [44.0, 30.0, 30.0], [100.0] * 3), {1, 2})
    (check,) = [
        c for c in judge(RunData("now", (now,), SETTINGS), reference, parse_rules("10%")).checks
        if c.backend == "fscrypt"
    ]  # fmt: skip
    assert check.status == MACHINE_BUSY and check.reason.startswith("4 busy rounds left out; worse by 12.0%")


def test_the_gate_replaces_busy_pairs_with_quiet_ones_while_it_may() -> None:
    reference = RunData("ref", (result("fscrypt", SEQ_READ, spread(50, 10), spread(100, 10)),), SETTINGS)
    gate = Gate(reference, tuple(parse_rules("10%")), settings=SETTINGS)
    res = with_busy(result("fscrypt", SEQ_READ, [50.0, 50.0, 50.0], [100.0] * 3), {0, 2})
    assert gate.pending(res, 12) == (True, "2 of 3 pairs busy, replacing them")
    assert gate.pending(res, 0) == (False, "")  # no pair may be added: decided from the quiet one
    res.rounds.append(res.rounds[1])
    res.baseline_rounds.append(res.baseline_rounds[1])
    res.confirm_rounds = 1
    assert gate.pending(res, 11)[1] == "2 of 4 pairs busy, replacing them"
    res.rounds.append(res.rounds[1])
    res.baseline_rounds.append(res.baseline_rounds[1])
    res.confirm_rounds = 2
    assert gate.pending(res, 10) == (False, "")  # three quiet pairs, as many as were planned
    assert Gate(None, ()).pending(with_busy(result("x", SEQ_READ, [1.0]), {0}), 12) == (False, "")  # no rule


def test_every_report_flags_a_cell_with_busy_rounds_and_the_share_others_used() -> None:
    res = with_busy(result("gocryptfs", SEQ_READ, [60.0, 80.0, 79.0], [100.0] * 3), {0}, {0})
    quiet = result("fscrypt", SEQ_READ, [80.0, 80.0, 80.0], [100.0] * 3)
    summary = summary_table([res, quiet], {}, ["gocryptfs", "fscrypt"], [SEQ_READ])
    assert "busy 2/6 (others 0.90 core)!" in summary
    assert summary.count("busy") == 1  # the quiet cell is not flagged
    detail = detail_table([res, quiet])
    assert "busy 2/6 (others 0.90 core)" in detail
    assert "busy k/n: rounds of both sides during which processes outside this run" in detail
    assert "busy 2/6 (others 0.90 core)" in markdown_report([res, quiet], None)
    tile = charts.tile(res, "gocryptfs", "median")
    assert charts.Mark("busy", "busy 2/6 (others 0.90 core)") in tile.marks
    assert not [mark for mark in charts.tile(quiet, "fscrypt", "median").marks if mark.kind == "busy"]
