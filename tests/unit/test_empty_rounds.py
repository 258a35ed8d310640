"""A round that moved nothing (0 bytes in its window) and statistics on values that are zero or not
finite: the run is still saved and judged, each check of such a cell says why it decided nothing, a
round is run again before it is kept as empty, and an error nobody expected names where it came from."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_encperf import stats, storage
from pytest_encperf.benchmarkentries import plain_entry, seconds_per_gib_stats
from pytest_encperf.gate import SAVED, judge, parse_rules
from pytest_encperf.model import MachineRun, Measurement, Result, RunData, coefficient_of_variation
from pytest_encperf.outcome import Outcome, unexpected_error
from pytest_encperf.report import detail_table, markdown_report, summary_table
from pytest_encperf.rounds import EMPTY_ROUND_ATTEMPTS, PairedRounds, RoundMeter, measure_rounds
from pytest_encperf.settings import resolve
from pytest_encperf.usertiming import ENGINE as TIMED_ENGINE
from pytest_encperf.workloads import CDM

RANDOM_WRITE = next(w for w in CDM if w.name == "RND4K-Q32T1-write")
MACHINE = ({"node": "box"}, "m1")


def measurement(mb_per_s: float, position: int = 1, **fields: Any) -> Measurement:
    moved = int(mb_per_s * 1e6)
    base: dict[str, Any] = dict(
        engine="fio", engine_version="3.33", bytes=moved, seconds=1.5, ios=moved // 4096, lat_p50_us=10.0,
        lat_p99_us=20.0, lat_p999_us=30.0, cpu_seconds=0.1, io_mode="buffered", pair_position=position,
    )  # fmt: skip
    base.update(fields)
    return Measurement(**base)


def result(volume: list[float], plain: float = 200.0) -> Result:
    """gocryptfs against plain in A B B A pairs: ``volume`` MB/s of each round, plain steady."""
    positions = [1 + (i // 1) % 2 for i in range(len(volume))]
    return Result(
        "gocryptfs",
        RANDOM_WRITE,
        [measurement(v, 2 if p == 1 else 1) for v, p in zip(volume, positions, strict=True)],
        [measurement(plain * (1 + 0.01 * (i % 3)), p) for i, p in enumerate(positions)],
    )


def steady(n: int = 10) -> list[float]:
    return [10.0 + 0.1 * (i % 4) for i in range(n)]


def with_empty_round(n: int = 10, at: int = 3) -> list[float]:
    values = steady(n)
    values[at] = 0.0
    return values


def machine_run(volume: list[float]) -> MachineRun:
    return MachineRun(
        "m1", {"node": "box"}, {"size": "268435456", "runtime": "1.5"}, "fio 3.33", [result(volume)]
    )


def outcome(tmp_path: Path, **options: str) -> Outcome:
    cli: dict[str, str | None] = {"backends": "gocryptfs", "storage": str(tmp_path / "saved"), **options}
    cli["dir"] = str(tmp_path)
    return Outcome(resolve(cli, {}, environ={}))


def finish(out: Outcome, run: MachineRun) -> bool:
    return out.finish(lambda: [run], lambda: MACHINE, lambda machine_run: [], "")


# ----------------------------------------------------------------------------- saving and judging


def test_a_run_with_a_round_that_moved_nothing_is_saved_and_its_stats_leave_the_round_out(
    tmp_path: Path,
) -> None:
    """The crash of a saving run on a busy machine: pytest-benchmark's stats of the rounds' seconds
    per GiB took the empty round's infinity, and statistics.stdev raised AttributeError ('float'
    object has no attribute 'numerator') while the document was built, before anything was saved."""
    reports = {kind: str(tmp_path / f"report.{kind}") for kind in ("json", "markdown", "html")}
    out = outcome(tmp_path, save="gate-bars", **reports)
    assert finish(out, machine_run(with_empty_round())) is False
    assert out.verdict is not None and out.verdict.errors == []
    assert out.verdict.saved is not None
    assert all(Path(path).stat().st_size for path in reports.values())  # every report written
    doc = json.loads(Path(out.verdict.saved).read_text())
    json.dumps(doc, allow_nan=False)  # strict JSON: no Infinity anywhere
    (entry,) = [e for e in doc["benchmarks"] if e["params"]["backend"] == "gocryptfs"]
    assert entry["stats"]["rounds"] == 9 and len(entry["stats"]["data"]) == 9
    assert entry["extra_info"]["stats_left_out"] == ["round 4 moved nothing: no time per GiB"]
    (loaded,) = storage.results_of(doc)
    assert [m.bytes for m in loaded.rounds][3] == 0  # the round itself is kept, as measured


def test_every_round_empty_gives_no_stats_and_says_which() -> None:
    rounds = [measurement(0.0), measurement(0.0)]
    assert seconds_per_gib_stats(rounds) == {}
    entry = plain_entry(Result("gocryptfs", RANDOM_WRITE, [measurement(10.0)] * 2, rounds))
    assert entry is not None
    assert entry["extra_info"]["stats_left_out"] == [
        "round 1 moved nothing: no time per GiB",
        "round 2 moved nothing: no time per GiB",
    ]


@pytest.mark.parametrize("options", [{"compare": "latest"}, {"fail": "10%"}, {"fail": "10%", "history": "5"}])
def test_a_check_of_a_cell_with_an_empty_round_is_invalid_and_says_which_round(
    tmp_path: Path, options: dict[str, str]
) -> None:
    """Against saved runs (one, or a history): the run is still saved, nothing crashes, the cell's
    check decides nothing and names the round."""
    for _ in range(3):
        assert finish(outcome(tmp_path, save="gate-bars"), machine_run(steady())) is False
    out = outcome(tmp_path, save="gate-bars", **options)
    finish(out, machine_run(with_empty_round()))
    assert out.verdict is not None and out.verdict.errors == [] and out.verdict.saved
    (check,) = [c for c in out.verdict.checks if c.backend == "gocryptfs"]
    assert check.status == "invalid"
    assert "this run has unusable samples (round 4 is 0)" in check.reason


def test_a_saved_run_with_an_empty_round_as_the_reference_leaves_its_cells_undecided() -> None:
    reference = RunData("ref", (result(with_empty_round()),))
    now = RunData("now", (result(steady()),))
    verdict = judge(now, reference, parse_rules("10%"))
    (check,) = [c for c in verdict.checks if c.backend == "gocryptfs" and c.kind == SAVED]
    assert check.status == "invalid" and "the reference has unusable samples (round 4 is 0)" in check.reason
    assert not verdict.failed  # undecided, not a regression (--encperf-strict fails it)


def test_the_overhead_check_of_a_cell_with_an_empty_round_is_invalid() -> None:
    verdict = judge(RunData("now", (result(with_empty_round()),)), None, [], parse_rules("99%"))
    (check,) = verdict.checks
    assert check.status == "invalid" and "round 4 is 0" in check.reason


def test_the_reports_show_a_cell_with_an_empty_round() -> None:
    """The tables, the Markdown report and every statistic of the result take the round."""
    cell = result(with_empty_round())
    assert cell.cv() is not None and cell.change_percent is not None
    interval = cell.overhead_interval
    assert interval is not None and interval.pairs == 9  # the pairs that have a ratio
    assert "RND4K-Q32T1-write" in detail_table([cell])
    assert "RND4K Q32T1" in summary_table([cell], {}, ["gocryptfs"], list(CDM))
    verdict = judge(RunData("now", (cell,)), None, [], parse_rules("99%"))
    assert "invalid" in markdown_report([cell], verdict)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_statistics_on_values_that_are_not_finite_give_no_number_instead_of_raising(bad: float) -> None:
    with pytest.raises(AttributeError):  # why these guards exist: Python 3.11's stdev on infinity
        stats.statistics.stdev([1.0, math.inf])
    assert coefficient_of_variation([1.0, 2.0, bad]) is None
    assert stats.mean_interval([0.1, 0.2, bad]) is None
    assert seconds_per_gib_stats([measurement(10.0), measurement(12.0, seconds=bad)])["rounds"] == (
        1 if not math.isfinite(bad) else 2
    )


# ----------------------------------------------------------------------------- a round that moved nothing


class Rounds:
    """A side whose rounds move ``values`` MB/s in turn (0: nothing); counts them."""

    def __init__(self, *values: float, engine: str = "fio") -> None:
        self.values, self.engine, self.calls = list(values), engine, 0

    def __call__(self, runtime: float = 1.5) -> Measurement:
        value = self.values[min(self.calls, len(self.values) - 1)]
        self.calls += 1
        return measurement(value, engine=self.engine)


def test_a_round_that_moved_nothing_is_run_again_and_the_round_kept_says_so() -> None:
    side = Rounds(0.0, 12.0)
    kept = RoundMeter().measure(side)
    assert side.calls == 2
    assert (kept.bytes > 0, kept.attempts, kept.caveats) == (True, 2, ("measured-again",))


def test_a_round_that_moves_nothing_every_time_is_kept_as_measured_with_a_caveat() -> None:
    side = Rounds(0.0)
    kept = RoundMeter().measure(side)
    assert side.calls == EMPTY_ROUND_ATTEMPTS
    assert (kept.bytes, kept.attempts, kept.caveats) == (0, EMPTY_ROUND_ATTEMPTS, ("moved-nothing",))


def test_a_round_that_moved_something_and_a_timed_function_are_run_once() -> None:
    """A timed function (encperf.time) moves no bytes of its own: its round is never empty (the
    runner tells the meter so: Workload.is_timed_function)."""
    timed = RoundMeter(timed_function=True)
    for side, meter in ((Rounds(12.0), RoundMeter()), (Rounds(0.0, engine=TIMED_ENGINE), timed)):
        kept = meter.measure(side)
        assert (side.calls, kept.attempts, kept.caveats) == (1, 1, ())


def test_a_round_of_no_bytes_is_empty_whatever_ios_it_counted() -> None:
    assert measurement(0.0, ios=3).moved_nothing and measurement(0.0).moved_nothing
    assert not measurement(0.001).moved_nothing


def test_the_paired_rounds_of_any_engine_run_an_empty_round_again_on_its_own_side() -> None:
    """The measuring loop (rounds.measure_rounds) runs every round through RoundMeter, so the fio
    and the native engine alike: the backend's empty round is run again, plain's rounds are not."""
    plain, backend = Rounds(200.0), Rounds(10.0, 0.0, 10.0)
    measured = measure_rounds(
        Result("gocryptfs", RANDOM_WRITE), PairedRounds(plain, backend), runtime=1.5, rounds=4
    )
    assert (plain.calls, backend.calls) == (4, 5)
    assert all(m.bytes > 0 for m in measured.rounds)
    assert [m.attempts for m in measured.rounds] == [1, 2, 1, 1]
    assert measured.caveats == {"measured-again": (1, 0)}


def test_a_round_measured_again_keeps_its_cell_comparable_with_a_saved_one() -> None:
    """How a round came about is no difference in what it measured (model.HOW_MEASURED_CAVEATS); a
    cell kept with an empty round differs from one without."""
    again = result(steady())
    again.rounds[2] = measurement(10.0, 1, attempts=2, caveats=("measured-again",))
    verdict = judge(RunData("now", (again,)), RunData("ref", (result(steady()),)), parse_rules("10%"))
    assert {c.status for c in verdict.checks if c.backend == "gocryptfs"} != {"not comparable"}
    empty = result(with_empty_round())
    empty.rounds[3] = measurement(0.0, 2, caveats=("moved-nothing",))
    verdict = judge(RunData("now", (empty,)), RunData("ref", (result(steady()),)), parse_rules("10%"))
    (check,) = [c for c in verdict.checks if c.backend == "gocryptfs"]
    assert check.status == "not comparable" and "moved-nothing" in check.reason


# ----------------------------------------------------------------------------- an error nobody expected


def raise_deep_down() -> list[MachineRun]:
    return [] + [MachineRun("m1")] * int("not a number")


def test_an_unexpected_error_names_each_frame_it_came_through(tmp_path: Path) -> None:
    """Outcome.finish never raises, and its error says where: the text ends with the traceback's
    frames, encperf's files by their place in the package, down to the line that raised."""
    out = outcome(tmp_path)
    assert out.finish(raise_deep_down, lambda: MACHINE, lambda machine_run: [], "") is True
    assert out.verdict is not None
    (error,) = out.verdict.errors
    assert error.startswith("ValueError: invalid literal for int() with base 10: 'not a number' (traceback: ")
    assert "pytest_encperf/outcome.py:" in error and " finish > " in error
    assert error.endswith(
        f"{Path(__file__).name}:{raise_deep_down.__code__.co_firstlineno + 1} raise_deep_down)"
    )


def test_an_unexpected_error_from_a_library_names_the_library_file() -> None:
    try:
        json.loads("{")
    except ValueError as exc:
        text = unexpected_error(exc)
    assert "json/decoder.py" not in text and "decoder.py:" in text  # the standard library: by name
    assert f"{Path(__file__).name}:" in text
