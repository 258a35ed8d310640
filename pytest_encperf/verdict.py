"""The run-level model of one check: what it estimates, how uncertain that is, and its outcome.

A check compares this run with the saved runs on the log scale (a paired check: the per-round
log ratio backend/plain; an absolute check: the log of the value). Two runs of the same code
differ by more than their rounds show: a new volume, its placement and the machine's state move
a run as a whole (benchmarks/data/noise-*.json, pytest_encperf/noise.py). So a check's
uncertainty has two parts, in the one-way random-effects model ``y = mu + run + round``:

- within run (round to round), variance ``w``: pooled over the rounds of every run used;
- between runs, variance ``b``: from a prior fitted to measured runs (``PRIOR``, per backend and
  workload), and, with at least ``MIN_HISTORY`` comparable saved runs, from how their means
  spread, the two combined by their degrees of freedom (history adds to the prior, it never
  replaces it, so more saved runs never make a check less certain than the prior alone).

Estimate = this run's mean minus the mean of the saved runs' means (one reference: its mean).
Variance = ``w / n_now + b + (b + w * mean(1 / n_saved)) / runs``; with one reference that is
``w / n_now + w / n_ref + 2 b``. Degrees of freedom by Satterthwaite, rounded down. Against a
threshold ``T`` (a tolerance): FAIL when the change is worse than T at the family's level (Holm
over every gated check of the run, FAIL_ALPHA), PASS when it is better than T at PASS_ALPHA one-sided,
otherwise UNDECIDED. Pure: no I/O at run time (``PRIOR`` is a table; ``fit_prior`` makes it).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import stats

FAIL_ALPHA = 0.01  # family-wise error rate of FAIL (Holm over every gated check of the run)
PASS_ALPHA = 0.05  # one-sided error of each pass
ALPHA = PASS_ALPHA
DETECT_POWER = 0.90  # "detects >= X%": the slowdown a check FAILs in this share of runs
MIN_HISTORY = 3  # comparable saved runs needed before their spread enters the model


@dataclass(frozen=True)
class Prior:
    """A between-run standard deviation (log scale) and its degrees of freedom, with its source."""

    sd: float
    df: float
    source: str


@dataclass(frozen=True)
class Estimate:
    """One check's change (log of now / before) and its uncertainty."""

    change: float
    se: float
    df: int
    within_var: float  # w: what more rounds of this run shrink (w / n_now)
    between_var: float  # b
    runs: int  # saved runs the estimate used (1: the reference alone)
    rounds_now: int
    between: str  # where b came from, for the report

    def se_with(self, rounds_now: int) -> float:
        """The standard error had this run measured ``rounds_now`` rounds (confirmation)."""
        fixed = self.se**2 - self.within_var / self.rounds_now
        return math.sqrt(max(0.0, fixed) + self.within_var / rounds_now)


def _pooled_within(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    squares = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups if len(g) >= 2)
    df = sum(len(g) - 1 for g in groups if len(g) >= 2)
    return (squares / df if df else math.nan), df


def estimate(now: Sequence[float], saved: Sequence[Sequence[float]], prior: Prior | None) -> Estimate | None:
    """The change of ``now`` (log values of this run's rounds) against ``saved`` (each saved
    run's log values, the reference first). The saved runs' own spread is used with at least
    MIN_HISTORY of them (else the reference alone). None when the model has no between-run
    variance (no prior, too few saved runs) or no within-run variance (single rounds)."""
    runs = [list(g) for g in saved if g]
    if not now or not runs:
        return None
    if len(runs) < MIN_HISTORY:
        runs = runs[:1]
    within, df_within = _pooled_within([list(now), *runs])
    if not df_within:
        return None
    means = [statistics.fmean(g) for g in runs]
    inverse_rounds = statistics.fmean(1 / len(g) for g in runs)
    count = len(runs)
    if count >= MIN_HISTORY:
        measured = max(0.0, statistics.variance(means) - within * inverse_rounds)
        if prior is None:
            between, df_between = measured, float(count - 1)
            source = f"{count} saved runs"
        else:
            df_between = prior.df + count - 1
            between = (prior.df * prior.sd**2 + (count - 1) * measured) / df_between
            source = f"{count} saved runs + {prior.source}"
    elif prior is None:
        return None
    else:
        between, df_between, source = prior.sd**2, prior.df, prior.source
    rounds_part = within * (1 / len(now) + inverse_rounds / count)
    runs_part = between * (1 + 1 / count)
    variance = rounds_part + runs_part
    denominator = rounds_part**2 / df_within + (runs_part**2 / df_between if df_between else 0.0)
    df = math.floor(variance**2 / denominator) if denominator > 0 else df_within
    return Estimate(
        change=statistics.fmean(now) - statistics.fmean(means),
        se=math.sqrt(variance),
        df=max(1, min(df, 1000)),  # 1000: the t is the normal there; a cap keeps t_ppf's cache small
        within_var=within,
        between_var=between,
        runs=count,
        rounds_now=len(now),
        between=f"between-run sd {100 * math.sqrt(between):.1f}% ({source})",
    )


# ----------------------------------------------------------------------------- outcomes

PASS, FAIL, UNDECIDED = "pass", "FAIL", "UNDECIDED"


def boundary(threshold_percent: float, higher_is_better: bool) -> float:
    """The threshold as a worsening on the log scale (positive)."""
    if higher_is_better:
        return -math.log(1 - threshold_percent / 100)
    return math.log(1 + threshold_percent / 100)


def worsening(change: float, higher_is_better: bool) -> float:
    """A log change as a worsening (positive = worse)."""
    return -change if higher_is_better else change


def as_percent(log_worse: float, higher_is_better: bool) -> float:
    """A worsening on the log scale in percent (a drop of throughput, a growth of time)."""
    return (1 - math.exp(-log_worse)) * 100 if higher_is_better else (math.exp(log_worse) - 1) * 100


def _sf(value: float, scale: float, df: int) -> float:
    if scale <= 0:
        return 0.0 if value > 0 else 1.0
    return stats.t_sf(value / scale, df)


def p_fail(worse: float, tau: float, se: float, df: int) -> float:
    """One-sided p of "worse by at most the threshold" (small: worse than the threshold)."""
    return _sf(worse - tau, se, df)


def p_pass(worse: float, tau: float, se: float, df: int) -> float:
    """One-sided p of "worse by at least the threshold" (small: within the threshold)."""
    return _sf(tau - worse, se, df)


def resolution(se: float, df: int, level: float) -> float:
    """How far beyond a boundary a true change must lie to be shown beyond it (at ``level``,
    one-sided) in DETECT_POWER of runs: (t(1 - level) + t(DETECT_POWER)) x se."""
    return (stats.t_ppf(1 - level, df) + stats.t_ppf(DETECT_POWER, df)) * se


def detectable_percent(tau: float, se: float, df: int, level: float, higher_is_better: bool) -> float:
    """The smallest worsening (percent) this check FAILs in DETECT_POWER of runs: the threshold
    plus the resolution at the family's level."""
    return as_percent(tau + resolution(se, df, level), higher_is_better)


def smallest_threshold_percent(se: float, df: int, higher_is_better: bool) -> float:
    """The tightest threshold an unchanged run PASSes in DETECT_POWER of runs (at ALPHA): a rule
    tighter than this is too noisy here."""
    return as_percent(resolution(se, df, ALPHA), higher_is_better)


def outcome(p_fail_adjusted: float, p_pass_value: float, alpha: float = FAIL_ALPHA) -> str:
    if p_fail_adjusted <= alpha:
        return FAIL
    if p_pass_value <= PASS_ALPHA:
        return PASS
    return UNDECIDED


# ----------------------------------------------------------------------------- the prior

PLAIN = "plain"


def fit_prior(documents: Iterable[Mapping[str, object]]) -> dict[tuple[str, str], tuple[float, float]]:
    """The between-run prior per (backend, workload) from noise documents (benchmarks/noise.py):
    sd = the larger of the cell's own estimate and its backend's estimate pooled over workloads
    (a cell's estimate from a few runs is often 0, truncated), df = the backend's pooled df. With
    several documents, each cell's estimate from the one with the most runs."""
    best: dict[tuple[str, str], dict[str, float]] = {}
    for doc in documents:
        estimates = doc.get("estimates", {})
        assert isinstance(estimates, Mapping)
        for key, found in estimates.items():
            backend, workload = key.split("|", 1)
            if found.get("sd_between_percent") is None:
                continue
            if (backend, workload) not in best or found["runs"] > best[(backend, workload)]["runs"]:
                best[(backend, workload)] = found
    pooled: dict[str, tuple[float, float]] = {}
    for backend in {b for b, _ in best}:
        cells = [e for (b, _), e in best.items() if b == backend]
        df = sum(e["df_between"] for e in cells)
        variance = sum(e["df_between"] * (e["sd_between_percent"] / 100) ** 2 for e in cells) / df
        pooled[backend] = (math.sqrt(variance), df)
    return {
        (backend, workload): (
            round(max(e["sd_between_percent"] / 100, pooled[backend][0]), 4),
            pooled[backend][1],
        )
        for (backend, workload), e in sorted(best.items())
    }


def load_prior(paths: Iterable[Path]) -> dict[tuple[str, str], tuple[float, float]]:
    return fit_prior(json.loads(Path(p).read_text(encoding="utf-8")) for p in paths)


# Fitted by fit_prior to benchmarks/data/noise-2026-12-01.json (tests/test_verdict.py checks that
# this table is that fit; refit after new noise data: python -m pytest_encperf.verdict FILES).
PRIOR_SOURCE = "noise-2026-12-01"
PRIOR: dict[tuple[str, str], tuple[float, float]] = {
    ("fscrypt", "RND4K-Q1T1-read"): (0.3075, 24),
    ("fscrypt", "RND4K-Q1T1-write"): (0.1575, 24),
    ("fscrypt", "RND4K-Q32T1-read"): (0.1557, 24),
    ("fscrypt", "RND4K-Q32T1-write"): (0.1557, 24),
    ("fscrypt", "SEQ1M-Q1T1-read"): (0.1557, 24),
    ("fscrypt", "SEQ1M-Q1T1-write"): (0.1943, 24),
    ("fscrypt", "SEQ1M-Q8T1-read"): (0.1557, 24),
    ("fscrypt", "SEQ1M-Q8T1-write"): (0.1557, 24),
    ("gocryptfs", "RND4K-Q1T1-read"): (0.4135, 24),
    ("gocryptfs", "RND4K-Q1T1-write"): (0.2385, 24),
    ("gocryptfs", "RND4K-Q32T1-read"): (0.2385, 24),
    ("gocryptfs", "RND4K-Q32T1-write"): (0.2385, 24),
    ("gocryptfs", "SEQ1M-Q1T1-read"): (0.2385, 24),
    ("gocryptfs", "SEQ1M-Q1T1-write"): (0.4538, 24),
    ("gocryptfs", "SEQ1M-Q8T1-read"): (0.2385, 24),
    ("gocryptfs", "SEQ1M-Q8T1-write"): (0.2495, 24),
    ("plain", "RND4K-Q1T1-read"): (0.2643, 24),
    ("plain", "RND4K-Q1T1-write"): (0.2643, 24),
    ("plain", "RND4K-Q32T1-read"): (0.2643, 24),
    ("plain", "RND4K-Q32T1-write"): (0.2643, 24),
    ("plain", "SEQ1M-Q1T1-read"): (0.2643, 24),
    ("plain", "SEQ1M-Q1T1-write"): (0.4223, 24),
    ("plain", "SEQ1M-Q8T1-read"): (0.2643, 24),
    ("plain", "SEQ1M-Q8T1-write"): (0.4478, 24),
}


def prior_for(
    backend: str, workload: str, table: Mapping[tuple[str, str], tuple[float, float]] | None = None
) -> Prior | None:
    """The between-run prior of a backend (its name, without the spec's options) x workload: its
    own; else, for an encrypted backend, the largest measured for that workload, else the largest
    of the backend, else the largest of any encrypted backend (an unmeasured backend or workload
    is assumed as noisy as the noisiest measured); plain: its own, else its largest. None when
    the table has nothing for it."""
    table = PRIOR if table is None else table
    name = backend.split(":", 1)[0]
    if (name, workload) in table:
        sd, df = table[(name, workload)]
        return Prior(sd, df, f"prior of {name} {workload}, {PRIOR_SOURCE}")
    encrypted = name != PLAIN
    candidates = (
        [v for (b, w), v in table.items() if w == workload and b != PLAIN] if encrypted else [],
        [v for (b, _), v in table.items() if b == name],
        [v for (b, _), v in table.items() if b != PLAIN] if encrypted else [],
    )
    for found in candidates:
        if found:
            sd, df = max(found)
            return Prior(
                sd, df, f"largest prior measured for what is nearest ({name} {workload}), {PRIOR_SOURCE}"
            )
    return None


def prior_source_code(table: Mapping[tuple[str, str], tuple[float, float]]) -> str:
    lines = ["PRIOR: dict[tuple[str, str], tuple[float, float]] = {"]
    lines += [f"    ({b!r}, {w!r}): ({sd!r}, {df!r})," for (b, w), (sd, df) in table.items()]
    return "\n".join([*lines, "}"])


if __name__ == "__main__":  # python -m pytest_encperf.verdict benchmarks/data/noise-*.json
    import sys

    print(prior_source_code(load_prior(Path(arg) for arg in sys.argv[1:])))
