"""Configuration sweeps: many settings of one backend in one run, ranked, with a recommendation.

Two pure parts, and ready-made sweeps:

* ``expand`` turns one spec whose values list alternatives (``luks2:sector-size=512|4096,
  no-workqueue=0|1``) into the cross product of specs; each is an ordinary backend run named by
  its parameters.
* ``rank`` orders the configurations of each backend family (every spec of one backend name)
  by the geometric mean over the workloads of their paired ratio to plain, with a confidence
  interval, and names those within noise of the best.

The noise is the spread of the per-round log ratios within each workload (each round's
encrypted/plain pair is independent of the next); the workloads' own differences are not noise.
For configuration c, with W common workloads and n_w rounds in workload w:

    log G_c = mean over w of (mean over the rounds of log ratio)
    var(log G_c) = s_c^2 / W^2 * sum over w of 1/n_w

where s_c^2 is the pooled within-workload variance of c's log ratios (degrees of freedom
sum(n_w - 1)). A configuration c is called slower than the best b only when the data show it
slower by more than the margin m (``--encperf-sweep-margin``, default DEFAULT_MARGIN): the one-sided
t-test of log G_b - log G_c > -log(1 - m) (Welch's degrees of freedom) rejects at ALPHA / (k (k - 1)),
Bonferroni over every ordered pair of the k configurations, because the best is chosen after
looking and a best-vs-other difference is a difference of some ordered pair. Without any real
difference that keeps the chance of calling any configuration slower at most ALPHA
(tests/functional/test_sweep.py checks it by simulation).

Why a margin: the rounds' spread is the noise within one volume's measurement. Each
configuration is another volume, measured at another time: a busy neighbour or a different file
layout moves a whole volume's ratios together, which no number of rounds reveals (two identical
gocryptfs configurations measured one after the other differed by 9% on a shared 2-core VM while
other jobs ran, by 5% on a quiet one). Differences within the margin are never called, and the
legend says that "slower" assumes volumes differ by less than that. By simulation, the default
margin keeps false "slower" calls at or under 5% for 8 configurations when each volume's ratios
share a random shift with a 3% spread (13% of runs call one at a 4% spread): on a busy machine,
raise the margin.

Not ranked on: read cells served partly by memory below the volume (``Result.cached_below``:
the stack's caching, not its encryption). On the partition target the plain side of every round
is one median (before/after), so no spread, interval or claim is computed there.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import Result
from .stats import t_ppf, t_sf
from .workloads import Workload

ALTERNATIVE = "|"
ALPHA = 0.05
DEFAULT_MARGIN = 0.10  # relative shortfall from the best that must be shown before "slower"

# Ready-made sweeps (--encperf-sweep). The cascade is three stacked plain dm-crypt mappings, as
# cryptsetup opens a TrueCrypt/VeraCrypt AES-Twofish-Serpent volume, so the four ciphers are one
# family (dm-plain: no header, the same key handling for all four).
SWEEPS: dict[str, tuple[str, str]] = {
    "luks-tuning": (
        "luks2:sector-size=512|4096,no-workqueue=0|1,key-size=256|512",
        "LUKS2 sector size x dm-crypt workqueue bypass x XTS key size (8 configurations)",
    ),
    "ciphers": (
        "dm-plain:cipher=aes-xts-plain64|serpent-xts-plain64|twofish-xts-plain64"
        "|aes-xts-plain64+twofish-xts-plain64+serpent-xts-plain64",
        "AES, Serpent, Twofish and the AES-Twofish-Serpent cascade (stacked dm-crypt), plain dm-crypt",
    ),
}


def expand(item: str) -> list[str]:
    """``name:key=a|b,other=x|y`` -> the specs of every combination, the first key varying
    slowest; an item without alternatives is returned as it is. ValueError for an empty or
    repeated alternative, or alternatives in the backend name."""
    name, colon, rest = item.strip().partition(":")
    if ALTERNATIVE in name:
        raise ValueError(
            f"bad sweep {item!r}: alternatives go in parameter values (name:key=a|b), not in the backend name"
        )
    if not colon or ALTERNATIVE not in rest:
        return [item.strip()]
    keys: list[str] = []
    choices: list[list[str]] = []
    for part in rest.split(","):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"bad parameter {part!r} in sweep {item!r}: expected key=value|value")
        values = [v.strip() for v in value.split(ALTERNATIVE)]
        if any(not v for v in values):
            raise ValueError(f"empty alternative in {part.strip()!r} of sweep {item!r}")
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ValueError(f"value {repeated[0]!r} repeated in {part.strip()!r} of sweep {item!r}")
        keys.append(key.strip())
        choices.append(values)
    return [
        f"{name}:" + ",".join(f"{key}={value}" for key, value in zip(keys, combination, strict=True))
        for combination in itertools.product(*choices)
    ]


def sweep_specs(names: Iterable[str]) -> list[str]:
    """The spec items of ready-made sweeps (not expanded yet)."""
    return [SWEEPS[name][0] for name in names]


def family(spec: str) -> str:
    return spec.partition(":")[0]


def parameters(spec: str) -> str:
    return spec.partition(":")[2] or "(defaults)"


@dataclass(frozen=True)
class Ranked:
    """One configuration's place in its family."""

    spec: str
    rank: int  # 1 = the best estimate
    geomean: float  # geometric mean over the common workloads of the paired ratio to plain
    low: float | None  # 1 - ALPHA interval of that geometric mean; None with no spread estimate
    high: float | None
    rounds: int  # ratio pairs used, over all common workloads
    within_noise: bool  # not shown slower than the best by more than the margin (the best: True)
    p_vs_best: float | None  # Bonferroni-adjusted p-value of "at most the margin slower than the best"

    @property
    def change_percent(self) -> float:
        return (self.geomean - 1.0) * 100.0


@dataclass(frozen=True)
class FamilyRanking:
    """The ranking of one backend family's configurations, and what it could not rank."""

    family: str
    workloads: tuple[str, ...]  # the labels ranked over (measured by every ranked configuration)
    ranked: tuple[Ranked, ...]
    margin: float = DEFAULT_MARGIN
    unranked: tuple[tuple[str, str], ...] = ()  # (spec, why)
    left_out: tuple[str, ...] = ()  # workloads not measured comparably by every configuration
    recommendation: tuple[str, ...] = field(default=())  # set by the session: commands, options

    @property
    def best(self) -> Ranked | None:
        return self.ranked[0] if self.ranked else None

    @property
    def decided(self) -> bool:
        """Whether the best is distinguishable from at least one other configuration."""
        return any(not r.within_noise for r in self.ranked)

    def to_dict(self) -> dict[str, object]:
        return {
            "family": self.family,
            "metric": "geometric mean over workloads of the paired ratio to plain",
            "confidence": 1 - ALPHA,
            "margin": self.margin,
            "workloads": list(self.workloads),
            "left_out_workloads": list(self.left_out),
            "configurations": [
                {
                    "spec": r.spec,
                    "rank": r.rank,
                    "geomean_ratio": r.geomean,
                    "change_percent": r.change_percent,
                    "interval": None if r.low is None else [r.low, r.high],
                    "rounds": r.rounds,
                    "within_noise_of_best": r.within_noise,
                    "p_vs_best": r.p_vs_best,
                }
                for r in self.ranked
            ],
            "unranked": [{"spec": spec, "why": why} for spec, why in self.unranked],
            "recommendation": list(self.recommendation),
        }


def ranking_from_dict(data: dict[str, Any]) -> FamilyRanking:
    """A saved ranking (``FamilyRanking.to_dict``) back, as the run printed it."""
    ranked = tuple(
        Ranked(
            spec=c["spec"],
            rank=c["rank"],
            geomean=c["geomean_ratio"],
            low=c["interval"][0] if c["interval"] else None,
            high=c["interval"][1] if c["interval"] else None,
            rounds=c["rounds"],
            within_noise=c["within_noise_of_best"],
            p_vs_best=c["p_vs_best"],
        )
        for c in data["configurations"]
    )
    return FamilyRanking(
        family=data["family"],
        workloads=tuple(data["workloads"]),
        ranked=ranked,
        margin=data.get("margin", DEFAULT_MARGIN),
        unranked=tuple((u["spec"], u["why"]) for u in data.get("unranked", [])),
        left_out=tuple(data.get("left_out_workloads", [])),
        recommendation=tuple(data.get("recommendation", [])),
    )


@dataclass(frozen=True)
class _Estimate:
    log_mean: float
    variance: float | None  # of log_mean; None without any degree of freedom
    df: int
    rounds: int


def _log_ratios(result: Result) -> list[float] | None:
    """The finite per-round log ratios of a result, or None when it has no ratio to plain."""
    if result.ratio() is None:
        return None
    logs = result.pair_log_ratios()
    if result.workload.lower_is_better:  # a task's time: its speed ratio is plain's time over it
        logs = [-log for log in logs]
    return logs or None


def _estimate(samples: Sequence[Sequence[float]], spread: bool = True) -> _Estimate:
    """``spread``: False when the rounds' ratios do not vary independently (a shared plain median)."""
    width = len(samples)
    log_mean = statistics.fmean(statistics.fmean(s) for s in samples)
    df = sum(len(s) - 1 for s in samples)
    rounds = sum(len(s) for s in samples)
    if df <= 0 or not spread:
        return _Estimate(log_mean, None, 0, rounds)
    pooled = sum((len(s) - 1) * statistics.variance(s) for s in samples if len(s) > 1) / df
    variance = pooled / width**2 * sum(1 / len(s) for s in samples)
    return _Estimate(log_mean, variance, df, rounds)


def _shortfall_p(best: _Estimate, other: _Estimate, margin: float) -> float | None:
    """One-sided p-value of "log G_best - log G_other <= -log(1 - margin)" (other is at most
    ``margin`` slower), Welch's degrees of freedom; None without a spread on either side."""
    if best.variance is None or other.variance is None:
        return None
    shift = -math.log1p(-margin)
    difference = best.log_mean - other.log_mean - shift
    spread = best.variance + other.variance
    if spread <= 0:
        return 0.0 if difference > 0 else 1.0
    df = spread**2 / (best.variance**2 / best.df + other.variance**2 / other.df)
    return t_sf(difference / math.sqrt(spread), df)


def rank_family(
    name: str, results: Sequence[Result], specs: Sequence[str] = (), margin: float = DEFAULT_MARGIN
) -> FamilyRanking:
    """Rank the configurations of one family from their results (one machine's run).
    ``specs``: every configuration the run asked for, so those without results are listed;
    ``margin``: the smallest relative shortfall from the best that may be called slower."""
    by_spec: dict[str, dict[Workload, list[float]]] = {}
    unranked: dict[str, str] = {}
    no_spread: set[str] = set()
    cached: set[str] = set()
    for result in results:
        by_spec.setdefault(result.backend, {})
        if result.cached_below:
            cached.add(f"{result.workload.label} {result.workload.rw}")
            continue
        logs = _log_ratios(result)
        if logs is not None:
            # a second result of one workload (two tests running it) adds its rounds
            by_spec[result.backend].setdefault(result.workload, []).extend(logs)
            if result.before_after:
                no_spread.add(result.backend)
    for spec in specs:
        if spec not in by_spec:
            unranked[spec] = "no results (skipped or failed)"
    for spec, cells in list(by_spec.items()):
        if not cells:
            unranked[spec] = "no workload with a ratio to plain"
            del by_spec[spec]
    workloads_all = {w for cells in by_spec.values() for w in cells}
    common = [w for w in workloads_all if all(w in cells for cells in by_spec.values())]
    common.sort(key=lambda w: (w.label, w.rw, w.block_size, w.iodepth, w.numjobs))
    left_out = sorted(
        {f"{w.label} {w.rw}" for w in workloads_all if w not in common}
        | {f"{label} (cached below)" for label in cached}
    )
    if not common:
        for spec in by_spec:
            unranked[spec] = "no workload measured comparably by every configuration"
        by_spec = {}
    estimates = {
        spec: _estimate([cells[w] for w in common], spread=spec not in no_spread)
        for spec, cells in by_spec.items()
    }
    order = sorted(estimates, key=lambda spec: (-estimates[spec].log_mean, spec))
    ordered_pairs = len(order) * (len(order) - 1)
    ranked = []
    for place, spec in enumerate(order, start=1):
        own = estimates[spec]
        low = high = None
        if own.variance is not None:
            half = t_ppf(1 - ALPHA / 2, own.df) * math.sqrt(own.variance)
            low, high = math.exp(own.log_mean - half), math.exp(own.log_mean + half)
        p_adjusted = None
        within = True
        if place > 1:
            p = _shortfall_p(estimates[order[0]], own, margin)
            if p is not None:
                p_adjusted = min(1.0, p * ordered_pairs)
                within = p_adjusted > ALPHA
        ranked.append(Ranked(spec, place, math.exp(own.log_mean), low, high, own.rounds, within, p_adjusted))
    return FamilyRanking(
        family=name,
        margin=margin,
        workloads=tuple(f"{w.label} {w.rw}" for w in common),
        ranked=tuple(ranked),
        unranked=tuple(sorted(unranked.items())),
        left_out=tuple(left_out),
    )


def rank(
    results: Sequence[Result], specs: Sequence[str], margin: float = DEFAULT_MARGIN
) -> list[FamilyRanking]:
    """A ranking for every family with at least two configurations in ``specs`` (the run's
    backends, plain left out)."""
    families: dict[str, list[str]] = {}
    for spec in specs:
        families.setdefault(family(spec), []).append(spec)
    rankings = []
    for name, members in families.items():
        if len(members) < 2:
            continue
        mine = [r for r in results if r.backend in members]
        rankings.append(rank_family(name, mine, members, margin))
    return rankings
