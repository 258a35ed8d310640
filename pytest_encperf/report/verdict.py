"""The gate's verdict as every report shows it: the header, the messages that explain it, the
check table and its legend, and the terminal's lines."""

from __future__ import annotations

import math

from tabulate import tabulate

from .. import verdict as gate_model
from ..gate import (
    ALPHA,
    EXIT_REGRESSION,
    FAIL,
    FAIL_ALPHA,
    INFO,
    INVALID,
    MACHINE_BUSY,
    NO_EVIDENCE,
    NOT_COMPARABLE,
    NOT_GATED,
    NOT_SIGNIFICANT,
    OVERHEAD,
    PASS,
    Check,
    Verdict,
)
from .formats import format_change, format_p, format_seconds, format_value


def _format_metric(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "x plain":  # a ratio of about 0.05 .. 1.5: three decimals say more than two
        return f"{value:.3f} {unit}"
    if unit == "s":  # a life-cycle step: from microseconds (plain's unmount) to minutes
        return f"{format_seconds(value)} {unit}"
    return f"{format_value(value)} {unit}"


def _format_interval(check: Check) -> str:
    low, high = check.change_interval
    if math.isnan(low):
        return "-"
    if math.isinf(low) or math.isinf(high):
        return "unbounded"
    return f"{low:+.1f}..{high:+.1f}%"


_STOPS = (("decided", "decided"), ("budget spent", "budget spent"), ("the most for one workload", "at most"))


def _rounds_cell(check: Check) -> str:
    """``4/10 (+1 decided)``: rounds now/before, and the confirmation pairs and why they stopped."""
    now, before = check.rounds
    why = next((short for text, short in _STOPS if text in check.stop), "")
    added = f"+{check.confirm_rounds} " if check.confirm_rounds else ""
    busy = f", {check.busy} busy left out" if check.busy else ""
    return f"{now}/{before} ({added}{why}){busy}" if why else f"{now}/{before}{busy}"


def _check_row(check: Check) -> list[str]:
    return [
        check.backend,
        check.workload,
        check.metric,
        _format_metric(check.before, check.unit),
        _format_metric(check.now, check.unit),
        "-" if math.isnan(check.change_percent) else format_change(check.change_percent),
        _format_interval(check),
        format_p(check.p_adjusted) if check.gated else f"({format_p(check.p_value)})",
        _rounds_cell(check),
        check.evidence,
        check.rule or "-",
        check.status,
    ]


CHECK_HEADERS = [
    "backend",
    "workload",
    "metric",
    "before",
    "now",
    "change",
    "95% interval",
    "p (adj.)",
    "rounds now/before",
    "evidence",
    "rule",
    "verdict",
]


CHECK_LEGEND = (
    "change: now/before of the geometric means (with a history: of the saved runs' centre) with its "
    "95% interval, rounds and runs both counted (pytest_encperf/verdict.py); p (adj.): one-sided, "
    "for 'worse than the threshold', Holm-adjusted over the gated checks (in parentheses: "
    "unadjusted, for checks that are not gated); rounds now/before: (+N) confirmation pairs and why "
    "they stopped, and the busy rounds (both sides) left out"
)


def check_table(checks: list[Check], tablefmt: str = "simple") -> str:
    if not checks:
        return ""
    return tabulate(
        [_check_row(c) for c in checks], headers=CHECK_HEADERS, tablefmt=tablefmt, disable_numparse=True
    )


def describe_check(check: Check) -> str:
    """One line per check that needs attention: what was compared, the estimate, its interval,
    the evidence, the rounds and how they were decided, and why the check got its status."""
    against = "plain in this run" if check.kind == OVERHEAD else "reference run"
    text = f"{check.status}: {check.backend} {check.workload} {check.metric}"
    if check.evidence == NO_EVIDENCE:
        return f"{text}: {check.reason}"
    p_text = f"adjusted p={format_p(check.p_adjusted)}" if check.gated else f"p={format_p(check.p_value)}"
    return (
        f"{text}: {against} {_format_metric(check.before, check.unit)} -> now "
        f"{_format_metric(check.now, check.unit)} ({format_change(check.change_percent)}, "
        f"95% interval {_format_interval(check)}; rule {check.rule or '-'}): {check.reason}; "
        f"evidence: {check.evidence}, {p_text}, {check.rounds[0]} vs {check.rounds[1]} rounds"
        + (f" ({check.stop})" if check.stop else "")
    )


_COUNTED = (  # (statuses, singular, plural) in the order the header gives them
    ((FAIL,), "regression", "regressions"),
    ((PASS,), "within threshold", "within threshold"),
    ((NOT_SIGNIFICANT,), "undecided", "undecided"),
    ((MACHINE_BUSY,), "undecided: machine busy", "undecided: machine busy"),
    ((NOT_COMPARABLE,), "not comparable", "not comparable"),
    ((INVALID,), "invalid", "invalid"),
    ((NOT_GATED,), "reported, not gated", "reported, not gated"),
    ((INFO,), "without a rule", "without a rule"),
)


def verdict_header(verdict: Verdict) -> str:
    """``encperf: 2 regressions, 14 within threshold, 1 not comparable`` (what a CI log shows first),
    then ``; not gated: kdf timings (luks2)`` for the timings of this run the gate never checks."""
    never = f"; not gated: {', '.join(verdict.not_gated)}" if verdict.not_gated else ""
    if not verdict.checks:
        problems = verdict.errors or verdict.incomplete
        return "encperf: nothing was checked" + (f" ({problems[0]})" if problems else "") + never
    parts = []
    for index, (statuses, one, many) in enumerate(_COUNTED):
        number = sum(verdict.count(status) for status in statuses)
        if number or index < 2:  # regressions and passes always, the rest when present
            parts.append(f"{number} {one if number == 1 else many}")
    if verdict.only_in_reference:
        parts.append(f"{len(verdict.only_in_reference)} missing now")
    return "encperf: " + ", ".join(parts) + never


def verdict_messages(verdict: Verdict) -> list[tuple[str, str]]:
    """(colour, message) lines that explain the verdict: errors, notes, what differs, each check
    that needs attention, what could not be checked, and the rule itself."""
    out: list[tuple[str, str]] = [("red", f"error: {error}") for error in verdict.errors]
    out += [("yellow", note) for note in verdict.notes]
    if any(check.gated and not check.history_runs and "prior" in check.between for check in verdict.checks):
        out.append(("", gate_model.prior_note(verdict.noise)))
    else:  # a history pooled with the built-in prior: say it is still there, and why
        pooled = [
            check.history_runs
            for check in verdict.checks
            if check.gated and check.history_runs and gate_model.PRIOR_SOURCE in check.between
        ]
        if pooled:
            out.append(("", gate_model.prior_note(verdict.noise, max(pooled))))
    if verdict.machine_differences:
        differences = "; ".join(verdict.machine_differences)
        out.append(("yellow", f"this machine differs from the reference run's: {differences}"))
    if len(verdict.history) > 1:
        out.append(("", f"history: {len(verdict.history)} saved runs ({', '.join(verdict.history)})"))
    out += [("red", describe_check(check)) for check in verdict.failures]
    out += [
        ("yellow", describe_check(check))
        for check in verdict.checks
        if check.status in (NOT_SIGNIFICANT, NOT_COMPARABLE, INVALID, MACHINE_BUSY)
    ]
    not_gated = [check for check in verdict.checks if check.status == NOT_GATED]
    if not_gated:
        out.append(("yellow", f"{len(not_gated)} absolute check(s) not gated: {not_gated[0].reason}"))
    if verdict.not_gated:
        out.append((
            "",
            f"not gated: {', '.join(verdict.not_gated)}: one timing per backend and run, with no plain side "
            "to pair with; reported, never checked",
        ))  # fmt: skip
    out += [("red" if verdict.strict else "yellow", f"not checked: {item}") for item in verdict.incomplete]
    if verdict.only_in_current:
        out.append(("", f"new in this run (not in the reference run): {', '.join(verdict.only_in_current)}"))
    gated = sum(check.gated for check in verdict.checks)
    if gated:
        family = (
            f"{verdict.family_size} gated checks of all machines"
            if verdict.family_size is not None
            else f"{gated} gated checks"
        )
        out.append((
            "red" if verdict.failed else "green",
            f"a check fails only if it is worse than its threshold at p <= {FAIL_ALPHA:g} after Holm's "
            f"correction over the {family} (rounds and runs both counted), passes only if within it at "
            f"{1 - ALPHA:.0%} confidence; otherwise it is UNDECIDED, which --encperf-strict fails",
        ))  # fmt: skip
    if verdict.incomplete and not verdict.strict:
        out.append(
            ("yellow", "the gate did not check everything it was asked to; --encperf-strict fails then")
        )
    return out


Line = tuple[str, str, str]  # (kind: "section" | "line", colour: "red bold", "yellow", "" ..., text)


def verdict_report(verdict: Verdict) -> list[Line]:
    """Everything the terminal shows of the gate, in order (the session only writes it)."""
    lines: list[Line] = []
    if verdict.saved:
        lines.append(("line", "", f"encperf: saved {verdict.saved}"))
    messages = verdict_messages(verdict)
    if not (verdict.reference or verdict.checks or messages):
        return lines
    title = f"encperf: compared with {verdict.reference}" if verdict.reference else "encperf: gate"
    if verdict.machine:
        title = title.replace("encperf:", f"encperf: machine {verdict.machine}:", 1)
    lines.append(("section", "", title))
    colour = "red" if verdict.failed else ("yellow" if verdict.incomplete else "green")
    lines.append(("line", colour, verdict_header(verdict)))
    table = check_table(verdict.checks)
    if table:
        lines += [("line", "", table), ("line", "", CHECK_LEGEND)]
    lines += [("line", tone, f"encperf: {message}") for tone, message in messages]
    if verdict.failed:
        lines.append(
            ("line", "red bold", f"encperf: exit status {EXIT_REGRESSION} (performance gate failed)")
        )
    return lines
