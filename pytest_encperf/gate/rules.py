"""The gate's vocabulary: metrics, the ``--encperf-fail`` / ``--encperf-max-overhead`` grammar,
rule selection, and the levels every check is decided at (no pytest)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .. import verdict
from ..lifecycledata import LIFECYCLE_STEPS
from ..workloads import TASK_NAMES, Workload

ALPHA = verdict.PASS_ALPHA  # the one-sided error of a pass (and the life cycles' minimum cycles)
FAIL_ALPHA = verdict.FAIL_ALPHA  # family-wise error rate of FAIL: an unchanged run fails at most this often
MIN_HISTORY = verdict.MIN_HISTORY  # comparable saved runs needed before their spread is used


@dataclass(frozen=True)
class Metric:
    name: str
    attribute: str | None  # Measurement attribute; None = the workload's primary (MB/s or IOPS)
    higher_is_better: bool
    unit: str | None  # None = from the workload (MB/s or IOPS)
    paired: bool = False  # an encrypted backend's per-pair ratio to plain (plain: absolute)

    def attr_for(self, workload: Workload) -> str:
        if self.attribute:
            return self.attribute
        return "iops" if workload.reports_iops else "mb_per_s"

    def unit_for(self, workload: Workload, plain: bool = False) -> str:
        if self.paired and not plain:
            return "x plain"
        if self.unit:
            return self.unit
        return workload.unit


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        # the default: encrypted backends by their per-pair ratio to plain, plain by itself
        Metric("throughput", None, True, None, paired=True),
        Metric("vs-plain", None, True, None, paired=True),  # the same, named for clarity
        Metric("abs-throughput", None, True, None),  # an encrypted backend's own MB/s or IOPS
        Metric("mb-per-s", "mb_per_s", True, "MB/s"),
        Metric("iops", "iops", True, "IOPS"),
        Metric("latency-p50", "lat_p50_us", False, "µs"),
        Metric("latency-p99", "lat_p99_us", False, "µs"),
        Metric("latency-p999", "lat_p999_us", False, "µs"),
        Metric("cpu-per-gib", "cpu_s_per_gib", False, "CPU s/GiB"),
        # real-work tasks (workloads.TASK_MODE) take seconds: lower is better. ``seconds`` is
        # their default check (an encrypted backend's per-pair ratio of time to plain's, plain's
        # own seconds), ``abs-seconds`` an encrypted backend's own seconds
        Metric("seconds", "seconds", False, "s", paired=True),
        Metric("abs-seconds", "seconds", False, "s"),
        # a step of the volume's life cycle (not a workload's metric: see lifecycle_checks)
        Metric("lifecycle", None, False, "s"),
    )
}
# What a throughput metric means for a task, which is timed: its seconds, lower is better.
TASK_METRICS = {"throughput": "seconds", "vs-plain": "seconds", "abs-throughput": "abs-seconds"}
# Metrics a task has (its bytes are its data: CPU per GiB holds); a block or files workload has
# every other one.
TASK_ONLY = ("seconds", "abs-seconds")
FOR_TASKS = (*TASK_ONLY, "cpu-per-gib")
DEFAULT_METRIC = "throughput"
WORKLOAD_CLASSES = ("seq", "rnd", "read", "write", "seq-read", "seq-write", "rnd-read", "rnd-write")
_WORKLOAD_NAME = re.compile(r"^(seq|rnd)\d+[km]-q\d+t\d+-(read|write)$")
_THRESHOLD = re.compile(r"^(\d+(?:\.\d+)?)%$")
_BACKEND = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_USER_WORKLOAD = re.compile(r"^[a-z0-9_][a-z0-9_.+\[\]-]*$")  # with a test's prefix or parameters
_JOB_NAME = re.compile(r"^[a-z0-9_][a-z0-9_.+-]*$")  # a fio job's section, lower case (fiojob.SECTION_NAME)
FIO_JOB_OPTION = "--encperf-fio-job"

LIFECYCLE_METRIC = "lifecycle"


def lifecycle_selector(step: str) -> str:
    """The rule grammar's WORKLOAD name of a life-cycle step: "first write" -> lifecycle-first-write."""
    return "lifecycle-" + step.replace(" ", "-")


LIFECYCLE_SELECTORS = {lifecycle_selector(step): step for step in LIFECYCLE_STEPS}

GRAMMAR = (
    "expected a comma list of [BACKEND:][WORKLOAD:][METRIC:]PERCENT%, e.g. 10%, seq-read:5%, "
    "rnd4k-q1t1-write:15%, latency-p99:20%, cpu-per-gib:25%, fscrypt:seq-write:8%; "
    f"WORKLOAD is {' | '.join(WORKLOAD_CLASSES)} or a workload name such as seq1m-q8t1-read, archive or "
    "a timed function's name (encperf.time: its test's, test_inserts for every parametrization, "
    "test_inserts[wal] for one, or its name=) or a job section of "
    f"{FIO_JOB_OPTION} (db-mixed); "
    f"METRIC is {' | '.join(METRICS)} (default throughput: an encrypted backend's ratio to plain, "
    "plain's own MB/s or IOPS); BACKEND is a backend name; life-cycle timings: lifecycle:50% (every "
    f"step) or a step, {' | '.join(LIFECYCLE_SELECTORS)}, e.g. gocryptfs:lifecycle-mount:40%"
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
        """backend 4, then a workload class 1, a name 2, a parametrized test's full id 3 (it beats
        its test's name, which selects every parametrization); a backend beats any workload."""
        score = 4 if self.backend else 0
        if self.workload:
            score += 1 if self.workload in WORKLOAD_CLASSES else (3 if "[" in self.workload else 2)
        return score


def selects_name(selector: str, name: str) -> bool:
    """Whether a rule's WORKLOAD names ``name``: the same name (in any case), or a test's name
    without parameters and ``name`` one of its parametrizations (``test_sqlite`` selects
    ``test_sqlite[wal]``, as -k selects by a function's name)."""
    name = name.lower()
    return name == selector or ("[" not in selector and name.startswith(selector + "["))


def workload_matches(selector: str, workload: Workload) -> bool:
    if selector not in WORKLOAD_CLASSES:
        return selects_name(selector, workload.name)
    if workload.kind == "task":  # a task only by its name; a class never selects a parametrization
        return selector == workload.name.lower()
    kind = "rnd" if workload.is_random else "seq"
    return selector in (kind, workload.direction, f"{kind}-{workload.direction}")


def parse_rules(
    text: str, backend_names: Iterable[str] | None = None, job_names: Iterable[str] | None = ()
) -> list[Rule]:
    """Parse ``--encperf-fail`` / ``--encperf-max-overhead``; an empty text gives no rules.

    ``backend_names``: the names a BACKEND prefix may use (None accepts any well-formed name).
    ``job_names``: the run's fio job sections (--encperf-fio-job), which a WORKLOAD may name; None
    when they are not known yet: a part of a section's form that is no backend is taken as one,
    for ``unknown_jobs`` to check once they are. Raises ValueError listing the grammar.
    """
    names = set(backend_names) if backend_names is not None else None
    jobs = {job.lower() for job in job_names} if job_names is not None else None
    rules = []
    for expression in (part.strip() for part in str(text).split(",")):
        if not expression:
            continue
        rules.append(_parse_rule(expression, names, jobs))
    if not rules and str(text).strip():
        raise ValueError(f"bad expression {text!r}: {GRAMMAR}")
    return rules


def builtin_selector(token: str) -> bool:
    """Whether a lower-case WORKLOAD part names what a run may have without naming it anywhere
    else: a class, a built-in workload, a real-work task or a life-cycle step."""
    return bool(
        token in WORKLOAD_CLASSES
        or _WORKLOAD_NAME.match(token)
        or token in TASK_NAMES
        or token in LIFECYCLE_SELECTORS
    )


def selector_clash(name: str, backend_names: Iterable[str]) -> str | None:
    """What a gate rule would read a fio job section ``name`` as instead of the job (a metric, a
    workload class or built-in workload, a task, a life-cycle step, a backend), or None when a rule
    can name the job by it."""
    token = name.lower()
    if token in METRICS:
        return "a metric"
    if token in WORKLOAD_CLASSES or _WORKLOAD_NAME.match(token):
        return "a built-in workload or workload class"
    if token in TASK_NAMES:
        return "a real-work task"
    if token in LIFECYCLE_SELECTORS:
        return "a life-cycle step"
    if token in {backend.lower() for backend in backend_names}:
        return "a backend"
    return None


def named_selectors(rules: Iterable[Rule], job_names: Iterable[str]) -> list[str]:
    """The WORKLOAD parts of ``rules`` that name no built-in selector and no job of ``job_names``:
    a test's or a timed function's name (encperf.time), or a typo; each once, in order."""
    jobs = {job.lower() for job in job_names}
    return list(
        dict.fromkeys(
            rule.workload
            for rule in rules
            if rule.workload is not None and not builtin_selector(rule.workload) and rule.workload not in jobs
        )
    )


def unmatched_names(rules: Iterable[Rule], job_names: Iterable[str], names: Iterable[str]) -> list[str]:
    """named_selectors of ``rules`` that select none of ``names`` (selects_name: a test's name
    selects its parametrizations)."""
    known = list(names)
    return [
        token
        for token in named_selectors(rules, job_names)
        if not any(selects_name(token, name) for name in known)
    ]


def unknown_name_message(
    flag: str, token: str, job_names: Iterable[str], names: Iterable[str], where: str
) -> str:
    """The usage error of a WORKLOAD part that names nothing: the fio jobs there are and the
    names of the tests and timed functions ``where`` (e.g. "collected", "measured in the runs")."""
    jobs = ", ".join(job_names) or f"none: {FIO_JOB_OPTION} not given"
    found = ", ".join(dict.fromkeys(names)) or "none"
    return (
        f"{flag}: unknown part {token!r}: not a backend, metric, workload or a job section of "
        f"{FIO_JOB_OPTION} ({jobs}), nor a test, timed function or test's own workload {where} ({found}); "
        f"{GRAMMAR}"
    )


def name_clash(name: str, backend_names: Iterable[str]) -> str | None:
    """What a gate rule would read a timed function's ``name`` as instead of it (selector_clash),
    or that no rule can name it (its form); None when ``NAME:20%`` names it and only it."""
    token = name.lower()
    if not _USER_WORKLOAD.match(token):
        return "nothing: a rule's WORKLOAD starts with a letter, a digit or _"
    return selector_clash(name, backend_names)


def _parse_rule(expression: str, names: set[str] | None, jobs: set[str] | None = None) -> Rule:
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
        elif (
            token in WORKLOAD_CLASSES
            or _WORKLOAD_NAME.match(token)
            or token in TASK_NAMES
            or token in LIFECYCLE_SELECTORS
        ):
            kind = "workload"
        elif _BACKEND.match(token) and (names is None or token in names):
            kind = "backend"
        elif _USER_WORKLOAD.match(token) and (token.startswith("test") or "[" in token):
            kind = "workload"  # a timed function's (encperf.time): its test's name, test_x[param]
        elif _JOB_NAME.match(token) and (jobs is None or token in jobs):
            kind = "workload"  # a fio job's section (--encperf-fio-job); None: checked by unknown_jobs
        else:
            raise ValueError(f"bad expression {expression!r}: unknown part {token!r}; {GRAMMAR}")
        if kind in found or any(later in found for later in order[order.index(kind) + 1 :]):
            raise ValueError(
                f"bad expression {expression!r}: {kind} {token!r} repeated or out of order; {GRAMMAR}"
            )
        found[kind] = token
    threshold = float(match.group(1))
    metric = _lifecycle_metric(expression, found) or found.get("metric", DEFAULT_METRIC)
    if METRICS[metric].higher_is_better and threshold >= 100:
        raise ValueError(
            f"bad expression {expression!r}: {metric} cannot drop by {threshold:g}% or more; "
            f"a threshold for it is below 100%; {GRAMMAR}"
        )
    return Rule(
        threshold=threshold,
        # one metric, one check: vs-plain is the default metric's own name for an encrypted backend
        metric=DEFAULT_METRIC if metric == "vs-plain" else metric,
        backend=found.get("backend"),
        workload=found.get("workload"),
        text=expression,
    )


def metric_for(name: str, workload: Workload) -> Metric | None:
    """The metric a check named ``name`` (as rules name it) judges ``workload`` on: for a task
    the throughput metrics become its seconds; None when the metric does not apply to it."""
    if workload.kind == "task":
        name = TASK_METRICS.get(name, name)
        return METRICS[name] if name in FOR_TASKS else None
    return None if name in TASK_ONLY else METRICS[name]


def _lifecycle_metric(expression: str, found: dict[str, str]) -> str | None:
    """LIFECYCLE_METRIC for a rule about life-cycle steps (a step selector implies it); a
    ValueError for one mixing them with workloads or workload metrics."""
    step = found.get("workload") in LIFECYCLE_SELECTORS
    named = found.get("metric") == LIFECYCLE_METRIC
    if not (step or named):
        return None
    if step and found.get("metric", LIFECYCLE_METRIC) != LIFECYCLE_METRIC:
        raise ValueError(
            f"bad expression {expression!r}: a life-cycle step is timed in seconds only; {GRAMMAR}"
        )
    if named and found.get("workload", next(iter(LIFECYCLE_SELECTORS))) not in LIFECYCLE_SELECTORS:
        raise ValueError(
            f"bad expression {expression!r}: the lifecycle metric takes a step "
            f"({' | '.join(LIFECYCLE_SELECTORS)}), not a workload; {GRAMMAR}"
        )
    return LIFECYCLE_METRIC


def select_rule(rules: Sequence[Rule], backend: str, workload: Workload, metric: str) -> Rule | None:
    """The most specific rule for this metric (backend beats workload name beats workload class);
    among equally specific ones the last given wins."""
    best: Rule | None = None
    for rule in rules:
        if rule.metric != metric or not rule.matches(backend, workload):
            continue
        if best is None or rule.specificity >= best.specificity:
            best = rule
    return best
