"""Mann-Whitney U, bootstrap interval, CV: pure statistics against known values."""

from __future__ import annotations

import math

import pytest

from pytest_encperf.stats import bootstrap_ratio_ci, cv, mann_whitney_u, median, min_p_value

# (x, y, alternative, method, U, p) from scipy 1.17.1 scipy.stats.mannwhitneyu(x, y, alternative=...,
# method=...) ("asymptotic" there is "normal" here; continuity correction on, as scipy's default).
# The third sample set is scipy's documented example (Conover): U=17, two-sided exact p=0.1111.
A7, B6 = [3.1, 2.2, 4.5, 1.7, 3.3, 2.9, 4.0], [2.5, 1.1, 1.9, 3.0, 0.8, 2.0]
TIED_X, TIED_Y = [1, 2, 2, 3, 4, 5, 5], [2, 3, 3, 4, 6, 7, 7, 8]
LONG_X, LONG_Y = [float(i) for i in range(30)], [i + 7.5 for i in range(30)]
SCIPY = [
    ([1, 2, 3], [4, 5, 6], "two-sided", "exact", 0.0, 0.1),
    ([1, 2, 3], [4, 5, 6], "two-sided", "normal", 0.0, 0.08085559837005224),
    ([1, 2, 3], [4, 5, 6], "greater", "exact", 0.0, 1.0),
    ([1, 2, 3], [4, 5, 6], "greater", "normal", 0.0, 0.9854518341293739),
    ([1, 2, 3], [4, 5, 6], "less", "exact", 0.0, 0.05),
    ([1, 2, 3], [4, 5, 6], "less", "normal", 0.0, 0.04042779918502612),
    ([10.1, 9.8, 10.3, 10.0], [8.0, 8.2, 7.9, 8.1], "two-sided", "exact", 16.0, 0.02857142857142857),
    ([10.1, 9.8, 10.3, 10.0], [8.0, 8.2, 7.9, 8.1], "two-sided", "normal", 16.0, 0.03038282197657749),
    ([10.1, 9.8, 10.3, 10.0], [8.0, 8.2, 7.9, 8.1], "greater", "exact", 16.0, 0.014285714285714285),
    ([10.1, 9.8, 10.3, 10.0], [8.0, 8.2, 7.9, 8.1], "less", "normal", 16.0, 0.9929310152720443),
    ([19, 22, 16, 29, 24], [20, 11, 17, 12], "two-sided", "exact", 17.0, 0.1111111111111111),
    ([19, 22, 16, 29, 24], [20, 11, 17, 12], "two-sided", "normal", 17.0, 0.11134688653314041),
    ([19, 22, 16, 29, 24], [20, 11, 17, 12], "greater", "exact", 17.0, 0.05555555555555555),
    ([19, 22, 16, 29, 24], [20, 11, 17, 12], "less", "exact", 17.0, 0.9682539682539683),
    (A7, B6, "two-sided", "exact", 35.0, 0.05128205128205128),
    (A7, B6, "greater", "normal", 35.0, 0.02689204443119914),
    # ties: only the normal approximation (with tie correction) is defined
    (TIED_X, TIED_Y, "two-sided", "normal", 14.5, 0.1286480339540388),
    (TIED_X, TIED_Y, "less", "normal", 14.5, 0.0643240169770194),
    (LONG_X, LONG_Y, "two-sided", "exact", 253.0, 0.003193540818593945),
    (LONG_X, LONG_Y, "less", "exact", 253.0, 0.0015967704092969726),
    (LONG_X, LONG_Y, "less", "normal", 253.0, 0.0018354466962253264),
]  # fmt: skip


@pytest.mark.parametrize(("x", "y", "alternative", "method", "u", "p"), SCIPY)
def test_mann_whitney_matches_scipy(
    x: list[float], y: list[float], alternative: str, method: str, u: float, p: float
) -> None:
    result = mann_whitney_u(x, y, alternative=alternative, method=method)
    assert result.u == u
    assert result.p_value == pytest.approx(p, rel=1e-9)
    assert result.method == method


def test_auto_method_is_exact_without_ties_and_normal_with_them() -> None:
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]).method == "exact"
    assert mann_whitney_u([1, 2, 2], [4, 5, 6]).method == "normal"
    assert mann_whitney_u(list(range(30)), list(range(100, 130))).method == "normal"  # n1 + n2 > 50


def test_identical_constant_samples_are_never_significant() -> None:
    assert mann_whitney_u([5.0, 5.0, 5.0], [5.0, 5.0, 5.0], alternative="less").p_value == 1.0


@pytest.mark.parametrize(
    ("bad", "message"), [({"alternative": "bigger"}, "alternative"), ({"method": "x"}, "method")]
)
def test_mann_whitney_rejects_bad_arguments(bad: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mann_whitney_u([1, 2], [3, 4], **bad)
    with pytest.raises(ValueError, match="at least one value"):
        mann_whitney_u([], [1.0])


def test_min_p_value_states_the_minimum_rounds() -> None:
    assert min_p_value(3, 3) == pytest.approx(0.05)
    assert min_p_value(2, 2) == pytest.approx(1 / 6)
    assert min_p_value(5, 5) == pytest.approx(1 / 252)


def test_bootstrap_interval_is_reproducible_and_brackets_the_ratio() -> None:
    current = [80.0, 81.0, 79.0, 80.5, 79.5]
    baseline = [100.0, 101.0, 99.0, 100.5, 99.5]
    low, high = bootstrap_ratio_ci(current, baseline)
    assert low <= 0.8 <= high
    assert high < 1.0  # a clear 20% drop excludes "no change"
    assert bootstrap_ratio_ci(current, baseline) == (low, high)
    wide = bootstrap_ratio_ci([60.0, 100.0, 140.0], [90.0, 100.0, 110.0])
    assert wide[0] < 1.0 < wide[1]


def test_median_and_cv() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert cv([10.0]) == 0.0
    assert cv([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert math.isinf(cv([-1.0, 1.0]))
