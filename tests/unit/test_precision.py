"""Whole A B B A blocks and --encperf-precision: the stopping rule on constructed samples, the
order each round ran in, and the overhead's interval in the summary and the JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest

from pytest_encperf import stats
from pytest_encperf.model import Measurement, Result
from pytest_encperf.report import summary_table
from pytest_encperf.rounds import PRECISION_MIN_PAIRS, PairedRounds, is_precise, measure_rounds, whole_blocks
from pytest_encperf.storage import benchmark_entry
from pytest_encperf.workloads import CDM

SEQ_READ = CDM[0]


class Script:
    """Rounds of scripted MB/s on a clock that each round advances by one second."""

    def __init__(self, volume: list[float]) -> None:
        self.now = 0.0
        self.volume: Iterator[float] = iter(volume * 100)
        self.order: list[str] = []

    def clock(self) -> float:
        return self.now

    def round(self, name: str, mb_per_s: float) -> Measurement:
        self.order.append(name)
        self.now += 1.0
        moved = int(mb_per_s * 1e6)
        return Measurement("t", "1", moved, 1.0, moved, 1.0, 1.0, 1.0, 0.1, "direct")

    def pairs(self) -> PairedRounds:
        return PairedRounds(
            lambda runtime: self.round("plain", 100.0),
            lambda runtime: self.round("volume", next(self.volume)),
            clock=self.clock,
        )


def measure(script: Script, rounds: int, precision: float | None, budget: float = 60.0) -> Result:
    return measure_rounds(
        Result("fscrypt", SEQ_READ),
        script.pairs(),
        runtime=1.0,
        rounds=rounds,
        precision=precision,
        steady_budget=budget,
        steady_clock=script.clock,
    )


# ----------------------------------------------------------------------------- the interval


def test_the_mean_interval_is_students_t() -> None:
    interval = stats.mean_interval([1.0, 2.0, 3.0, 4.0])
    assert interval is not None and interval.estimate == 2.5 and interval.n == 4
    # t(0.975, 3) = 3.182; sd = 1.291; half-width = 3.182 x 1.291 / 2 = 2.054
    assert interval.high - interval.estimate == pytest.approx(2.054, abs=0.001)
    assert interval.estimate - interval.low == pytest.approx(interval.high - interval.estimate)
    assert stats.mean_interval([1.0]) is None


def test_the_overhead_interval_is_on_the_log_scale_of_the_paired_ratios() -> None:
    def m(mb_per_s: float) -> Measurement:
        return Measurement("t", "1", int(mb_per_s * 1e6), 1.0, 1, 1.0, 1.0, 1.0, 0.1, "direct")

    result = Result("fscrypt", SEQ_READ, [m(v) for v in (72, 78, 75, 77)], [m(100)] * 4)
    interval = result.overhead_interval
    assert interval is not None and interval.pairs == 4
    logs = [math.log(v / 100) for v in (72, 78, 75, 77)]
    expected = stats.mean_interval(logs)
    assert expected is not None
    assert interval.estimate == pytest.approx((math.exp(expected.estimate) - 1) * 100)
    assert interval.low == pytest.approx((math.exp(expected.low) - 1) * 100)
    assert interval.high == pytest.approx((math.exp(expected.high) - 1) * 100)
    assert interval.half_width == pytest.approx((interval.high - interval.low) / 2)
    # one pair cannot bound it; nor can rounds whose plain ran before and after (the partition)
    assert Result("fscrypt", SEQ_READ, [m(75)], [m(100)]).overhead_interval is None
    before_after = Result("fscrypt", SEQ_READ, [m(75)] * 4, [m(100)] * 4, {"baseline": "before/after"})
    assert before_after.overhead_interval is None


def test_a_tasks_interval_is_of_its_speed_plain_over_backend() -> None:
    from pytest_encperf.workloads import REALWORK

    task = next(w for w in REALWORK if w.kind == "task")
    assert task.lower_is_better

    def took(seconds: float) -> Measurement:
        return Measurement("t", "1", 1, seconds, 1, 1.0, 1.0, 1.0, 0.1, "direct")

    # 12.5 s against plain's 10 s: 20% slower, as change_percent says it
    result = Result("fscrypt", task, [took(v) for v in (12.4, 12.6, 12.5, 12.5)], [took(10.0)] * 4)
    interval = result.overhead_interval
    assert interval is not None and result.change_percent == pytest.approx(-20.0)
    assert interval.low < interval.estimate < interval.high < 0
    assert interval.estimate == pytest.approx(-20.0, abs=0.1)


# ----------------------------------------------------------------------------- whole blocks


@pytest.mark.parametrize(("asked", "counted"), [(1, 2), (2, 2), (3, 4), (4, 4), (5, 6), (10, 10)])
def test_rounds_are_rounded_up_to_whole_a_b_b_a_blocks(asked: int, counted: int) -> None:
    assert whole_blocks(asked) == counted
    script = Script([50.0])
    result = measure(script, asked, precision=None)
    assert len(result.rounds) == len(result.baseline_rounds) == counted
    assert script.order == ["plain", "volume", "volume", "plain"] * (counted // 2)
    rounded = f" ({asked} rounded up to whole A B B A blocks)" if counted != asked else ""
    assert result.stop_reason == f"{counted} rounds{rounded}"


def test_each_round_records_where_it_ran_in_its_pair_and_the_json_keeps_it() -> None:
    result = measure(Script([50.0]), 4, precision=None)
    assert [m.pair_position for m in result.baseline_rounds] == [1, 2, 1, 2]
    assert [m.pair_position for m in result.rounds] == [2, 1, 2, 1]
    assert result.order_problem is None
    entry = json.loads(json.dumps(benchmark_entry(result)))
    saved = entry["extra_info"]["encperf"]
    assert [r["pair_position"] for r in saved["baseline_rounds"]] == [1, 2, 1, 2]
    assert [m.pair_position for m in Result.from_dict(saved).rounds] == [2, 1, 2, 1]


def test_a_run_saved_without_the_order_still_loads_and_has_no_order_problem() -> None:
    saved = benchmark_entry(measure(Script([50.0]), 4, precision=None))["extra_info"]["encperf"]
    for round_ in (*saved["rounds"], *saved["baseline_rounds"]):
        del round_["pair_position"]
    old = Result.from_dict(json.loads(json.dumps(saved)))
    assert [m.pair_position for m in old.rounds] == [None] * 4 and old.order_problem is None


def test_rounds_that_are_not_whole_blocks_say_so() -> None:
    result = measure(Script([50.0]), 4, precision=None)
    result.rounds.pop()
    result.baseline_rounds.pop()
    assert result.order_problem == (
        "2 pairs with plain first and 1 with the backend first: not whole A B B A blocks, "
        "so an order effect does not cancel"
    )


# ----------------------------------------------------------------------------- the stopping rule


def test_a_cell_precise_after_the_minimum_rounds_stops_there() -> None:
    script = Script([75.0, 75.3, 74.8, 75.1])
    result = measure(script, 4, precision=2.0)
    assert len(result.rounds) == PRECISION_MIN_PAIRS
    assert is_precise(result, 2.0)
    half = result.overhead_interval.half_width  # type: ignore[union-attr]
    assert result.stop_reason == f"4 rounds, within ±2 (±{half:.1f})"


def test_precision_measures_at_least_the_minimum_pairs_even_when_fewer_rounds_are_asked() -> None:
    result = measure(Script([75.0]), 1, precision=2.0)
    assert len(result.rounds) == PRECISION_MIN_PAIRS  # two blocks: an interval on 3 df


def test_a_noisy_cell_gets_whole_blocks_until_precise() -> None:
    # the first four pairs scatter widely; after them every ratio is 0.75
    script = Script([55.0, 95.0, 60.0, 90.0] + [75.0] * 200)
    result = measure(script, 4, precision=5.0, budget=1000.0)
    assert is_precise(result, 5.0) and len(result.rounds) > PRECISION_MIN_PAIRS
    assert len(result.rounds) % 2 == 0 and result.order_problem is None
    assert "within ±5" in result.stop_reason
    assert not is_precise(result, 0.001)


def test_a_noisy_cell_continues_until_the_budget_is_spent_in_whole_blocks() -> None:
    script = Script([50.0, 100.0])  # ratios 0.5 and 1.0 for ever: never within ±2
    result = measure(script, 4, precision=2.0, budget=20.0)
    # 1 s per round, 4 s per block: blocks start at 0, 4, 8, 12 and 16 s of the budget
    assert len(result.rounds) == 4 + 5 * 2
    assert len(result.rounds) % 2 == 0 and result.order_problem is None
    half = result.overhead_interval.half_width  # type: ignore[union-attr]
    assert result.stop_reason == f"14 rounds, precision ±2 (±{half:.1f}) not reached in 20 s"


def test_precision_and_steady_state_share_one_budget_and_both_are_named() -> None:
    script = Script([50.0, 100.0])
    result = measure_rounds(
        Result("fscrypt", SEQ_READ), script.pairs(), runtime=1.0, rounds=2, steady_cv=0.01,
        precision=2.0, steady_budget=8.0, steady_clock=script.clock,
    )  # fmt: skip
    assert result.stop_reason.startswith("6 rounds, CV target and precision ±2 (±")
    assert result.stop_reason.endswith(") not reached in 8 s")


def test_precision_off_adds_nothing() -> None:
    result = measure(Script([50.0, 100.0]), 4, precision=None)
    assert len(result.rounds) == 4 and result.stop_reason == "4 rounds"


def test_the_summary_shows_the_change_with_its_interval() -> None:
    result = measure(Script([75.0, 75.2, 74.8, 75.0]), 4, precision=None)
    half = result.overhead_interval.half_width  # type: ignore[union-attr]
    assert 0 < half < 1
    table = summary_table([result], {}, ["fscrypt"], list(CDM))
    assert f"-25.0% ±{half:.1f}" in table


# ----------------------------------------------------------------------------- a session


def test_the_html_tiles_and_the_markdown_show_the_change_with_its_interval() -> None:
    from pytest_encperf.report import html, markdown_report

    result = measure(Script([75.0, 75.2, 74.8, 75.0]), 4, precision=None)
    half = result.overhead_interval.half_width  # type: ignore[union-attr]
    # the tile shows CrystalDiskMark's best against plain's best (75.2 / 100), then the interval
    assert f"-24.8% ±{half:.1f}</span>" in html.tiles_html([result], ["fscrypt"], {}, ["cdm"])
    markdown = markdown_report([result], None)
    assert f"-25.0% ±{half:.1f}" in markdown and "vs plain ±: half the width of the 95% interval" in markdown
