"""The results tables (tabulate): the summary, its Markdown form, the details, the machines side
by side, real work's steps; and the marks and meanings their cells carry. Pure functions, no pytest."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from tabulate import tabulate

from ..load import BUSY_SHARE
from ..model import CAVEATS, Measurement, Result, device_traffic, is_baseline, speed_change
from ..workloads import PROFILES, GiB, KiB, Profile, Workload, same_definition
from .formats import format_change, format_value, pick

DIRECTIONS = ("read", "write", "mixed")
TRANSPOSE_AFTER = 6  # more workload labels than this: labels become rows


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


def in_seconds(result: Result) -> bool:
    """Whether ``result`` is measured in seconds per round, lower is better: a real-work task's
    or a timed function's (encperf.time); the detail tables show them apart from the MB/s rows."""
    return result.workload.kind == "task"


TIMED_TITLE = (
    "real-work tasks and timed functions (encperf.time): seconds per round, lower is better; "
    "vs plain: the change in speed (negative: slower than plain)"
)


def speed_cells(result: Result) -> tuple[str, str, str]:
    """The detail tables' median, its best and plain's median: MB/s, or for a task or a timed
    function its seconds (``1.23 s``; best is the fewest), as the summary shows it."""
    plain = bool(result.baseline_rounds)
    if in_seconds(result):
        return (
            f"{format_value(result.median('seconds'))} s",
            f"{format_value(min(m.seconds for m in result.rounds))} s",
            f"{format_value(result.median('seconds', baseline=True))} s" if plain else "-",
        )
    return (
        format_value(result.median("mb_per_s")),
        format_value(result.best("mb_per_s")),
        format_value(result.median("mb_per_s", baseline=True)) if plain else "-",
    )


def vs_plain(result: Result) -> str:
    """The detail table's and the Markdown's ``vs plain``: the median paired ratio as a change
    with its interval's half-width, whether memory below the volume explains a read beating
    plain, and busy rounds."""
    text = format_change(result.change_percent) + interval_mark(result)
    text += f" {CACHED_BELOW_MARK}" if result.cached_below else ""
    return text + (f" {busy_mark(result)}" if result.busy_rounds else "")


def shown_change(result: Result, value: str) -> float | None:
    """The change the summary shows: the backend's figure against its own plain rounds' figure
    (both ``value``: best or median), so that it follows from the two numbers shown."""
    if not result.comparable or not result.rounds or not result.baseline_rounds:
        return None
    metric = result.primary_metric
    plain = pick([getattr(m, metric) for m in result.baseline_rounds], value)
    mine = pick([getattr(m, metric) for m in result.rounds], value)
    return speed_change(mine, plain, result.workload.lower_is_better)


def _change_cell(result: Result, value: str) -> str:
    if not result.comparable:
        vol, base = result.io_modes
        return f"modes differ ({vol} vs {base})"
    text = format_change(shown_change(result, value)) + interval_mark(result)
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
            value_cells.append(format_value(pick([getattr(m, metric) for m in result.rounds], value)))
            base = [getattr(m, metric) for m in result.baseline_rounds]
            plain_cells.append(format_value(pick(base, value)) if base else "-")
            change_cells.append(_change_cell(result, value))
            change = shown_change(result, value)
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
                row.append(format_change(statistics.fmean(all_changes)) if all_changes else "n/a")
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
            return f"{format_value(result.median(result.primary_metric))} {workload.unit}"
        if not result.comparable:
            return "modes differ"
        return format_change(result.change_percent)

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
                "-" if mine is None else format_value(mine),
                "-" if plain is None else format_value(plain),
                format_change(change),
            ])  # fmt: skip
    if not rows:
        return ""
    headers = ["backend", "task", "step", "seconds", "plain seconds", "vs plain"]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def _cpu_cells(result: Result) -> tuple[str, str, str]:
    """CPU s/GiB, the daemons' and plain's; "-" for a timed function, which moves no bytes of its own."""
    if result.workload.is_timed_function:
        return "-", "-", "-"
    daemon = [m.daemon_cpu_seconds for m in result.rounds if m.daemon_cpu_seconds is not None]
    daemon_text = "-"
    if len(daemon) == len(result.rounds):  # every round measured its daemons
        moved = sum(m.bytes for m in result.rounds) / GiB
        daemon_text = format_value(sum(daemon) / moved) if moved else "-"
    plain = format_value(result.median("cpu_s_per_gib", baseline=True)) if result.baseline_rounds else "-"
    return format_value(result.median("cpu_s_per_gib")), daemon_text, plain


def _context_cells(result: Result, notes: dict[str, str]) -> tuple[str, str, str, str]:
    """The engine, the I/O mode, what reached the device and the caveats of a detail row;
    ``notes`` gets the backends whose O_DIRECT fell back to buffered."""
    mode, base_mode = result.io_modes
    if not result.comparable:
        mode = f"{mode}, plain {base_mode} (NOT COMPARED)"
    o_direct = result.description.get("o_direct")
    if o_direct and o_direct != "direct" and "buffered" in mode:
        mode += "*"
        notes[result.backend] = o_direct
    is_read = result.workload.is_read or result.workload.kind == "files"
    physical = _physical(result.rounds, is_read)
    base_physical = _physical(result.baseline_rounds, is_read)
    if "CACHED" in base_physical or result.cached_below:
        physical += f" (plain {base_physical})"
    engine = _engines(result.rounds)
    if result.baseline_rounds and _engines(result.baseline_rounds) != engine:
        engine += f", plain {_engines(result.baseline_rounds)}"
    return engine, mode, physical, _caveats_cell(result)


def detail_table(results: list[Result], ceilings: Mapping[str, float | None] | None = None) -> str:
    """Every backend x workload: throughput (median, best, CV), latency, CPU cost, change vs
    plain, efficiency, the engine, I/O mode, what reached the device and the caveats; the tasks
    and timed functions, which take seconds (lower is better), in a table of their own.

    ``ceilings``: MB/s of each cipher a backend names (``cipher_ceiling``, see ceiling.py);
    efficiency is shown only for a backend whose cipher has one."""
    ceilings = ceilings or {}
    headers = [
        "backend", "workload", "MB/s", "best", "IOPS", "p50 µs", "p99 µs", "CV %",
        "CPU s/GiB", "daemon", "plain MB/s", "plain CPU", "vs plain", "eff.", "engine", "I/O",
        "device/logical", "caveats", "rounds",
    ]  # fmt: skip
    timed_headers = [
        "backend", "task", "seconds", "fewest", "CV %", "CPU s/GiB", "daemon", "plain seconds",
        "plain CPU", "vs plain", "engine", "I/O", "device/logical", "caveats", "rounds",
    ]  # fmt: skip
    rows, timed_rows = [], []
    notes: dict[str, str] = {}
    caveats: set[str] = set()
    for result in results:
        if not result.rounds:
            continue
        cv = result.cv()
        cv_text = "-" if cv is None else f"{cv * 100:.1f}"
        caveats.update(result.caveats)
        speed, best, plain_speed = speed_cells(result)
        cpu, daemon, plain_cpu = _cpu_cells(result)
        engine, mode, physical, caveat_cell = _context_cells(result, notes)
        if in_seconds(result):
            timed_rows.append([
                result.backend, result.workload.name, speed, best, cv_text, cpu, daemon, plain_speed,
                plain_cpu, vs_plain(result), engine, mode, physical, caveat_cell, str(len(result.rounds)),
            ])  # fmt: skip
            continue
        cipher = result.cipher_ceiling
        efficiency = result.efficiency(ceilings.get(cipher)) if cipher else None
        rows.append([
            result.backend,
            result.workload.name,
            speed,
            best,
            format_value(result.median("iops")),
            format_value(result.median("lat_p50_us")),
            format_value(result.median("lat_p99_us")),
            cv_text,
            cpu,
            daemon,
            plain_speed,
            plain_cpu,
            vs_plain(result),
            "-" if efficiency is None else f"{efficiency:.0%}",
            engine,
            mode,
            physical,
            caveat_cell,
            str(len(result.rounds)),
        ])  # fmt: skip
    if not rows and not timed_rows:
        return ""
    lines = [tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)] if rows else []
    if timed_rows:
        lines += ["", TIMED_TITLE] if rows else [TIMED_TITLE]
        lines.append(tabulate(timed_rows, headers=timed_headers, tablefmt="simple", disable_numparse=True))
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


def timed_table(results: Iterable[Result], tablefmt: str = "github") -> str:
    """The tasks and timed functions of ``results`` in seconds per round (lower is better), for
    the Markdown and HTML reports: median, plain's median beside it, the change, the rounds."""
    rows = []
    for result in results:
        if not result.rounds or not in_seconds(result):
            continue
        speed, _, plain_speed = speed_cells(result)
        cpu, _, _ = _cpu_cells(result)
        rounds = str(len(result.rounds))
        rows.append([result.backend, result.workload.name, speed, cpu, plain_speed, vs_plain(result), rounds])
    headers = ["backend", "task", "seconds", "CPU s/GiB", "plain seconds", "vs plain", "rounds"]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True) if rows else ""


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
