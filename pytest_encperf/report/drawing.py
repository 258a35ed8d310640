"""The HTML report's charts, drawn with matplotlib (the optional extra ``pytest-encperf[html]``,
imported only here and only when a page is made) and inlined as SVG elements of the page.

The charts have no background and draw text, axes and grid in ``FOREGROUND``, which becomes the
page's own text colour (``currentColor``); bars and lines use the Okabe-Ito colours, which stay
distinct for colour-blind readers, and every bar carries its value as text. What each chart
shows comes from charts.py.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..gate import FAIL, NOT_COMPARABLE
from ..workloads import KiB, MiB
from . import charts
from .formats import format_percent, format_value

MATPLOTLIB_MISSING = (
    "the HTML report draws its charts with matplotlib, which is not installed: "
    "pip install 'pytest-encperf[html]'"
)

# Okabe & Ito's palette (distinct for the common colour-vision deficiencies), plain first.
PLAIN_COLOUR = "#56B4E9"
COLOURS = ("#E69F00", "#009E73", "#CC79A7", "#D55E00", "#0072B2", "#F0E442", "#999999")
PERCENTILE_COLOURS = ("#56B4E9", "#E69F00", "#D55E00")  # p50, p99, p99.9
# Text, axes and grid are drawn in this colour and become ``currentColor`` in the page.
FOREGROUND = "#010203"


def matplotlib_problem() -> str | None:
    """Why the page cannot be drawn here (matplotlib missing), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return MATPLOTLIB_MISSING
    return None


def _rc(salt: str) -> dict[str, Any]:
    return {
        "svg.fonttype": "none",  # text stays text: smaller, and the page's colour applies
        "svg.hashsalt": salt,  # ids differ between the figures of one page
        "font.family": "sans-serif",
        "font.size": 9,
        "text.color": FOREGROUND,
        "axes.labelcolor": FOREGROUND,
        "axes.edgecolor": FOREGROUND,
        "xtick.color": FOREGROUND,
        "ytick.color": FOREGROUND,
        "grid.color": FOREGROUND,
        "grid.alpha": 0.2,
        "axes.facecolor": "none",
        "figure.facecolor": "none",
        "savefig.facecolor": "none",
        "savefig.edgecolor": "none",
        "legend.frameon": False,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }


class Drawing:
    """Makes matplotlib figures and turns each into an SVG element for the page."""

    def __init__(self) -> None:
        problem = matplotlib_problem()
        if problem:
            raise RuntimeError(problem)
        self.count = 0

    @contextmanager
    def figure(self, width: float, height: float, out: list[str]) -> Iterator[Any]:
        """A matplotlib Figure (no pyplot: no global state, no GUI); its SVG is appended to ``out``."""
        import matplotlib
        from matplotlib.figure import Figure

        self.count += 1
        # RcParams validates each setting, and is what rc_context's keys are typed as
        with matplotlib.rc_context(matplotlib.RcParams(_rc(f"encperf-{self.count}"))):
            figure = Figure(figsize=(width, height), layout="constrained")
            yield figure
            buffer = io.StringIO()
            figure.savefig(
                buffer, format="svg", metadata=dict.fromkeys(("Creator", "Date", "Format", "Type"))
            )
        out.append(inline_svg(buffer.getvalue()))


def inline_svg(text: str) -> str:
    """matplotlib's SVG file as an element of the page: no XML prolog or DTD, no namespace URLs
    (HTML needs neither), no ids on groups (several figures share those), the foreground colour
    as ``currentColor``."""
    text = text[text.index("<svg") :]
    text = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text)
    text = re.sub(r'<g id="[^"]*"', "<g", text)
    # coordinates to 0.1 pt (a third of the size); text is left as it is
    text = re.sub(
        r'( (?:d|x|y|transform)=")([^"]*)"', lambda m: m[1] + re.sub(r"(\.\d)\d+", r"\1", m[2]) + '"', text
    )
    return text.replace(FOREGROUND, "currentColor").replace("<svg ", '<svg role="img" ', 1)


def colour_of(backend: str, backends: Sequence[str]) -> str:
    if backend == charts.BASELINE:
        return PLAIN_COLOUR
    others = [b for b in backends if b != charts.BASELINE]
    return COLOURS[others.index(backend) % len(COLOURS)] if backend in others else COLOURS[-1]


def size_label(size: int) -> str:
    for unit, factor in (("M", MiB), ("K", KiB)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


# ----------------------------------------------------------------------------- the charts


def _grouped(
    bars: Sequence[Any], backends: list[str]
) -> tuple[list[str], list[tuple[str, list[float], list[Any]]], float]:
    """Horizontal grouped bars: the workloads (rows), and per backend the y of its bar in each
    row it has and those bars; the height of one bar."""
    workloads = list(dict.fromkeys(b.workload for b in bars))
    order = [charts.BASELINE, *backends]
    names = sorted(
        dict.fromkeys(bar.backend for bar in bars), key=lambda b: order.index(b) if b in order else 99
    )
    step = 0.8 / max(1, len(names))
    groups = []
    for k, backend in enumerate(names):
        mine = {bar.workload: bar for bar in bars if bar.backend == backend}
        ys = [i + (k - (len(names) - 1) / 2) * step for i, w in enumerate(workloads) if w in mine]
        groups.append((backend, ys, [mine[w] for w in workloads if w in mine]))
    return workloads, groups, step


def draw_overhead(
    bars: list[charts.OverheadBar], backends: list[str], drawing: Drawing, out: list[str]
) -> None:
    workloads, groups, step = _grouped(bars, backends)
    with drawing.figure(10.5, 0.9 + 0.28 * len(bars), out) as figure:
        axes = figure.subplots()
        for backend, ys, shown in groups:
            widths = [bar.estimate if bar.estimate is not None else 0.0 for bar in shown]
            errors = [
                [
                    bar.estimate - bar.low if bar.low is not None and bar.estimate is not None else 0.0
                    for bar in shown
                ],
                [
                    bar.high - bar.estimate if bar.high is not None and bar.estimate is not None else 0.0
                    for bar in shown
                ],
            ]
            drawn = axes.barh(
                ys, widths, height=step * 0.9, xerr=errors, color=colour_of(backend, backends), label=backend,
                error_kw={"ecolor": FOREGROUND, "elinewidth": 0.8, "capsize": 2},
            )  # fmt: skip
            labels = [format_percent(bar.estimate) if bar.estimate is not None else bar.note for bar in shown]
            axes.bar_label(drawn, labels=labels, padding=3, fontsize=7)
        axes.axvline(0, color=FOREGROUND, linewidth=0.8)
        axes.set_yticks(range(len(workloads)), workloads)
        axes.invert_yaxis()
        axes.set_xlabel("change against plain in this run, % (MB/s; IOPS for the 4K rows)")
        axes.grid(axis="x")
        # a change is above -100%; intervals reaching past +100% (few, noisy rounds) are cut at the edge
        shown = [v for bar in bars for v in (bar.estimate, bar.high) if v is not None]
        left, right = -100.0, min(max([5.0, *shown]), max(100.0, *(b.estimate or 0 for b in bars)))
        axes.set_xlim(left - 0.18 * (right - left), right + 0.12 * (right - left))  # room for the labels
        axes.legend(loc="lower right", fontsize=8)


def draw_latency(bars: list[charts.LatencyBars], drawing: Drawing, out: list[str]) -> None:
    workloads = list(dict.fromkeys(b.workload for b in bars))
    columns = min(2, len(workloads))
    rows = math.ceil(len(workloads) / columns)
    with drawing.figure(10.5, 0.6 + 2.6 * rows, out) as figure:
        grid = figure.subplots(rows, columns, squeeze=False)
        for index, workload in enumerate(workloads):
            axes = grid[index // columns][index % columns]
            mine = [b for b in bars if b.workload == workload]
            for k, (name, attr) in enumerate((("p50", "p50_us"), ("p99", "p99_us"), ("p99.9", "p999_us"))):
                values = [getattr(b, attr) for b in mine]
                drawn = axes.bar(
                    [i + (k - 1) * 0.27 for i in range(len(mine))], values, width=0.25,
                    color=PERCENTILE_COLOURS[k], label=name,
                )  # fmt: skip
                axes.bar_label(
                    drawn, labels=[format_value(v) for v in values], fontsize=6, rotation=90, padding=2
                )
            axes.set_yscale("log")
            axes.set_xticks(range(len(mine)), [_short(b.backend) for b in mine], fontsize=7)
            axes.set_title(workload, fontsize=9)
            axes.set_ylabel("µs")
            axes.margins(y=0.25)
            if index == 0:
                axes.legend(fontsize=7, ncols=3, loc="upper left")
        for index in range(len(workloads), rows * columns):
            grid[index // columns][index % columns].set_visible(False)


def draw_cpu(bars: list[charts.CpuBar], backends: list[str], drawing: Drawing, out: list[str]) -> None:
    workloads, groups, step = _grouped(bars, backends)
    with drawing.figure(10.5, 0.9 + 0.24 * len(bars), out) as figure:
        axes = figure.subplots()
        for backend, ys, shown in groups:
            daemon = [min(bar.daemon_s_per_gib or 0.0, bar.cpu_s_per_gib) for bar in shown]
            colour = colour_of(backend, backends)
            axes.barh(
                ys, daemon, height=step * 0.9, color=colour, hatch="///", edgecolor=FOREGROUND, linewidth=0
            )
            drawn = axes.barh(
                ys, [bar.cpu_s_per_gib - d for bar, d in zip(shown, daemon, strict=True)], left=daemon,
                height=step * 0.9, color=colour, label=backend,
            )  # fmt: skip
            labels = [
                format_value(bar.cpu_s_per_gib)
                + (f" (daemon {format_value(bar.daemon_s_per_gib)})" if bar.daemon_s_per_gib else "")
                for bar in shown
            ]
            axes.bar_label(drawn, labels=labels, padding=3, fontsize=7)
        axes.set_yticks(range(len(workloads)), workloads)
        axes.invert_yaxis()
        axes.set_xlabel("CPU seconds per GiB moved (system-wide; hatched: the backend's own daemon)")
        axes.grid(axis="x")
        axes.set_xlim(0, axes.get_xlim()[1] * 1.3)
        axes.legend(loc="lower right", fontsize=8)


def draw_atto(lines: list[charts.SweepLine], backends: list[str], drawing: Drawing, out: list[str]) -> None:
    directions = list(dict.fromkeys(line.direction for line in lines))
    with drawing.figure(10.5, 3.2, out) as figure:
        grid = figure.subplots(1, len(directions), squeeze=False, sharey=True)
        for axes, direction in zip(grid[0], directions, strict=True):
            for line in (line for line in lines if line.direction == direction):
                sizes, values = zip(*line.points, strict=True)
                axes.plot(
                    sizes, values, marker="o", markersize=3, color=colour_of(line.backend, backends),
                    linestyle="--" if line.backend == charts.BASELINE else "-", label=line.backend,
                )  # fmt: skip
                axes.annotate(
                    format_value(values[-1]), (sizes[-1], values[-1]), xytext=(3, 0),
                    textcoords="offset points", fontsize=7, va="center",
                )  # fmt: skip
            every_size = sorted({s for line in lines for s, _ in line.points})
            axes.set_xscale("log", base=2)
            axes.set_xticks(every_size, [size_label(s) for s in every_size], fontsize=6, rotation=90)
            axes.minorticks_off()
            axes.set_title(f"sequential {direction}, queue depth 4", fontsize=9)
            axes.set_xlabel("transfer size")
            axes.grid(True)
        grid[0][0].set_ylabel("MB/s (median of the rounds)")
        grid[0][0].legend(fontsize=7)


def draw_matrix(grids: list[charts.Grid], drawing: Drawing, out: list[str]) -> None:
    from matplotlib.colors import TwoSlopeNorm

    backends = list(dict.fromkeys(g.backend for g in grids))
    directions = list(dict.fromkeys(g.direction for g in grids))
    changes = [abs(c.change) for g in grids for c in g.cells.values() if c.change is not None]
    limit = max([10.0, *changes])
    norm = TwoSlopeNorm(0.0, -limit, limit)
    with drawing.figure(10.5, 0.8 + 2.2 * len(backends), out) as figure:
        grid = figure.subplots(len(backends), len(directions), squeeze=False)
        image = None
        for g in grids:
            axes = grid[backends.index(g.backend)][directions.index(g.direction)]
            values = [
                [(g.cells[(f, r)].change if (f, r) in g.cells else None) for r in g.record_sizes]
                for f in g.file_sizes
            ]
            data = [[math.nan if v is None else v for v in row] for row in values]
            image = axes.imshow(data, cmap="PuOr", norm=norm, aspect="auto")
            for i, f in enumerate(g.file_sizes):
                for j, r in enumerate(g.record_sizes):
                    cell = g.cells.get((f, r))
                    if cell is None:
                        continue
                    dark = cell.change is not None and abs(cell.change) > 0.6 * limit
                    text = f"{format_value(cell.mb_per_s)} MB/s\n{format_percent(cell.change)}"
                    colour = "#ffffff" if dark else "#111111"
                    axes.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)
            axes.set_xticks(range(len(g.record_sizes)), [f"R{size_label(r)}" for r in g.record_sizes])
            axes.set_yticks(range(len(g.file_sizes)), [f"F{size_label(f)}" for f in g.file_sizes])
            axes.set_title(f"{_short(g.backend)}: sequential {g.direction}", fontsize=9)
        if image is not None:
            figure.colorbar(image, ax=grid, label="change against plain, %", shrink=0.8)


def draw_history(
    series: list[charts.HistorySeries],
    runs: list[str],
    backends: list[str],
    drawing: Drawing,
    out: list[str],
    change: bool,
) -> None:
    workloads = list(dict.fromkeys(s.workload for s in series))
    columns = min(4, len(workloads))
    rows = math.ceil(len(workloads) / columns)
    with drawing.figure(10.5, 0.7 + 2.0 * rows, out) as figure:
        grid = figure.subplots(rows, columns, squeeze=False, sharex=True)
        for index, workload in enumerate(workloads):
            axes = grid[index // columns][index % columns]
            for s in series:
                if s.workload != workload or (change and s.backend == charts.BASELINE):
                    continue
                xs = [i for i, p in enumerate(s.points) if p is not None]
                ys = [(p.change if change else p.value) for p in s.points if p is not None]
                if change and any(y is None for y in ys):
                    xs = [x for x, y in zip(xs, ys, strict=True) if y is not None]
                    ys = [y for y in ys if y is not None]
                colour = colour_of(s.backend, backends)
                axes.plot(xs, ys, marker="o", markersize=3, color=colour, label=s.backend)
                last = s.points[-1]
                if (
                    last is not None
                    and last.status in (FAIL, NOT_COMPARABLE)
                    and xs
                    and xs[-1] == len(runs) - 1
                ):
                    failed = last.status == FAIL
                    axes.plot(
                        xs[-1], ys[-1], marker="X" if failed else "s", markersize=9, color=COLOURS[3],
                        markerfacecolor=COLOURS[3] if failed else "none",
                    )  # fmt: skip
                    axes.annotate(
                        "regression" if failed else "not comparable", (xs[-1], ys[-1]), xytext=(-4, 6),
                        textcoords="offset points", fontsize=6, ha="right", color=COLOURS[3],
                    )  # fmt: skip
            if change:
                axes.axhline(0, color=FOREGROUND, linewidth=0.6)
            unit = next((s.unit for s in series if s.workload == workload), "")
            if change:
                title = f"{workload}: vs plain %"
            else:  # a task's or timed function's seconds: lower is better
                title = f"{workload} ({unit}{', lower is better' if unit == 's' else ''})"
            axes.set_title(title, fontsize=8)
            axes.set_xticks(range(len(runs)), [f"#{i + 1}" for i in range(len(runs))], fontsize=7)
            axes.grid(True)
        for index in range(len(workloads), rows * columns):
            grid[index // columns][index % columns].set_visible(False)
        handles, labels = grid[0][0].get_legend_handles_labels()
        figure.legend(handles, labels, loc="outside lower center", ncols=min(6, len(labels)), fontsize=7)
        figure.supylabel("change against plain, %" if change else "MB/s (IOPS for the 4K rows), median")


def _short(backend: str) -> str:
    return backend if len(backend) <= 18 else backend.split(":", 1)[0] + ":…"
