"""The run-level model of one check: what it estimates, how uncertain that is, and its outcome.

A check compares this run with the saved runs on the log scale (a paired check: the per-round
log ratio backend/plain; an absolute check: the log of the value). Two runs of the same code
differ by more than their rounds show: a new volume, its placement and the machine's state move
a run as a whole (benchmarks/data/noise-*.json, pytest_encperf/noise.py). So a check's
uncertainty has two parts, in the one-way random-effects model ``y = mu + run + round``:

- within run (round to round), variance ``w``: pooled over the rounds of every run used;
- between runs, variance ``b``: without a history, from a prior (per backend and workload): the
  user's, measured on their runner (``--encperf-noise``, ``read_noise_prior``; the gate passes it
  to every function here that takes ``noise``), else the built-in one fitted to the development
  machine's runs (``PRIOR``, ``builtin_prior``). With at least ``MIN_HISTORY``
  comparable saved runs it comes from them, per workload (never pooled over workloads): how the
  workload's saved run means spread, combined by degrees of freedom with the prior (the user's,
  else the built-in one, which decided one saved run alone: ``history_prior``). A saved run measured
  on several fresh volumes (``--encperf-volumes``, ``Measurement.volume_block``) is a group per
  volume block: a saved run with at least ``MIN_BLOCKS`` of them measures its own between-volume
  spread, which stands for ``b`` as a history's does (the built-in prior then left out, the
  user's kept).

Groups are the saved runs, each split by volume block when it has several ("a run's level is its
volume's": a fresh volume draws the between-run part, the assumption the simulation states).
Estimate = this run's mean minus the mean of the groups' means (one saved run: its mean).
Variance = ``w / n_now + b + (b + w * mean(1 / n_saved)) / runs``; with one saved run that is
``w / n_now + w / n_saved + 2 b``; with groups, ``S2 (1 + 1 / groups) + w max(0, 1 / n_now - mean(1
/ n_group))`` where ``S2``, the variance of the group means, estimates ``b + w mean(1 / n_group)``
(so nothing is truncated at 0; groups of fewer rounds than this run's make it conservative).
Degrees of freedom by Satterthwaite, rounded down. Against a threshold ``T`` (a tolerance): FAIL
when the change is worse than T at the family's level (Holm over every gated check of the run,
FAIL_ALPHA), PASS when it is better than T at PASS_ALPHA one-sided, otherwise UNDECIDED. Pure: no
I/O at run time (``PRIOR`` is a table; ``fit_prior`` makes it).
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
MIN_BLOCKS = 2  # volume blocks of one saved run needed before their spread enters the model


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
    runs: int  # saved runs the estimate used (1: one saved run, the reference run alone)
    rounds_now: int
    between: str  # where b came from, for the report
    groups: int = 0  # groups whose spread gave b (saved runs, or their volume blocks); 0: a prior

    def se_with(self, rounds_now: int) -> float:
        """The standard error had this run measured ``rounds_now`` rounds (confirmation)."""
        fixed = self.se**2 - self.within_var / self.rounds_now
        return math.sqrt(max(0.0, fixed) + self.within_var / rounds_now)


def _pooled_within(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    # each group's mean once, not once per value (the same float: the sums are unchanged)
    squares = sum(  # each group's squares summed from a list: the same additions, faster than a generator
        sum([(x - mean) ** 2 for x in g]) for g in groups if len(g) >= 2 for mean in [statistics.fmean(g)]
    )
    df = sum(len(g) - 1 for g in groups if len(g) >= 2)
    return (squares / df if df else math.nan), df


def volume_groups(values: Sequence[float], blocks: Sequence[int | None]) -> list[list[float]]:
    """One run's values split by the volume block each was measured on (``blocks``, one per value:
    Measurement.volume_block), blocks in the order they first appear; the values as one group
    unless every value has its block and there are at least two (one volume, or a run saved
    before blocks were recorded)."""
    if len(blocks) != len(values) or None in blocks or len(set(blocks)) < MIN_BLOCKS:
        return [list(values)] if values else []
    groups: dict[int | None, list[float]] = {}
    for value, block in zip(values, blocks, strict=True):
        groups.setdefault(block, []).append(value)
    return list(groups.values())


def has_blocks(blocks: Sequence[int | None]) -> bool:
    """Whether a run's values come from at least MIN_BLOCKS recorded volume blocks."""
    return None not in blocks and len(set(blocks)) >= MIN_BLOCKS


def _groups_source(count: int, groups: int) -> str:
    runs = f"{count} saved runs" if count > 1 else "the reference"
    return runs if groups == count else f"{groups} volume blocks of {runs}"


def estimate(
    now: Sequence[float],
    saved: Sequence[Sequence[float]],
    prior: Prior | None,
    blocks: Sequence[Sequence[int | None]] = (),
) -> Estimate | None:
    """The change of ``now`` (log values of this run's rounds) against ``saved`` (each saved
    run's log values, the reference run first; ``blocks``: each one's volume block per value, when
    recorded). The spread of the groups (the saved runs, each split by volume block) is used with
    a history of at least MIN_HISTORY saved runs, or with one saved run of at least MIN_BLOCKS
    volume blocks (else that one saved run alone and ``prior``), combined with ``prior`` by
    degrees of freedom (the caller then passes ``history_prior``'s). None when the model has no
    between-run variance (no prior, too few groups) or no within-run variance (single rounds)."""
    labels = list(blocks) if len(blocks) == len(saved) else [()] * len(saved)
    runs = [(list(g), list(b)) for g, b in zip(saved, labels, strict=True) if g]
    if not now or not runs:
        return None
    if len(runs) < MIN_HISTORY:
        runs = runs[:1]
    count = len(runs)
    groups = [group for values, block in runs for group in volume_groups(values, block)]
    spread_model = count >= MIN_HISTORY or len(groups) >= MIN_BLOCKS
    if not spread_model:
        groups = [runs[0][0]]
    within, df_within = _pooled_within([list(now), *groups])
    if not df_within:
        return None
    means = [statistics.fmean(g) for g in groups]
    inverse_rounds = statistics.fmean(1 / len(g) for g in groups)
    size = len(groups)
    if spread_model:
        # predictive: the spread of the group means (each b + w / its rounds, never truncated)
        # stands for the saved centre's and this run's level alike; this run's fewer rounds add
        # w x (1 / n_now - mean 1 / n_group)
        spread = stats.variance(means)
        if prior is None:
            df_between, source = float(size - 1), _groups_source(count, size)
        else:  # the user's prior, as that many groups' worth of spread
            df_between = prior.df + size - 1
            spread = (prior.df * (prior.sd**2 + within * inverse_rounds) + (size - 1) * spread) / df_between
            source = f"{_groups_source(count, size)}, with {prior.source}"
        between = max(0.0, spread - within * inverse_rounds)
        # groups of fewer rounds than this run (volume blocks of 2) hold more round noise in S2
        # than this run's level needs: nothing is subtracted for it (conservative; subtracting
        # would leave a difference of variances, whose few degrees of freedom cost more)
        rounds_part = within * max(0.0, 1 / len(now) - inverse_rounds)
        runs_part = spread * (1 + 1 / size)
    elif prior is None:
        return None
    else:
        between, df_between, source = prior.sd**2, prior.df, prior.source
        rounds_part = within * (1 / len(now) + inverse_rounds)
        runs_part = between * 2
    variance = rounds_part + runs_part
    denominator = rounds_part**2 / df_within + (runs_part**2 / df_between if df_between else 0.0)
    df = math.floor(variance**2 / denominator) if denominator > 0 else df_within
    if spread_model:  # a spread of a few groups can be small by chance, which Satterthwaite's
        df = min(df, math.floor(df_between))  # df would then trust: its own df bound the statistic's
    return Estimate(
        change=statistics.fmean(now) - statistics.fmean(means),
        se=math.sqrt(variance),
        df=max(1, min(df, 1000)),  # 1000: the t is the normal there; a cap keeps t_ppf's cache small
        within_var=within,
        between_var=between,
        runs=count,
        rounds_now=len(now),
        between=f"between-run sd {100 * math.sqrt(between):.1f}% ({source})",
        groups=size if spread_model else 0,
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
    one-sided) in DETECT_POWER of runs: the noncentrality at which a noncentral t on ``df``
    exceeds t(1 - level) in that share of runs, x se. The sum t(1 - level) + t(DETECT_POWER) that
    it replaces leaves out that the standard error is itself estimated: on few degrees of freedom
    (one saved run's volume blocks) it overstated the power (4 df: 10.6 se where 12.8 are needed)."""
    critical = stats.t_ppf(1 - level, df)
    return stats.noncentrality_for(critical, df, DETECT_POWER) * se


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


# Fitted by fit_prior to benchmarks/data/noise-2026-12-01.json (tests/unit/test_verdict.py::
# test_a_noise_file_is_fitted_as_the_built_in_prior_is and tests/functional/test_verdict_simulation.py::
# test_the_prior_is_the_fit_of_the_measured_noise check this table is that fit; refit after new noise
# data: python -m pytest_encperf.verdict FILES).
PRIOR_SOURCE = "built-in prior"
PRIOR_ORIGIN = (
    "built-in, measured on the development machine (benchmarks/data/noise-2026-12-01.json: 10 runs on "
    "a shared, loaded 2-core machine), not on this runner"
)
PRIOR: dict[tuple[str, str], tuple[float, float]] = {
    ("fscrypt", "RND4K-Q1T1-read"): (0.4318, 72),
    ("fscrypt", "RND4K-Q1T1-write"): (0.2831, 72),
    ("fscrypt", "RND4K-Q32T1-read"): (0.3068, 72),
    ("fscrypt", "RND4K-Q32T1-write"): (0.2831, 72),
    ("fscrypt", "SEQ1M-Q1T1-read"): (0.3589, 72),
    ("fscrypt", "SEQ1M-Q1T1-write"): (0.3821, 72),
    ("fscrypt", "SEQ1M-Q8T1-read"): (0.2831, 72),
    ("fscrypt", "SEQ1M-Q8T1-write"): (0.2831, 72),
    ("gocryptfs", "RND4K-Q1T1-read"): (0.3891, 72),
    ("gocryptfs", "RND4K-Q1T1-write"): (0.2962, 72),
    ("gocryptfs", "RND4K-Q32T1-read"): (0.2962, 72),
    ("gocryptfs", "RND4K-Q32T1-write"): (0.2962, 72),
    ("gocryptfs", "SEQ1M-Q1T1-read"): (0.2962, 72),
    ("gocryptfs", "SEQ1M-Q1T1-write"): (0.5654, 72),
    ("gocryptfs", "SEQ1M-Q8T1-read"): (0.2962, 72),
    ("gocryptfs", "SEQ1M-Q8T1-write"): (0.3636, 72),
    ("plain", "RND4K-Q1T1-read"): (0.8275, 72),
    ("plain", "RND4K-Q1T1-write"): (0.4961, 72),
    ("plain", "RND4K-Q32T1-read"): (0.4961, 72),
    ("plain", "RND4K-Q32T1-write"): (0.4961, 72),
    ("plain", "SEQ1M-Q1T1-read"): (0.4961, 72),
    ("plain", "SEQ1M-Q1T1-write"): (0.7175, 72),
    ("plain", "SEQ1M-Q8T1-read"): (0.4961, 72),
    ("plain", "SEQ1M-Q8T1-write"): (0.4961, 72),
}


@dataclass(frozen=True)
class NoisePrior:
    """The between-run priors a gate uses: per (backend, workload) (sd, df), and where from."""

    table: Mapping[tuple[str, str], tuple[float, float]]
    source: str  # short, in each check's "between-run sd" (a file's name)
    origin: str  # in full, in the gate's header
    measured_here: bool  # the user's, of their runner: it stays in the model beside a history


def builtin_prior() -> NoisePrior:
    """The built-in prior (``PRIOR``, of the development machine): a gate's when the user gave none."""
    return NoisePrior(PRIOR, PRIOR_SOURCE, PRIOR_ORIGIN, measured_here=False)


def _in_use(noise: NoisePrior | None) -> NoisePrior:
    """The prior a gate uses: the user's (``noise``, from --encperf-noise), else the built-in one."""
    return builtin_prior() if noise is None else noise


class NoiseFileError(ValueError):
    """A file given as a noise prior that is not what benchmarks/noise.py writes."""


MAX_NOISE_FILE = 16 * 1024 * 1024  # the 10-run file is ~150 KiB


def read_noise_prior(text: str, source: str) -> NoisePrior:
    """A noise prior from the JSON that ``benchmarks/noise.py`` writes (its ``estimates``: per
    ``backend|workload`` the between-run sd in percent, its runs and degrees of freedom), fitted as
    the built-in one is (``fit_prior``). NoiseFileError for anything else, never another exception."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NoiseFileError(f"{source}: not JSON ({exc})") from None
    estimates = doc.get("estimates") if isinstance(doc, dict) else None
    if not isinstance(estimates, dict) or not estimates:
        raise NoiseFileError(f"{source}: no 'estimates' (write the file with benchmarks/noise.py)")
    cells: dict[str, dict[str, float]] = {}
    for key, found in estimates.items():
        if not isinstance(found, dict) or key.count("|") != 1 or not all(key.split("|")):
            raise NoiseFileError(f"{source}: bad estimate {key!r}: expected 'backend|workload' with figures")
        sd, runs, df = (found.get(name) for name in ("sd_between_percent", "runs", "df_between"))
        if sd is None:  # no estimate for this cell
            continue
        numbers = (sd, runs, df)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
            raise NoiseFileError(f"{source}: {key}: sd_between_percent, runs and df_between must be numbers")
        assert isinstance(sd, int | float) and isinstance(runs, int | float) and isinstance(df, int | float)
        finite = math.isfinite(sd) and math.isfinite(runs) and math.isfinite(df)
        if not (finite and 0 <= sd < 1000 and runs >= 2 and 0 < df <= 1e6):
            raise NoiseFileError(
                f"{source}: {key}: expected 0 <= sd_between_percent < 1000, runs >= 2 and 0 < df_between"
            )
        cells[key] = {"sd_between_percent": float(sd), "runs": float(runs), "df_between": float(df)}
    if not cells:
        raise NoiseFileError(f"{source}: no cell has a between-run estimate")
    runs = max(int(c["runs"]) for c in cells.values())
    return NoisePrior(
        fit_prior([{"estimates": cells}]), source, f"{source} ({runs} runs, --encperf-noise)", True
    )


def prior_note(noise: NoisePrior | None = None, history_runs: int = 0) -> str:
    """The line under the gate's header when a check used a prior: which one (the user's
    ``noise``, None for the built-in one), and where from; ``history_runs``: the most saved runs a
    check's history pooled with it (from MIN_HISTORY on, the built-in prior is kept beside them)."""
    active = _in_use(noise)
    note = f"between-run prior: {active.origin}"
    if active.measured_here:
        return note
    if history_runs >= MIN_HISTORY:
        return note + (
            f"; a history of {history_runs} saved one-volume runs is pooled with it, not put in its "
            "place: runs saved while the machine was quiet cannot show how far a busier hour moves a "
            "run (their spread alone failed 17-19% of unchanged runs in a simulation where 30% of "
            "checking runs were loaded; docs/explanation/statistics.md); measure this runner with "
            "benchmarks/noise.py and give --encperf-noise=FILE, or save the reference run with "
            "--encperf-volumes=N"
        )
    return note + (
        "; against one saved run it decides only changes far beyond that machine's noise: measure "
        "this runner with benchmarks/noise.py and give --encperf-noise=FILE, or save the reference run "
        "with --encperf-volumes=N (N >= 2: its own between-volume spread then replaces it)"
    )


def prior_for(backend: str, workload: str, noise: NoisePrior | None = None) -> Prior | None:
    """The between-run prior of a backend (its name, without the spec's options) x workload: its
    own; else, for an encrypted backend, the largest measured for that workload, else the largest
    of the backend, else the largest of any encrypted backend (an unmeasured backend or workload
    is assumed as noisy as the noisiest measured); plain: its own, else its largest. None when
    the table has nothing for it. The table is the user's prior's (``noise``), else the built-in."""
    active = _in_use(noise)
    label = active.source
    table = active.table
    name = backend.split(":", 1)[0]
    if (name, workload) in table:
        sd, df = table[(name, workload)]
        return Prior(sd, df, f"prior of {name} {workload}, {label}")
    encrypted = name != PLAIN
    candidates = (
        [v for (b, w), v in table.items() if w == workload and b != PLAIN] if encrypted else [],
        [v for (b, _), v in table.items() if b == name],
        [v for (b, _), v in table.items() if b != PLAIN] if encrypted else [],
    )
    for found in candidates:
        if found:
            sd, df = max(found)
            return Prior(sd, df, f"largest prior measured for what is nearest ({name} {workload}), {label}")
    return None


def history_prior(
    backend: str | None,
    workload: str,
    exact: bool = False,
    noise: NoisePrior | None = None,
    volume_blocks: bool = False,
) -> Prior | None:
    """What the spread of a workload's saved groups (a history's runs, one saved run's volume
    blocks) is combined with: the cell's prior (``backend`` None: a metric without one; ``exact``:
    only the user's file's own cell, as for a life-cycle step). The user's prior (``noise``)
    always stays. The built-in prior (another machine's) stays beside a history of one-volume
    runs, since it decided one saved run alone: the runs then only add groups and a centre of
    several runs, and never decide less than one saved run did (a few runs' spread alone, on its
    few degrees of freedom, did). Saved runs of a quiet hour cannot show a busier one either: in
    the statistics review's regime-mix simulation (history quiet, 30% of checking runs loaded,
    gocryptfs x 8 workloads at 10%, docs/explanation/statistics.md) the history's spread alone
    FAILed 17.4% +- 0.8 of 2000 unchanged runs at 5 saved runs (0.7% at 3), this pooling 0.1%;
    with only quiet runs neither FAILed any, the spread alone passed 15-26% of checks, this
    pooling none: the price, every check UNDECIDED at 10% on that machine (gate.judge's
    unreachable_note says so in the header). It is left out when the saved run was measured on
    fresh volumes (``volume_blocks``: its own between-volume spread replaces it), and for a
    life-cycle step (it has none)."""
    active = _in_use(noise)
    if backend is None:
        return None
    if exact:
        found = active.table.get((backend.split(":", 1)[0], workload)) if active.measured_here else None
        return Prior(found[0], found[1], f"prior of {backend} {workload}, {active.source}") if found else None
    if volume_blocks and not active.measured_here:
        return None
    return prior_for(backend, workload, active)


def prior_source_code(table: Mapping[tuple[str, str], tuple[float, float]]) -> str:
    lines = ["PRIOR: dict[tuple[str, str], tuple[float, float]] = {"]
    lines += [f"    ({b!r}, {w!r}): ({sd!r}, {df!r})," for (b, w), (sd, df) in table.items()]
    return "\n".join([*lines, "}"])


if __name__ == "__main__":  # python -m pytest_encperf.verdict benchmarks/data/noise-*.json
    import sys

    print(prior_source_code(load_prior(Path(arg) for arg in sys.argv[1:])))
