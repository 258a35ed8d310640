"""Checks: one metric of one cell against what it is compared with (the reference run, the
history of saved runs, or plain in this run), the words of their outcomes and evidence, which
checks are gated, and the family correction that decides them (no pytest)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import stats, verdict
from ..load import BUSY_SHARE
from ..model import BASELINE, Result, RunData
from .cells import Cell, cell_differences, cells_of, setting_differences
from .rules import (
    ALPHA,
    DEFAULT_METRIC,
    FAIL_ALPHA,
    LIFECYCLE_METRIC,
    METRICS,
    MIN_HISTORY,
    Metric,
    Rule,
    metric_for,
    select_rule,
)

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
    "rounds + run prior",  # plain's own throughput against the reference run's, with plain's prior
    "this run's plain rounds",
    "rounds of both runs",  # absolute numbers without a history: reported, never gated
    "-",
)
# What a check compares this run with (Check.kind; never written to a file): the reference run
# (and its history), or plain's rounds interleaved in this run (--encperf-max-overhead).
SAVED, OVERHEAD = "saved", "overhead"


@dataclass(frozen=True)
class Check:
    kind: str  # SAVED (vs the reference run) or OVERHEAD (vs plain in this run)
    backend: str
    workload: str
    metric: str
    unit: str
    evidence: str  # PAIRED, HISTORY, PAIRED_HISTORY, RUN_PRIOR, IN_RUN, ROUNDS, or NO_EVIDENCE
    # the reports' "before" and "now" columns: geometric means of the samples compared with (the
    # reference run's; with a history: of its runs' means; OVERHEAD: plain's in this run) and of this run's
    before: float
    now: float
    change_percent: float  # estimated now / before - 1, in percent (signed)
    worse_percent: float  # positive = worse than before by that much (direction-aware)
    interval: tuple[float, float]  # 95% interval of now / before
    p_value: float  # one-sided, for "worse by at most the threshold"; before the family correction
    rounds: tuple[int, int]  # (now, before)
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
    order: str = ""  # why its rounds (this run's, the reference's) are not whole A B B A blocks

    def replaced(self, **changes: Any) -> Check:
        """``dataclasses.replace(self, **changes)``, the same check, without replace's walk over
        every field and the frozen __init__'s setattr of each (Check has no __post_init__ and no
        field outside __init__): the gate decides every check of every verdict with it, hundreds
        of thousands in the simulations (tests/unit/test_gate.py checks it is replace's copy)."""
        fields = self.__dict__.copy()
        if not changes.keys() <= fields.keys():
            raise TypeError(f"not fields of Check: {sorted(changes.keys() - fields.keys())}")
        fields.update(changes)
        made = object.__new__(Check)
        object.__setattr__(made, "__dict__", fields)
        return made

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
    (the reference run first; verdict.estimate uses them from MIN_HISTORY runs on)."""

    samples: dict[str, list[list[float]]]
    blocks: dict[str, list[list[int | None]]] = field(default_factory=dict)  # each sample's volume block

    def runs(self, workload: str) -> int:
        return len(self.samples.get(workload, []))


def log_values(values: Sequence[float]) -> list[float]:
    return [math.log(v) for v in values]


def quiet_cells(run: RunData) -> dict[tuple[str, str], Cell]:
    """The cells the gate compares: a run's, without its busy rounds."""
    return cells_of(run.results, True)


class SortedRuns:
    """Runs sorted into their quiet cells, each once (a cell figures its samples once): a
    verdict's own, or one shared by several verdicts over runs that do not change meanwhile (a
    simulation judging checking runs against the same saved runs). By identity: it keeps each run
    it sorted, so an identity it knows is never another run's."""

    def __init__(self) -> None:
        self._sorted: dict[int, tuple[RunData, dict[tuple[str, str], Cell]]] = {}

    def __call__(self, run: RunData) -> dict[tuple[str, str], Cell]:
        found = self._sorted.get(id(run))
        if found is None:
            found = self._sorted[id(run)] = (run, quiet_cells(run))
        return found[1]


def history_for(
    backend: str,
    metric: Metric,
    current: RunData,
    runs: Sequence[RunData],
    cells_of_run: Callable[[RunData], dict[tuple[str, str], Cell]] = quiet_cells,
) -> History:
    """Each workload of ``backend`` on ``metric``: the log samples of each saved run whose cell is
    comparable with this run's (per workload, never pooled over workloads). ``cells_of_run``: a
    run's quiet cells (a verdict passes one that sorts each run once for all its histories)."""
    samples: dict[str, list[list[float]]] = {}
    blocks: dict[str, list[list[int | None]]] = {}
    now_cells = cells_of_run(current)
    unpaired = {key: now.pairing_problem() for key, now in now_cells.items() if key[0] == backend}
    for run in runs:
        if setting_differences(run.settings, current.settings):
            continue
        cells = cells_of_run(run)
        for (name, workload), now in now_cells.items():
            if name != backend:
                continue
            old = cells.get((name, workload))
            paired = metric.paired and not now.plain
            mismatch = paired and (unpaired[(name, workload)] or (old and old.pairing_problem()))
            if old is None or mismatch or cell_differences(old, now, metric):
                continue
            logs = old.log_samples(metric)
            if logs is not None:
                samples.setdefault(workload, []).append(logs)
                blocks.setdefault(workload, []).append(list(old.volume_blocks))
    return History(samples, blocks)


def _saved_blocks(
    workload: str,
    history: History | None,
    history_runs: int,
    before_blocks: Sequence[int | None],
    own: str | None,
    kind: str,
) -> list[list[int | None]]:
    """The volume blocks of what verdict.estimate gets as saved runs: a history's, else the
    reference run's for a check that has a prior (paired ratios, plain's throughput), whose
    between-run part its blocks may then measure instead; [] for none."""
    if history is not None and history_runs >= MIN_HISTORY:
        return history.blocks.get(workload, [])
    return [list(before_blocks)] if own and kind != OVERHEAD and before_blocks else []


def _direction(metric: Metric, log_change: float) -> float:
    """Worsening in percent for a change of ``log_change`` (log of now / before)."""
    ratio = math.exp(log_change)
    return (1 - ratio) * 100 if metric.higher_is_better else (ratio - 1) * 100


def order_note(now: Cell, reference: Cell | None = None) -> str:
    """Why the rounds a check compares are not in whole A B B A blocks, run by run ("" when they
    are, or the order was not recorded): its change may then carry an order effect."""
    found = [(side, cell.order_problem) for side, cell in (("this run", now), ("the reference", reference))
             if cell is not None]  # fmt: skip
    return "; ".join(f"{side}: {problem}" for side, problem in found if problem)


def check_name(cell: Cell, metric: Metric) -> str:
    """The name a check's workload goes by in the rules, the --encperf-noise file, the history and
    the report: the workload's, or for a life-cycle step its selector (``lifecycle-mount``, the
    label of its stand-in workload, whose own name has a direction: lifecycle-mount-write)."""
    return cell.workload.label if metric.name == LIFECYCLE_METRIC else cell.workload.name


def _unevaluated(
    kind: str, cell: Cell, metric: Metric, rule: Rule | None, status: str, reason: str,
    rounds: tuple[int, int] = (0, 0),
) -> Check:  # fmt: skip
    nan = math.nan
    return Check(
        kind=kind, backend=cell.backend, workload=check_name(cell, metric), metric=metric.name,
        unit=metric.unit_for(cell.workload, cell.plain), evidence=NO_EVIDENCE, before=nan, now=nan,
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
    now: Sequence[float],
    before: Sequence[float],
    rule: Rule | None,
    *,
    history: History | None = None,
    differences: Sequence[str] = (),
    noise: verdict.NoisePrior | None = None,
    before_blocks: Sequence[int | None] = (),
) -> Check:
    """One check before the family correction: evidence, change, interval and raw p-value of this
    run's samples (``now``) against ``before``: the reference run's (``kind`` SAVED) or plain's in
    this run (OVERHEAD). ``before_blocks``: the volume block of each of them (verdict.volume_groups).

    The status is provisional (``decide_family`` sets the final one): invalid samples, settings
    that differ, no rule or no gating evidence are final here. ``noise``: the user's between-run
    prior (--encperf-noise), None for the built-in one.
    """
    rounds = (len(now), len(before))
    name = check_name(cell, metric)  # one name for the history, the prior and the check
    if differences:
        return _unevaluated(kind, cell, metric, rule, NOT_COMPARABLE, "; ".join(differences), rounds)
    against = "the reference" if kind == SAVED else "plain in this run"
    for side, values in (("this run", now), (against, before)):
        problems = stats.invalid_values(values) if values else ["no rounds"]
        if problems:
            reason = (
                f"{cell.backend} {name} {metric.name}: {side} has unusable samples "
                f"({', '.join(problems)}); a ratio needs positive finite values"
            )
            return _unevaluated(kind, cell, metric, rule, INVALID, reason, rounds)
    log_now, log_before = log_values(now), log_values(before)
    paired_evidence = kind == OVERHEAD or (metric.paired and not cell.plain)
    history_runs = history.runs(name) if history else 0
    saved = history.samples[name] if history and history_runs >= MIN_HISTORY else [log_before]
    own = _own_prior(kind, cell, metric)
    blocks = _saved_blocks(name, history, history_runs, before_blocks, own, kind)
    volumes = kind != OVERHEAD and verdict.has_blocks(before_blocks)  # --encperf-volumes
    if kind == OVERHEAD:  # both sides in this run: no between-run part
        prior: verdict.Prior | None = verdict.Prior(0.0, 1e9, "one run")
    elif (history and history_runs >= MIN_HISTORY) or (own and volumes):
        # the saved runs' spread (or the reference run's volume blocks'), per workload
        lifecycle = metric.name == LIFECYCLE_METRIC  # a step: only its own cell of the user's file
        prior = verdict.history_prior(
            own or (cell.backend if lifecycle else None), name, lifecycle, noise, volumes
        )
    else:  # the user's prior (--encperf-noise), else the built-in one; none for other numbers
        prior = verdict.prior_for(own, name, noise) if own else None
    found = verdict.estimate(log_now, saved, prior, blocks)
    if found is None:
        evidence, log_change, interval = (
            ROUNDS,
            statistics.fmean(log_now) - statistics.fmean(log_before),
            (math.nan,) * 2,
        )
        p_value = p_pass = se = within_var = math.nan
        df, between, shown_before = 0, "", math.exp(statistics.fmean(log_before))
    else:
        if kind == OVERHEAD:
            evidence = IN_RUN
        elif paired_evidence:
            evidence = (
                PAIRED_HISTORY
                if found.runs >= MIN_HISTORY and not cell.before_after
                else BEFORE_AFTER
                if cell.before_after
                else PAIRED
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
        shown_before = math.exp(statistics.fmean(log_now) - log_change)

    # found is None (evidence ROUNDS): no between-run model, or rounds it cannot use (single ones)
    gated = found is not None and is_gated(kind, cell, metric, rule, history_runs, noise)
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
        workload=name,
        metric=metric.name,
        unit=metric.unit_for(cell.workload, cell.plain),
        evidence=evidence,
        before=shown_before,
        now=math.exp(statistics.fmean(log_now)),
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
    if check.order:
        reason += f"; {check.order}"
    return check.replaced(
        status=status, reason=reason, p_adjusted=p_adjusted, detectable=detect, tightest=tightest,
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


def saved_checks(
    reference: RunData,
    current: RunData,
    rules: Sequence[Rule],
    history: Sequence[RunData] = (),
    noise: verdict.NoisePrior | None = None,
    sorted_runs: SortedRuns | None = None,
) -> tuple[list[Check], list[str], list[str]]:
    """Every cell present in both runs, for throughput and each metric a rule names; plus the
    cells only in the reference run and only in this run (``backend workload``). ``sorted_runs``:
    the runs' cells, if the caller shares them between verdicts (each run sorted once, not once
    per backend x metric of its history)."""
    cells_of_run = SortedRuns() if sorted_runs is None else sorted_runs
    ref_cells, cur_cells = cells_of_run(reference), cells_of_run(current)
    histories: dict[tuple[str, str], History] = {}

    def history_of(backend: str, metric: Metric) -> History | None:
        if (backend, metric.name) not in histories:
            histories[(backend, metric.name)] = history_for(backend, metric, current, history, cells_of_run)
        return histories[(backend, metric.name)]

    checks = cell_checks(
        ref_cells, cur_cells, rules, reference.settings, current.settings, history_of, noise=noise
    )
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
    *,
    noise: verdict.NoisePrior | None = None,
) -> list[Check]:
    """The checks of every current cell that the reference run also has (``noise``: the user's
    between-run prior, None for the built-in one)."""
    run_differences = setting_differences(ref_settings, cur_settings)
    checks = []
    for key, cell in cur_cells.items():
        old = ref_cells.get(key)
        if old is None:
            continue
        for metric, rule in cell_metrics(rules, cell).values():
            busy = busy_problem(cell, "this run") or busy_problem(old, "the reference")
            if busy:  # undecided if it was to be gated; an absolute number without history is not
                history = history_of(cell.backend, metric)
                runs = history.runs(cell.workload.name) if history is not None else 0
                gated = is_gated(SAVED, cell, metric, rule, runs, noise)
                status = MACHINE_BUSY if gated else NOT_GATED if rule else INFO
                checks.append(_unevaluated(SAVED, cell, metric, rule, status, busy))
                continue
            differences = [*run_differences, *cell_differences(old, cell, metric)]
            if metric.paired and not cell.plain:
                differences += [f"this run: {m}" for m in [cell.pairing_problem()] if m]
                differences += [f"reference: {m}" for m in [old.pairing_problem()] if m]
            check = assess(
                SAVED, cell, metric, cell.samples(metric), old.samples(metric), rule,
                history=history_of(cell.backend, metric), differences=differences, noise=noise,
                before_blocks=old.volume_blocks,
            )  # fmt: skip
            order = order_note(cell, old)  # assess leaves it "": a copy only for a note
            checks.append(replace(check, order=order) if order else check)
    return checks


def _plain_throughput(cell: Cell, metric: Metric) -> bool:
    """Plain's own primary metric (MB/s or IOPS): what its between-run prior was fitted to."""
    return cell.plain and metric.attribute is None and metric.name != LIFECYCLE_METRIC


def _own_prior(kind: str, cell: Cell, metric: Metric) -> str | None:
    """Whose between-run prior a check's model takes: plain's for plain's own throughput, the
    backend's for its ratio to plain (paired evidence); None for an absolute number, which has none."""
    if _plain_throughput(cell, metric):
        return BASELINE
    return cell.backend if kind == OVERHEAD or (metric.paired and not cell.plain) else None


def is_gated(
    kind: str,
    cell: Cell,
    metric: Metric,
    rule: Rule | None,
    history_runs: int,
    noise: verdict.NoisePrior | None = None,
) -> bool:
    """Whether a check of ``cell`` on ``metric`` joins the family that can fail the run: a rule
    asks for it and the model has a between-run part for it: both sides in this run (``kind``
    OVERHEAD), at least MIN_HISTORY comparable saved runs of its workload (``history_runs``), or
    a prior of its own (an encrypted backend's ratio to plain, plain's own throughput; ``noise``:
    the user's, None for the built-in one). An absolute number without a history is reported,
    not gated. The one rule for the family confirmation expects (``expected_family_size``) and
    the one the verdict decides (``assess``, which leaves out only a check whose rounds it
    cannot use, and life-cycle steps with too few cycles)."""
    if rule is None:
        return False
    if kind == OVERHEAD or history_runs >= MIN_HISTORY:
        return True
    own = _own_prior(kind, cell, metric)
    return own is not None and verdict.prior_for(own, check_name(cell, metric), noise) is not None


def cell_metrics(rules: Sequence[Rule], cell: Cell) -> dict[str, tuple[Metric, Rule | None]]:
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
        return replace(_unevaluated(OVERHEAD, cell, metric, rule, MACHINE_BUSY, busy), metric=name)
    mismatch = cell.pairing_problem()
    plain = Cell(BASELINE, cell.workload, cell.baseline_rounds)
    check = assess(
        OVERHEAD, cell, metric, cell.samples(metric), plain.samples(metric), rule,
        differences=[mismatch] if mismatch else [],
    )  # fmt: skip
    return replace(check, metric=name, order=order_note(cell))  # named as the rule names it
