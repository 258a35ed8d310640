"""Rendering of results: the terminal summary tables (tabulate). Pure functions, no pytest."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from tabulate import tabulate

from .model import Measurement, Result
from .workloads import Workload

BASELINE_LABEL = "plain (baseline)"


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


def _columns(workloads: Iterable[Workload]) -> list[tuple[str, str]]:
    """(label, unit) per CrystalDiskMark row, in first-seen order."""
    seen: dict[str, str] = {}
    for workload in workloads:
        seen.setdefault(workload.label, "IOPS" if workload.reports_iops else "MB/s")
    return list(seen.items())


def _baseline_rounds(results: list[Result]) -> dict[str, list[Measurement]]:
    """Every baseline round per workload name, whichever backend it was paired with."""
    rounds: dict[str, list[Measurement]] = {}
    for result in results:
        rounds.setdefault(result.workload.name, []).extend(result.baseline_rounds)
    return rounds


def _metric(workload: Workload) -> str:
    return "iops" if workload.reports_iops else "mb_per_s"


def summary_table(
    results: list[Result], skipped: dict[str, str], backends: list[str], selected: list[Workload]
) -> str:
    """One row per backend, a column per CrystalDiskMark row with read / write values and,
    under them, the change against the plain baseline measured in the same rounds.

    Every selected backend gets a row: measured, skipped (with the reason) or not measured.
    """
    columns = _columns([*selected, *(r.workload for r in results)])
    by_key = {(r.backend, r.workload.label, r.workload.direction): r for r in results}
    workloads = {w.name: w for w in [*selected, *(r.workload for r in results)]}
    base = _baseline_rounds(results)
    headers = ["backend", *(f"{label}\n{unit} read / write" for label, unit in columns)]

    rows: list[list[str]] = []
    if results:
        row = [BASELINE_LABEL]
        for label, _ in columns:
            cells = []
            for direction in ("read", "write"):
                name = f"{label.replace(' ', '-')}-{direction}"
                if base.get(name):
                    metric = _metric(workloads[name])
                    cells.append(_format_value(statistics.median(getattr(m, metric) for m in base[name])))
                else:
                    cells.append("-")
            row.append(" / ".join(cells))
        rows.append(row)
    for backend in backends:
        if backend in skipped:
            rows.append([backend, f"skipped: {skipped[backend]}", *([""] * (len(columns) - 1))])
            continue
        values, changes = [], []
        for label, _ in columns:
            value_cells, change_cells = [], []
            for direction in ("read", "write"):
                result = by_key.get((backend, label, direction))
                if result is None or not result.rounds:
                    value_cells.append("-")
                    change_cells.append("")
                    continue
                value_cells.append(_format_value(result.median(result.primary_metric)))
                change_cells.append(_format_change(result.change_percent))
            values.append(" / ".join(value_cells))
            changes.append(" / ".join(c for c in change_cells if c))
        if any(v.strip("-/ ") for v in values):
            rows.append([backend, *(f"{v}\n{c}" for v, c in zip(values, changes, strict=True))])
        else:
            rows.append([backend, "not measured", *([""] * (len(columns) - 1))])
    if not rows or not columns:
        return ""
    widths = [None, *([60] * len(columns))] if skipped else None
    return tabulate(rows, headers=headers, tablefmt="simple_grid", maxcolwidths=widths, disable_numparse=True)


def detail_table(results: list[Result]) -> str:
    """Every backend x workload: throughput, IOPS, latency, CPU cost, I/O mode, change vs plain."""
    headers = [
        "backend", "workload", "MB/s", "IOPS", "p50 µs", "p99 µs", "p99.9 µs",
        "CPU s/GiB", "plain MB/s", "plain CPU", "vs plain", "I/O", "rounds",
    ]  # fmt: skip
    rows = []
    notes: dict[str, str] = {}
    for result in results:
        if not result.rounds:
            continue
        mode, base_mode = result.io_modes
        if base_mode != mode:
            mode = f"{mode}, plain {base_mode}"
        o_direct = result.description.get("o_direct")
        if o_direct and o_direct != "direct" and "buffered" in mode:
            mode += "*"
            notes[result.backend] = o_direct
        rows.append([
            result.backend,
            result.workload.name,
            _format_value(result.median("mb_per_s")),
            _format_value(result.median("iops")),
            _format_value(result.median("lat_p50_us")),
            _format_value(result.median("lat_p99_us")),
            _format_value(result.median("lat_p999_us")),
            _format_value(result.median("cpu_s_per_gib")),
            _format_value(result.median("mb_per_s", baseline=True)) if result.baseline_rounds else "-",
            _format_value(result.median("cpu_s_per_gib", baseline=True)) if result.baseline_rounds else "-",
            _format_change(result.change_percent),
            mode,
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
    return "\n".join(lines)
