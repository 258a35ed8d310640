"""The CI gate: regression rules, the checks they give, and the one Verdict builder (no pytest).

A *check* compares one metric of one backend x workload ("cell") of this run with the reference run
(the saved run the gate compares with, and its history of saved runs) or, for
``--encperf-max-overhead``, with plain's rounds in this run. What counts as evidence depends on the
metric and on what is compared with:

- ``paired ratios`` (the default for an encrypted backend): each backend round divided by the
  plain round measured beside it. Whole-run drift (a busy neighbour, a warmer disk) moves both
  sides of a pair and cancels in the ratio; what a new run changes for the backend alone (a new
  volume, its placement) does not, and enters as the between-run part of the model
  (pytest_encperf/verdict.py: a prior per backend and workload, fitted to measured runs; a
  reference saved with --encperf-volumes measures it from its own volume blocks instead).
- ``paired ratios + history``: the same, with at least MIN_HISTORY comparable saved runs, whose
  spread adds to the prior (per workload).
- ``rounds + run prior``: plain's own throughput against the reference run's plain, with plain's
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

The modules, each importing only those before it: ``rules`` (metrics, the grammar, rule
selection), ``cells`` (a run's backend x workload rounds, what must match), ``checks`` (one
check, its evidence, ``is_gated``, the family correction), ``lifecycle`` (life-cycle steps),
``judge`` (the Verdict and its one builder), ``confirmation`` (``Gate``, the expected family).
"""

from __future__ import annotations

from .cells import (
    COMPARED_SETTINGS,
    Cell,
    cell_differences,
    cells_of,
    quiet_rounds,
    setting_differences,
)
from .checks import (
    BEFORE_AFTER,
    FAIL,
    HISTORY,
    IN_RUN,
    INFO,
    INVALID,
    MACHINE_BUSY,
    NO_EVIDENCE,
    NOT_COMPARABLE,
    NOT_GATED,
    NOT_SIGNIFICANT,
    OVERHEAD,
    PAIRED,
    PAIRED_HISTORY,
    PASS,
    ROUNDS,
    RUN_PRIOR,
    SAVED,
    UNDECIDED,
    Check,
    History,
    SortedRuns,
    assess,
    busy_problem,
    cell_checks,
    cell_metrics,
    decide,
    decide_family,
    history_for,
    is_gated,
    overhead_check,
    overhead_checks,
    saved_checks,
)
from .confirmation import (
    CHECK_CONFIRM_PAIRS,
    Gate,
    expected_family_size,
)
from .judge import (
    EXIT_REGRESSION,
    Machine,
    Verdict,
    judge,
    judge_machines,
)
from .lifecycle import (
    LIFECYCLE_EVIDENCE,
    LIFECYCLE_SETTINGS,
    MIN_LIFECYCLE_CYCLES,
    lifecycle_checks,
    lifecycle_differences,
    lifecycle_history,
    lifecycle_workload,
    select_lifecycle_rule,
)
from .rules import (
    ALPHA,
    DEFAULT_METRIC,
    FAIL_ALPHA,
    GRAMMAR,
    LIFECYCLE_METRIC,
    LIFECYCLE_SELECTORS,
    METRICS,
    MIN_HISTORY,
    WORKLOAD_CLASSES,
    Metric,
    Rule,
    lifecycle_selector,
    metric_for,
    name_clash,
    named_selectors,
    parse_rules,
    select_rule,
    selector_clash,
    selects_name,
    unknown_name_message,
    unmatched_names,
    workload_matches,
)

__all__ = [
    "ALPHA",
    "BEFORE_AFTER",
    "CHECK_CONFIRM_PAIRS",
    "COMPARED_SETTINGS",
    "DEFAULT_METRIC",
    "EXIT_REGRESSION",
    "FAIL",
    "FAIL_ALPHA",
    "GRAMMAR",
    "HISTORY",
    "INFO",
    "INVALID",
    "IN_RUN",
    "LIFECYCLE_EVIDENCE",
    "LIFECYCLE_METRIC",
    "LIFECYCLE_SELECTORS",
    "LIFECYCLE_SETTINGS",
    "MACHINE_BUSY",
    "METRICS",
    "MIN_HISTORY",
    "MIN_LIFECYCLE_CYCLES",
    "NOT_COMPARABLE",
    "NOT_GATED",
    "NOT_SIGNIFICANT",
    "NO_EVIDENCE",
    "OVERHEAD",
    "PAIRED",
    "PAIRED_HISTORY",
    "PASS",
    "ROUNDS",
    "RUN_PRIOR",
    "SAVED",
    "UNDECIDED",
    "WORKLOAD_CLASSES",
    "Cell",
    "Check",
    "Gate",
    "History",
    "Machine",
    "Metric",
    "Rule",
    "SortedRuns",
    "Verdict",
    "assess",
    "busy_problem",
    "cell_checks",
    "cell_differences",
    "cell_metrics",
    "cells_of",
    "decide",
    "decide_family",
    "expected_family_size",
    "history_for",
    "is_gated",
    "judge",
    "judge_machines",
    "lifecycle_checks",
    "lifecycle_differences",
    "lifecycle_history",
    "lifecycle_selector",
    "lifecycle_workload",
    "metric_for",
    "name_clash",
    "named_selectors",
    "overhead_check",
    "overhead_checks",
    "parse_rules",
    "quiet_rounds",
    "saved_checks",
    "select_lifecycle_rule",
    "select_rule",
    "selector_clash",
    "selects_name",
    "setting_differences",
    "unknown_name_message",
    "unmatched_names",
    "workload_matches",
]
