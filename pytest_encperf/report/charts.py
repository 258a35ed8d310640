"""What each part of the HTML report shows, as plain data (no matplotlib, no pytest).

drawing.py draws these; the tests check the numbers here. Every figure comes from the same
places as the terminal tables and the gate: a tile is a summary-table cell (tables.py), an
overhead bar is the estimate and 95% interval that ``--encperf-max-overhead`` judges
(gate.overhead_check), plain is the pooled plain cell the gate uses (gate.cells_of).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..gate import (
    FAIL,
    INVALID,
    MACHINE_BUSY,
    NO_EVIDENCE,
    NOT_COMPARABLE,
    NOT_SIGNIFICANT,
    PASS,
    Cell,
    Verdict,
    cells_of,
    overhead_check,
)
from ..model import BASELINE, Measurement, Result, RunData
from ..workloads import ATTO, GiB, Workload
from .formats import pick
from .tables import CACHED_BELOW_MARK, CAVEAT_MARKS, busy_mark, shown_change

SWEEPS = ("atto", "matrix")  # profiles drawn as charts, not tiles
_ATTO_NAMES = frozenset(w.name for w in ATTO)


def is_sweep(workload: Workload) -> bool:
    """A workload of the ATTO sweep or the matrix grid: drawn in its own chart, and left out of
    the tiles, overhead, CPU and history charts (30 and 12 more rows would drown them)."""
    return workload.name in _ATTO_NAMES or workload.extent is not None


# Tile colours by the change against plain (percent): the first tone whose floor it reaches.
TONES: tuple[tuple[str, float], ...] = (
    ("faster", 5.0),
    ("same", -5.0),
    ("slower", -25.0),
    ("much-slower", -50.0),
    ("severe", -math.inf),
)


def tone(change: float | None) -> str:
    """``faster`` (+5% or more), ``same`` (within 5%), ``slower`` (to -25%), ``much-slower``
    (to -50%), ``severe`` (worse), ``none`` (no change to show: not comparable, no plain)."""
    if change is None or math.isnan(change):
        return "none"
    return next(name for name, floor in TONES if change >= floor)


# ----------------------------------------------------------------------------- tiles


@dataclass(frozen=True)
class Mark:
    kind: str  # cached | buffered | caveat | not-comparable | busy
    text: str


@dataclass(frozen=True)
class Tile:
    """One backend in one cell of the CrystalDiskMark grid."""

    backend: str
    value: float | None  # the profile's figure (best or median) of the backend's rounds
    plain: float | None  # the same figure of the plain rounds interleaved with them
    change: float | None  # value / plain - 1 in percent; None when not comparable
    tone: str
    marks: tuple[Mark, ...] = ()
    skipped: str = ""  # why the backend did not run
    # half the width of the 95% interval of the overhead, in points (Result.overhead_interval)
    half_width: float | None = None


@dataclass(frozen=True)
class TileRow:
    label: str  # the workload label, e.g. SEQ1M Q8T1
    unit: str
    cells: tuple[tuple[str, tuple[Tile, ...]], ...]  # (direction, one tile per backend)


def marks(result: Result) -> tuple[Mark, ...]:
    """What makes a cell's numbers other than a direct-I/O, uncached comparison."""
    found = []
    if not result.comparable:
        mine, plain = result.io_modes
        found.append(Mark("not-comparable", f"not comparable ({mine} vs plain {plain})"))
    cached, cached_plain = result.cached_rounds
    if cached or cached_plain:
        found.append(Mark("cached", f"cached {cached}/{len(result.rounds)}, plain {cached_plain}"))
    modes = {m.io_mode for m in (*result.rounds, *result.baseline_rounds)}
    if modes - {"direct"}:
        star = "*" if "direct-requested-but-buffered" in (*modes, result.description.get("o_direct")) else ""
        found.append(Mark("buffered", f"buffered{star}"))
    found += [Mark("caveat", CAVEAT_MARKS.get(key, key)) for key in result.caveats]
    if result.cached_below:
        found.append(Mark("cached", CACHED_BELOW_MARK))
    if result.busy_rounds:
        found.append(Mark("busy", busy_mark(result)))
    return tuple(found)


def tile(result: Result | None, backend: str, value: str, skipped: str = "") -> Tile:
    if result is None or not result.rounds:
        return Tile(backend, None, None, None, "none", skipped=skipped or "not measured")
    metric = result.primary_metric
    base = [getattr(m, metric) for m in result.baseline_rounds]
    change = shown_change(result, value)
    return Tile(
        backend,
        pick([getattr(m, metric) for m in result.rounds], value),
        pick(base, value) if base else None,
        change,
        tone(change),
        marks(result),
        half_width=interval.half_width if (interval := result.overhead_interval) is not None else None,
    )


def tile_rows(
    results: Sequence[Result],
    backends: Sequence[str],
    workloads: Sequence[Workload],
    value: str,
    skipped: dict[str, str] | None = None,
) -> list[TileRow]:
    """The CrystalDiskMark grid of one profile: a row per workload label, a cell per direction
    (read, write), a tile per backend in each (skipped ones say why)."""
    skipped = skipped or {}
    by_key = {(r.backend, r.workload.name): r for r in results}
    rows: dict[str, list[Workload]] = {}
    for workload in workloads:
        rows.setdefault(workload.label, []).append(workload)
    return [
        TileRow(
            label,
            members[0].unit,
            tuple(
                (
                    w.direction,
                    tuple(tile(by_key.get((b, w.name)), b, value, skipped.get(b, "")) for b in backends),
                )
                for w in members
            ),
        )
        for label, members in rows.items()
    ]


# ----------------------------------------------------------------------------- overhead


@dataclass(frozen=True)
class OverheadBar:
    workload: str
    backend: str
    estimate: float | None  # percent: Hodges-Lehmann estimate of backend / plain - 1
    low: float | None  # its 95% interval; None when the rounds are too few to bound it
    high: float | None
    note: str = ""  # why there is no bar, or no interval


def _as_speed(time_change: float) -> float:
    """A change in time (percent) as the change in speed it is: +100% time is -50% speed."""
    return 100.0 / (1.0 + time_change / 100.0) - 100.0 if time_change > -100.0 else math.inf


def overhead_bars(results: Iterable[Result]) -> list[OverheadBar]:
    """Each encrypted backend x workload against the plain rounds interleaved with it: the
    estimate and 95% interval of ``--encperf-max-overhead`` (throughput: MB/s, IOPS for the 4K
    rows), from the gate's model of one run (verdict.estimate: no between-run part)."""
    bars = []
    for cell in cells_of(results).values():
        if cell.plain or not cell.baseline_rounds:
            continue
        check = overhead_check(cell, "throughput", None)
        if check.evidence == NO_EVIDENCE:
            bars.append(OverheadBar(cell.workload.name, cell.backend, None, None, None, check.status))
            continue
        low, high = check.change_interval
        estimate = check.change_percent
        if cell.workload.lower_is_better:  # a task's time: drawn as its speed, as every other bar
            estimate, low, high = (_as_speed(estimate), _as_speed(high), _as_speed(low))
        bounded = math.isfinite(low) and math.isfinite(high)
        note = "" if bounded else f"{check.rounds[0]} vs {check.rounds[1]} rounds cannot bound a 95% interval"
        bars.append(
            OverheadBar(
                cell.workload.name,
                cell.backend,
                estimate,
                low if bounded else None,
                high if bounded else None,
                note,
            )
        )
    return bars


# ----------------------------------------------------------------------------- latency and CPU


def _cells(results: Iterable[Result]) -> list[Cell]:
    """Plain's pooled cell first, then the backends', per workload in the order they ran."""
    cells = list(cells_of(results).values())
    order = list(dict.fromkeys(c.workload.name for c in cells))
    return sorted(cells, key=lambda c: (order.index(c.workload.name), not c.plain))


@dataclass(frozen=True)
class LatencyBars:
    workload: str
    backend: str
    p50_us: float  # medians over the rounds (total latency, see model.LATENCY_MEANING)
    p99_us: float
    p999_us: float


def latency_bars(results: Iterable[Result]) -> list[LatencyBars]:
    """p50, p99 and p99.9 of every backend (plain first) for the 4K (IOPS) block workloads."""
    return [
        LatencyBars(
            cell.workload.name,
            cell.backend,
            statistics.median(m.lat_p50_us for m in cell.rounds),
            statistics.median(m.lat_p99_us for m in cell.rounds),
            statistics.median(m.lat_p999_us for m in cell.rounds),
        )
        for cell in _cells(results)
        if cell.workload.kind == "block" and cell.workload.reports_iops and cell.rounds
    ]


@dataclass(frozen=True)
class CpuBar:
    workload: str
    backend: str
    cpu_s_per_gib: float  # median over the rounds, system-wide busy CPU per GiB moved
    daemon_s_per_gib: float | None  # the backend's own processes; None when not measured


def daemon_per_gib(rounds: Sequence[Measurement]) -> float | None:
    daemon = [m.daemon_cpu_seconds for m in rounds]
    moved = sum(m.bytes for m in rounds) / GiB
    if not rounds or any(d is None for d in daemon) or not moved:
        return None
    return sum(d for d in daemon if d is not None) / moved


def cpu_bars(results: Iterable[Result]) -> list[CpuBar]:
    """CPU seconds per GiB of every backend (plain first) per workload, with the daemon's share;
    none of a timed function (encperf.time), which moves no bytes of its own."""
    return [
        CpuBar(
            cell.workload.name,
            cell.backend,
            statistics.median(m.cpu_s_per_gib for m in cell.rounds),
            None if cell.plain else daemon_per_gib(cell.rounds),
        )
        for cell in _cells(results)
        if cell.rounds and not cell.workload.is_timed_function
    ]


# ----------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class SweepLine:
    backend: str
    direction: str
    points: tuple[tuple[int, float], ...]  # (transfer size in bytes, median MB/s), by size


def atto_lines(results: Iterable[Result]) -> list[SweepLine]:
    """The ATTO sweep: MB/s against transfer size, read and write, per backend (plain first)."""
    lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for cell in _cells(results):
        if cell.workload.name in _ATTO_NAMES and cell.rounds:
            points = lines.setdefault((cell.backend, cell.workload.direction), [])
            points.append((cell.workload.block_size, statistics.median(m.mb_per_s for m in cell.rounds)))
    ordered = sorted(lines, key=lambda key: (key[0] != BASELINE, key[1]))
    return [
        SweepLine(backend, direction, tuple(sorted(lines[(backend, direction)])))
        for backend, direction in ordered
    ]


@dataclass(frozen=True)
class GridCell:
    mb_per_s: float  # median of the backend's rounds
    change: float | None  # median vs median of its plain rounds, percent (the grid table's change)


@dataclass(frozen=True)
class Grid:
    backend: str
    direction: str
    file_sizes: tuple[int, ...]  # rows
    record_sizes: tuple[int, ...]  # columns
    cells: dict[tuple[int, int], GridCell]  # (file size, record size) -> cell


def matrix_grids(results: Iterable[Result]) -> list[Grid]:
    """The iozone-style grid of each encrypted backend and direction: file size x record size."""
    found: dict[tuple[str, str], dict[tuple[int, int], GridCell]] = {}
    for result in results:
        workload = result.workload
        if workload.extent is None or not result.rounds or result.backend == BASELINE:
            continue
        cells = found.setdefault((result.backend, workload.direction), {})
        cells[(workload.extent, workload.block_size)] = GridCell(
            result.median("mb_per_s"), shown_change(result, "median")
        )
    return [
        Grid(
            backend,
            direction,
            tuple(sorted({f for f, _ in cells})),
            tuple(sorted({r for _, r in cells})),
            cells,
        )
        for (backend, direction), cells in found.items()
    ]


# ----------------------------------------------------------------------------- history

# The verdict's statuses a history point is marked with, most serious first.
MARKED = (FAIL, INVALID, NOT_COMPARABLE, MACHINE_BUSY, NOT_SIGNIFICANT, PASS)


@dataclass(frozen=True)
class HistoryPoint:
    value: float  # median of the primary metric (MB/s, IOPS for the 4K rows)
    change: float | None  # the detail table's vs plain (median per-round ratio), percent
    status: str = ""  # the verdict's most serious status for this cell (last run only)


@dataclass(frozen=True)
class HistorySeries:
    backend: str
    workload: str
    unit: str
    points: tuple[HistoryPoint | None, ...]  # one per run, oldest first; None: not in that run


def history_series(runs: Sequence[RunData], verdict: Verdict | None = None) -> list[HistorySeries]:
    """Each backend x workload over ``runs`` (oldest first); plain from its pooled rounds. The
    last run's points carry the verdict's most serious status for their cell."""
    statuses: dict[tuple[str, str], str] = {}
    for check in verdict.checks if verdict else []:
        key = (check.backend, check.workload)
        if check.status in MARKED:
            current = statuses.get(key)
            if current is None or MARKED.index(check.status) < MARKED.index(current):
                statuses[key] = check.status
    found: dict[tuple[str, str], list[HistoryPoint | None]] = {}
    units: dict[tuple[str, str], str] = {}
    for index, run in enumerate(runs):
        last = index == len(runs) - 1
        by_cell = {(r.backend, r.workload.name): r for r in run.results if r.rounds}
        for (backend, workload), cell in cells_of(run.results).items():
            result = by_cell.get((backend, workload))
            attr = "iops" if cell.workload.reports_iops else "mb_per_s"
            if cell.workload.kind == "task":
                attr = "seconds"
            value = statistics.median(getattr(m, attr) for m in cell.rounds)
            change = result.change_percent if result is not None and backend != BASELINE else None
            status = statuses.get((backend, workload), "") if last else ""
            points = found.setdefault((backend, workload), [None] * len(runs))
            points[index] = HistoryPoint(value, change, status)
            units[(backend, workload)] = cell.workload.unit
    ordered = sorted(found, key=lambda key: (key[0] != BASELINE, key[0]))
    return [HistorySeries(b, w, units[(b, w)], tuple(found[(b, w)])) for b, w in ordered]
