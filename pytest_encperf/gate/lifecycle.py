"""Life cycles: each backend's life-cycle steps (mkfs, mount, first write, ...) checked against
the saved runs' spread, lower is better, like a cell's absolute number (no pytest)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .. import stats, verdict
from ..lifecycledata import LIFECYCLE_STEPS
from ..model import RunData
from ..workloads import Workload
from .cells import Cell, setting_differences
from .checks import HISTORY, NOT_GATED, ROUNDS, SAVED, Check, History, assess, log_values
from .rules import ALPHA, LIFECYCLE_METRIC, METRICS, Rule, lifecycle_selector

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
    """A stand-in workload for a life-cycle step, so a step's check reads like a cell's: its label
    is the step's selector (``lifecycle-mount``), the one name the rules, the --encperf-noise file,
    the history and the report know the step by (checks.check_name)."""
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
    LIFECYCLE_SETTINGS match this run's (keyed by the step's selector, lifecycle-mount). Not
    pooled over the steps, as history_for pools workloads: a mkfs of seconds and an unmount of
    microseconds spread nothing alike."""
    name = lifecycle_selector(step)  # as checks.check_name names the step's check
    samples: list[list[float]] = []
    for run in runs:
        values = run.lifecycle.get(backend, {}).get(step)
        if lifecycle_differences(run.settings, current.settings) or not values:
            continue
        if not stats.invalid_values(values):
            samples.append(log_values(values))
    return History({name: samples})


def lifecycle_checks(
    reference: RunData,
    current: RunData,
    rules: Sequence[Rule],
    history: Sequence[RunData] = (),
    noise: verdict.NoisePrior | None = None,
) -> tuple[list[Check], list[str]]:
    """One check per backend x life-cycle step that both runs timed and a life-cycle rule
    selects, lower is better, and the notes the gate shows: why a backend's life cycle is not
    gated (too few cycles), and that there was nothing to check. No life-cycle rule: no checks.
    ``history``: the saved runs (the reference among them) whose spread gates a step; ``noise``:
    the user's between-run prior (a step's own cell of it joins that spread)."""
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
            check = assess(
                SAVED, cell, metric, now, old, rule, history=spread, differences=differences, noise=noise
            )
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
