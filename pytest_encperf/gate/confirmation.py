"""Confirmation: what the runner asks after a workload's rounds (is every gated check of it
decided, or would more paired rounds help?), and how many gated checks the run will have, the
family whose level it decides at (no pytest)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import verdict
from ..lifecycledata import LIFECYCLE_STEPS
from ..model import BASELINE, Result, RunData
from ..workloads import Workload
from .cells import Cell, cells_of, quiet_rounds
from .checks import (
    NO_EVIDENCE,
    PAIRED,
    PAIRED_HISTORY,
    SAVED,
    Check,
    History,
    cell_checks,
    cell_metrics,
    history_for,
    is_gated,
    overhead_checks,
)
from .lifecycle import MIN_LIFECYCLE_CYCLES, lifecycle_workload, select_lifecycle_rule
from .rules import (
    ALPHA,
    FAIL_ALPHA,
    LIFECYCLE_METRIC,
    METRICS,
    MIN_HISTORY,
    Metric,
    Rule,
    metric_for,
    select_rule,
)

# Confirmation pairs one check (one workload's result) may add, of the run's budget: a noisy cell
# cannot spend the budget the others need (the runner's MAX_CONFIRM_PAIRS is the outer limit).
CHECK_CONFIRM_PAIRS = 6


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
    noise: verdict.NoisePrior | None = None  # the user's between-run prior (None: the built-in one)
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
                self.reference_cells, now, self.rules, self.reference.settings, self.settings, history_of,
                noise=self.noise,
            )  # fmt: skip
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
    *,
    noise: verdict.NoisePrior | None = None,
    test_cells: Sequence[tuple[str, Workload]] = (),
) -> int:
    """How many gated checks the run will have (the level confirmation decides at): every check
    the verdict's checks will have that is_gated gates, plain's own among them whether or not
    plain is one of ``backends`` (its cell pools the plain rounds beside every backend), life-cycle
    checks included (``lifecycle_cycles``: the cycles this run times, --encperf-lifecycle-cycles).
    ``noise``: the user's between-run prior, None for the built-in one. ``test_cells``: (backend,
    workload) of what the collected tests measure beyond ``workloads`` on every backend (a timed
    function of encperf.time, a test's own Workload: usertiming.expected_cells), plain's with them."""
    ref_cells = cells_of(reference.results) if reference else {}
    planned = {
        (backend, workload.name): (backend, workload)
        for backend in dict.fromkeys([*backends, BASELINE])
        for workload in workloads
    }
    for backend, workload in test_cells:
        planned.setdefault((backend, workload.name), (backend, workload))
        planned.setdefault((BASELINE, workload.name), (BASELINE, workload))
    size = 0
    for backend, workload in planned.values():
        cell = Cell(backend, workload, ())
        if (backend, workload.name) in ref_cells:  # as saved_checks checks
            for metric, rule in cell_metrics(rules, cell).values():
                size += is_gated(SAVED, cell, metric, rule, history_runs, noise)
        if cell.plain:
            continue
        for name in dict.fromkeys(r.metric for r in overhead_rules if r.metric != LIFECYCLE_METRIC):
            metric_of = metric_for(name, workload)  # as overhead_checks checks
            rule = select_rule(overhead_rules, backend, workload, name)
            size += metric_of is not None and is_gated("overhead", cell, metric_of, rule, 0, noise)
    if reference is not None and lifecycle_cycles >= MIN_LIFECYCLE_CYCLES:  # as lifecycle_checks gates
        for backend in dict.fromkeys([BASELINE, *backends]):
            old = reference.lifecycle.get(backend, {})
            for step in LIFECYCLE_STEPS:
                if len(old.get(step) or ()) >= MIN_LIFECYCLE_CYCLES:
                    cell = Cell(backend, lifecycle_workload(step), ())
                    rule = select_lifecycle_rule(rules, backend, step)
                    size += is_gated(SAVED, cell, METRICS[LIFECYCLE_METRIC], rule, history_runs, noise)
    return max(1, size)
