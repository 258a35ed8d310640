"""How noisy a backend's ratio to plain is: round to round within a run, and run to run.

The per-round log ratios backend/plain of one backend and workload, grouped by run, are split by
a one-way random-effects ANOVA (method of moments, a negative between-run estimate truncated at
0) into a within-run variance (round to round: the machine and the paired plain round) and a
between-run variance (what changes with a new run: a new volume, its placement, the machine's
state), which the rounds of one run cannot show. Pure: no I/O; benchmarks/noise.py runs the runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_encperf.model import round_ratios
from pytest_encperf.storage import StorageError, results_of

__all__ = ["NoiseEstimate", "StorageError", "chi2_ppf", "estimate", "estimate_all", "read_log_ratios"]

CONFIDENCE = 0.90  # of the intervals given for each standard deviation
# Below one effective df the chi-square quantiles underflow (a lower bound above the estimate):
# no interval is given there.
MIN_INTERVAL_DF = 1.0
SHOWN_UPPER_LIMIT = 10.0  # an interval's top above sd 10 (1000%) is shown as ">1000" in the table


@dataclass(frozen=True)
class NoiseEstimate:
    """Standard deviations of the natural log of the ratio (x 100: about the % change for small
    values); None where the data cannot define one, with the reason in ``notes``."""

    runs: int
    rounds: int  # in all runs
    sd_within: float | None
    sd_between: float | None
    df_within: int
    df_between: int
    within_interval: tuple[float, float] | None
    between_interval: tuple[float, float] | None  # Satterthwaite's approximate df
    between_df_effective: float | None
    truncated: bool  # the moment estimate of the between variance was negative, reported as 0
    notes: tuple[str, ...] = ()
    # 1.4826 x the median absolute deviation of each round from its run's median: the within-run
    # sd that a few outlying rounds (a busy neighbour) do not inflate; None without 2 rounds in a run
    sd_within_robust: float | None = None

    @property
    def sd_run_mean(self) -> float | None:
        """The sd of one run's mean log ratio with this design's average rounds per run: what two
        unchanged runs differ by, as a whole, is about sqrt(2) times it."""
        if self.sd_within is None or self.sd_between is None:
            return None
        return math.sqrt(self.sd_between**2 + self.sd_within**2 * self.runs / self.rounds)

    def to_dict(self) -> dict[str, Any]:
        def percent(value: float | None) -> float | None:
            return None if value is None else round(100 * value, 3)

        def interval(pair: tuple[float, float] | None) -> list[float | None] | None:
            return None if pair is None else [percent(pair[0]), percent(pair[1])]

        return {
            "runs": self.runs,
            "rounds": self.rounds,
            "sd_within_percent": percent(self.sd_within),
            "sd_within_robust_percent": percent(self.sd_within_robust),
            "sd_between_percent": percent(self.sd_between),
            "sd_run_mean_percent": percent(self.sd_run_mean),
            "df_within": self.df_within,
            "df_between": self.df_between,
            "within_interval_percent": interval(self.within_interval),
            "between_interval_percent": interval(self.between_interval),
            "between_df_effective": None
            if self.between_df_effective is None
            else round(self.between_df_effective, 2),
            "confidence": CONFIDENCE,
            "truncated": self.truncated,
            "notes": list(self.notes),
        }


def estimate(groups: Sequence[Sequence[float]], confidence: float = CONFIDENCE) -> NoiseEstimate:
    """One-way random-effects ANOVA of ``groups`` (one list of values per run; empty lists are
    left out, groups may differ in size). Within: sqrt(MSW), chi-square interval on N - k df.
    Between: sqrt(max(0, (MSB - MSW) / n0)) with n0 the unbalanced design's effective group
    size, its interval from Satterthwaite's effective df (none when the estimate is 0)."""
    used = [[float(v) for v in group] for group in groups if len(group)]
    for group in used:
        if not all(math.isfinite(v) for v in group):
            raise ValueError("every value must be finite")
    k = len(used)
    total = sum(len(g) for g in used)
    notes: list[str] = []
    df_within, df_between = total - k, max(k - 1, 0)
    means = [sum(g) / len(g) for g in used]
    ss_within = sum((v - m) ** 2 for g, m in zip(used, means, strict=True) for v in g)
    ms_within = ss_within / df_within if df_within > 0 else None
    sd_within = math.sqrt(ms_within) if ms_within is not None else None
    within_interval = None
    tail = (1 - confidence) / 2
    if ms_within is None:
        notes.append("within-run variance undefined: no run has 2 rounds")
    else:
        within_interval = (
            math.sqrt(ss_within / chi2_ppf(1 - tail, df_within)),
            math.sqrt(ss_within / chi2_ppf(tail, df_within)),
        )
    sd_between = between_interval = df_effective = None
    truncated = False
    if k < 2:
        notes.append(f"between-run variance undefined: {k} run{'s' if k != 1 else ''} (needs 2 or more)")
    elif ms_within is None:
        notes.append("between-run variance undefined without a within-run variance")
    else:
        grand = sum(sum(g) for g in used) / total
        ms_between = sum(len(g) * (m - grand) ** 2 for g, m in zip(used, means, strict=True)) / df_between
        n0 = (total - sum(len(g) ** 2 for g in used) / total) / df_between
        moment = (ms_between - ms_within) / n0
        truncated = moment < 0
        sd_between = math.sqrt(max(moment, 0.0))
        if truncated:
            notes.append("between-run estimate negative (runs agree more than their rounds): reported as 0")
        elif moment > 0:
            # Satterthwaite: (MSB - MSW) / n0 as a scaled chi-square with this many df
            df_effective = (ms_between - ms_within) ** 2 / (
                ms_between**2 / df_between + ms_within**2 / df_within
            )
            if df_effective < MIN_INTERVAL_DF:
                notes.append(
                    f"between-run interval undefined: Satterthwaite's effective df {df_effective:.2g} "
                    f"is below {MIN_INTERVAL_DF} (the estimate is small beside the within-run noise)"
                )
            else:
                between_interval = (
                    math.sqrt(df_effective * moment / chi2_ppf(1 - tail, df_effective)),
                    math.sqrt(df_effective * moment / chi2_ppf(tail, df_effective)),
                )
    deviations = [abs(v - middle) for g in used if len(g) > 1 for middle in [statistics.median(g)] for v in g]
    robust = 1.4826 * statistics.median(deviations) if deviations else None
    return NoiseEstimate(
        sd_within_robust=robust,
        runs=k,
        rounds=total,
        sd_within=sd_within,
        sd_between=sd_between,
        df_within=max(df_within, 0),
        df_between=df_between,
        within_interval=within_interval,
        between_interval=between_interval,
        between_df_effective=df_effective,
        truncated=truncated,
        notes=tuple(notes),
    )


# ----------------------------------------------------------------------------- chi-square


def _lower_gamma_regularized(a: float, x: float) -> float:
    """P(a, x), series below a + 1, Lentz's continued fraction of Q above (Numerical Recipes)."""
    if x <= 0:
        return 0.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        denominator = a
        for _ in range(10_000):
            denominator += 1
            term *= x / denominator
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return total * math.exp(log_front)
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return 1.0 - math.exp(log_front) * h


def chi2_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of the chi-square distribution with ``df`` (> 0, not only whole) df."""
    if not 0 < q < 1 or not df > 0:
        raise ValueError("chi2_ppf needs 0 < q < 1 and df > 0")
    low, high = 0.0, max(1.0, df)
    while _lower_gamma_regularized(df / 2, high / 2) < q:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if _lower_gamma_regularized(df / 2, middle / 2) < q:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * max(high, 1e-300):
            break
    return (low + high) / 2


# ----------------------------------------------------------------------------- saved documents

Cell = tuple[str, str]  # (backend, workload name)
PLAIN = "plain"  # the cell of plain's own values (its log primary metric, not a ratio)


def read_log_ratios(doc: Any, source: str = "document") -> dict[Cell, list[float]]:
    """Per (backend, workload) of a saved run (or --encperf-json document): the natural log of
    each round's primary metric over its paired plain round's; per (``plain``, workload) the
    natural log of plain's own primary metric (every plain round paired with a backend). Rounds
    without a usable ratio (not paired, mixed I/O modes, a value of 0) are left out. StorageError
    for anything that is not such a document, never another exception."""
    cells: dict[Cell, list[float]] = {}
    for result in results_of(doc, source):
        # results_of checks the document's shape, not the types of each round's fields
        try:
            if result.before_after or not result.comparable:
                continue  # no per-round pairs (partition target) or no ratio at all
            workload = result.workload.name
            ratios = round_ratios(result.rounds, result.baseline_rounds, result.primary_metric)
            logs = [math.log(r) for r in ratios if isinstance(r, float) and math.isfinite(r) and r > 0]
            values = [float(getattr(m, result.primary_metric)) for m in result.baseline_rounds]
            plain = [math.log(v) for v in values if math.isfinite(v) and v > 0]
        except (TypeError, ValueError, ArithmeticError, AttributeError) as exc:
            raise StorageError(f"{source}: not an encperf result file (bad round: {exc})") from None
        if logs:
            cells.setdefault((result.backend, workload), []).extend(logs)
        if logs and plain:  # plain's own value: the between-run prior of its absolute check
            cells.setdefault((PLAIN, workload), []).extend(plain)
    return cells


def estimate_all(runs: Mapping[str, Mapping[Cell, Sequence[float]]]) -> dict[Cell, NoiseEstimate]:
    """Per cell found in any run: the estimate over the runs that have it."""
    cells = sorted({cell for by_cell in runs.values() for cell in by_cell})
    return {cell: estimate([list(by_cell.get(cell, ())) for by_cell in runs.values()]) for cell in cells}


def data_document(
    runs: Mapping[str, Mapping[Cell, Sequence[float]]],
    table: Mapping[Cell, NoiseEstimate],
    *,
    label: str,
    date: str,
) -> dict[str, Any]:
    """The kept data: every run's log ratios per cell, and the estimates."""
    return {
        "what": "natural log of each round's ratio backend/plain (primary metric), per run; for "
        "plain: the natural log of its own primary metric; "
        "one-way random-effects ANOVA per backend and workload (pytest_encperf.noise)",
        "label": label,
        "date": date,
        "runs": {
            run: {
                f"{backend}|{workload}": [round(v, 5) for v in values]
                for (backend, workload), values in cells.items()
            }
            for run, cells in runs.items()
        },
        "estimates": {f"{backend}|{workload}": e.to_dict() for (backend, workload), e in table.items()},
    }


def markdown_table(table: Mapping[Cell, NoiseEstimate], *, label: str, date: str) -> str:
    """The estimates as a Markdown table (sd of the log ratio x 100, with 90% intervals)."""

    def show(value: float | None, interval: tuple[float, float] | None) -> str:
        if value is None:
            return "undefined"
        text = f"{100 * value:.1f}%"
        if not interval:
            return text
        # a between-run interval on ~1 effective df reaches absurd heights: its top says "unbounded"
        top = (
            f"{100 * interval[1]:.1f}"
            if interval[1] < SHOWN_UPPER_LIMIT
            else f">{100 * SHOWN_UPPER_LIMIT:.0f}"
        )
        return f"{text} ({100 * interval[0]:.1f}-{top})"

    lines = [
        f"Noise of the log ratio backend/plain, {date}: {label}",
        "",
        f"sd x 100 of ln(ratio) with {CONFIDENCE:.0%} intervals; between-run: method of moments, "
        "truncated at 0 (no interval then), Satterthwaite df; robust: 1.4826 x the median absolute "
        "deviation of the rounds from their run's median.",
        "",
        "| backend | workload | runs | rounds | sd within run | robust | sd between runs "
        "| sd of a run's mean | df within | df between |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (backend, workload), e in table.items():
        between = show(e.sd_between, e.between_interval) + (" (truncated)" if e.truncated else "")
        if e.sd_between and e.between_interval is None:
            between += " (no interval: df < 1)"
        lines.append(
            f"| {backend} | {workload} | {e.runs} | {e.rounds} | {show(e.sd_within, e.within_interval)} "
            f"| {show(e.sd_within_robust, None)} "
            f"| {between} | {show(e.sd_run_mean, None)} | {e.df_within} | {e.df_between} |"
        )
    return "\n".join(lines) + "\n"
