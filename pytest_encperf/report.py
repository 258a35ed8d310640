"""Rendering of results: the terminal summary tables (tabulate). Pure functions, no pytest."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from tabulate import tabulate

from . import verdict as gate_model
from .compare import (
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
    PASS,
    Check,
    Verdict,
)
from .ladder import TOLERANCE as LADDER_TOLERANCE
from .ladder import LadderRow, Rung
from .load import BUSY_SHARE
from .model import (
    BASELINE,
    CAVEATS,
    LIFECYCLE_STEPS,
    Measurement,
    Result,
    device_traffic,
    is_baseline,
    lifecycle_medians,
    lifecycle_samples,
    speed_change,
)
from .sweep import ALPHA as SWEEP_ALPHA
from .sweep import FamilyRanking, Ranked, parameters
from .workloads import PROFILES, GiB, KiB, Profile, Workload, same_definition

DIRECTIONS = ("read", "write", "mixed")
TRANSPOSE_AFTER = 6  # more workload labels than this: labels become rows
MARKDOWN_LIMIT = 60_000  # characters; a GitHub PR comment takes 65,536


def _format_value(value: float) -> str:
    if value >= 100_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _format_change(percent: float | None) -> str:
    return "n/a" if percent is None else f"{percent:+.1f}%"


def _columns(workloads: Iterable[Workload]) -> list[tuple[str, str, list[str]]]:
    """(label, unit, directions) per workload label, in first-seen order."""
    units: dict[str, str] = {}
    directions: dict[str, list[str]] = {}
    for workload in workloads:
        units.setdefault(workload.label, workload.unit)
        seen = directions.setdefault(workload.label, [])
        if workload.direction not in seen:
            seen.append(workload.direction)
    return [(label, unit, sorted(directions[label], key=DIRECTIONS.index)) for label, unit in units.items()]


def _metric(workload: Workload) -> str:
    return "iops" if workload.reports_iops else "mb_per_s"


def _pick(values: list[float], value: str) -> float:
    return max(values) if value == "best" else statistics.median(values)


# what each caveat (model.CAVEATS) is called in a summary cell and in the detail table
CAVEAT_MARKS = {
    "loop-dio-off": "loop dio off",
    "cache-not-dropped": "cache not dropped",
    "buffered-depth-1": "depth 1",
}


CACHED_BELOW_MARK = "cached below"
CACHED_BELOW_MEANING = (
    "a read that beats plain while its device saw under 90% of plain's bytes per byte read (or, "
    "random reads, of its requests; device/logical shows both sides): memory below the volume "
    "(the page cache of the file system under a FUSE store) served part of it, not faster "
    "encryption"
)


BUSY_MEANING = (
    "rounds of both sides during which processes outside this run (and steal) used more than the "
    f"busy threshold (--encperf-busy-threshold, {BUSY_SHARE:g} of a core by default; others: their "
    "average over those rounds, in cores); such a cell's "
    "numbers say what a busy machine gave, and the gate decides no check from its busy rounds"
)


def busy_mark(result: Result) -> str:
    """``busy 2/6 (others 0.97 core)``: the rounds of both sides that were busy and what others
    took over them; "" when none was."""
    if not result.busy_rounds:
        return ""
    total = len(result.rounds) + len(result.baseline_rounds)
    share = result.busy_share
    others = f" (others {share:.2f} core{'s' * (share >= 1.005)})" if share is not None else ""
    return f"busy {result.busy_rounds}/{total}{others}"


INTERVAL_MEANING = (
    "±: half the width of the 95% interval of the overhead, in percentage points (Student's t "
    "interval of the mean log ratio over the A B B A pairs; --encperf-precision runs pairs until it is "
    "narrow enough)"
)


def interval_mark(result: Result) -> str:
    """`` ±1.8``: half the width of the 95% interval of the cell's overhead, in percentage points
    (model.Result.overhead_interval); "" when its rounds cannot give one."""
    interval = result.overhead_interval
    return f" ±{interval.half_width:.1f}" if interval is not None else ""


def _vs_plain(result: Result) -> str:
    """The detail table's and the Markdown's ``vs plain``: the median paired ratio as a change
    with its interval's half-width, whether memory below the volume explains a read beating
    plain, and busy rounds."""
    text = _format_change(result.change_percent) + interval_mark(result)
    text += f" {CACHED_BELOW_MARK}" if result.cached_below else ""
    return text + (f" {busy_mark(result)}" if result.busy_rounds else "")


def _shown_change(result: Result, value: str) -> float | None:
    """The change the summary shows: the backend's figure against its own plain rounds' figure
    (both ``value``: best or median), so that it follows from the two numbers shown."""
    if not result.comparable or not result.rounds or not result.baseline_rounds:
        return None
    metric = result.primary_metric
    plain = _pick([getattr(m, metric) for m in result.baseline_rounds], value)
    mine = _pick([getattr(m, metric) for m in result.rounds], value)
    return speed_change(mine, plain, result.workload.lower_is_better)


def _change_cell(result: Result, value: str) -> str:
    if not result.comparable:
        vol, base = result.io_modes
        return f"modes differ ({vol} vs {base})"
    text = _format_change(_shown_change(result, value)) + interval_mark(result)
    if any(result.cached_rounds):
        text += " cached!"
    for caveat in result.caveats:
        text += f" {CAVEAT_MARKS.get(caveat, caveat)}!"
    if result.cached_below:
        text += f" {CACHED_BELOW_MARK}!"
    if result.busy_rounds:
        text += f" {busy_mark(result)}!"
    return text


def _backend_cells(
    by_key: Mapping[tuple[str, str, str], Result],
    backend: str,
    columns: list[tuple[str, str, list[str]]],
    value: str,
    newline: str = "\n",
) -> tuple[list[str] | None, list[float]]:
    """One backend's summary cells (value, ``plain ...`` and the change, one line each, per
    workload label) and every change shown; None when nothing of it was measured."""
    cells, all_changes = [], []
    measured_any = False
    for label, _, directions in columns:
        value_cells, plain_cells, change_cells = [], [], []
        for direction in directions:
            result = by_key.get((backend, label, direction))
            if result is None or not result.rounds:
                value_cells.append("-")
                plain_cells.append("-")
                continue
            metric = result.primary_metric
            value_cells.append(_format_value(_pick([getattr(m, metric) for m in result.rounds], value)))
            base = [getattr(m, metric) for m in result.baseline_rounds]
            plain_cells.append(_format_value(_pick(base, value)) if base else "-")
            change_cells.append(_change_cell(result, value))
            change = _shown_change(result, value)
            if change is not None:
                all_changes.append(change)
        measured = any(cell != "-" for cell in value_cells)
        measured_any = measured_any or measured
        lines = (" / ".join(value_cells), "plain " + " / ".join(plain_cells) if measured else "")
        cells.append(newline.join(line for line in (*lines, " / ".join(change_cells)) if line))
    return (cells if measured_any else None), all_changes


def summary_table(
    results: list[Result],
    skipped: dict[str, str],
    backends: list[str],
    selected: list[Workload],
    *,
    value: str = "median",
    mean_column: bool = False,
) -> str:
    """One row per backend, a column per workload label with its directions' values
    (read / write), under them the same figure of the plain rounds interleaved with this
    backend's (``plain ...``), and the change between the two: each line follows from the
    numbers above it. ``value`` is ``median`` or ``best`` (what CrystalDiskMark shows).
    ``mean_column`` adds the mean change over all the table's cells (the iozone-style grid).

    Every selected backend gets a row: measured, skipped (with the reason) or not measured.
    """
    names = {w.name for w in selected}
    mine = [r for r in results if r.workload.name in names]
    columns = _columns(selected)
    by_key = {(r.backend, r.workload.label, r.workload.direction): r for r in mine}
    headers = ["backend", *(f"{label}\n{unit} {' / '.join(dirs)}" for label, unit, dirs in columns)]
    if mean_column:
        headers.append("mean vs plain\nover all cells")

    rows: list[list[str]] = []
    width = len(columns) + (1 if mean_column else 0)
    for backend in backends:
        if backend in skipped:
            rows.append([backend, f"skipped: {skipped[backend]}", *([""] * (width - 1))])
            continue
        cells, all_changes = _backend_cells(by_key, backend, columns, value)
        if cells is not None:
            row = [backend, *cells]
            if mean_column:
                row.append(_format_change(statistics.fmean(all_changes)) if all_changes else "n/a")
            rows.append(row)
        else:
            rows.append([backend, "not measured", *([""] * (width - 1))])
    if not rows or not columns:
        return ""
    if len(columns) > TRANSPOSE_AFTER:
        # a sweep (ATTO, the grid): one row per workload label reads better than 15 columns
        grid = [headers, *(row + [""] * (len(headers) - len(row)) for row in rows)]
        headers, *rows = (list(line) for line in zip(*grid, strict=True))
        headers[0] = "workload"
        return tabulate(rows, headers=headers, tablefmt="simple_grid", disable_numparse=True)
    widths = [None, *([60] * width)] if skipped else None
    return tabulate(rows, headers=headers, tablefmt="simple_grid", maxcolwidths=widths, disable_numparse=True)


MACHINES_NOTE = (
    "per machine: an encrypted backend's vs plain (median of its per-round ratios to the plain "
    "rounds run beside it on that machine), plain's own median; - = not measured there"
)


def machines_table(machines: list[tuple[str, list[Result]]], tablefmt: str = "simple_grid") -> str:
    """Across machines (a fleet): one row per backend and workload, one column per machine with
    that machine's change vs plain (plain: its median MB/s or IOPS), side by side."""
    keys: dict[tuple[str, str], Workload] = {}
    for _, results in machines:
        for result in results:
            keys.setdefault((result.backend, result.workload.name), result.workload)
    found = {
        (label, r.backend, r.workload.name): r for label, results in machines for r in results if r.rounds
    }

    def cell(label: str, backend: str, workload: Workload) -> str:
        result = found.get((label, backend, workload.name))
        if result is None:
            return "-"
        if is_baseline(backend):
            return f"{_format_value(result.median(result.primary_metric))} {workload.unit}"
        if not result.comparable:
            return "modes differ"
        return _format_change(result.change_percent)

    rows = [
        [backend, name, *(cell(label, backend, workload) for label, _ in machines)]
        for (backend, name), workload in keys.items()
    ]
    if not rows:
        return ""
    split = "\n(" if tablefmt != "github" else " ("  # a machine's node under its id in the terminal
    headers = ["backend", "workload", *(label.replace(" (", split) for label, _ in machines)]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def _physical(rounds: list[Measurement], is_read: bool) -> str:
    """Device bytes per logical byte over the rounds (``r 1.00`` = every byte read came from
    the device), the average size of the device's requests (a 1 MiB workload whose I/Os were
    split shows 512 KiB/req), and how many rounds were served by the page cache."""
    traffic = device_traffic(rounds, is_read)
    if traffic.bytes is None:
        return "-"
    text = f"{'r' if is_read else 'w'} {traffic.bytes:.2f}"
    if traffic.request_size is not None:
        text += f", {traffic.request_size / KiB:.0f} KiB/req"
    cached = sum(bool(m.cached) for m in rounds)
    return text + (f" CACHED {cached}/{len(rounds)}" if cached else "")


def _caveats_cell(result: Result) -> str:
    """``loop dio off 3/3, plain 0/3``: rounds of each side a caveat applies to."""
    mine, plain = len(result.rounds), len(result.baseline_rounds)
    counts = [
        f"{CAVEAT_MARKS.get(key, key)} {n}/{mine}, plain {n_plain}/{plain}"
        for key, (n, n_plain) in result.caveats.items()
    ]
    return "; ".join(counts) or "-"


def _engines(rounds: list[Measurement]) -> str:
    return "+".join(dict.fromkeys(m.engine for m in rounds)) or "-"


def task_steps_table(results: Iterable[Result], workloads: Iterable[Workload]) -> str:
    """The real-work tasks among ``workloads``, step by step: the median seconds of each timed
    step on the backend and on the plain rounds beside it, and the change in speed."""
    names = {w.name for w in workloads if w.kind == "task"}
    rows = []
    for result in results:
        if result.workload.name not in names or not result.rounds:
            continue
        for step, _ in result.rounds[0].steps:

            def median(rounds: list[Measurement], step: str = step) -> float | None:
                values = [dict(m.steps)[step] for m in rounds if step in dict(m.steps)]
                return statistics.median(values) if values else None

            mine, plain = median(result.rounds), median(result.baseline_rounds)
            change = speed_change(mine, plain, True) if mine is not None and plain is not None else None
            rows.append([
                result.backend,
                result.workload.name,
                step,
                "-" if mine is None else _format_value(mine),
                "-" if plain is None else _format_value(plain),
                _format_change(change),
            ])  # fmt: skip
    if not rows:
        return ""
    headers = ["backend", "task", "step", "seconds", "plain seconds", "vs plain"]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def detail_table(results: list[Result], ceilings: Mapping[str, float | None] | None = None) -> str:
    """Every backend x workload: throughput (median, best, CV), latency, CPU cost, change vs
    plain, efficiency, the engine, I/O mode, what reached the device and the caveats.

    ``ceilings``: MB/s of each cipher a backend names (``cipher_ceiling``, see ceiling.py);
    efficiency is shown only for a backend whose cipher has one."""
    ceilings = ceilings or {}
    headers = [
        "backend", "workload", "MB/s", "best", "IOPS", "p50 µs", "p99 µs", "CV %",
        "CPU s/GiB", "daemon", "plain MB/s", "plain CPU", "vs plain", "eff.", "engine", "I/O",
        "device/logical", "caveats", "rounds",
    ]  # fmt: skip
    rows = []
    notes: dict[str, str] = {}
    caveats: set[str] = set()
    for result in results:
        if not result.rounds:
            continue
        mode, base_mode = result.io_modes
        if not result.comparable:
            mode = f"{mode}, plain {base_mode} (NOT COMPARED)"
        o_direct = result.description.get("o_direct")
        if o_direct and o_direct != "direct" and "buffered" in mode:
            mode += "*"
            notes[result.backend] = o_direct
        cv = result.cv()
        daemon = [m.daemon_cpu_seconds for m in result.rounds if m.daemon_cpu_seconds is not None]
        daemon_text = "-"
        if len(daemon) == len(result.rounds):  # every round measured its daemons
            moved = sum(m.bytes for m in result.rounds) / GiB
            daemon_text = _format_value(sum(daemon) / moved) if moved else "-"
        cipher = result.cipher_ceiling
        efficiency = result.efficiency(ceilings.get(cipher)) if cipher else None
        is_read = result.workload.is_read or result.workload.kind == "files"
        physical = _physical(result.rounds, is_read)
        base_physical = _physical(result.baseline_rounds, is_read)
        if "CACHED" in base_physical or result.cached_below:
            physical += f" (plain {base_physical})"
        caveats.update(result.caveats)
        engine = _engines(result.rounds)
        if result.baseline_rounds and _engines(result.baseline_rounds) != engine:
            engine += f", plain {_engines(result.baseline_rounds)}"
        rows.append([
            result.backend,
            result.workload.name,
            _format_value(result.median("mb_per_s")),
            _format_value(result.best("mb_per_s")),
            _format_value(result.median("iops")),
            *(["-", "-"] if result.workload.kind == "task" else [  # a task has no I/O latency
                _format_value(result.median("lat_p50_us")),
                _format_value(result.median("lat_p99_us")),
            ]),
            "-" if cv is None else f"{cv * 100:.1f}",
            _format_value(result.median("cpu_s_per_gib")),
            daemon_text,
            _format_value(result.median("mb_per_s", baseline=True)) if result.baseline_rounds else "-",
            _format_value(result.median("cpu_s_per_gib", baseline=True)) if result.baseline_rounds else "-",
            _vs_plain(result),
            "-" if efficiency is None else f"{efficiency:.0%}",
            engine,
            mode,
            physical,
            _caveats_cell(result),
            str(len(result.rounds)),
        ])  # fmt: skip
    if not rows:
        return ""
    lines = [tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)]
    for backend, o_direct in notes.items():
        lines.append(
            f"* {backend}: O_DIRECT gives {o_direct} on this volume, so both sides ran buffered "
            "(page cache dropped before each round)"
        )
    for key in sorted(caveats):
        lines.append(f"{CAVEAT_MARKS.get(key, key)}: {CAVEATS.get(key, key)}")
    if any(result.cached_below for result in results):
        lines.append(f"{CACHED_BELOW_MARK}: {CACHED_BELOW_MEANING}")
    if any(result.busy_rounds for result in results):
        lines.append(f"busy k/n: {BUSY_MEANING}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- comparison and verdict


def _format_metric(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "x plain":  # a ratio of about 0.05 .. 1.5: three decimals say more than two
        return f"{value:.3f} {unit}"
    if unit == "s":  # a life-cycle step: from microseconds (plain's unmount) to minutes
        return f"{_format_seconds(value)} {unit}"
    return f"{_format_value(value)} {unit}"


def _format_interval(check: Check) -> str:
    low, high = check.change_interval
    if math.isnan(low):
        return "-"
    if math.isinf(low) or math.isinf(high):
        return "unbounded"
    return f"{low:+.1f}..{high:+.1f}%"


def _format_p(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


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
        _format_metric(check.reference, check.unit),
        _format_metric(check.current, check.unit),
        "-" if math.isnan(check.change_percent) else _format_change(check.change_percent),
        _format_interval(check),
        _format_p(check.p_adjusted) if check.gated else f"({_format_p(check.p_value)})",
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
    against = "plain in this run" if check.kind == "overhead" else "baseline"
    text = f"{check.status}: {check.backend} {check.workload} {check.metric}"
    if check.evidence == NO_EVIDENCE:
        return f"{text}: {check.reason}"
    p_text = f"adjusted p={_format_p(check.p_adjusted)}" if check.gated else f"p={_format_p(check.p_value)}"
    return (
        f"{text}: {against} {_format_metric(check.reference, check.unit)} -> now "
        f"{_format_metric(check.current, check.unit)} ({_format_change(check.change_percent)}, "
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
        out.append(("", gate_model.prior_note()))
    if verdict.machine_differences:
        out.append(
            ("yellow", f"this machine differs from the baseline's: {'; '.join(verdict.machine_differences)}")
        )
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
        out.append(("", f"new in this run (not in the baseline): {', '.join(verdict.only_in_current)}"))
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
    if not (verdict.baseline or verdict.checks or messages):
        return lines
    title = f"encperf: compared with {verdict.baseline}" if verdict.baseline else "encperf: gate"
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


def shown_profiles(
    results: Iterable[Result], names: Iterable[str] | None = None
) -> list[tuple[Profile, list[Workload]]]:
    """The profiles ``names`` (those a run was given: ``--encperf-profile``), or when unknown each
    profile all of whose workloads are among ``results``, with the workloads that ran in the
    profile's order (a grid cell as it ran: its label names the file size it had, see
    workloads.fit_to_size)."""
    ran = list(dict.fromkeys(r.workload for r in results if r.rounds))
    wanted = [PROFILES[name] for name in names or () if name in PROFILES]
    found = []
    for profile in wanted or PROFILES.values():
        matches = [[w for w in ran if same_definition(p, w)] for p in profile.workloads]
        mine = list(dict.fromkeys(w for found_here in matches for w in found_here))
        if mine and (wanted or all(matches)):
            found.append((profile, mine))
    return found


def compact_table(results: list[Result], backends: list[str], workloads: list[Workload], value: str) -> str:
    """The summary table as a GitHub-flavoured Markdown table: a row per backend, a column per
    workload label, its three lines (value, ``plain ...``, change) joined by ``<br>``."""
    names = {w.name for w in workloads}
    columns = _columns(workloads)
    by_key = {
        (r.backend, r.workload.label, r.workload.direction): r for r in results if r.workload.name in names
    }
    rows = []
    for backend in backends:
        cells, _ = _backend_cells(by_key, backend, columns, value, newline="<br>")
        if cells is not None:
            rows.append([backend, *cells])
    headers = ["backend", *(f"{label}<br>{unit} {' / '.join(dirs)}" for label, unit, dirs in columns)]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True) if rows else ""


def lifecycle_table(
    lifecycle: Mapping[str, Mapping[str, Any]], backends: Iterable[str] = (), tablefmt: str = "simple"
) -> str:
    """Seconds of each step of each volume's life, the median of its cycles, and how many cycles
    (plain first, then the backends in order). A step's value is a list of seconds per cycle, or
    one float (a run saved before --encperf-lifecycle-cycles)."""
    samples = lifecycle_samples(lifecycle)
    medians = lifecycle_medians(lifecycle)
    order = [BASELINE, *backends, *samples]
    rows = [
        [
            spec,
            *(_format_seconds(medians[spec].get(step)) for step in LIFECYCLE_STEPS),
            str(max(len(values) for values in samples[spec].values())),
        ]
        for spec in dict.fromkeys(order)
        if spec in samples
    ]
    headers = ["backend", *LIFECYCLE_STEPS, "cycles"]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True) if rows else ""


KDF_HEADERS = (
    "backend", "fast setting", "default setting", "mount s fast", "mount s default",
    "create s fast", "create s default", "default/fast (mount)",
)  # fmt: skip


def kdf_table(
    kdf: Mapping[str, Mapping[str, Any]], backends: Iterable[str] = (), tablefmt: str = "simple"
) -> str:
    """The kdf profile (pytest_encperf.kdf, as saved): per backend, create and the mount of an
    existing volume with the fast (benchmark only) and the default key derivation, and the
    ratio of the two mounts; a backend without one says why in place of the numbers."""
    rows = []
    for spec in dict.fromkeys([BASELINE, *backends, *kdf]):
        if spec not in kdf:
            continue
        row = kdf[spec]
        settings = row.get("settings") or {}
        fast, default = settings.get("fast") or {}, settings.get("default") or {}
        if not settings:
            rows.append([spec, row.get("note", ""), "", "", "", "", "", ""])
            continue
        ratio = row.get("ratio")
        rows.append([
            spec,
            fast.get("label") or row.get("note", "-"),
            default.get("label", "-"),
            _format_seconds(fast.get("mount")),
            _format_seconds(default.get("mount")),
            _format_seconds(fast.get("create")),
            _format_seconds(default.get("create")),
            "-" if ratio is None else f"{ratio:.3g}x",
        ])  # fmt: skip
    return tabulate(rows, headers=KDF_HEADERS, tablefmt=tablefmt, disable_numparse=True) if rows else ""


def projected_time(size: int, mb_per_s: float) -> str:
    """How long ``size`` bytes take at ``mb_per_s`` (10^6 bytes/s), rounded for a person to
    read: "about 40 s", "about 12 min", "about 4 h 10 min", "about 3 d 2 h"."""
    if mb_per_s <= 0:
        return "never (nothing was encrypted)"
    seconds = size / (mb_per_s * 1e6)
    if seconds < 59.5:
        return f"about {max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"about {hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours + (minutes >= 30), 24)
    return f"about {days} d" + (f" {hours} h" if hours else "")


def inplace_table(
    inplace: Mapping[str, Mapping[str, Any]],
    project_size: int,
    backends: Iterable[str] = (),
    tablefmt: str = "simple",
) -> str:
    """The in-place encryption figures (pytest_encperf.inplace, as saved): per backend how it
    was measured, the bytes and seconds, MB/s and the time ``project_size`` bytes would take."""
    rows = []
    for spec in dict.fromkeys([BASELINE, *backends, *inplace]):
        if spec not in inplace:
            continue
        row = inplace[spec]
        check = ""
        if row.get("intact") is not None:
            check = ("data intact" if row["intact"] else "DATA CHANGED") + (
                f", {row['format_after']} after" if row.get("format_after") else ""
            )
        mb_per_s = row.get("mb_per_s", 0.0)
        rows.append([
            spec, row.get("method", ""), f"{row.get('bytes', 0) / 1e6:.4g}",
            _format_seconds(row.get("seconds")), f"{mb_per_s:.4g}",
            projected_time(project_size, mb_per_s), check,
        ])  # fmt: skip
    headers = ["backend", "how", "MB", "s", "MB/s", f"{_format_size(project_size)} would take", "check"]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True) if rows else ""


def _format_size(size: int) -> str:
    for unit, factor in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size} B"


def _format_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def cpu_line(info: Mapping[str, object]) -> str:
    """The CPU's frequency scaling as the run found it: governor, current and maximum MHz."""
    mhz = info.get("cpu_mhz")
    mhz = mhz if isinstance(mhz, Mapping) else {}
    governor = str(info.get("governor") or "unknown")
    scaling = f"governor {governor}" if governor != "unknown" else "no cpufreq governor exposed"
    current, maximum = mhz.get("current"), mhz.get("max")
    speed = f"{current:.0f} MHz" if isinstance(current, (int, float)) else "frequency unknown"
    if isinstance(maximum, (int, float)):
        speed += f" (max {maximum:.0f} MHz)"
    return f"CPU at the start: {scaling}, {speed}"


# ---------------------------------------------------------------- the ladder (--encperf-ladder)

LADDER_TITLE = "where the overhead comes from (--encperf-ladder): cipher, layer, device"
LADDER_LEGEND = (
    "cipher: the speed of the implementation of its cipher that the backend uses, on one core "
    "(encryption, MB/s); in () that cipher, then for reference the same cipher in the other place "
    "(the kernel's through AF_ALG, or user space), which never stands in for it (why one is not "
    "measured: the ladder cipher lines). layer: the same backend and workload "
    "on a RAM-backed container (a loop device over a file on a tmpfs this run mounted), with plain "
    "on the same RAM in (); it measures memory, never a disk, and is never a baseline nor gated. "
    "device: the normal run, with its plain rounds in (). Medians of the rounds. The limiting rung "
    "is the lowest of the three ceilings (cipher, layer, plain on the device); of ceilings within "
    f"{LADDER_TOLERANCE:.0%} of the lowest, the first of cipher, layer, device is named (a layer "
    "at its cipher's speed adds no limit of its own); an unmeasured rung takes no part."
)


def format_speed(mb_per_s: float | None) -> str:
    """``2.1 GB/s``, ``430 MB/s``, ``7.5 MB/s`` (10^6 bytes)."""
    if mb_per_s is None:
        return "-"
    if mb_per_s >= 1000:
        return f"{mb_per_s / 1000:.1f} GB/s"
    return f"{mb_per_s:.0f} MB/s" if mb_per_s >= 10 else f"{mb_per_s:.2g} MB/s"


def _rung_text(rung: Rung) -> str:
    return format_speed(rung.mb_per_s) if rung.mb_per_s else (rung.note or "not measured")


def _cipher_text(rung: Rung) -> str:
    """``gocryptfs:AES-GCM-256 4.6 GB/s`` or ``kernel:xts(aes):512 not measured`` (why: in the
    section's cipher lines); a note without a cipher name as it is."""
    name, separator, _ = rung.note.partition(": ")
    if not separator:
        return rung.note or "not measured"
    return f"{name} {format_speed(rung.mb_per_s) if rung.mb_per_s else 'not measured'}"


def ladder_line(row: LadderRow) -> str:
    """``gocryptfs SEQ1M-Q1T1-write: cipher 2.1 GB/s (...), layer 430 MB/s on RAM (plain 1.8
    GB/s), device 410 MB/s (plain 1.8 GB/s): the layer limits it``."""
    if row.cipher.note == "no encryption":
        cipher = "cipher none (no encryption)"
    else:
        speed = format_speed(row.cipher.mb_per_s) if row.cipher.mb_per_s else "not measured"
        texts = dict.fromkeys((_cipher_text(row.cipher), _cipher_text(row.counterpart)))  # a reason once
        cipher = f"cipher {speed} ({'; '.join(texts)})"
    layer = f"layer {_rung_text(row.layer)}"
    if row.layer.mb_per_s:
        layer += f" on RAM (plain {_rung_text(row.layer_plain)})"
    device = f"device {_rung_text(row.device)} (plain {_rung_text(row.device_plain)})"
    limit = row.limit
    verdict = f"the {limit.rung} limits it" if limit.rung else limit.remark
    if limit.rung and limit.remark:
        verdict += f" ({limit.remark})"
    return f"{row.backend} {row.workload}: {cipher}, {layer}, {device}: {verdict}"


def ladder_lines(rows: Iterable[Mapping[str, object]]) -> list[str]:
    """The ladder section: title, one line per backend x workload (as stored), legend, and each
    cipher's measurement once."""
    parsed = [LadderRow.from_dict(dict(row)) for row in rows]
    if not parsed:
        return []
    ciphers = {
        rung.note: None for row in parsed for rung in (row.cipher, row.counterpart) if ": " in rung.note
    }
    return [
        LADDER_TITLE,
        *(ladder_line(row) for row in parsed),
        LADDER_LEGEND,
        *(f"ladder cipher: {note}" for note in ciphers),
    ]


# ---------------------------------------------------------------- sweeps

SWEEP_LEGEND = (
    "vs plain: geometric mean over the workloads every configuration measured of its paired ratio to "
    "plain (each workload: geometric mean of its rounds' ratios), with a {confidence:.0%} interval from "
    "the spread of the rounds; slower = shown slower than the best by more than {margin:.0%} (one-sided "
    "t-test, p Bonferroni-adjusted over every pair of configurations); otherwise within noise. The "
    "rounds do not show how much two volumes measured at different times differ: 'slower' assumes "
    "they differ by less than the margin (raise --encperf-sweep-margin on a busy machine)."
)


def _sweep_row(ranked: Ranked) -> list[str]:
    interval = "-"
    if ranked.low is not None and ranked.high is not None:
        interval = f"{_format_change((ranked.low - 1) * 100)} .. {_format_change((ranked.high - 1) * 100)}"
    if ranked.rank == 1:
        standing = "best"
    elif ranked.p_vs_best is None:
        standing = "not tested (no spread of rounds)"
    else:
        standing = f"{'within noise' if ranked.within_noise else 'slower'} (p={_format_p(ranked.p_vs_best)})"
    return [
        str(ranked.rank),
        parameters(ranked.spec),
        _format_change(ranked.change_percent),
        interval,
        str(ranked.rounds),
        standing,
    ]


def sweep_table(ranking: FamilyRanking, tablefmt: str = "simple") -> str:
    headers = ["#", "configuration", "vs plain", f"{1 - SWEEP_ALPHA:.0%} interval", "pairs", "vs best"]
    rows = [_sweep_row(r) for r in ranking.ranked]
    rows += [["-", parameters(spec), "-", "-", "-", f"not ranked: {why}"] for spec, why in ranking.unranked]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def sweep_recommendation(ranking: FamilyRanking) -> list[str]:
    """What to choose, and how sure: the best configuration, and the others within noise of it."""
    best = ranking.best
    if len(ranking.ranked) < 2:
        return [f"no recommendation for {ranking.family}: fewer than two configurations could be ranked"]
    assert best is not None
    close = [parameters(r.spec) for r in ranking.ranked[1:] if r.within_noise]
    change = _format_change(best.change_percent)
    if close and not ranking.decided:
        return [
            f"no recommendation for {ranking.family}: no configuration is shown faster than the others "
            f"by more than {ranking.margin:.0%} here; choose on other grounds",
            f"  best estimate: {parameters(best.spec)} ({change} vs plain), set up with:",
            *(f"  {line}" for line in ranking.recommendation),
        ]
    lines = [f"recommendation for {ranking.family}: {parameters(best.spec)} ({change} vs plain)"]
    if close:
        lines.append(f"  as fast within noise: {'; '.join(close)}")
    return [*lines, *(f"  {line}" for line in ranking.recommendation)]


def sweep_title(ranking: FamilyRanking) -> str:
    ranked = (
        f"{len(ranking.ranked)} of {len(ranking.ranked) + len(ranking.unranked)}" if ranking.unranked else ""
    )
    return (
        f"sweep: {ranking.family}, {ranked or len(ranking.ranked)} configurations ranked over "
        f"{len(ranking.workloads)} workloads"
    )


def sweep_notes(ranking: FamilyRanking) -> list[str]:
    notes = []
    if ranking.left_out:
        notes.append(
            f"not ranked on (not measured comparably by every configuration): {', '.join(ranking.left_out)}"
        )
    return [*notes, SWEEP_LEGEND.format(confidence=1 - SWEEP_ALPHA, margin=ranking.margin)]


def sweep_report(ranking: FamilyRanking) -> list[str]:
    """The ranking of one family's configurations, its legend and the recommendation."""
    return [sweep_title(ranking), sweep_table(ranking), *sweep_notes(ranking), *sweep_recommendation(ranking)]


def results_markdown(results: list[Result]) -> str:
    headers = [
        "backend",
        "workload",
        "MB/s",
        "IOPS",
        "p99 µs",
        "CPU s/GiB",
        "plain MB/s",
        "vs plain",
        "rounds",
    ]
    rows = [
        [
            r.backend,
            r.workload.name,
            _format_value(r.median("mb_per_s")),
            _format_value(r.median("iops")),
            _format_value(r.median("lat_p99_us")),
            _format_value(r.median("cpu_s_per_gib")),
            _format_value(r.median("mb_per_s", baseline=True)) if r.baseline_rounds else "-",
            _vs_plain(r),
            str(len(r.rounds)),
        ]
        for r in results
        if r.rounds
    ]
    if not rows:
        return ""
    table = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
    return table + f"\n\nvs plain {INTERVAL_MEANING}" if any(r.overhead_interval for r in results) else table


def markdown_report(
    results: list[Result],
    verdict: Verdict | None,
    title: str = "encperf",
    backends: list[str] | None = None,
    profiles: Iterable[str] | None = None,
    limit: int = MARKDOWN_LIMIT,
    sweeps: Iterable[FamilyRanking] = (),
    ladder: Iterable[Mapping[str, object]] = (),
) -> str:
    """A GitHub-flavoured Markdown report (for PR comments and $GITHUB_STEP_SUMMARY): the verdict's
    one-line header (✅/❌ with its counts), what failed, the compact CrystalDiskMark table(s) of
    ``profiles`` (see shown_profiles), then everything else in a collapsed ``<details>`` block:
    every result, what explains the verdict and the check table.

    The text stays under ``limit`` characters (a PR comment takes 65,536): the details shrink to
    the checks that need attention, then go, then the tables; the header and the failures stay."""
    head = [f"## {title}", ""]
    failures: list[str] = []
    if verdict is not None:
        icon = "❌" if verdict.failed else "✅"
        baseline = f" (baseline `{verdict.baseline}`)" if verdict.baseline else ""
        head += [f"**{icon} {verdict_header(verdict)}**{baseline}", ""]
        failures = [f"- {message}" for tone, message in verdict_messages(verdict) if tone == "red"]
    names = backends or list(dict.fromkeys(r.backend for r in results))
    # the CrystalDiskMark-style tables, and real work (its seconds are in no other table)
    tables = [part for profile, workloads in shown_profiles(results, profiles)
              if profile.value == "best" or any(w.kind == "task" for w in workloads)
              for part in (f"**{profile.title}** ({profile.value} of the rounds; under it plain "
                           "beside it and the change)", "",
                           compact_table(results, names, workloads, profile.value), "")]  # fmt: skip
    if not any(r.rounds for r in results):
        tables = ["_no results_", ""]
    for ranking in sweeps:
        tables += [f"**{sweep_title(ranking)}**", "", sweep_table(ranking, tablefmt="github"), ""]
        tables += [*sweep_notes(ranking), "", "```", *sweep_recommendation(ranking), "```", ""]
    ladder_section = ladder_lines(ladder)
    if ladder_section:
        title, *lines = ladder_section
        tables += [f"**{title}**", "", *(f"- {line}" for line in lines if line != LADDER_LEGEND)]
        tables += ["", LADDER_LEGEND, ""]

    def details(checks: list[Check] | None, note: str = "") -> list[str]:
        body = [results_markdown(results), ""] if checks is None else []
        if verdict is not None:
            body += [f"- {message}" for tone, message in verdict_messages(verdict) if tone != "red"]
            shown = verdict.checks if checks is None else checks
            if shown:
                body += ["", check_table(shown, tablefmt="github"), "", CHECK_LEGEND]
        body += [note] if note else []
        summary = (
            "Details: every result and check" if checks is None else "Details: checks that need attention"
        )
        return ["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>", ""]

    def text(*parts: list[str]) -> str:
        return "\n".join(line for part in parts for line in part) + "\n"

    attention = [c for c in (verdict.checks if verdict else []) if c.status not in (PASS, INFO, NOT_GATED)]
    cut = "_details cut to keep this report under {limit:,} characters: see the JSON or HTML report_"
    for candidate in (
        text(head, failures, tables, details(None)),
        text(head, failures, tables, details(attention, cut.format(limit=limit))),
        text(head, failures, tables, [cut.format(limit=limit)]),
        text(head, failures, [cut.format(limit=limit)]),
    ):
        if len(candidate) < limit:
            return candidate
    kept: list[str] = []  # the failures alone are too long: as many as fit, and how many were left
    size = len(text(head)) + len("- ... and 999999 more\n")
    for line in failures:
        size += len(line) + 1
        if size >= limit:
            break
        kept.append(line)
    return text(head, kept, [f"- ... and {len(failures) - len(kept)} more"])
