"""The noise estimator (pytest_encperf.noise): a one-way random-effects ANOVA of log ratios by run,
and its reader of saved documents."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_encperf import noise, storage
from pytest_encperf.model import Measurement, Result
from pytest_encperf.workloads import CDM

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def simulated(
    seed: int, runs: int, rounds: int | list[int], sd_within: float, sd_between: float
) -> list[list[float]]:
    generator = random.Random(seed)
    sizes = rounds if isinstance(rounds, list) else [rounds] * runs
    groups = []
    for size in sizes:
        level = generator.gauss(-0.3, sd_between)
        groups.append([level + generator.gauss(0, sd_within) for _ in range(size)])
    return groups


def test_known_components_are_recovered() -> None:
    """200 runs of 10 rounds, sd 0.15 within and 0.10 between: both within 10% of the truth."""
    estimate = noise.estimate(simulated(1, 200, 10, 0.15, 0.10))
    assert estimate.runs == 200 and estimate.rounds == 2000
    assert estimate.df_within == 1800 and estimate.df_between == 199
    assert estimate.sd_within == pytest.approx(0.15, rel=0.1)
    assert estimate.sd_between == pytest.approx(0.10, rel=0.1)
    assert estimate.within_interval[0] < 0.15 < estimate.within_interval[1]
    assert estimate.between_interval[0] < 0.10 < estimate.between_interval[1]
    assert not estimate.truncated and estimate.notes == ()
    assert estimate.sd_run_mean == pytest.approx(math.sqrt(0.10**2 + 0.15**2 / 10), rel=0.1)
    assert estimate.sd_within_robust == pytest.approx(0.15, rel=0.1)  # normal rounds: the same sd


def test_the_robust_within_sd_ignores_a_few_outlying_rounds() -> None:
    groups = simulated(3, 20, 10, 0.1, 0.05)
    groups[0][0] += 3.0  # one round 20 times slower: a neighbour took the disk
    estimate = noise.estimate(groups)
    assert estimate.sd_within > 0.2 and estimate.sd_within_robust == pytest.approx(0.1, rel=0.15)


def test_intervals_cover_the_truth_about_as_often_as_stated() -> None:
    """90% intervals over 300 simulated designs of 10 runs x 10 rounds: coverage 83-96%."""
    within = between = 0
    for seed in range(300):
        e = noise.estimate(simulated(seed, 10, 10, 0.15, 0.10))
        within += e.within_interval is not None and e.within_interval[0] <= 0.15 <= e.within_interval[1]
        between += e.between_interval is not None and e.between_interval[0] <= 0.10 <= e.between_interval[1]
    assert 0.83 * 300 <= within <= 0.96 * 300
    assert 0.80 * 300 <= between <= 0.96 * 300  # Satterthwaite is approximate; truncation misses


def test_unbalanced_groups() -> None:
    """Runs with 2 to 20 rounds (an interrupted run, confirmation rounds): still recovered."""
    sizes = [2 + (i * 7) % 19 for i in range(150)]
    estimate = noise.estimate(simulated(2, 0, sizes, 0.2, 0.1))
    assert estimate.rounds == sum(sizes) and estimate.df_within == sum(sizes) - 150
    assert estimate.sd_within == pytest.approx(0.2, rel=0.1)
    assert estimate.sd_between == pytest.approx(0.1, rel=0.15)


def test_unbalanced_exact_values() -> None:
    """Hand-computed: groups [0, 2] and [4]: MSW = 2 (1 df), MSB = 6 (1 df), n0 = 4/3."""
    estimate = noise.estimate([[0.0, 2.0], [4.0]])
    # grand mean 2; SSB = 2 * (1 - 2)^2 + 1 * (4 - 2)^2 = 6 (1 df); n0 = (3 - 5/3) / 1 = 4/3
    assert estimate.sd_within == pytest.approx(math.sqrt(2.0))
    assert estimate.sd_between == pytest.approx(math.sqrt((6.0 - 2.0) / (4 / 3)))


def test_a_single_run_leaves_the_between_variance_undefined() -> None:
    estimate = noise.estimate([[0.1, 0.2, 0.15, 0.3]])
    assert estimate.runs == 1 and estimate.sd_between is None and estimate.between_interval is None
    assert estimate.sd_run_mean is None
    assert estimate.sd_within is not None and estimate.df_within == 3 and estimate.df_between == 0
    assert any("between-run variance undefined: 1 run " in note for note in estimate.notes)
    assert noise.estimate([]).notes[0].startswith("within-run variance undefined")


def test_one_round_per_run_leaves_both_undefined() -> None:
    estimate = noise.estimate([[0.1], [0.3], [0.2]])
    assert estimate.sd_within is None and estimate.sd_between is None
    assert "within-run variance undefined" in estimate.notes[0]


def test_a_negative_between_estimate_is_truncated_at_zero() -> None:
    """Runs whose means agree more closely than their rounds would predict: reported as 0."""
    estimate = noise.estimate([[-1.0, 1.0], [1.0, -1.0], [-1.0, 1.0]])
    assert estimate.sd_between == 0.0 and estimate.truncated and estimate.between_interval is None
    assert any("reported as 0" in note for note in estimate.notes)
    assert estimate.to_dict()["sd_between_percent"] == 0.0


def test_a_between_estimate_on_less_than_one_effective_df_has_no_interval() -> None:
    """Runs that differ barely more than their rounds predict: a small positive estimate whose
    Satterthwaite df is far below 1, where chi-square quantiles underflow (a 'lower bound' of
    4e20% was once printed for a 0.8% estimate); the table says there is no interval."""
    offset = math.sqrt(0.1008)  # ten runs' means at +-offset: MSB 1.12 just above MSW 1.11
    groups = [
        [(offset if i % 2 else -offset) + (1.0 if j % 2 else -1.0) for j in range(10)] for i in range(10)
    ]
    estimate = noise.estimate(groups)
    assert 0 < estimate.sd_between < 0.05 and estimate.between_interval is None
    assert any("effective df" in note for note in estimate.notes)
    table = noise.markdown_table({("x", "w"): estimate}, label="test", date="2026-12-01")
    assert "(no interval: df < 1)" in table


def test_every_between_interval_given_holds_its_estimate() -> None:
    generator = random.Random(7)
    for _ in range(300):
        runs, rounds = generator.randint(2, 8), generator.randint(2, 12)
        spread = generator.choice([0.0, 0.01, 0.1, 0.5])
        groups = [
            [mean + generator.gauss(0, 0.3) for _ in range(rounds)]
            for mean in [generator.gauss(0, spread) for _ in range(runs)]
        ]
        estimate = noise.estimate(groups)
        if estimate.between_interval is not None:
            low, high = estimate.between_interval
            assert low <= estimate.sd_between <= high, (groups, estimate)


def test_non_finite_values_are_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        noise.estimate([[0.1, math.inf]])


@pytest.mark.parametrize(
    ("q", "df", "expected"),
    [(0.975, 1, 5.02389), (0.025, 9, 2.70039), (0.95, 9, 16.9190), (0.05, 199, 167.361), (0.5, 2.5, 1.87385)],
)
def test_chi2_quantiles(q: float, df: float, expected: float) -> None:
    assert noise.chi2_ppf(q, df) == pytest.approx(expected, rel=1e-4)


# ----------------------------------------------------------------------------- saved documents


def measurement(mb_per_s: float) -> Measurement:
    return Measurement(
        engine="fake", engine_version="1", bytes=int(mb_per_s * 1e6), seconds=1.0, ios=int(mb_per_s),
        lat_p50_us=1.0, lat_p99_us=2.0, lat_p999_us=3.0, cpu_seconds=0.1, io_mode="direct",
    )  # fmt: skip


def saved_document() -> dict[str, Any]:
    results = [
        Result("gocryptfs", CDM[0], [measurement(50), measurement(80)], [measurement(100), measurement(100)]),
        Result("fscrypt", CDM[0], [measurement(90)], [measurement(100)]),
    ]
    return json.loads(json.dumps(storage.document(results, {}, "m1", {}, {}, NOW)))


def test_the_reader_gives_each_rounds_log_ratio() -> None:
    cells = noise.read_log_ratios(saved_document())
    assert cells[("gocryptfs", CDM[0].name)] == pytest.approx([math.log(0.5), math.log(0.8)])
    assert cells[("fscrypt", CDM[0].name)] == pytest.approx([math.log(0.9)])


def test_estimate_all_and_the_kept_data() -> None:
    runs = {
        "run-01": noise.read_log_ratios(saved_document()),
        "run-02": noise.read_log_ratios(saved_document()),
    }
    table = noise.estimate_all(runs)
    assert table[("gocryptfs", CDM[0].name)].runs == 2
    doc = noise.data_document(runs, table, label="test", date="2026-12-01")
    assert json.loads(json.dumps(doc))["runs"]["run-01"][f"gocryptfs|{CDM[0].name}"] == [
        round(math.log(0.5), 5),
        round(math.log(0.8), 5),
    ]
    markdown = noise.markdown_table(table, label="test", date="2026-12-01")
    assert "| fscrypt | SEQ1M-Q8T1-read | 2 | 2 |" in markdown and "undefined" in markdown


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def refused_or_read(doc: Any) -> None:
    try:
        cells = noise.read_log_ratios(doc, "doc.json")
    except storage.StorageError as exc:
        assert str(exc).startswith("doc.json: not an encperf result file")
    else:
        assert all(math.isfinite(v) for values in cells.values() for v in values)


@given(JSON)
def test_the_reader_never_raises_on_arbitrary_json(doc: Any) -> None:
    refused_or_read(doc)


@settings(max_examples=300)
@given(st.data())
def test_the_reader_never_raises_on_a_saved_document_with_one_part_replaced(data: st.DataObject) -> None:
    """Any field of a real document (a round's seconds, the workload, the format ...) replaced by
    arbitrary JSON: read, or refused with a StorageError naming the file."""
    doc = saved_document()
    where = data.draw(st.sampled_from(paths(doc)[1:]))
    parent = doc
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = data.draw(JSON)
    refused_or_read(copy.deepcopy(doc))


@pytest.mark.parametrize("field", ["busy_remeasured", "warmup_rounds", "confirm_rounds"])
def test_an_infinite_count_is_refused_not_raised(field: str) -> None:
    """Found by the test above: int(inf) raises OverflowError, which no reader caught."""
    doc = saved_document()
    doc["benchmarks"][0]["extra_info"]["encperf"][field] = float("inf")
    refused_or_read(doc)


@pytest.mark.parametrize("kept_in", ["benchmarks/data", "benchmarks/data/quiet"])
def test_the_statistics_page_states_the_kept_figures(kept_in: str) -> None:
    """docs/explanation/statistics.md's noise tables are the newest kept benchmark data: the loaded
    machine's (benchmarks/data/noise-*.md, the built-in prior's fit) and the quiet machine's
    (benchmarks/data/quiet/noise-*.md, not part of the prior)."""
    root = Path(__file__).resolve().parents[2]
    kept = sorted((root / kept_in).glob("noise-*.md"))
    assert kept, f"benchmarks/noise.py's data is kept in {kept_in}"
    readme = (root / "docs" / "explanation" / "statistics.md").read_text(encoding="utf-8")
    rows = [line for line in kept[-1].read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    assert rows and [row for row in rows if row not in readme] == []
    assert json.loads(kept[-1].with_suffix(".json").read_text(encoding="utf-8"))["estimates"]
