"""The gate's look-ups that the simulations of tests/functional/test_verdict_simulation make
millions of times, each kept once figured (issue 26): a kept value is the value figured afresh,
and Check.replaced is dataclasses.replace's copy."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pytest_encperf.gate.cells import Cell, cells_of, quiet_rounds
from pytest_encperf.gate.checks import Check, decide
from pytest_encperf.gate.rules import METRICS
from pytest_encperf.model import Measurement, Result
from pytest_encperf.workloads import CDM, PROFILES, Workload


def round_of(mb_per_s: float, block_size: int, position: int | None = None) -> Measurement:
    moved = int(mb_per_s * 1e6)
    return Measurement(
        "fake", "1", moved, 1.0, moved // block_size, 1.0, 2.0, 3.0, 0.1, "direct", pair_position=position
    )


def every_workload() -> list[Workload]:
    return list({w.name: w for profile in PROFILES.values() for w in profile.workloads_for(8 << 20)}.values())


def test_reports_iops_kept_is_reports_iops_figured() -> None:
    for workload in every_workload():
        figured = type(workload).reports_iops.func(workload)  # type: ignore[attr-defined]
        assert workload.reports_iops is figured and workload.reports_iops is figured  # kept: the same
        assert dataclasses.replace(workload).reports_iops is figured


def cells(positions: tuple[int | None, ...]) -> dict[tuple[str, str], Cell]:
    results = []
    for backend in ("gocryptfs", "plain:x"):
        for workload in CDM[:3]:
            result = Result(backend, workload)
            for index, position in enumerate(positions):
                result.baseline_rounds.append(round_of(100.0 + index, workload.block_size, position))
                result.rounds.append(round_of(50.0 + index, workload.block_size, position))
            results.append(result)
    return cells_of(results)


@pytest.mark.parametrize("positions", [(1, 2, 2, 1), (1, 1, 2), (None, None)])
def test_a_cells_kept_look_ups_are_its_figured_ones(positions: tuple[int | None, ...]) -> None:
    for cell in cells(positions).values():
        fresh = dataclasses.replace(cell)  # nothing kept yet
        assert cell.plain == (cell.backend.split(":", 1)[0] == "plain")
        for _ in range(2):  # figured, then kept
            assert cell.plain is fresh.plain
            assert cell.order_problem == Cell.order_problem.fget(fresh)  # type: ignore[attr-defined]
            for metric in METRICS.values():
                assert cell.setup(metric) == fresh._setup_of(metric)
                assert cell.samples(metric) == dataclasses.replace(cell).samples(metric)


def a_check() -> Check:
    return Check(
        "saved", "gocryptfs", "SEQ1M-Q8T1-read", "throughput", "x plain", "paired", 1.0, 0.9, -10.0, 10.0,
        (0.8, 1.0), 0.2, (4, 10), 10.0, "10%", "", "", gated=True, p_pass=0.3, se=0.05, df=12,
    )  # fmt: skip


def test_a_replaced_check_is_dataclasses_replace_copy() -> None:
    check = a_check()
    changes = {"status": "FAIL", "reason": "why", "p_adjusted": 0.01, "detectable": 12.5, "unreachable": True}
    made, copied = check.replaced(**changes), dataclasses.replace(check, **changes)
    assert made == copied and vars(made) == vars(copied) and list(vars(made)) == list(vars(copied))
    assert type(made) is Check and check.status == "" and made is not check
    assert repr(decide(check, 0.01, 3)) == repr(decide(dataclasses.replace(check), 0.01, 3))
    with pytest.raises(TypeError, match="not fields of Check: \\['statsu'\\]"):
        check.replaced(statsu="FAIL")
    # what replaced's copy rests on: every field set by __init__, nothing after it
    assert all(f.init for f in dataclasses.fields(Check)) and not hasattr(Check, "__post_init__")
    assert math.isnan(dataclasses.replace(check, se=math.nan).replaced().se)


@pytest.mark.parametrize("before_after", [False, True])
@pytest.mark.parametrize("plain_count", [4, 3])
def test_quiet_rounds_without_a_busy_round_keep_every_round_in_order(
    before_after: bool, plain_count: int
) -> None:
    rounds = [round_of(50.0 + i, 4096, 1 + i % 2) for i in range(4)]
    plain = [round_of(100.0 + i, 4096, 1 + i % 2) for i in range(plain_count)]
    kept, kept_plain, dropped = quiet_rounds(rounds, plain, before_after)
    assert kept == tuple(rounds) and kept_plain == tuple(plain) and dropped == 0
    busy = [dataclasses.replace(rounds[0], busy=True), *rounds[1:]]  # and a busy one is still left out
    assert quiet_rounds(busy, plain, before_after)[2] == (1 if before_after or plain_count == 3 else 2)
