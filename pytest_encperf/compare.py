"""Regression rules (``--encperf-fail``, ``--encperf-max-overhead``) and the checks they give.

Pure functions on Results, no pytest. A check compares the per-round samples of one metric of
one backend x workload, either against a saved run (``--encperf-fail``) or against the plain
baseline rounds of the same run (``--encperf-max-overhead``). It fails only when the median is
worse than the threshold (direction-aware: throughput down, latency or CPU up) AND the
difference is significant: one-sided Mann-Whitney U, p <= ALPHA. The ratio of medians gets a
bootstrap confidence interval, shown with the p-value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import stats
from .model import Result
from .workloads import Workload

EXIT_REGRESSION = 7  # pytest exit status (and `encperf compare`'s) when a check fails; see README
ALPHA = 0.05
MIN_ROUNDS = 3  # per side: with fewer, no exact one-sided p-value reaches ALPHA (1/C(4,2) = 0.17)


@dataclass(frozen=True)
class Metric:
    name: str
    attribute: str | None  # Measurement attribute; None = the workload's primary (MB/s or IOPS)
    higher_is_better: bool
    unit: str | None  # None = from the workload (MB/s or IOPS)

    def attr_for(self, workload: Workload) -> str:
        if self.attribute:
            return self.attribute
        return "iops" if workload.reports_iops else "mb_per_s"

    def unit_for(self, workload: Workload) -> str:
        if self.unit:
            return self.unit
        return "IOPS" if workload.reports_iops else "MB/s"


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("throughput", None, True, None),
        # per-round ratio backend/plain (paired rounds): machine drift between runs cancels
        Metric("vs-plain", None, True, "x plain"),
        Metric("mb-per-s", "mb_per_s", True, "MB/s"),
        Metric("iops", "iops", True, "IOPS"),
        Metric("latency-p50", "lat_p50_us", False, "µs"),
        Metric("latency-p99", "lat_p99_us", False, "µs"),
        Metric("latency-p999", "lat_p999_us", False, "µs"),
        Metric("cpu-per-gib", "cpu_s_per_gib", False, "CPU s/GiB"),
    )
}
DEFAULT_METRIC = "throughput"
WORKLOAD_CLASSES = ("seq", "rnd", "read", "write", "seq-read", "seq-write", "rnd-read", "rnd-write")
_WORKLOAD_NAME = re.compile(r"^(seq|rnd)\d+[km]-q\d+t\d+-(read|write)$")
_THRESHOLD = re.compile(r"^(\d+(?:\.\d+)?)%$")
_BACKEND = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")

GRAMMAR = (
    "expected a comma list of [BACKEND:][WORKLOAD:][METRIC:]PERCENT%, e.g. 10%, seq-read:5%, "
    "rnd4k-q1t1-write:15%, latency-p99:20%, cpu-per-gib:25%, fscrypt:seq-write:8%; "
    f"WORKLOAD is {' | '.join(WORKLOAD_CLASSES)} or a workload name such as seq1m-q8t1-read; "
    f"METRIC is {' | '.join(METRICS)} (default throughput: MB/s, IOPS for 4K random rows); "
    "BACKEND is a backend name"
)


@dataclass(frozen=True)
class Rule:
    """One parsed expression: the worst change tolerated for the matching backend/workload/metric."""

    threshold: float  # percent
    metric: str = DEFAULT_METRIC
    backend: str | None = None
    workload: str | None = None  # a class from WORKLOAD_CLASSES or a lower-case workload name
    text: str = ""

    def matches(self, backend: str, workload: Workload) -> bool:
        if self.backend is not None and self.backend not in (backend, backend.split(":", 1)[0]):
            return False
        return self.workload is None or workload_matches(self.workload, workload)

    @property
    def specificity(self) -> int:
        score = 4 if self.backend else 0
        if self.workload:
            score += 1 if self.workload in WORKLOAD_CLASSES else 2
        return score


def workload_matches(selector: str, workload: Workload) -> bool:
    if selector not in WORKLOAD_CLASSES:
        return selector == workload.name.lower()
    kind = "rnd" if workload.is_random else "seq"
    return selector in (kind, workload.direction, f"{kind}-{workload.direction}")


def parse_rules(text: str, backend_names: Iterable[str] | None = None) -> list[Rule]:
    """Parse ``--encperf-fail`` / ``--encperf-max-overhead``; an empty text gives no rules.

    ``backend_names``: the names a BACKEND prefix may use (None accepts any well-formed name).
    Raises ValueError listing the grammar.
    """
    names = set(backend_names) if backend_names is not None else None
    rules = []
    for expression in (part.strip() for part in str(text).split(",")):
        if not expression:
            continue
        rules.append(_parse_rule(expression, names))
    if not rules and str(text).strip():
        raise ValueError(f"bad expression {text!r}: {GRAMMAR}")
    return rules


def _parse_rule(expression: str, names: set[str] | None) -> Rule:
    *prefix, last = [token.strip().lower() for token in expression.split(":")]
    match = _THRESHOLD.match(last)
    if not match:
        raise ValueError(
            f"bad expression {expression!r}: it must end with a percentage such as 10%; {GRAMMAR}"
        )
    found: dict[str, str] = {}
    order = ("backend", "workload", "metric")
    for token in prefix:
        if token in METRICS:
            kind = "metric"
        elif token in WORKLOAD_CLASSES or _WORKLOAD_NAME.match(token):
            kind = "workload"
        elif _BACKEND.match(token) and (names is None or token in names):
            kind = "backend"
        else:
            raise ValueError(f"bad expression {expression!r}: unknown part {token!r}; {GRAMMAR}")
        if kind in found or any(later in found for later in order[order.index(kind) + 1 :]):
            raise ValueError(
                f"bad expression {expression!r}: {kind} {token!r} repeated or out of order; {GRAMMAR}"
            )
        found[kind] = token
    return Rule(
        threshold=float(match.group(1)),
        metric=found.get("metric", DEFAULT_METRIC),
        backend=found.get("backend"),
        workload=found.get("workload"),
        text=expression,
    )


def select_rule(rules: Sequence[Rule], backend: str, workload: Workload, metric: str) -> Rule | None:
    """The most specific rule for this metric (backend beats workload name beats workload class);
    among equally specific ones the last given wins."""
    best: Rule | None = None
    for rule in rules:
        matching = rule.metric == metric and rule.matches(backend, workload)
        if matching and (best is None or rule.specificity >= best.specificity):
            best = rule
    return best


# ----------------------------------------------------------------------------- checks

PASS, FAIL, NOT_SIGNIFICANT, TOO_FEW_ROUNDS, INFO = (
    "pass",
    "FAIL",
    "not significant",
    "too few rounds",
    "info",
)


@dataclass(frozen=True)
class Check:
    kind: str  # "baseline" (vs a saved run) or "overhead" (vs plain in this run)
    backend: str
    workload: str
    metric: str
    unit: str
    reference: float  # median of the reference: the saved run, or plain in this run
    current: float
    worse_percent: float  # positive = worse than the reference by that much (direction-aware)
    change_percent: float  # current / reference - 1, in percent (signed, not direction-aware)
    p_value: float
    interval: tuple[float, float]  # bootstrap 95% interval of current / reference (medians)
    rounds: tuple[int, int]  # (current, reference)
    threshold: float | None
    rule: str
    status: str
    reason: str

    @property
    def failed(self) -> bool:
        return self.status == FAIL


def evaluate(
    kind: str,
    backend: str,
    workload: Workload,
    metric_name: str,
    current: Sequence[float],
    reference: Sequence[float],
    rule: Rule | None,
) -> Check:
    """Decide one check from the two samples (one value per round)."""
    metric = METRICS[metric_name]
    cur, ref = stats.median(current), stats.median(reference)
    ratio = cur / ref if ref else float("inf")
    worse = (1 - ratio) * 100 if metric.higher_is_better else (ratio - 1) * 100
    alternative = "less" if metric.higher_is_better else "greater"
    test = stats.mann_whitney_u(current, reference, alternative=alternative)
    interval = stats.bootstrap_ratio_ci(current, reference)
    n = (len(current), len(reference))
    threshold = rule.threshold if rule else None
    significant = test.p_value <= ALPHA
    if rule is None:
        status, reason = INFO, "no rule"
    elif worse <= threshold + 1e-9:
        status, reason = PASS, f"worse by {worse:.1f}%, within {threshold:g}%" if worse > 0 else "not worse"
    elif stats.min_p_value(*n) > ALPHA:
        status = TOO_FEW_ROUNDS
        reason = (
            f"worse by {worse:.1f}% > {threshold:g}%, but {n[0]} vs {n[1]} rounds cannot show significance "
            f"at {ALPHA:g} (at least {MIN_ROUNDS} rounds on each side are needed)"
        )
    elif not significant:
        status = NOT_SIGNIFICANT
        reason = (
            f"worse by {worse:.1f}% > {threshold:g}%, but not significant: p={test.p_value:.3f} > {ALPHA:g} "
            f"(round-to-round CV {stats.cv(current) * 100:.1f}% now, {stats.cv(reference) * 100:.1f}% before)"
        )
    else:
        status, reason = FAIL, f"worse by {worse:.1f}% > {threshold:g}%, p={test.p_value:.3f} <= {ALPHA:g}"
    return Check(
        kind=kind,
        backend=backend,
        workload=workload.name,
        metric=metric_name,
        unit=metric.unit_for(workload),
        reference=ref,
        current=cur,
        worse_percent=worse,
        change_percent=(ratio - 1) * 100,
        p_value=test.p_value,
        interval=interval,
        rounds=n,
        threshold=threshold,
        rule=rule.text if rule else "",
        status=status,
        reason=reason,
    )


def _samples(rounds: Iterable, metric: Metric, workload: Workload) -> list[float]:
    attr = metric.attr_for(workload)
    return [float(getattr(m, attr)) for m in rounds]


def _result_samples(result: Result, metric: Metric) -> list[float]:
    if metric.name != "vs-plain":
        return _samples(result.rounds, metric, result.workload)
    attr = metric.attr_for(result.workload)
    return [
        getattr(v, attr) / getattr(b, attr)
        for v, b in zip(result.rounds, result.baseline_rounds, strict=False)
        if getattr(b, attr)
    ]


def _metrics(rules: Sequence[Rule]) -> list[str]:
    names = [DEFAULT_METRIC, *(rule.metric for rule in rules)]
    return list(dict.fromkeys(names))


@dataclass
class Comparison:
    checks: list[Check] = field(default_factory=list)
    only_in_reference: list[str] = field(default_factory=list)  # "backend workload"
    only_in_current: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [check for check in self.checks if check.failed]


def compare_runs(reference: Sequence[Result], current: Sequence[Result], rules: Sequence[Rule]) -> Comparison:
    """Every backend x workload present in both runs, for throughput and each metric a rule names."""
    ref_by_key = {(r.backend, r.workload.name): r for r in reference if r.rounds}
    cur_by_key = {(r.backend, r.workload.name): r for r in current if r.rounds}
    comparison = Comparison(
        only_in_reference=[" ".join(k) for k in ref_by_key if k not in cur_by_key],
        only_in_current=[" ".join(k) for k in cur_by_key if k not in ref_by_key],
    )
    for key, cur in cur_by_key.items():
        ref = ref_by_key.get(key)
        if ref is None:
            continue
        for name in _metrics(rules):
            metric = METRICS[name]
            comparison.checks.append(
                evaluate(
                    "baseline",
                    cur.backend,
                    cur.workload,
                    name,
                    _result_samples(cur, metric),
                    _result_samples(ref, metric),
                    select_rule(rules, cur.backend, cur.workload, name),
                )
            )
    return comparison


def overhead_checks(results: Sequence[Result], rules: Sequence[Rule]) -> list[Check]:
    """``--encperf-max-overhead``: each backend against the plain rounds interleaved with it
    (``vs-plain`` means throughput here: the comparison is already with plain)."""
    checks = []
    for result in results:
        if not result.rounds or not result.baseline_rounds:
            continue
        for name in dict.fromkeys(rule.metric for rule in rules):
            rule = select_rule(rules, result.backend, result.workload, name)
            if rule is None:
                continue
            metric = METRICS["throughput" if name == "vs-plain" else name]
            checks.append(
                evaluate(
                    "overhead",
                    result.backend,
                    result.workload,
                    metric.name,
                    _samples(result.rounds, metric, result.workload),
                    _samples(result.baseline_rounds, metric, result.workload),
                    rule,
                )
            )
    return checks


@dataclass
class Verdict:
    """Everything the gate decided for one run, for the terminal, Markdown and the exit status."""

    baseline: str | None = None  # label of the compared saved run
    comparison: Comparison | None = None
    overhead: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # shown, never failing (missing baseline ...)
    errors: list[str] = field(default_factory=list)  # failing: unreadable baseline, save failed
    saved: str | None = None

    @property
    def checks(self) -> list[Check]:
        return [*(self.comparison.checks if self.comparison else []), *self.overhead]

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.failed]

    @property
    def failed(self) -> bool:
        return bool(self.errors or self.failures)
