"""Mann-Whitney U (exact with ties), Hodges-Lehmann interval, Holm, Student's t, CV: pure
statistics against scipy's values, brute-force enumeration and hand-computed examples."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

import pytest

from pytest_encperf.stats import (
    _ranks,
    cv,
    holm,
    invalid_values,
    mann_whitney_u,
    median,
    min_p_value,
    noncentral_t_sf,
    noncentrality_for,
    predict,
    regularized_beta,
    shift_interval,
    t_ppf,
    t_sf,
    variance,
)

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
    # ties: the normal approximation with tie correction, as scipy (the exact method is tested below)
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


def test_auto_method_is_exact_for_small_samples_ties_or_not() -> None:
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]).method == "exact"
    assert mann_whitney_u([1, 2, 2], [4, 5, 6]).method == "exact"
    assert mann_whitney_u(list(range(31)), list(range(100, 130))).method == "normal"  # n1 + n2 > 60


def brute_force_p(x: list[float], y: list[float], alternative: str) -> float:
    """Every way to split the pooled values into groups of len(x) and len(y): the share whose
    mid-rank sum of the first group is at least as extreme as the observed one."""
    pooled = [*x, *y]
    ranks = _ranks(pooled)
    observed = sum(ranks[: len(x)])
    sums = [sum(ranks[i] for i in c) for c in itertools.combinations(range(len(pooled)), len(x))]
    if alternative == "less":
        return sum(s <= observed + 1e-9 for s in sums) / len(sums)
    return sum(s >= observed - 1e-9 for s in sums) / len(sums)


def test_exact_p_with_ties_is_the_permutation_distribution_of_these_ranks() -> None:
    rng = random.Random(4)
    for _ in range(300):
        x = [rng.randint(1, 4) for _ in range(rng.randint(1, 6))]
        y = [rng.randint(1, 4) for _ in range(rng.randint(1, 6))]
        for alternative in ("less", "greater"):
            exact = mann_whitney_u(x, y, alternative=alternative, method="exact").p_value
            assert exact == pytest.approx(brute_force_p(x, y, alternative), abs=1e-12), (x, y)


def test_ties_never_give_a_p_value_below_what_the_data_support() -> None:
    # 3 vs 3, each side tied: the normal approximation said 0.023; no split can be more extreme
    # than "all three below", which is 1 of C(6, 3) = 20 splits
    assert mann_whitney_u([1, 1, 1], [2, 2, 2], "less", method="normal").p_value == pytest.approx(
        0.0234, abs=1e-4
    )
    assert mann_whitney_u([1, 1, 1], [2, 2, 2], "less").p_value == pytest.approx(1 / 20)
    # 4 vs 4 small integers: the approximation passes at 0.05 where the exact p is 5/70 = 0.071
    assert mann_whitney_u([2, 2, 2, 3], [3, 3, 3, 3], "less", method="normal").p_value < 0.05
    assert mann_whitney_u([2, 2, 2, 3], [3, 3, 3, 3], "less").p_value == pytest.approx(5 / 70)
    found = [
        (x, y)
        for x in itertools.combinations_with_replacement(range(1, 4), 4)
        for y in itertools.combinations_with_replacement(range(1, 4), 4)
        if mann_whitney_u(x, y, "less").p_value <= 0.05 < brute_force_p(list(x), list(y), "less")
    ]
    assert found == []


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


def test_shift_interval_by_hand() -> None:
    # x = y - 5 exactly: the pairwise differences are -9 .. -1, their median -5
    shift = shift_interval([1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0])
    assert shift.estimate == -5.0
    # 5 vs 5: P(U <= 2) = 4/252 <= 0.025 < P(U <= 3) = 7/252, so the interval runs from the 3rd
    # smallest to the 3rd largest of the 25 differences: -8 .. -2, covering 1 - 2 * 4/252
    assert (shift.low, shift.high) == (-8.0, -2.0)
    assert shift.confidence == pytest.approx(1 - 8 / 252)
    assert shift_interval([1.0, 2.0], [3.0, 4.0]).low == -math.inf  # 2 vs 2 cannot reach 95%


def test_shift_interval_covers_the_true_shift_at_least_95_percent_of_the_time() -> None:
    rng = random.Random(11)
    covered = 0
    for _ in range(1000):
        x = [rng.gauss(-0.2, 0.07) for _ in range(4)]
        y = [rng.gauss(0.0, 0.07) for _ in range(10)]
        shift = shift_interval(x, y)
        covered += shift.low <= -0.2 <= shift.high
    assert covered >= 940  # nominal >= 95% (exact level 96.4% for 4 vs 10), binomial slack


def test_holm_by_hand() -> None:
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept at 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


# (t or q, df, value) from scipy 1.17.1 scipy.stats.t.sf and .ppf
T_SF = [
    (2.0, 5, 0.050969739414929174), (-1.3, 3, 0.8577662456360515), (12.9, 2, 0.002977812202518396),
    (3.2, 16, 0.002788853152388212), (0.5, 40, 0.3099073676167241), (6.0, 1, 0.05256845671125344),
]  # fmt: skip
T_PPF = [(0.975, 4, 2.7764451051977934), (0.975, 16, 2.1199052992212546), (0.95, 2, 2.9199855803537242)]


@pytest.mark.parametrize(("t", "df", "expected"), T_SF)
def test_t_sf_matches_scipy(t: float, df: int, expected: float) -> None:
    assert t_sf(t, df) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("q", "df", "expected"), T_PPF)
def test_t_ppf_matches_scipy(q: float, df: int, expected: float) -> None:
    assert t_ppf(q, df) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("t", "df"), [(2.0, 5), (-1.3, 3), (12.9, 2), (3.2, 16), (6.0, 1), (0.5, 1000)])
def test_the_noncentral_t_without_noncentrality_is_students_t(t: float, df: int) -> None:
    assert noncentral_t_sf(t, df, 0.0) == pytest.approx(t_sf(t, df), abs=1e-5)


@pytest.mark.parametrize(
    ("t", "df", "delta"), [(3.0, 1, 4.0), (10.0, 2, 14.0), (9.0, 4, 12.0), (-1.0, 3, 0.5)]
)
def test_the_noncentral_t_is_the_distribution_of_a_shifted_normal_over_an_estimated_sd(
    t: float, df: int, delta: float
) -> None:
    """(Z + delta) / sqrt(chi2_df / df), drawn: 40,000 draws, binomial sd of the share <= 0.0025."""
    rng = random.Random(7)
    draws = 40_000
    above = sum(
        (rng.gauss(0, 1) + delta) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(df)) / df) > t
        for _ in range(draws)
    )
    assert noncentral_t_sf(t, df, delta) == pytest.approx(above / draws, abs=0.01)


def test_the_noncentral_t_of_many_degrees_of_freedom_is_the_shifted_normal() -> None:
    assert noncentral_t_sf(3.0, 1000, 4.0) == pytest.approx(
        0.5 * math.erfc((3.0 - 4.0) / math.sqrt(2)), abs=2e-3
    )


@pytest.mark.parametrize("df", [1, 2, 4, 9, 30, 1000])
def test_the_noncentrality_for_a_power_reaches_it_and_exceeds_the_sum_of_two_t_quantiles(df: int) -> None:
    critical = t_ppf(1 - 0.01 / 24, df)
    needed = noncentrality_for(critical, df, 0.9)
    assert noncentral_t_sf(critical, df, needed) == pytest.approx(0.9, abs=1e-6)
    # the sum of quantiles leaves out that the standard error is estimated: it asks for too little
    # on few degrees of freedom (4 df: 10.6 where 12.8 are needed), about the same on many
    assert needed > critical + t_ppf(0.9, df) - 0.01
    if df <= 4:
        assert needed > 1.15 * (critical + t_ppf(0.9, df))
    if df >= 1000:
        assert needed == pytest.approx(critical + t_ppf(0.9, df), rel=0.01)


def test_prediction_against_a_history() -> None:
    history = [0.0, 0.02, -0.02, 0.01, -0.01]  # mean 0, sample sd 0.0158
    inside = predict(0.01, history)
    assert inside.df == 4 and inside.p_below > 0.5
    outside = predict(-0.2, history)
    scale = 0.015811388300841896 * math.sqrt(1 + 1 / 5)
    assert outside.t == pytest.approx(-0.2 / scale)
    assert outside.p_below == pytest.approx(t_sf(0.2 / scale, 4))
    pooled = predict(-0.2, history, spread=0.05, df=30)  # a wider pooled spread: less surprising
    assert pooled.p_below > outside.p_below
    with pytest.raises(ValueError, match="at least two"):
        predict(0.0, [0.0])


def test_invalid_values_name_their_round() -> None:
    assert invalid_values([1.0, 2.5]) == []
    assert invalid_values([1.0, math.nan, math.inf, 0.0, -1.0]) == [
        "round 2 is NaN", "round 3 is infinite", "round 4 is 0", "round 5 is -1",
    ]  # fmt: skip


def test_median_and_cv() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert cv([10.0]) == 0.0
    assert cv([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert math.isinf(cv([-1.0, 1.0]))


@pytest.mark.parametrize("seed", range(4))
def test_variance_is_the_standard_librarys_to_the_last_bit(seed: int) -> None:
    """stats.variance replaces statistics.variance in the verdict's hot path: the same float (or
    the same exception), over log ratios, wide magnitudes, subnormals, zeros and huge values."""
    import statistics

    rng = random.Random(seed)
    special = [0.0, -0.0, 1.0, 5e-324, 1.5e-323, 1e308, -1e308, 0.1, 1 / 3, math.inf, math.nan]

    def outcome(function: Callable[[list[float]], float], values: list[float]) -> str:
        try:
            return repr(function(values))
        except (ValueError, OverflowError, statistics.StatisticsError) as exc:
            return type(exc).__name__

    for _ in range(2000):
        size = rng.randint(0, 12)
        kind = rng.random()
        if kind < 0.3:
            values = [rng.gauss(0, 10 ** rng.randint(-12, 12)) for _ in range(size)]
        elif kind < 0.5:
            values = [rng.choice(special) for _ in range(size)]
        else:
            values = [math.log(rng.uniform(0.3, 3)) for _ in range(size)]
        assert outcome(variance, values) == outcome(statistics.variance, values), values


def test_the_t_tails_are_figured_once_for_both_signs() -> None:
    """A check's p_fail and p_pass ask for t and -t: the tail is figured once (cached) and each
    is what the continued fraction gives, asked first or second."""
    for t, df in ((1.3, 20), (0.0, 4), (2.5, 1000), (-0.7, 3), (0.7, 3)):
        tail = 0.5 * regularized_beta(df / 2, 0.5, df / (df + t * t))
        assert t_sf(t, df) == (tail if t >= 0 else 1 - tail)
        assert t_sf(-t, df) == (tail if -t >= 0 else 1 - tail)
