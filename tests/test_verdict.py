"""The run-level model of one check (pytest_encperf/verdict.py) on constructed samples."""

from __future__ import annotations

import math
import statistics

import pytest

from pytest_encperf import verdict
from pytest_encperf.verdict import FAIL, PASS, UNDECIDED, Prior

PRIOR = Prior(0.05, 24.0, "test prior")


def test_one_reference_adds_twice_the_between_run_variance() -> None:
    now, ref = [0.0, 0.1, -0.1], [0.5, 0.6, 0.4, 0.5]
    found = verdict.estimate(now, [ref], PRIOR)
    assert found is not None
    within = (sum((x - 0.0) ** 2 for x in now) + sum((x - 0.5) ** 2 for x in ref)) / (2 + 3)
    assert found.change == pytest.approx(-0.5)
    assert found.se == pytest.approx(math.sqrt(within / 3 + within / 4 + 2 * 0.05**2))
    assert found.runs == 1 and "test prior" in found.between


def test_a_history_measures_the_between_run_spread_with_the_prior_and_never_widens_the_interval() -> None:
    now = [0.0, 0.1, -0.1]
    saved = [[0.5 + d + e for e in (0.05, -0.05, 0.0, 0.02)] for d in (0.0, 0.03, -0.03, 0.01)]
    one = verdict.estimate(now, saved[:1], PRIOR)
    four = verdict.estimate(now, saved, PRIOR)
    assert one is not None and four is not None
    means = [statistics.fmean(g) for g in saved]
    assert four.change == pytest.approx(statistics.fmean(now) - statistics.fmean(means))
    assert four.runs == 4 and "4 saved runs + test prior" in four.between
    assert four.se < one.se and four.df >= one.df  # history adds power, never removes it
    # two saved runs are not a history: the reference alone
    two = verdict.estimate(now, saved[:2], PRIOR)
    assert two is not None and two.runs == 1


def test_without_a_prior_only_a_history_gives_a_between_run_variance() -> None:
    assert verdict.estimate([1.0, 1.1], [[1.0, 1.2]], None) is None
    found = verdict.estimate([1.0, 1.1], [[1.0, 1.2], [1.1, 1.0], [0.9, 1.0]], None)
    assert (
        found is not None and found.between.startswith("between-run sd") and "3 saved runs)" in found.between
    )


def test_single_rounds_give_no_within_run_variance() -> None:
    assert verdict.estimate([1.0], [[1.0]], PRIOR) is None


@pytest.mark.parametrize(
    ("worse_percent", "expected"), [(40.0, FAIL), (0.0, PASS), (10.0, UNDECIDED), (-30.0, PASS)]
)
def test_three_outcomes_against_a_tolerance(worse_percent: float, expected: str) -> None:
    tau = verdict.boundary(10.0, higher_is_better=True)
    worse = -math.log(1 - worse_percent / 100)
    se, df = 0.03, 30
    p_fail, p_pass = verdict.p_fail(worse, tau, se, df), verdict.p_pass(worse, tau, se, df)
    assert verdict.outcome(p_fail, p_pass) == expected


def test_the_detectable_change_is_failed_in_ninety_percent_of_runs() -> None:
    tau, se, df, level = verdict.boundary(10.0, True), 0.04, 40, 0.05 / 16
    detect = verdict.detectable_percent(tau, se, df, level, True)
    true_worse = -math.log(1 - detect / 100)
    # with the estimate normal around the true change, FAIL needs worse - tau > t(1 - level) se
    shortfall = (true_worse - tau) / se - verdict.stats.t_ppf(1 - level, df)
    assert verdict.stats.t_sf(-shortfall, df) == pytest.approx(0.90, abs=1e-6)
    assert verdict.smallest_threshold_percent(se, df, True) < detect


def test_the_prior_of_an_unmeasured_backend_or_workload_is_the_largest_nearest() -> None:
    table = {("gocryptfs", "A"): (0.2, 24.0), ("fscrypt", "A"): (0.1, 24.0), ("gocryptfs", "B"): (0.3, 24.0)}
    table |= {("plain", "A"): (0.15, 24.0)}
    assert verdict.prior_for("fscrypt:contents=aes", "A", table).sd == 0.1  # its own, options aside
    assert verdict.prior_for("luks2", "A", table).sd == 0.2  # the workload's largest
    assert verdict.prior_for("fscrypt", "B", table).sd == 0.3  # no fscrypt B: the workload's largest
    assert verdict.prior_for("luks2", "C", table).sd == 0.3  # nothing of C: any encrypted backend's
    assert verdict.prior_for("plain", "C", table).sd == 0.15  # plain: only plain's own
    assert verdict.prior_for("plain", "A", {}) is None


def test_fit_prior_takes_the_larger_of_the_cell_and_its_backend_pooled() -> None:
    def cell(sd: float) -> dict[str, float]:
        return {"runs": 4, "df_between": 3, "sd_between_percent": sd}

    doc = {
        "estimates": {"x|A": cell(0.0), "x|B": cell(30.0), "x|C": {**cell(0.0), "sd_between_percent": None}}
    }
    fit = verdict.fit_prior([doc])
    pooled = math.sqrt((3 * 0.3**2) / 6)
    assert fit == {("x", "A"): (round(pooled, 4), 6), ("x", "B"): (0.3, 6)}
