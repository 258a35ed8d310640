"""Statistics on per-round samples. Pure functions, standard library only (no scipy).

Benchmarks give few rounds (3 to 20), so the tests here are exact where that matters:

- the Mann-Whitney U test uses the exact conditional permutation distribution of the rank sum
  (ties get mid-ranks, and the distribution is that of *these* ranks, so a tie never makes a
  p-value smaller than the data can support); large samples use the normal approximation;
- the shift between two samples is the Hodges-Lehmann estimate (median of all pairwise
  differences) with the distribution-free interval that inverts the same test;
- a family of checks is corrected with Holm's step-down procedure;
- a value is compared with a history of run medians through Student's t prediction interval;
- the mean of paired log ratios gets Student's t confidence interval (mean_interval);
- the power of a t test (the change a check detects) comes from the noncentral t
  (noncentral_t_sf, noncentrality_for), which counts that the standard error is estimated too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

EXACT_MAX = 60  # exact permutation distribution when n1 + n2 <= EXACT_MAX (ties or not)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation: sample standard deviation / mean (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else math.inf


def variance(values: Sequence[float]) -> float:
    """The sample variance: statistics.variance's value to the last bit (its exact sum of squared
    deviations, rounded once), without the Fractions it spends most of its time on. A finite float
    is an integer over a power of two, so over one common power the exact sums are integer sums,
    and Python's int / int is correctly rounded as float(Fraction) is."""
    count = len(values)
    if count < 2 or not all(math.isfinite(value) for value in values):
        return statistics.variance(values)  # its errors and its non-finite results
    ratios = [float(value).as_integer_ratio() for value in values]  # denominators: powers of two
    scale = max(denominator for _, denominator in ratios).bit_length() - 1
    integers = [numerator << (scale - denominator.bit_length() + 1) for numerator, denominator in ratios]
    total = sum(integers)
    squares = sum(integer * integer for integer in integers)
    return (count * squares - total * total) / (count * (count - 1) << (2 * scale))


def invalid_values(values: Sequence[float]) -> list[str]:
    """Why ``values`` cannot be compared on a ratio scale: NaN, infinite, zero or negative entries
    (each named by its 1-based round). Empty when every value is a positive finite number."""
    if all(0 < value < math.inf for value in values):  # the usual case, fast (NaN fails it too)
        return []
    problems = []
    for index, value in enumerate(values, start=1):
        if math.isnan(value):
            problems.append(f"round {index} is NaN")
        elif math.isinf(value):
            problems.append(f"round {index} is infinite")
        elif value <= 0:
            problems.append(f"round {index} is {value:g}")
    return problems


# ----------------------------------------------------------------------------- Mann-Whitney U


@dataclass(frozen=True)
class MannWhitney:
    u: float  # U statistic of the first sample (number of pairs where x > y, ties count 1/2)
    p_value: float
    method: str  # "exact" (permutation distribution of these ranks) or "normal"


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties get the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@cache
def _rank_sum_counts(weights: tuple[int, ...], n1: int) -> tuple[int, ...]:
    """How many of the C(N, n1) ways to pick n1 of the ``weights`` give each sum 0 .. sum(weights).

    ``weights`` are doubled mid-ranks (integers even with ties). The count polynomials for each
    subset size are packed into Python integers, one fixed-width slot per sum, so adding an item
    is one shift and one addition per size instead of a loop over every sum.
    """
    slot = (math.comb(len(weights), n1).bit_length() + 8) // 8 * 8  # bits per slot, no carries
    by_size = [1] + [0] * n1  # by_size[k]: polynomial in x^sum over the subsets of size k
    for seen, weight in enumerate(weights, start=1):
        for k in range(min(seen, n1), 0, -1):
            by_size[k] += by_size[k - 1] << (weight * slot)
    top = sum(weights)
    width = slot // 8
    packed = by_size[n1].to_bytes((top + 1) * width, "little")
    return tuple(int.from_bytes(packed[s * width : (s + 1) * width], "little") for s in range(top + 1))


def mann_whitney_u(
    x: Sequence[float], y: Sequence[float], alternative: str = "two-sided", method: str = "auto"
) -> MannWhitney:
    """Mann-Whitney U test of x against y.

    ``alternative``: ``"greater"`` (x tends to be larger than y), ``"less"`` or ``"two-sided"``;
    ``method``: ``"exact"``, ``"normal"`` or ``"auto"`` (exact when n1 + n2 <= EXACT_MAX).
    ``exact`` is the permutation distribution conditional on the observed ranks: without ties it
    is the classical exact distribution (scipy's ``method="exact"``); with ties it is what an
    exhaustive permutation test of the mid-rank sum gives. ``normal`` matches scipy's
    ``method="asymptotic"`` with its tie and continuity corrections.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, got {alternative!r}")
    if method == "auto":
        method = "exact" if n1 + n2 <= EXACT_MAX else "normal"
    ranks = _ranks([*x, *y])
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    if method == "exact":
        weights = [round(2 * rank) for rank in ranks]
        counts = _rank_sum_counts(tuple(sorted(weights)), n1)
        total = math.comb(n1 + n2, n1)
        observed = sum(weights[:n1])
        p_greater = sum(counts[observed:]) / total  # P(rank sum >= observed)
        p_less = sum(counts[: observed + 1]) / total  # P(rank sum <= observed)
    elif method == "normal":
        n = n1 + n2
        tie_term = 0.0
        for rank in set(ranks):
            t = ranks.count(rank)
            tie_term += t**3 - t
        sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
        mean_u = n1 * n2 / 2
        if sigma == 0:
            p_greater = p_less = 1.0
        else:
            p_greater = _normal_sf((u1 - mean_u - 0.5) / sigma)
            p_less = _normal_sf((mean_u - u1 - 0.5) / sigma)
    else:
        raise ValueError(f"method must be exact, normal or auto, got {method!r}")
    if alternative == "greater":
        p = p_greater
    elif alternative == "less":
        p = p_less
    else:
        p = 2 * min(p_greater, p_less)
    return MannWhitney(u1, min(1.0, max(0.0, p)), method)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def _normal_ppf(q: float) -> float:
    return statistics.NormalDist().inv_cdf(q)


def min_p_value(n1: int, n2: int) -> float:
    """Smallest one-sided p-value samples of these sizes can give: 1 / C(n1+n2, n1).

    With 3 rounds on each side it is 0.05; a family of checks corrected for multiplicity needs
    far smaller p-values, hence more rounds (see pytest_encperf/gate/).
    """
    return 1 / math.comb(n1 + n2, n1)


# ----------------------------------------------------------------------------- shift and interval


@dataclass(frozen=True)
class Shift:
    """Hodges-Lehmann shift of x against y with its distribution-free interval."""

    estimate: float  # median of all differences x_i - y_j
    low: float  # -inf / +inf when the samples are too small for the confidence asked
    high: float
    confidence: float  # what the interval really covers (discrete: at least the level asked)


@cache
def _u_cdf(n1: int, n2: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0 .. n1*n2 under the null, without ties."""
    counts = _rank_sum_counts(tuple(range(2, 2 * (n1 + n2) + 1, 2)), n1)
    offset = n1 * (n1 + 1)  # doubled rank sum of the smallest n1 ranks: U = sum / 2 - n1(n1+1)/2
    total = math.comb(n1 + n2, n1)
    cdf, running = [], 0
    for u in range(n1 * n2 + 1):
        running += counts[offset + 2 * u]
        cdf.append(running / total)
    return tuple(cdf)


def shift_interval(x: Sequence[float], y: Sequence[float], confidence: float = 0.95) -> Shift:
    """Hodges-Lehmann estimate of the shift of x against y, and the interval that inverts the
    Mann-Whitney test: the c-th smallest and c-th largest pairwise differences, with c the
    largest count such that P(U < c) <= (1 - confidence) / 2 (exact for small samples)."""
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    diffs = sorted(a - b for a in x for b in y)
    estimate = statistics.median(diffs)
    tail = (1 - confidence) / 2
    if n1 + n2 <= EXACT_MAX:
        cdf = _u_cdf(n1, n2)
        c = 0
        while c < len(cdf) and cdf[c] <= tail:  # P(U <= c) <= tail, so P(U < c + 1) <= tail
            c += 1
        achieved = 1 - 2 * cdf[c - 1] if c else 0.0
    else:
        sigma = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
        c = max(0, math.floor(n1 * n2 / 2 - _normal_ppf(1 - tail) * sigma))
        achieved = confidence
    if c == 0 or 2 * c > len(diffs):
        return Shift(estimate, -math.inf, math.inf, 1.0)
    return Shift(estimate, diffs[c - 1], diffs[len(diffs) - c], achieved)


# ----------------------------------------------------------------------------- families


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the k-th smallest p-value is
    multiplied by (m - k + 1) and kept monotone. Rejecting the adjusted p-values <= alpha keeps
    the chance of any false rejection in the family at most alpha, whatever their dependence."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


# ----------------------------------------------------------------------------- Student's t


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return result


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for 0 <= x <= 1."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_continued_fraction(b, a, 1 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = _t_tail(t * t, df)
    return tail if t >= 0 else 1 - tail


@lru_cache(maxsize=64)
def _t_tail(square: float, df: float) -> float:
    """P(T > |t|) from t squared. Cached: a check asks for the two tails of one statistic (p_fail
    and p_pass, whose t differ only in sign), the continued fraction is figured once."""
    return 0.5 * regularized_beta(df / 2, 0.5, df / (df + square))


@cache
def t_ppf(q: float, df: float) -> float:
    """The t such that P(T <= t) = q (bisection on t_sf; q in (0, 1); cached: few q and df occur)."""

    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}")
    low, high = -1e6, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        if 1 - t_sf(middle, df) < q:
            low = middle
        else:
            high = middle
    return (low + high) / 2


# Simpson's rule over S = sqrt(chi2_df / df): this many intervals over +-12 of its (approximate)
# standard deviations, 1 / sqrt(2 df), around 1: the noncentral t's tail to about 1e-5 (1e-7 above 1 df)
_CHI_INTERVALS = 400


@cache
def _scaled_chi(df: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Nodes and weights (Simpson's rule times the density) over which E[g(S)] is a sum, for
    S = sqrt(chi2_df / df), the standard error's ratio to its true value in a t statistic."""
    spread = 12 / math.sqrt(2 * df)
    low, high = max(0.0, 1 - spread), 1 + spread + (8 / df if df < 8 else 0.0)
    step = (high - low) / _CHI_INTERVALS
    log_front = math.log(2) + df / 2 * math.log(df / 2) - math.lgamma(df / 2)
    nodes, weights = [], []
    for index in range(_CHI_INTERVALS + 1):
        s = low + index * step
        if s > 0:
            density = math.exp(log_front + (df - 1) * math.log(s) - df * s * s / 2)
        else:  # s^(df - 1) at 0: 1 for df = 1 (the half-normal), 0 above
            density = math.exp(log_front) if df == 1 else 0.0
        simpson = 1 if index in (0, _CHI_INTERVALS) else 4 if index % 2 else 2
        nodes.append(s)
        weights.append(simpson * step / 3 * density)
    total = sum(weights)  # the density's mass over the range (1 up to the rule's error)
    return tuple(nodes), tuple(w / total for w in weights)


def noncentral_t_sf(t: float, df: float, delta: float) -> float:
    """P(T > t) for the noncentral t with ``df`` degrees of freedom and noncentrality ``delta``:
    T = (Z + delta) / S, S = sqrt(chi2_df / df), so P(T > t) = E[Phi(delta - t S)] (numerical
    integration over S; delta 0 gives t_sf)."""
    nodes, weights = _scaled_chi(df)
    return min(1.0, sum(w * _normal_sf(t * s - delta) for s, w in zip(nodes, weights, strict=True)))


@cache
def noncentrality_for(critical: float, df: float, power: float) -> float:
    """The noncentrality at which a noncentral t on ``df`` degrees of freedom exceeds ``critical``
    with probability ``power``: a test that rejects beyond ``critical`` then has that power
    against a true change of this many standard errors (the standard error itself estimated on
    ``df`` degrees of freedom, which the sum of two t quantiles leaves out; cached)."""
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    low, high = critical + _normal_ppf(power) - 1, critical + _normal_ppf(power) + 1
    while noncentral_t_sf(critical, df, low) > power:
        low -= 2 * (high - low)
    while noncentral_t_sf(critical, df, high) < power:
        high += 2 * (high - low)
    for _ in range(100):
        middle = (low + high) / 2
        if noncentral_t_sf(critical, df, middle) < power:
            low = middle
        else:
            high = middle
        if high - low < 1e-9 * max(1.0, high):
            break
    return (low + high) / 2


@dataclass(frozen=True)
class Prediction:
    """Where a new value falls against a history of values (all on a log scale)."""

    value: float  # the new value
    center: float  # mean of the history
    spread: float  # standard deviation used (pooled where given)
    df: float
    t: float  # (value - center) / (spread * sqrt(1 + 1/k))
    p_below: float  # one-sided p that the new value is this low (or lower) by chance
    p_above: float
    half_width: float  # of the two-sided 95% prediction interval around the center


def predict(
    value: float,
    history: Sequence[float],
    spread: float | None = None,
    df: float | None = None,
    extra_variance: float = 0.0,
) -> Prediction:
    """Student's t prediction test of ``value`` against ``history`` (k >= 2 values).

    ``spread``/``df``: a pooled standard deviation and its degrees of freedom (from several
    related histories); by default the history's own sample standard deviation, k - 1 df.
    ``extra_variance``: what the new value varies by beyond a history value (it was measured
    with fewer rounds, say), added to the scale.
    """
    k = len(history)
    if k < 2:
        raise ValueError("a history needs at least two values")
    center = statistics.fmean(history)
    if spread is None:
        spread, df = statistics.stdev(history), k - 1
    assert df is not None
    scale = math.sqrt(spread * spread * (1 + 1 / k) + extra_variance)
    if scale == 0:
        t = 0.0 if value == center else math.copysign(math.inf, value - center)
    else:
        t = (value - center) / scale
    return Prediction(
        value=value,
        center=center,
        spread=spread,
        df=df,
        t=t,
        p_below=1 - t_sf(t, df),
        p_above=t_sf(t, df),
        half_width=t_ppf(0.975, df) * scale,
    )


@dataclass(frozen=True)
class MeanInterval:
    """Student's t confidence interval of the mean of ``n`` values."""

    estimate: float  # the mean
    low: float
    high: float
    n: int


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> MeanInterval | None:
    """The mean of ``values`` with its two-sided t interval on n - 1 df; None for fewer than two,
    or when one is not finite.

    For the log ratios of A B B A pairs over whole blocks, the mean cancels a linear drift of the
    machine and a constant order effect (each favours the side run second, which alternates),
    where a median need not; their alternation widens the spread, so the interval stays honest.
    """
    n = len(values)
    if n < 2 or not all(math.isfinite(value) for value in values):  # stdev raises on an infinity
        return None
    mean = statistics.fmean(values)
    half = t_ppf(1 - (1 - confidence) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return MeanInterval(mean, mean - half, mean + half, n)
