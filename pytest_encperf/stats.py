"""Statistics on per-round samples. Pure functions, standard library only (no scipy).

Benchmarks give few rounds (3 to 10), so the tests here are rank-based and exact where that is
cheap: the Mann-Whitney U test uses the exact null distribution when there are no ties and the
samples are small, and the normal approximation (tie and continuity corrected, as scipy does)
otherwise. The ratio of medians gets a percentile bootstrap interval with a fixed seed, so the
same samples always give the same interval.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

EXACT_MAX = 50  # exact distribution when n1 + n2 <= EXACT_MAX and there are no ties


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation: sample standard deviation / mean (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else math.inf


@dataclass(frozen=True)
class MannWhitney:
    u: float  # U statistic of the first sample (number of pairs where x > y, ties count 1/2)
    p_value: float
    method: str  # "exact" or "normal"


@cache
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """Number of arrangements of n1 x's and n2 y's giving each U = 0 .. n1*n2 (no ties).

    Recurrence on who holds the largest value: an x above all n2 y's adds n2 to U.
    """
    if n1 == 0 or n2 == 0:
        return (1,)
    with_x_top = _u_counts(n1 - 1, n2)
    with_y_top = _u_counts(n1, n2 - 1)
    counts = [0] * (n1 * n2 + 1)
    for u, count in enumerate(with_x_top):
        counts[u + n2] += count
    for u, count in enumerate(with_y_top):
        counts[u] += count
    return tuple(counts)


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


def mann_whitney_u(
    x: Sequence[float], y: Sequence[float], alternative: str = "two-sided", method: str = "auto"
) -> MannWhitney:
    """Mann-Whitney U test of x against y.

    ``alternative``: ``"greater"`` (x tends to be larger than y), ``"less"`` or ``"two-sided"``;
    ``method``: ``"exact"``, ``"normal"`` or ``"auto"`` (exact without ties for small samples).
    Matches ``scipy.stats.mannwhitneyu(x, y, alternative=..., method=...)`` with its default
    continuity correction.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, got {alternative!r}")
    ranks = _ranks([*x, *y])
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    ties = len(set(ranks)) < n1 + n2
    if method == "auto":
        method = "exact" if not ties and n1 + n2 <= EXACT_MAX else "normal"
    if method == "exact":
        counts = _u_counts(n1, n2)
        total = sum(counts)
        u_int = math.floor(u1)
        p_greater = sum(counts[u_int:]) / total  # P(U >= u1)
        p_less = sum(counts[: math.ceil(u1) + 1]) / total  # P(U <= u1)
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


def min_p_value(n1: int, n2: int) -> float:
    """Smallest one-sided exact p-value samples of these sizes can give: 1 / C(n1+n2, n1).

    With 3 rounds on each side it is 0.05, so 3 rounds per side is the minimum for a verdict
    at the 5% level.
    """
    return 1 / math.comb(n1 + n2, n1)


def bootstrap_ratio_ci(
    current: Sequence[float],
    baseline: Sequence[float],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 20240,
) -> tuple[float, float]:
    """Percentile bootstrap interval for median(current) / median(baseline).

    Both samples are resampled independently; the seed is fixed so a report is reproducible.
    """
    if not current or not baseline:
        raise ValueError("both samples need at least one value")
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        cur = statistics.median(rng.choices(current, k=len(current)))
        base = statistics.median(rng.choices(baseline, k=len(baseline)))
        if base:
            ratios.append(cur / base)
    if not ratios:
        return (math.nan, math.nan)
    ratios.sort()
    tail = (1 - confidence) / 2
    low = ratios[math.floor(tail * (len(ratios) - 1))]
    high = ratios[math.ceil((1 - tail) * (len(ratios) - 1))]
    return (low, high)
