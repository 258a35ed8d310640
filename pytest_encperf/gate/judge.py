"""The verdict: every check of a run (each machine against its own reference run, one family over
all of them), decided, with what the gate could not check; the one Verdict builder (no pytest)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..model import RunData
from ..verdict import NoisePrior
from .checks import (
    FAIL,
    INVALID,
    MACHINE_BUSY,
    NOT_COMPARABLE,
    PASS,
    UNDECIDED,
    Check,
    SortedRuns,
    decide_family,
    overhead_checks,
    saved_checks,
)
from .lifecycle import lifecycle_checks
from .rules import FAIL_ALPHA, Rule

EXIT_REGRESSION = 7  # pytest exit status (and `encperf compare`'s) when the gate fails; see README


@dataclass
class Verdict:
    """Everything the gate decided for one run, for the terminal, Markdown and the exit status."""

    reference: str | None = None  # label of the reference run (the saved run compared with)
    checks: list[Check] = field(default_factory=list)
    only_in_reference: list[str] = field(default_factory=list)  # "backend workload", vanished now
    only_in_current: list[str] = field(default_factory=list)
    machine_differences: list[str] = field(default_factory=list)  # "kernel 6.1.0-1 -> 6.1.0-2"
    history: list[str] = field(default_factory=list)  # labels of the saved runs used as history
    notes: list[str] = field(default_factory=list)  # shown, never failing
    unchecked: list[str] = field(default_factory=list)  # what the gate could not check (strict fails)
    not_gated: list[str] = field(default_factory=list)  # timings it never checks (gatescope), in the header
    errors: list[str] = field(default_factory=list)  # failing: unreadable reference run, save failed
    strict: bool = False
    saved: str | None = None
    machine: str = ""  # in a run over several machines: whose verdict this is (one per machine)
    family_size: int | None = None  # gated checks Holm corrected over (all machines'), if not these
    noise: NoisePrior | None = None  # the user's between-run prior the checks used (None: built-in)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.failed]

    def count(self, status: str) -> int:
        return sum(check.status == status for check in self.checks)

    @property
    def incomplete(self) -> list[str]:
        """Everything that kept the gate from checking what it was asked to check."""
        found = list(self.unchecked)
        found += [f"{key}: in {self.reference}, not in this run" for key in self.only_in_reference]
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
    noise: NoisePrior | None = None,
    sorted_runs: SortedRuns | None = None,
) -> Verdict:
    """The one verdict builder (the pytest session and ``encperf compare`` both use it).

    ``history``: earlier comparable saved runs, the reference run among them, newest first.
    ``noise``: the user's between-run prior (--encperf-noise), None for the built-in one.
    ``sorted_runs``: the runs' cells, shared with other verdicts of the same unchanged runs.
    """
    (verdict,) = judge_machines(
        [(current, reference, history)], rules, overhead_rules, strict=strict, alpha=alpha, noise=noise,
        sorted_runs=sorted_runs,
    )  # fmt: skip
    return verdict


Machine = tuple[RunData, RunData | None, Sequence[RunData]]  # (this run, its reference run, history)


def judge_machines(
    machines: Sequence[Machine],
    rules: Sequence[Rule],
    overhead_rules: Sequence[Rule] = (),
    *,
    strict: bool = False,
    alpha: float = FAIL_ALPHA,
    noise: NoisePrior | None = None,
    sorted_runs: SortedRuns | None = None,
) -> list[Verdict]:
    """One Verdict per machine of a run, each machine compared with its own reference run; the
    gated checks of all machines form ONE family for Holm's correction, so a run over five
    machines fails falsely no more often than a run on one (the run has one exit status)."""
    verdicts: list[Verdict] = []
    families: list[list[Check]] = []
    for current, reference, history in machines:
        verdict = Verdict(reference=reference.label if reference else None, strict=strict, noise=noise)
        checks: list[Check] = []
        if reference is not None:
            checks, verdict.only_in_reference, verdict.only_in_current = saved_checks(
                reference, current, rules, history, noise, sorted_runs
            )
            verdict.history = [run.label for run in history]
            cycle_checks, cycle_notes = lifecycle_checks(reference, current, rules, history, noise)
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
        verdict.notes += [  # a decision that may carry an order effect is never silent
            f"{c.backend} {c.workload} {c.metric} ({c.status}): {c.order}"
            for c in verdict.checks
            if c.order and c.gated
        ]
        verdict.notes += unreachable_note(verdict.checks, strict)
    if len(machines) > 1:
        size = sum(check.gated for verdict in verdicts for check in verdict.checks)
        for verdict in verdicts:
            verdict.family_size = size
    return verdicts


def _span(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.0f}%" if round(low) == round(high) else f"{low:.0f}-{high:.0f}%"


def unreachable_note(checks: Sequence[Check], strict: bool) -> list[str]:
    """One header note when gated checks cannot pass an unchanged run at their threshold (their
    tightest passable threshold is above it, the "too noisy" checks of ``decide``): under
    --encperf-strict every run then fails, without it those checks never pass and FAIL only a
    change beyond their "detects >= X%". A per-check reason alone hides that it is the setup
    (prior, rounds, threshold), not this run, that decides it."""
    stuck = [
        check
        for check in checks
        if check.gated
        and check.status not in (PASS, FAIL)
        and check.threshold is not None
        and not math.isnan(check.tightest)
        and check.tightest > check.threshold
    ]
    if not stuck:
        return []
    thresholds = [check.threshold for check in stuck if check.threshold is not None]
    count = f"{len(stuck)} check{'s' if len(stuck) > 1 else ''}"
    tightest = _span([check.tightest for check in stuck])
    facts = f"{count} cannot pass an unchanged run at {_span(thresholds)} here (tightest {tightest})"
    remedy = (
        "raise the threshold, save the reference run with --encperf-volumes=N, or give --encperf-noise=FILE "
        "measured on this runner (benchmarks/noise.py)"
    )
    if strict:
        return [f"--encperf-strict: {facts}: every run fails; {remedy}"]
    detects = _span([check.detectable for check in stuck])  # decide figured it for every gated check
    return [f"{facts}: they never pass and FAIL only a change beyond {detects} ('detects >= X%'); {remedy}"]
