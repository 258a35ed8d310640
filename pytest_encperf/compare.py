"""The CI gate: regression rules, the checks they give, and the one Verdict builder (no pytest).

A *check* compares one metric of one backend x workload ("cell") of this run with a reference.
What counts as evidence depends on the metric and on what the reference offers:

- ``paired ratios`` (the default for an encrypted backend): each backend round divided by the
  plain round measured beside it. Whole-run drift (a busy neighbour, a warmer disk) moves both
  sides of a pair and cancels in the ratio; what a new run changes for the backend alone (a new
  volume, its placement) does not, and enters as the between-run part of the model
  (pytest_encperf/verdict.py: a prior per backend and workload, fitted to measured runs).
- ``paired ratios + history``: the same, with at least MIN_HISTORY comparable saved runs, whose
  spread adds to the prior (per workload).
- ``rounds + run prior``: plain's own throughput against the reference's plain, with plain's
  between-run prior (a machine that got slower: not the encryption's fault, shown as such).
- ``history``: other absolute numbers (latency, CPU, an encrypted backend's MB/s, life-cycle
  steps) have no prior: they are gated only with at least MIN_HISTORY comparable saved runs.
- ``this run's plain rounds`` (``--encperf-max-overhead``): a backend's rounds against the plain
  rounds interleaved with it (one run: no between-run part).

Every check has three outcomes against its threshold, a tolerance: FAIL when worse than the
threshold with the family's confidence (Holm over every gated check of the run, so a run with 50
checks is no more likely to fail falsely than one with 5; FAIL_ALPHA), pass when not worse than it at ALPHA
one-sided, otherwise UNDECIDED (fails under --encperf-strict). A check whose two sides were
measured with different settings is ``not comparable``, never a pass. ``Gate`` lets the runner
add paired rounds to a check that is not yet decided.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache

from . import stats, verdict
from .load import BUSY_SHARE
from .model import LIFECYCLE_STEPS, Measurement, Result, RunData, io_mode_problem, round_ratios
from .workloads import TASK_NAMES, MiB, Workload

EXIT_REGRESSION = 7  # pytest exit status (and `encperf compare`'s) when the gate fails; see README
ALPHA = verdict.PASS_ALPHA  # the one-sided error of a pass (and the life cycles' minimum cycles)
FAIL_ALPHA = verdict.FAIL_ALPHA  # family-wise error rate of FAIL: an unchanged run fails at most this often
MIN_HISTORY = verdict.MIN_HISTORY  # comparable saved runs needed before their spread is used
# Confirmation pairs one check (one workload's result) may add, of the run's budget: a noisy cell
# cannot spend the budget the others need (the runner's MAX_CONFIRM_PAIRS is the outer limit).
CHECK_CONFIRM_PAIRS = 6
BASELINE = "plain"  # the unencrypted backend (backends.BASELINE; compare imports no backend)


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

LIFECYCLE_METRIC = "lifecycle"


def lifecycle_selector(step: str) -> str:
    """The rule grammar's WORKLOAD name of a life-cycle step: "first write" -> lifecycle-first-write."""
    return "lifecycle-" + step.replace(" ", "-")


LIFECYCLE_SELECTORS = {lifecycle_selector(step): step for step in LIFECYCLE_STEPS}

GRAMMAR = (
    "expected a comma list of [BACKEND:][WORKLOAD:][METRIC:]PERCENT%, e.g. 10%, seq-read:5%, "
    "rnd4k-q1t1-write:15%, latency-p99:20%, cpu-per-gib:25%, fscrypt:seq-write:8%; "
    f"WORKLOAD is {' | '.join(WORKLOAD_CLASSES)} or a workload name such as seq1m-q8t1-read or archive; "
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
        score = 4 if self.backend else 0
        if self.workload:
            score += 1 if self.workload in WORKLOAD_CLASSES else 2
        return score


def workload_matches(selector: str, workload: Workload) -> bool:
    if selector not in WORKLOAD_CLASSES or workload.kind == "task":  # a task only by its name
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
        elif (
            token in WORKLOAD_CLASSES
            or _WORKLOAD_NAME.match(token)
            or token in TASK_NAMES
            or token in LIFECYCLE_SELECTORS
        ):
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


# ----------------------------------------------------------------------------- runs and cells


# Run-wide settings that change what a workload measures (engine, I/O mode and the workload's
# own definition are compared per cell, from the rounds themselves).
COMPARED_SETTINGS = ("size", "runtime", "target")


@dataclass(frozen=True)
class Cell:
    """The rounds of one backend x workload of a run. Plain's cell pools the plain rounds that
    every backend of the run was paired with (they come from the one baseline volume)."""

    backend: str
    workload: Workload
    rounds: tuple[Measurement, ...]
    baseline_rounds: tuple[Measurement, ...] = ()  # paired plain rounds (encrypted backends)
    stop_reason: str = ""
    confirm_rounds: int = 0
    # partition target: the plain rounds were measured before the volume existed and after it
    # was removed, not beside each round
    before_after: bool = False
    busy: int = 0  # rounds (both sides) left out because the machine was busy (cells_of quiet_only)

    @property
    def plain(self) -> bool:
        return self.backend.split(":", 1)[0] == BASELINE

    @property
    def paired_evidence(self) -> str:
        return BEFORE_AFTER if self.before_after else PAIRED

    def samples(self, metric: Metric) -> list[float]:
        """One value per round: the metric, or for a paired metric on an encrypted backend its
        ratio to the plain round beside it (on the partition target: to the median of the plain
        rounds measured before and after the volume)."""
        attr = metric.attr_for(self.workload)
        if not metric.paired or self.plain:
            return [float(getattr(m, attr)) for m in self.rounds]
        if self.pairing_problem():
            return []
        return round_ratios(self.rounds, self.baseline_rounds, attr, before_after=self.before_after)

    def pairing_problem(self) -> str | None:
        """Why the backend's rounds cannot be divided by plain rounds, if they cannot: a round
        without its plain partner, or plain rounds in another I/O mode."""
        if not self.before_after and len(self.rounds) != len(self.baseline_rounds):
            return f"{len(self.rounds)} rounds but {len(self.baseline_rounds)} plain rounds beside them"
        if not self.baseline_rounds:
            return "no plain rounds"
        return io_mode_problem(self.rounds, self.baseline_rounds)

    def setup(self, metric: Metric) -> dict[str, str]:
        """What has to match for two cells to be compared on ``metric``."""
        rounds = [*self.rounds, *(self.baseline_rounds if metric.paired and not self.plain else ())]
        setup = {
            "engine": "/".join(sorted({m.engine for m in rounds})) or "-",
            "I/O mode": "/".join(sorted({m.io_mode for m in rounds})) or "-",
            "caveats": "/".join(sorted({c for m in rounds for c in m.caveats})) or "none",
            **_workload_fields(self.workload),
        }
        if self.workload.kind == "block":  # what a round of the workload does (workloads.io_plan)
            setup["round definition"] = "/".join(sorted({m.round_definition or "1" for m in rounds}))
        if metric.attr_for(self.workload).startswith("lat_"):  # total latency, or fio's older clat
            setup["latency"] = "/".join(sorted({m.latency or "completion" for m in rounds}))
        return setup


@cache
def _workload_fields(workload: Workload) -> dict[str, str]:
    """The workload's definition (what its profile made of it), field by field, without its label."""
    return {f"workload {key}": str(value) for key, value in asdict(workload).items() if key != "label"}


def quiet_rounds(
    rounds: Sequence[Measurement], baseline_rounds: Sequence[Measurement], before_after: bool = False
) -> tuple[tuple[Measurement, ...], tuple[Measurement, ...], int]:
    """The rounds and plain rounds without the busy ones (Measurement.busy), and how many rounds
    were left out: a pair goes whole when either of its rounds was busy (on the partition
    target, whose plain rounds are not paired, each busy round alone)."""
    if before_after or len(rounds) != len(baseline_rounds):
        kept, plain = [m for m in rounds if not m.busy], [m for m in baseline_rounds if not m.busy]
        return tuple(kept), tuple(plain), len(rounds) + len(baseline_rounds) - len(kept) - len(plain)
    pairs = [(v, b) for v, b in zip(rounds, baseline_rounds, strict=True) if not (v.busy or b.busy)]
    return tuple(v for v, _ in pairs), tuple(b for _, b in pairs), 2 * (len(rounds) - len(pairs))


def cells_of(results: Iterable[Result], quiet_only: bool = False) -> dict[tuple[str, str], Cell]:
    """Every backend x workload of a run, plus plain's cell per workload (its pooled rounds).
    ``quiet_only`` (the gate): without the rounds during which the machine was busy (quiet_rounds),
    a cell all of whose rounds were busy kept with none."""
    cells: dict[tuple[str, str], Cell] = {}
    plain: dict[str, list[Measurement]] = {}
    plain_busy: dict[str, int] = {}
    workloads: dict[str, Workload] = {}
    for result in results:
        if not result.rounds:
            continue
        name = result.workload.name
        workloads.setdefault(name, result.workload)
        rounds, baseline_rounds, busy = tuple(result.rounds), tuple(result.baseline_rounds), 0
        if quiet_only:
            rounds, baseline_rounds, busy = quiet_rounds(rounds, baseline_rounds, result.before_after)
        plain.setdefault(name, []).extend(baseline_rounds)
        if result.backend.split(":", 1)[0] == BASELINE:
            plain[name].extend(rounds)
            plain_busy[name] = plain_busy.get(name, 0) + busy
            continue
        dropped = len(result.baseline_rounds) - len(baseline_rounds)  # plain rounds left out
        plain_busy[name] = plain_busy.get(name, 0) + dropped
        cells[(result.backend, name)] = Cell(
            result.backend, result.workload, rounds, baseline_rounds,
            result.stop_reason, result.confirm_rounds, result.before_after, busy,
        )  # fmt: skip
    for name, plain_rounds in plain.items():
        if plain_rounds or plain_busy.get(name):
            cells[(BASELINE, name)] = Cell(
                BASELINE, workloads[name], tuple(plain_rounds), busy=plain_busy.get(name, 0)
            )
    return cells


def setting_differences(
    before: dict[str, str], now: dict[str, str], keys: Sequence[str] = COMPARED_SETTINGS
) -> list[str]:
    """``size 1073741824 -> 268435456`` for each compared setting (``keys``) both runs recorded
    differently."""
    found = []
    for key in keys:
        old, new = before.get(key), now.get(key)
        if old is not None and new is not None and str(old) != str(new):
            found.append(f"{key} {_setting_display(key, old)} -> {_setting_display(key, new)}")
    return found


def _setting_display(key: str, value: str) -> str:
    if key == "size" and str(value).isdigit():
        return f"{int(value) // MiB} MiB"
    if key == "runtime":
        return f"{value} s"
    return str(value)


def cell_differences(before: Cell, now: Cell, metric: Metric) -> list[str]:
    a, b = before.setup(metric), now.setup(metric)
    return [f"{key} {a[key]} -> {b[key]}" for key in a if a[key] != b[key]]


# ----------------------------------------------------------------------------- checks

PASS, FAIL, UNDECIDED, NOT_COMPARABLE, NOT_GATED, INVALID, INFO = (
    verdict.PASS,
    verdict.FAIL,
    verdict.UNDECIDED,  # neither worse than the threshold nor within it, with the stated confidence
    "not comparable",
    "not gated",
    "invalid",
    "info",
)
NOT_SIGNIFICANT = UNDECIDED  # the reports' name for what needs a look but did not fail
# Not decided because the machine was busy: its busy rounds were left out (cells_of quiet_only)
# and the quiet ones left could not decide it.
MACHINE_BUSY = "UNDECIDED: machine busy"
PAIRED, BEFORE_AFTER, HISTORY, PAIRED_HISTORY, RUN_PRIOR, IN_RUN, ROUNDS, NO_EVIDENCE = (
    "paired ratios",
    "ratios to plain before/after",  # the partition target: one volume on the device at a time
    "history",
    "paired ratios + history",
    "rounds + run prior",  # plain's own throughput against the reference's, with plain's prior
    "this run's plain rounds",
    "rounds of both runs",  # absolute numbers without a history: reported, never gated
    "-",
)


@dataclass(frozen=True)
class Check:
    kind: str  # "baseline" (vs a saved run) or "overhead" (vs plain in this run)
    backend: str
    workload: str
    metric: str
    unit: str
    evidence: str  # PAIRED, HISTORY, PAIRED_HISTORY, RUN_PRIOR, IN_RUN, ROUNDS, or NO_EVIDENCE
    reference: float  # geometric mean of the reference samples (with a history: of its runs' means)
    current: float  # geometric mean of this run's samples
    change_percent: float  # estimated current / reference - 1, in percent (signed)
    worse_percent: float  # positive = worse than the reference by that much (direction-aware)
    interval: tuple[float, float]  # 95% interval of current / reference
    p_value: float  # one-sided, for "worse by at most the threshold"; before the family correction
    rounds: tuple[int, int]  # (current, reference)
    threshold: float | None
    rule: str
    status: str
    reason: str
    gated: bool = False  # part of the family: can fail the run
    p_adjusted: float | None = None  # Holm, for gated checks
    history_runs: int = 0  # saved runs in the history used
    p_pass: float = math.nan  # one-sided, for "worse by at least the threshold" (a pass when small)
    se: float = math.nan  # standard error of the log change (verdict.estimate)
    df: int = 0
    within_var: float = math.nan  # the part of se**2 x rounds that more rounds of this run shrink
    between: str = ""  # where the between-run variance came from
    detectable: float = math.nan  # the smallest worsening (%) this check FAILs in 90% of runs
    tightest: float = math.nan  # the tightest threshold (%) an unchanged run passes in 90% of runs
    stop: str = ""  # how the current rounds were decided (fixed, steady state, confirmation)
    confirm_rounds: int = 0  # pairs added to the current rounds because the check was undecided
    unreachable: bool = False  # UNDECIDED (more rounds may decide it; strict fails)
    busy: int = 0  # rounds of this run (both sides) left out because the machine was busy

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    @property
    def change_interval(self) -> tuple[float, float]:
        """The 95% interval as changes in percent."""
        low, high = self.interval
        return ((low - 1) * 100, (high - 1) * 100)


@dataclass(frozen=True)
class History:
    """The comparable saved runs of one backend x metric: per workload, each run's log samples
    (the reference first; verdict.estimate uses them from MIN_HISTORY runs on)."""

    samples: dict[str, list[list[float]]]

    def runs(self, workload: str) -> int:
        return len(self.samples.get(workload, []))


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(v) for v in values]


def history_for(backend: str, metric: Metric, current: RunData, runs: Sequence[RunData]) -> History:
    """Each workload of ``backend`` on ``metric``: the log samples of each saved run whose cell is
    comparable with this run's (per workload, never pooled over workloads)."""
    samples: dict[str, list[list[float]]] = {}
    now_cells = cells_of(current.results, True)
    for run in runs:
        if setting_differences(run.settings, current.settings):
            continue
        cells = cells_of(run.results, True)
        for (name, workload), now in now_cells.items():
            if name != backend:
                continue
            old = cells.get((name, workload))
            paired = metric.paired and not now.plain
            mismatch = paired and (now.pairing_problem() or (old and old.pairing_problem()))
            if old is None or mismatch or cell_differences(old, now, metric):
                continue
            values = old.samples(metric)
            if values and not stats.invalid_values(values):
                samples.setdefault(workload, []).append(_logs(values))
    return History(samples)


def _direction(metric: Metric, log_change: float) -> float:
    """Worsening in percent for a change of ``log_change`` (log of current / reference)."""
    ratio = math.exp(log_change)
    return (1 - ratio) * 100 if metric.higher_is_better else (ratio - 1) * 100


def _unevaluated(
    kind: str, cell: Cell, metric: Metric, rule: Rule | None, status: str, reason: str,
    rounds: tuple[int, int] = (0, 0),
) -> Check:  # fmt: skip
    nan = math.nan
    return Check(
        kind=kind, backend=cell.backend, workload=cell.workload.name, metric=metric.name,
        unit=metric.unit_for(cell.workload, cell.plain), evidence=NO_EVIDENCE, reference=nan, current=nan,
        change_percent=nan, worse_percent=nan, interval=(nan, nan), p_value=nan, rounds=rounds,
        threshold=rule.threshold if rule else None, rule=rule.text if rule else "", status=status,
        reason=reason, stop=cell.stop_reason, confirm_rounds=cell.confirm_rounds, busy=cell.busy,
    )  # fmt: skip


def busy_problem(cell: Cell, side: str) -> str | None:
    """Why nothing can be decided from ``cell``: every one of its rounds was busy."""
    if cell.rounds or not cell.busy:
        return None
    return (
        f"all {cell.busy} rounds of {side} were measured while processes outside the run used more than "
        f"the busy threshold (--encperf-busy-threshold, {BUSY_SHARE:g} of a core by default): "
        "nothing is decided from them (--encperf-quiet-wait waits for quiet)"
    )


def assess(
    kind: str,
    cell: Cell,
    metric: Metric,
    current: Sequence[float],
    reference: Sequence[float],
    rule: Rule | None,
    *,
    history: History | None = None,
    differences: Sequence[str] = (),
) -> Check:
    """One check before the family correction: evidence, change, interval and raw p-value.

    The status is provisional (``decide_family`` sets the final one): invalid samples, settings
    that differ, no rule or no gating evidence are final here.
    """
    rounds = (len(current), len(reference))
    if differences:
        return _unevaluated(kind, cell, metric, rule, NOT_COMPARABLE, "; ".join(differences), rounds)
    for side, values in (("this run", current), ("the reference", reference)):
        problems = stats.invalid_values(values) if values else ["no rounds"]
        if problems:
            reason = (
                f"{cell.backend} {cell.workload.name} {metric.name}: {side} has unusable samples "
                f"({', '.join(problems)}); a ratio needs positive finite values"
            )
            return _unevaluated(kind, cell, metric, rule, INVALID, reason, rounds)
    log_cur, log_ref = _logs(current), _logs(reference)
    paired_evidence = kind == "overhead" or (metric.paired and not cell.plain)
    history_runs = history.runs(cell.workload.name) if history else 0
    saved = history.samples[cell.workload.name] if history and history_runs >= MIN_HISTORY else [log_ref]
    own = BASELINE if _plain_throughput(cell, metric) else cell.backend if paired_evidence else None
    if kind == "overhead":  # both sides in this run: no between-run part
        prior: verdict.Prior | None = verdict.Prior(0.0, 1e9, "one run")
    elif history and history_runs >= MIN_HISTORY:  # the saved runs' spread, per workload
        lifecycle = metric.name == LIFECYCLE_METRIC  # a step: only its own cell of the user's file
        prior = verdict.history_prior(
            own or (cell.backend if lifecycle else None), cell.workload.name, lifecycle
        )
    else:  # the user's prior (--encperf-noise), else the built-in one; none for other numbers
        prior = verdict.prior_for(own, cell.workload.name) if own else None
    found = verdict.estimate(log_cur, saved, prior)
    if found is None:
        evidence, log_change, interval = (
            ROUNDS,
            statistics.fmean(log_cur) - statistics.fmean(log_ref),
            (math.nan,) * 2,
        )
        p_value = p_pass = se = within_var = math.nan
        df, between, shown_reference = 0, "", math.exp(statistics.fmean(log_ref))
    else:
        if kind == "overhead":
            evidence = IN_RUN
        elif paired_evidence:
            evidence = (
                PAIRED_HISTORY
                if found.runs >= MIN_HISTORY and not cell.before_after
                else cell.paired_evidence
            )
        else:
            evidence = HISTORY if found.runs >= MIN_HISTORY else RUN_PRIOR
        log_change, se, df = found.change, found.se, found.df
        half = stats.t_ppf(0.975, df) * se
        interval = (math.exp(log_change - half), math.exp(log_change + half))
        worse = verdict.worsening(log_change, metric.higher_is_better)
        tau = verdict.boundary(rule.threshold, metric.higher_is_better) if rule else 0.0
        p_value, p_pass = verdict.p_fail(worse, tau, se, df), verdict.p_pass(worse, tau, se, df)
        within_var, between = found.within_var, found.between
        shown_reference = math.exp(statistics.fmean(log_cur) - log_change)

    gated = rule is not None and evidence != ROUNDS
    if rule is None:
        status, reason = INFO, "no rule"
    elif not gated:
        status = NOT_GATED
        reason = (
            f"an absolute number without a between-run prior is decided only against the run-to-run "
            f"spread of at least {MIN_HISTORY} comparable saved runs ({history_runs} here, see "
            "--encperf-history): reported, not gated"
        )
    else:
        status, reason = "", ""
    return Check(
        kind=kind,
        backend=cell.backend,
        workload=cell.workload.name,
        metric=metric.name,
        unit=metric.unit_for(cell.workload, cell.plain),
        evidence=evidence,
        reference=shown_reference,
        current=math.exp(statistics.fmean(log_cur)),
        change_percent=(math.exp(log_change) - 1) * 100,
        worse_percent=_direction(metric, log_change),
        interval=interval,
        p_value=p_value,
        rounds=rounds,
        threshold=rule.threshold if rule else None,
        rule=rule.text if rule else "",
        status=status,
        reason=reason,
        gated=gated,
        history_runs=history_runs if evidence in (HISTORY, PAIRED_HISTORY) else 0,
        p_pass=p_pass,
        se=se,
        df=df,
        within_var=within_var,
        between=between,
        stop=cell.stop_reason,
        confirm_rounds=cell.confirm_rounds,
        busy=cell.busy,
    )


def decide(check: Check, p_adjusted: float, family: int = 1, alpha: float = FAIL_ALPHA) -> Check:
    """The final status of a gated check, given its family-adjusted p-value for "worse than the
    threshold" and the number of gated checks (the level "detects >= X% here" is figured at)."""
    threshold = check.threshold
    assert threshold is not None
    higher = METRICS[check.metric].higher_is_better if check.metric in METRICS else True
    tau = verdict.boundary(threshold, higher)
    detect = verdict.detectable_percent(tau, check.se, check.df, alpha / max(1, family), higher)
    tightest = verdict.smallest_threshold_percent(check.se, check.df, higher)
    worse = check.worse_percent
    worse_log = verdict.worsening(math.log1p(check.change_percent / 100), higher)
    bound = stats.t_ppf(1 - alpha, check.df) * check.se  # FAIL's bound; a pass's at ALPHA below
    detects = f"detects >= {detect:.0f}% here"
    status = verdict.outcome(p_adjusted, check.p_pass, alpha)
    if status == FAIL:
        least = verdict.as_percent(worse_log - bound, higher)
        reason = (
            f"worse by {worse:.1f}% > {threshold:g}% (at least {least:.1f}% worse, adjusted "
            f"p={p_adjusted:.3g} <= {alpha:g}); {detects}"
        )
    elif status == PASS:
        most = verdict.as_percent(worse_log + stats.t_ppf(1 - ALPHA, check.df) * check.se, higher)
        reason = f"within {threshold:g}% (at most {most:.1f}% worse, one-sided {1 - ALPHA:.0%}); {detects}"
    else:
        reason = (
            f"worse by {worse:.1f}%: neither shown worse than {threshold:g}% (adjusted p={p_adjusted:.3g}) "
            f"nor within it (p={check.p_pass:.3g}); {detects}"
        )
        if tightest > threshold:
            reason = f"too noisy for {threshold:g}%: {detects}, a threshold under {tightest:.0f}% cannot pass"
            reason += f" an unchanged run (worse by {worse:.1f}% now, {check.between})"
        if check.busy:
            status, reason = MACHINE_BUSY, f"{check.busy} busy rounds left out; {reason}"
    if check.evidence == RUN_PRIOR and status != PASS:  # plain: the machine, not the encryption
        reason += "; plain itself: a finding about the machine (disk, kernel, load), not the encryption"
    return replace(
        check, status=status, reason=reason, p_adjusted=p_adjusted, detectable=detect, tightest=tightest,
        unreachable=status not in (PASS, FAIL),
    )  # fmt: skip


def decide_family(checks: Sequence[Check], alpha: float = FAIL_ALPHA) -> list[Check]:
    """Holm's correction over every gated check, then each one's final status."""
    gated = [i for i, check in enumerate(checks) if check.gated]
    adjusted = stats.holm([checks[i].p_value for i in gated])
    decided = list(checks)
    for index, p in zip(gated, adjusted, strict=True):
        decided[index] = decide(checks[index], p, len(gated), alpha)
    return decided


def _metric_names(rules: Sequence[Rule]) -> list[str]:
    """The metrics the cells of a run are checked on (life-cycle rules have their own checks)."""
    named = (rule.metric for rule in rules if rule.metric != LIFECYCLE_METRIC)
    return list(dict.fromkeys([DEFAULT_METRIC, *named]))


def baseline_checks(
    reference: RunData, current: RunData, rules: Sequence[Rule], history: Sequence[RunData] = ()
) -> tuple[list[Check], list[str], list[str]]:
    """Every cell present in both runs, for throughput and each metric a rule names; plus the
    cells only in the reference and only in this run (``backend workload``)."""
    ref_cells, cur_cells = cells_of(reference.results, True), cells_of(current.results, True)
    histories: dict[tuple[str, str], History] = {}

    def history_of(backend: str, metric: Metric) -> History | None:
        if (backend, metric.name) not in histories:
            histories[(backend, metric.name)] = history_for(backend, metric, current, history)
        return histories[(backend, metric.name)]

    checks = cell_checks(ref_cells, cur_cells, rules, reference.settings, current.settings, history_of)
    only_ref = [" ".join(key) for key in ref_cells if key not in cur_cells]
    only_cur = [" ".join(key) for key in cur_cells if key not in ref_cells]
    return checks, only_ref, only_cur


def cell_checks(
    ref_cells: dict[tuple[str, str], Cell],
    cur_cells: dict[tuple[str, str], Cell],
    rules: Sequence[Rule],
    ref_settings: dict[str, str],
    cur_settings: dict[str, str],
    history_of: Callable[[str, Metric], History | None] = lambda backend, metric: None,
) -> list[Check]:
    """The checks of every current cell that the reference also has."""
    run_differences = setting_differences(ref_settings, cur_settings)
    checks = []
    for key, cell in cur_cells.items():
        old = ref_cells.get(key)
        if old is None:
            continue
        for metric, rule in _cell_metrics(rules, cell).values():
            busy = busy_problem(cell, "this run") or busy_problem(old, "the reference")
            if busy:  # undecided if it was to be gated; an absolute number without history is not
                history = history_of(cell.backend, metric)
                gated = (
                    (metric.paired and not cell.plain)
                    or (_plain_throughput(cell, metric) and _plain_prior(cell.workload.name))
                    or (history is not None and history.runs(cell.workload.name) >= MIN_HISTORY)
                )
                status = MACHINE_BUSY if rule is not None and gated else NOT_GATED if rule else INFO
                checks.append(_unevaluated("baseline", cell, metric, rule, status, busy))
                continue
            differences = [*run_differences, *cell_differences(old, cell, metric)]
            if metric.paired and not cell.plain:
                differences += [f"this run: {m}" for m in [cell.pairing_problem()] if m]
                differences += [f"reference: {m}" for m in [old.pairing_problem()] if m]
            checks.append(
                assess(
                    "baseline", cell, metric, cell.samples(metric), old.samples(metric), rule,
                    history=history_of(cell.backend, metric), differences=differences,
                )
            )  # fmt: skip
    return checks


def _plain_throughput(cell: Cell, metric: Metric) -> bool:
    """Plain's own primary metric (MB/s or IOPS): what its between-run prior was fitted to."""
    return cell.plain and metric.attribute is None and metric.name != LIFECYCLE_METRIC


def _plain_prior(workload: str) -> bool:
    return verdict.prior_for(BASELINE, workload) is not None


def _cell_metrics(rules: Sequence[Rule], cell: Cell) -> dict[str, tuple[Metric, Rule | None]]:
    """The metrics a cell is checked on and each one's rule: one check per metric, even where two
    names lead to it (a task's default ``throughput`` and an explicit ``seconds`` rule; the rule
    of the name given later, that is the explicit one, wins)."""
    chosen: dict[str, tuple[Metric, Rule | None]] = {}
    for name in _metric_names(rules):
        metric = metric_for(name, cell.workload)
        if metric is None:
            continue
        rule = select_rule(rules, cell.backend, cell.workload, name)
        if metric.name not in chosen or rule is not None:
            chosen[metric.name] = (metric, rule)
    return chosen


def overhead_checks(results: Sequence[Result], rules: Sequence[Rule]) -> list[Check]:
    """``--encperf-max-overhead``: each backend against the plain rounds interleaved with it
    (``throughput`` and ``vs-plain`` mean the backend's own throughput here: the comparison is
    already with plain). Never across I/O modes."""
    checks = []
    for cell in cells_of(results, True).values():
        if cell.plain or not (cell.baseline_rounds or cell.busy):
            continue
        for name in dict.fromkeys(rule.metric for rule in rules if rule.metric != LIFECYCLE_METRIC):
            rule = select_rule(rules, cell.backend, cell.workload, name)
            if rule is not None and metric_for(name, cell.workload) is not None:
                checks.append(overhead_check(cell, name, rule))
    return checks


def overhead_check(cell: Cell, name: str, rule: Rule | None) -> Check:
    """One backend x workload on metric ``name`` against the plain rounds interleaved with it:
    the estimate and 95% interval ``--encperf-max-overhead`` judges (``rule`` None: not judged,
    as the HTML report's overhead chart shows it)."""
    asked = metric_for(name, cell.workload)
    if asked is None:
        raise ValueError(f"{name} does not apply to {cell.workload.name}")
    absolute = {"throughput": "abs-throughput", "vs-plain": "abs-throughput", "seconds": "abs-seconds"}
    metric = METRICS[absolute.get(asked.name, asked.name)]
    if cell.workload.kind == "task":  # named for what it judges: a task's seconds, lower is better
        name = metric.name
    busy = busy_problem(cell, "this run")
    if busy:
        return replace(_unevaluated("overhead", cell, metric, rule, MACHINE_BUSY, busy), metric=name)
    mismatch = cell.pairing_problem()
    plain = Cell(BASELINE, cell.workload, cell.baseline_rounds)
    check = assess(
        "overhead", cell, metric, cell.samples(metric), plain.samples(metric), rule,
        differences=[mismatch] if mismatch else [],
    )  # fmt: skip
    return replace(check, metric=name)  # named as the rule names it


# ----------------------------------------------------------------------------- life cycles

LIFECYCLE_EVIDENCE = "cycles of both runs"
# A life-cycle step's seconds are an absolute number with no plain side to pair with: the cycles
# of one run share its conditions (load, CPU frequency, the disk's state), so a whole run moves
# them together and two runs' cycles are not two samples of one distribution. As every absolute
# number, a step is therefore gated only against the run-to-run spread of at least MIN_HISTORY
# comparable saved runs (evidence "history"); with fewer it is reported, not gated. Below this
# many cycles on either side it is not gated either (the median of one or two cycles is one
# outlier away from anything; 3 is also where 3 against 3 cycles can reach p = 0.05).
MIN_LIFECYCLE_CYCLES = next(n for n in range(1, 100) if stats.min_p_value(n, n) <= ALPHA)
# run settings that change what a cycle times: the volume's size (the test file's, and the room
# realwork's tree adds to the container: profile, tree_size), the target kind; the key
# derivation is part of the backend spec
LIFECYCLE_SETTINGS = ("size", "target", "profile", "tree_size")


def lifecycle_workload(step: str) -> Workload:
    """A stand-in workload named for a life-cycle step, so a step's check reads like a cell's."""
    return Workload(lifecycle_selector(step), "write", 1)


def select_lifecycle_rule(rules: Sequence[Rule], backend: str, step: str) -> Rule | None:
    """The most specific life-cycle rule for ``backend`` and ``step`` (as select_rule chooses)."""
    best: Rule | None = None
    for rule in rules:
        if rule.metric != LIFECYCLE_METRIC or rule.backend not in (None, backend, backend.split(":", 1)[0]):
            continue
        if rule.workload not in (None, lifecycle_selector(step)):
            continue
        if best is None or rule.specificity >= best.specificity:
            best = rule
    return best


def lifecycle_differences(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """The LIFECYCLE_SETTINGS both runs recorded differently (``size 256 MiB -> 64 MiB``)."""
    return setting_differences(before, now, LIFECYCLE_SETTINGS)


def lifecycle_history(backend: str, step: str, current: RunData, runs: Sequence[RunData]) -> History:
    """The run-to-run spread of ``backend``'s life-cycle ``step`` over the saved ``runs`` whose
    LIFECYCLE_SETTINGS match this run's (keyed by the step's stand-in name). Not pooled over the
    steps, as history_for pools workloads: a mkfs of seconds and an unmount of microseconds
    spread nothing alike."""
    name = lifecycle_workload(step).name
    samples: list[list[float]] = []
    for run in runs:
        values = run.lifecycle.get(backend, {}).get(step)
        if lifecycle_differences(run.settings, current.settings) or not values:
            continue
        if not stats.invalid_values(values):
            samples.append(_logs(values))
    return History({name: samples})


def lifecycle_checks(
    reference: RunData, current: RunData, rules: Sequence[Rule], history: Sequence[RunData] = ()
) -> tuple[list[Check], list[str]]:
    """One check per backend x life-cycle step that both runs timed and a life-cycle rule
    selects, lower is better, and the notes the gate shows: why a backend's life cycle is not
    gated (too few cycles), and that there was nothing to check. No life-cycle rule: no checks.
    ``history``: the saved runs (the reference among them) whose spread gates a step."""
    if not any(rule.metric == LIFECYCLE_METRIC for rule in rules):
        return [], []
    metric = METRICS[LIFECYCLE_METRIC]
    differences = lifecycle_differences(reference.settings, current.settings)
    checks: list[Check] = []
    notes: list[str] = []
    for backend, steps in current.lifecycle.items():
        old_steps = reference.lifecycle.get(backend, {})
        ruled = [
            step for step in LIFECYCLE_STEPS
            if steps.get(step) and old_steps.get(step) and select_lifecycle_rule(rules, backend, step)
        ]  # fmt: skip
        if not ruled:
            continue
        cycles = min(len(steps[step]) for step in ruled), min(len(old_steps[step]) for step in ruled)
        too_few = min(cycles) < MIN_LIFECYCLE_CYCLES
        why = (
            f"life cycle not gated: {min(cycles)} cycles (this run {cycles[0]}, {reference.label} "
            f"{cycles[1]}; needs {MIN_LIFECYCLE_CYCLES}; --encperf-lifecycle-cycles)"
        )
        if too_few and not differences:
            notes.append(f"{backend}: {why}")
        for step in ruled:
            rule = select_lifecycle_rule(rules, backend, step)
            cell = Cell(backend, lifecycle_workload(step), ())
            now, old = steps[step], old_steps[step]
            spread = lifecycle_history(backend, step, current, history)
            check = assess("baseline", cell, metric, now, old, rule, history=spread, differences=differences)
            named = lifecycle_selector(step)  # the stand-in workload's name has a direction
            check = replace(check, workload=named, reason=check.reason.replace(cell.workload.name, named))
            if check.evidence == ROUNDS:  # evaluated, but without MIN_HISTORY saved runs: not gated
                check = replace(check, evidence=LIFECYCLE_EVIDENCE)
            if too_few and check.evidence in (ROUNDS, LIFECYCLE_EVIDENCE, HISTORY):
                check = replace(check, status=NOT_GATED, reason=why, gated=False)
            checks.append(check)
    if not checks:
        notes.append(
            f"life cycle: nothing to check: no backend has life-cycle timings in both this run and "
            f"{reference.label} that a lifecycle rule selects"
        )
    return checks, notes


# ----------------------------------------------------------------------------- the verdict


@dataclass
class Verdict:
    """Everything the gate decided for one run, for the terminal, Markdown and the exit status."""

    baseline: str | None = None  # label of the compared saved run
    checks: list[Check] = field(default_factory=list)
    only_in_reference: list[str] = field(default_factory=list)  # "backend workload", vanished now
    only_in_current: list[str] = field(default_factory=list)
    machine_differences: list[str] = field(default_factory=list)  # "kernel 6.1.0-1 -> 6.1.0-2"
    history: list[str] = field(default_factory=list)  # labels of the saved runs used as history
    notes: list[str] = field(default_factory=list)  # shown, never failing
    unchecked: list[str] = field(default_factory=list)  # what the gate could not check (strict fails)
    not_gated: list[str] = field(default_factory=list)  # timings it never checks (gatescope), in the header
    errors: list[str] = field(default_factory=list)  # failing: unreadable baseline, save failed
    strict: bool = False
    saved: str | None = None
    machine: str = ""  # in a run over several machines: whose verdict this is (one per machine)
    family_size: int | None = None  # gated checks Holm corrected over (all machines'), if not these

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.failed]

    def count(self, status: str) -> int:
        return sum(check.status == status for check in self.checks)

    @property
    def incomplete(self) -> list[str]:
        """Everything that kept the gate from checking what it was asked to check."""
        found = list(self.unchecked)
        found += [f"{key}: in {self.baseline}, not in this run" for key in self.only_in_reference]
        found += [
            f"{c.backend} {c.workload} {c.metric}: {c.status}: {c.reason}"
            for c in self.checks
            if c.status in (NOT_COMPARABLE, INVALID, MACHINE_BUSY, UNDECIDED) and c.rule
        ]

        return found

    @property
    def failed(self) -> bool:
        return bool(self.errors or self.failures or (self.strict and self.incomplete))


def judge(
    current: RunData,
    reference: RunData | None,
    rules: Sequence[Rule],
    overhead_rules: Sequence[Rule] = (),
    history: Sequence[RunData] = (),
    *,
    strict: bool = False,
    alpha: float = FAIL_ALPHA,
) -> Verdict:
    """The one verdict builder (the pytest session and ``encperf compare`` both use it).

    ``history``: earlier comparable saved runs, the reference among them, newest first.
    """
    (verdict,) = judge_machines(
        [(current, reference, history)], rules, overhead_rules, strict=strict, alpha=alpha
    )
    return verdict


Machine = tuple[RunData, RunData | None, Sequence[RunData]]  # (this run, its reference, history)


def judge_machines(
    machines: Sequence[Machine],
    rules: Sequence[Rule],
    overhead_rules: Sequence[Rule] = (),
    *,
    strict: bool = False,
    alpha: float = FAIL_ALPHA,
) -> list[Verdict]:
    """One Verdict per machine of a run, each machine compared with its own reference; the
    gated checks of all machines form ONE family for Holm's correction, so a run over five
    machines fails falsely no more often than a run on one (the run has one exit status)."""
    verdicts: list[Verdict] = []
    families: list[list[Check]] = []
    for current, reference, history in machines:
        verdict = Verdict(baseline=reference.label if reference else None, strict=strict)
        checks: list[Check] = []
        if reference is not None:
            checks, verdict.only_in_reference, verdict.only_in_current = baseline_checks(
                reference, current, rules, history
            )
            verdict.history = [run.label for run in history]
            cycle_checks, cycle_notes = lifecycle_checks(reference, current, rules, history)
            checks += cycle_checks
            verdict.notes += cycle_notes
            if not checks:
                verdict.unchecked.append(
                    f"{reference.label} has no backend x workload in common with this run"
                )
        if overhead_rules:
            checks += overhead_checks(current.results, overhead_rules)
        verdicts.append(verdict)
        families.append(checks)
    decided = iter(decide_family([check for checks in families for check in checks], alpha))
    for verdict, checks in zip(verdicts, families, strict=True):
        verdict.checks = [next(decided) for _ in checks]
    if len(machines) > 1:
        size = sum(check.gated for verdict in verdicts for check in verdict.checks)
        for verdict in verdicts:
            verdict.family_size = size
    return verdicts


# ----------------------------------------------------------------------------- confirmation


@dataclass
class Gate:
    """What the runner asks after a workload's rounds: is every gated check of this result
    decided, or would more paired rounds help? Built once per session from the reference.

    Checks are decided here at the Bonferroni level ALPHA / family_size, the level Holm's
    correction starts from; the final decision is Holm's over the checks the run really had
    (when it has more than family_size expected, a check decided here may still fall short).
    """

    reference: RunData | None
    rules: tuple[Rule, ...]
    overhead_rules: tuple[Rule, ...] = ()
    settings: dict[str, str] = field(default_factory=dict)  # this run's
    family_size: int = 1
    alpha: float = FAIL_ALPHA
    history: tuple[RunData, ...] = ()  # the comparable saved runs, the reference among them
    check_pairs: int = CHECK_CONFIRM_PAIRS  # confirmation pairs one check may add
    reference_cells: dict[tuple[str, str], Cell] = field(init=False, repr=False)
    _histories: dict[tuple[str, str], History] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.reference_cells = cells_of(self.reference.results, True) if self.reference else {}

    @property
    def level(self) -> float:
        return self.alpha / max(1, self.family_size)

    def _checks(self, result: Result) -> list[Check]:
        """Every check of one result a rule asks for that more paired rounds can move (paired
        evidence), before the family correction, whether it could be evaluated or not."""
        found: list[Check] = []
        if self.reference is not None and self.rules:
            now = cells_of([result], True)
            current = RunData("now", (result,), self.settings)

            def history_of(backend: str, metric: Metric) -> History | None:
                if len(self.history) < MIN_HISTORY:
                    return None
                if (backend, metric.name) not in self._histories:  # the saved runs do not change
                    self._histories[(backend, metric.name)] = history_for(
                        backend, metric, current, self.history
                    )
                return self._histories[(backend, metric.name)]

            checks = cell_checks(
                self.reference_cells, now, self.rules, self.reference.settings, self.settings, history_of
            )
            paired = (PAIRED, PAIRED_HISTORY, NO_EVIDENCE)
            found += [c for c in checks if c.backend == result.backend and c.evidence in paired]
        if self.overhead_rules:
            found += overhead_checks([result], self.overhead_rules)
        return [check for check in found if check.rule]

    def checks(self, result: Result) -> list[Check]:
        """The gated checks of one result that more paired rounds can move (paired evidence)."""
        return [check for check in self._checks(result) if check.gated]

    def busy_to_replace(self, result: Result) -> str:
        """Why busy rounds of ``result`` should be replaced by quiet ones: fewer quiet pairs than
        the rounds it was to have, and a rule asks for a check of it; "" otherwise."""
        if result.before_after or len(result.rounds) != len(result.baseline_rounds):
            return ""
        kept, _, busy = quiet_rounds(result.rounds, result.baseline_rounds)
        planned = len(result.rounds) - result.confirm_rounds
        if not busy or len(kept) >= planned or not self._checks(result):
            return ""
        return f"{len(result.rounds) - len(kept)} of {len(result.rounds)} pairs busy, replacing them"

    def pending(self, result: Result, extra_possible: int) -> tuple[bool, str]:
        """Whether one more pair of rounds is wanted for ``result``, and why: (True, why) while
        busy pairs are to be replaced or a check is undecided and more pairs could decide it;
        (False, "") when every check is decided; (False, why) when a check is undecided but the
        pairs it may still add (``extra_possible``, and its own share, ``check_pairs``) could not
        decide it: the between-run part of its uncertainty does not shrink with rounds."""
        replacing = self.busy_to_replace(result)
        if replacing and extra_possible > 0:
            return True, replacing
        hopeless = ""
        for check in self.checks(result):
            if check.evidence == NO_EVIDENCE or math.isnan(check.se) or check.threshold is None:
                continue
            if check.p_value <= self.level or check.p_pass <= ALPHA:
                continue  # decided: worse than the threshold, or within it
            higher = METRICS[check.metric].higher_is_better if check.metric in METRICS else True
            tau = verdict.boundary(check.threshold, higher)
            worse = verdict.worsening(math.log1p(check.change_percent / 100), higher)
            name = f"{check.metric} worse by {check.worse_percent:.1f}%, threshold {check.threshold:g}%"
            share = self.check_pairs - result.confirm_rounds
            if share <= 0:
                spent = f"its share of the confirmation budget ({self.check_pairs} pairs) is spent"
                hopeless = hopeless or f"{name}: {spent}"
                continue
            left = min(extra_possible, share)
            if left <= 0:
                hopeless = hopeless or f"{name}: no more pairs may be added to this workload"
                continue
            model = verdict.Estimate(
                change=0.0, se=check.se, df=check.df, within_var=check.within_var, between_var=0.0,
                runs=1, rounds_now=check.rounds[0], between="",
            )  # fmt: skip
            se = model.se_with(check.rounds[0] + left)
            fails = verdict.p_fail(worse, tau, se, check.df) <= self.level
            if fails or verdict.p_pass(worse, tau, se, check.df) <= ALPHA:
                return (
                    True,
                    f"{name}, undecided (p={check.p_value:.3g} for worse, {check.p_pass:.3g} for within)",
                )
            hopeless = (
                hopeless or f"{name}, and {left} more pairs could not decide it (the run-to-run part stays)"
            )
        return False, hopeless


def expected_family_size(
    backends: Sequence[str],
    workloads: Sequence[Workload],
    rules: Sequence[Rule],
    overhead_rules: Sequence[Rule],
    reference: RunData | None,
    history_runs: int = 0,
    lifecycle_cycles: int = 1,
) -> int:
    """How many gated checks the run will have (the level confirmation decides at), life-cycle
    checks included (``lifecycle_cycles``: the cycles this run times, --encperf-lifecycle-cycles)."""
    ref_cells = cells_of(reference.results) if reference else {}
    size = 0
    for backend in backends:
        plain = backend.split(":", 1)[0] == BASELINE
        for workload in workloads:
            if (backend, workload.name) in ref_cells:
                cell = Cell(backend, workload, ())
                for metric, rule in _cell_metrics(rules, cell).values():
                    paired = metric.paired and not plain
                    prior = plain and metric.attribute is None and _plain_prior(workload.name)
                    size += rule is not None and (paired or prior or history_runs >= MIN_HISTORY)
            for name in dict.fromkeys(rule.metric for rule in overhead_rules):
                rule = select_rule(overhead_rules, backend, workload, name)
                size += not plain and rule is not None and metric_for(name, workload) is not None
    if rules and reference is not None and BASELINE not in backends:  # plain's own checks join the family
        size += sum(
            select_rule(rules, BASELINE, w, DEFAULT_METRIC) is not None
            and (history_runs >= MIN_HISTORY or _plain_prior(w.name))
            for w in workloads
        )
    gates_cycles = lifecycle_cycles >= MIN_LIFECYCLE_CYCLES and history_runs >= MIN_HISTORY
    if reference is not None and gates_cycles:  # as lifecycle_checks gates
        for backend in dict.fromkeys([BASELINE, *backends]):
            old = reference.lifecycle.get(backend, {})
            size += sum(
                len(old.get(step) or ()) >= MIN_LIFECYCLE_CYCLES
                and select_lifecycle_rule(rules, backend, step) is not None
                for step in LIFECYCLE_STEPS
            )
    return max(1, size)
