"""The self-contained HTML report (``--encperf-html``, ``encperf report``). No pytest.

One file that works offline: CSS in the page, every chart drawn by matplotlib (the optional
extra ``pytest-encperf[html]``, imported only here and only when a page is made) and inlined
as SVG, no script, no external URL, and a Content-Security-Policy that lets the browser load
nothing else. The data behind each chart comes from charts.py; the
verdict's header, messages, check table and legend from report.py, as in the terminal and
in Markdown.

Readable in light and dark viewers: the page follows ``prefers-color-scheme``, the charts
have no background and draw text, axes and grid in the page's own text colour
(``currentColor``); bars and lines use the Okabe-Ito colours, which stay distinct for
colour-blind readers, and every bar carries its value as text.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from . import charts
from .charts import SWEEPS
from .compare import FAIL, NOT_COMPARABLE, Verdict
from .machine import same_machine
from .model import Result, RunData
from .report import (
    CHECK_LEGEND,
    _format_value,
    check_table,
    shown_profiles,
    verdict_header,
    verdict_messages,
)
from .workloads import KiB, MiB

MATPLOTLIB_MISSING = (
    "the HTML report draws its charts with matplotlib, which is not installed: "
    "pip install 'pytest-encperf[html]'"
)

# Okabe & Ito's palette (distinct for the common colour-vision deficiencies), plain first.
PLAIN_COLOUR = "#56B4E9"
COLOURS = ("#E69F00", "#009E73", "#CC79A7", "#D55E00", "#0072B2", "#F0E442", "#999999")
PERCENTILE_COLOURS = ("#56B4E9", "#E69F00", "#D55E00")  # p50, p99, p99.9
# Nothing may be loaded when the page is viewed: no script, image, font or style from anywhere.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"  # data: the heatmap's pixels
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


def _percent(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:+.1f}%"


# ----------------------------------------------------------------------------- charts


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
            labels = [_percent(bar.estimate) if bar.estimate is not None else bar.note for bar in shown]
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
                    drawn, labels=[_format_value(v) for v in values], fontsize=6, rotation=90, padding=2
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
                _format_value(bar.cpu_s_per_gib)
                + (f" (daemon {_format_value(bar.daemon_s_per_gib)})" if bar.daemon_s_per_gib else "")
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
                    _format_value(values[-1]), (sizes[-1], values[-1]), xytext=(3, 0),
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
                    axes.text(
                        j, i, f"{_format_value(cell.mb_per_s)} MB/s\n{_percent(cell.change)}", ha="center",
                        va="center", fontsize=7, color="#ffffff" if dark else "#111111",
                    )  # fmt: skip
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
            axes.set_title(workload, fontsize=8)
            axes.set_xticks(range(len(runs)), [f"#{i + 1}" for i in range(len(runs))], fontsize=7)
            axes.grid(True)
        for index in range(len(workloads), rows * columns):
            grid[index // columns][index % columns].set_visible(False)
        handles, labels = grid[0][0].get_legend_handles_labels()
        figure.legend(handles, labels, loc="outside lower center", ncols=min(6, len(labels)), fontsize=7)
        figure.supylabel("change against plain, %" if change else "MB/s (IOPS for the 4K rows), median")


def _short(backend: str) -> str:
    return backend if len(backend) <= 18 else backend.split(":", 1)[0] + ":…"


# ----------------------------------------------------------------------------- page


@dataclass
class Page:
    """What one page shows: the runs (oldest first; the last one of each machine in full), the
    verdict of the newest, and for a live run what it skipped and measured besides."""

    runs: list[RunData]
    verdict: Verdict | None = None
    title: str = "encperf report"
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. the cipher ceilings of a live run
    # a live fleet: the runs of each machine (its history, then this run), and each machine's
    # verdict by machine id; otherwise the runs are grouped by hardware and ``verdict`` is the newest's
    sections: list[list[RunData]] | None = None
    verdicts: dict[str, Verdict] = field(default_factory=dict)


def _e(text: object) -> str:
    return html.escape(str(text))


def _table(rows: list[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _figure(svgs: list[str], caption: str) -> str:
    return f"<figure>{''.join(svgs)}<figcaption>{_e(caption)}</figcaption></figure>"


def machines(runs: Sequence[RunData]) -> list[list[RunData]]:
    """The runs grouped by machine (same hardware and host name: a kernel update keeps its
    history), in the order given."""
    groups: list[list[RunData]] = []
    for run in runs:
        for group in groups:
            if same_machine(group[-1].machine_info, run.machine_info):
                group.append(run)
                break
        else:
            groups.append([run])
    return groups


def _backends(results: Sequence[Result], skipped: dict[str, str]) -> list[str]:
    found = list(dict.fromkeys(r.backend for r in results))
    return [*found, *(b for b in skipped if b not in found and b != charts.BASELINE)]


def tiles_html(
    results: Sequence[Result], backends: list[str], skipped: dict[str, str], profiles: list[str] | None = None
) -> str:
    parts = []
    for profile, workloads in shown_profiles(results, profiles):
        if profile.name in SWEEPS:
            continue
        rows = charts.tile_rows(results, backends, workloads, profile.value, skipped)
        header = "".join(f"<th>{_e(d)}</th>" for d in dict.fromkeys(d for row in rows for d, _ in row.cells))
        body = []
        for row in rows:
            cells = []
            for _, tiles in row.cells:
                cells.append("<td>" + "".join(_tile_html(t, row.unit) for t in tiles) + "</td>")
            label = f'<th class="label">{_e(row.label)}<small>{_e(row.unit)}</small></th>'
            body.append(f"<tr>{label}{''.join(cells)}</tr>")
        parts.append(
            f"<h4>{_e(profile.title)} <small>({_e(profile.value)} of the rounds)</small></h4>"
            f'<table class="cdm"><thead><tr><th></th>{header}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>"
        )
    return "".join(parts)


def _tile_html(t: charts.Tile, unit: str) -> str:
    if t.value is None:
        why = f'<span class="why">{_e(t.skipped)}</span>'
        return f'<div class="tile tone-none"><b>{_e(t.backend)}</b>{why}</div>'
    marks = "".join(f'<span class="mark mark-{m.kind}">{_e(m.text)}</span>' for m in t.marks)
    plain = f"plain {_format_value(t.plain)}" if t.plain is not None else "no plain rounds"
    change = _percent(t.change) if t.change is not None else "not compared"
    change += f" ±{t.half_width:.1f}" if t.change is not None and t.half_width is not None else ""
    classes = f"tile tone-{t.tone}" + (" marked" if t.marks else "")
    return (
        f'<div class="{classes}"><b>{_e(t.backend)}</b><span class="value">{_format_value(t.value)}</span>'
        f'<span class="unit">{_e(unit)}</span><span class="plain">{_e(plain)}</span>'
        f'<span class="change">{_e(change)}</span>{marks}</div>'
    )


def _context(run: RunData, page: Page, backends: list[str], verdict: Verdict | None) -> str:
    info = run.machine_info
    machine = [
        (k, " ".join(map(str, v)) if isinstance(v, list) else v)
        for k, v in info.items()
        if v not in (None, "")
    ]
    described: dict[str, dict[str, Any]] = {}
    for result in run.results:
        described.setdefault(result.backend, result.description)
    keys = list(dict.fromkeys(k for d in described.values() for k in d))
    head = "".join(f"<th>{_e(k)}</th>" for k in ["backend", *keys])
    rows = "".join(
        f"<tr><td>{_e(b)}</td>" + "".join(f"<td>{_e(d.get(k, ''))}</td>" for k in keys) + "</tr>"
        for b, d in described.items()
    )
    parts = [
        "<h4>Machine</h4>",
        _table(machine),
        "<h4>Backends</h4>",
        f'<div class="scroll"><table class="grid"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>",
    ]
    skipped = [(b, why) for b, why in page.skipped.items() if b in backends or b == charts.BASELINE]
    if skipped:
        parts.append("<ul>" + "".join(f"<li>{_e(b)} skipped: {_e(why)}</li>" for b, why in skipped) + "</ul>")
    if run.settings:
        parts += ["<h4>Settings</h4>", _table(list(run.settings.items()))]
    if page.notes:
        parts.append("<ul>" + "".join(f"<li>{_e(note)}</li>" for note in page.notes) + "</ul>")
    if verdict is not None:
        parts.append(verdict_html(verdict))
    return "".join(parts)


def verdict_html(verdict: Verdict) -> str:
    """The gate as the terminal shows it: header, the check table, its legend, the messages."""
    tone = "fail" if verdict.failed else ("incomplete" if verdict.incomplete else "pass")
    parts = [
        "<h4>Verdict" + (f" against {_e(verdict.baseline)}" if verdict.baseline else "") + "</h4>",
        f'<p class="verdict {tone}">{_e(verdict_header(verdict))}</p>',
    ]
    table = check_table(verdict.checks, tablefmt="html")
    if table:
        parts += [f'<div class="scroll checks">{table}</div>', f'<p class="legend">{_e(CHECK_LEGEND)}</p>']
    messages = verdict_messages(verdict)
    if messages:
        items = "".join(f'<li class="tone-{_e(t or "plain")}">{_e(m)}</li>' for t, m in messages)
        parts.append(f'<ul class="messages">{items}</ul>')
    return "".join(parts)


def machine_section(
    index: int, runs: list[RunData], page: Page, drawing: Drawing, verdict: Verdict | None
) -> str:
    run = runs[-1]
    results = [r for r in run.results if r.rounds]
    focus = [r for r in results if not charts.is_sweep(r.workload)]
    profiles = [p for p in run.settings.get("profile", "").split(",") if p] or None
    backends = _backends(results, page.skipped)
    info = run.machine_info
    name = info.get("machine_id") or "this machine"
    about = ", ".join(str(info[k]) for k in ("cpu_model", "kernel") if info.get(k))
    sections = [f'<section class="machine" id="m{index}"><h2>Machine {_e(name)}</h2><p>{_e(about)}</p>']
    sections.append(f"<p>{_e(run.label)}: {len(results)} results of {len(backends)} backends</p>")

    def section(key: str, title: str, body: str) -> None:
        opening = f'<section class="part" id="m{index}-{key}" data-part="{key}">'
        sections.append(f"{opening}<h3>{_e(title)}</h3>{body}</section>")

    section(
        "tiles",
        "CrystalDiskMark tiles",
        tiles_html(results, backends, page.skipped, profiles) or "<p>no tile profile ran</p>",
    )
    drawn: list[tuple[str, str, Sequence[Any], Callable[[Any, list[str]], None]]] = [
        ("overhead", "Overhead against plain", charts.overhead_bars(focus),
         lambda data, out: draw_overhead(data, backends, drawing, out)),
        ("latency", "Latency of the 4K workloads", charts.latency_bars(results),
         lambda data, out: draw_latency(data, drawing, out)),
        ("cpu", "CPU cost", charts.cpu_bars(focus), lambda data, out: draw_cpu(data, backends, drawing, out)),
        ("atto", "ATTO sweep", charts.atto_lines(results),
         lambda data, out: draw_atto(data, backends, drawing, out)),
        ("matrix", "File size x record size", charts.matrix_grids(results),
         lambda data, out: draw_matrix(data, drawing, out)),
    ]  # fmt: skip
    for key, title, data, draw in drawn:
        if data:
            svgs: list[str] = []
            draw(data, svgs)
            section(key, title, _figure(svgs, CAPTIONS[key]))
    if len(runs) > 1:
        focused = [
            RunData(r.label, tuple(x for x in r.results if not charts.is_sweep(x.workload))) for r in runs
        ]
        series = charts.history_series(focused, verdict)
        labels = [r.label for r in runs]
        history: list[str] = []
        draw_history(series, labels, backends, drawing, history, change=False)
        draw_history(series, labels, backends, drawing, history, change=True)
        legend = "".join(f"<li>#{i + 1}: {_e(label)}</li>" for i, label in enumerate(labels))
        section(
            "history", "History", _figure(history, CAPTIONS["history"]) + f'<ol class="runs">{legend}</ol>'
        )
    section("context", "Context", _context(run, page, backends, verdict))
    sections.append("</section>")
    return "".join(sections)


CAPTIONS = {
    "overhead": "Bars: estimate of backend / plain - 1 over the rounds of this run (the mean log ratio), "
    "against the plain rounds interleaved with each backend (as --encperf-max-overhead judges it); error "
    "bars: its 95% t interval from the rounds (one run: no between-run part), drawn where the rounds can "
    "bound it; the axis ends at +100% or the largest estimate.",
    "latency": "Median over the rounds of each round's p50, p99 and p99.9 total latency (submission to "
    "completion), log scale; plain is every plain round of the run.",
    "cpu": "Median CPU seconds per GiB moved (system-wide busy time, psutil); hatched: CPU time of the "
    "backend's own processes (FUSE daemons) per GiB.",
    "atto": "Median MB/s against transfer size, sequential, queue depth 4; plain dashed.",
    "matrix": "iozone-style grid: each cell's median MB/s and its change against the median of the plain "
    "rounds interleaved with it (colour: orange slower, purple faster).",
    "history": "Each workload over the runs, oldest first: the median (MB/s, IOPS for the 4K rows), then "
    "the change against plain (median of the per-round ratios); the newest run's points are marked where "
    "the verdict found a regression (X) or could not compare (square).",
}

STYLE = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1b1d21; --muted: #5b6068; --line: #d5d8dc;
  --panel: #f4f5f7; --fail: #b63c00; --pass: #006e52; --warn: #8a5a00; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #16181c; --fg: #e6e7e9; --muted: #a3a8b0; --line: #3a3e45; --panel: #20232a;
    --fail: #ff8a50; --pass: #56d3a6; --warn: #f0c060; }
}
body { background: var(--bg); color: var(--fg); font: 14px/1.4 system-ui, sans-serif; margin: 0 auto;
  max-width: 1100px; padding: 1em 1.5em; }
h1 { font-size: 1.5em; margin: 0.2em 0; } h2 { border-bottom: 2px solid var(--line); padding-bottom: .2em; }
h3 { margin-top: 1.6em; } small { color: var(--muted); font-weight: normal; }
nav a { color: inherit; margin-right: 1em; }
.verdict { font-weight: bold; font-size: 1.1em; } .verdict.fail { color: var(--fail); }
.verdict.pass { color: var(--pass); } .verdict.incomplete { color: var(--warn); }
figure { margin: 0.5em 0; } figure svg { width: 100%; height: auto; }
figcaption, .legend { color: var(--muted); font-size: 0.9em; }
table { border-collapse: collapse; } .scroll { overflow-x: auto; }
table.kv th { text-align: left; padding-right: 1em; color: var(--muted); font-weight: normal; }
table.grid td, table.grid th, .checks td, .checks th { border: 1px solid var(--line); padding: 2px 6px;
  font-size: 0.85em; }
table.cdm { width: 100%; } table.cdm td { vertical-align: top; padding: 3px; }
table.cdm th.label { text-align: left; width: 9em; } th.label small { display: block; }
.tile { display: inline-block; box-sizing: border-box; width: 12.5em; margin: 2px; padding: 4px 8px;
  border-radius: 4px; color: #111; border: 2px solid transparent; vertical-align: top; }
.tile b { display: block; font-size: 0.85em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.tile .value { font-size: 1.6em; font-weight: bold; } .tile .unit { margin-left: 0.3em; font-size: 0.8em; }
.tile .plain, .tile .change, .tile .why { display: block; font-size: 0.85em; }
.tile .change { font-weight: bold; }
.tile.marked { border: 2px dashed #111; }
.tone-faster { background: #9cc9ee; } .tone-same { background: #dcdcdc; }
.tone-slower { background: #fbd8a6; }
.tone-much-slower { background: #f3ad63; } .tone-severe { background: #e8834a; }
.tone-none { background: repeating-linear-gradient(45deg, #d9d9d9, #d9d9d9 6px, #eeeeee 6px, #eeeeee 12px); }
.mark { display: inline-block; margin: 2px 2px 0 0; padding: 0 4px; border-radius: 3px; font-size: 0.75em;
  background: #111; color: #fff; }
.mark-not-comparable { background: #7a1f00; }
.mark-busy { background: #6b4e00; }
.key span { display: inline-block; padding: 0 6px; margin-right: 4px; border-radius: 3px; color: #111; }
ul.messages li.tone-red { color: var(--fail); } ul.messages li.tone-yellow { color: var(--warn); }
ul.messages li.tone-green { color: var(--pass); }
.badge { display: inline-block; padding: 0 8px; border-radius: 4px; color: #fff; }
.badge.pass { background: #006e52; } .badge.fail { background: #b63c00; }
"""

KEY = (
    '<p class="key">Tiles: the change against plain '
    '<span class="tone-faster">+5% or more</span><span class="tone-same">within 5%</span>'
    '<span class="tone-slower">to -25%</span><span class="tone-much-slower">to -50%</span>'
    '<span class="tone-severe">worse</span><span class="tone-none">not compared</span>; '
    "a dashed border and a dark label mark cached rounds, buffered I/O (* O_DIRECT asked, served "
    "buffered), a caveat (loop dio off, cache not dropped) or sides in different I/O modes "
    "(not comparable).</p>"
)


def render(page: Page) -> str:
    """The whole page as one string."""
    drawing = Drawing()
    groups = page.sections or machines(page.runs)
    newest = page.runs[-1] if page.runs else None
    body, shown = [], []
    for index, runs in enumerate(groups):
        if page.sections is not None:
            verdict = page.verdicts.get(runs[-1].machine_info.get("machine_id", ""))
        else:
            verdict = page.verdict if newest in runs else None
        body.append(machine_section(index, runs, page, drawing, verdict))
        if verdict is not None:
            shown.append((runs[-1].machine_info.get("machine_id", ""), verdict))
    header = ""
    for machine_id, verdict in shown:
        tone, word = ("fail", "failed") if verdict.failed else ("pass", "passed")
        badge = f'<span class="badge {tone}">gate {word}</span>'
        where = f"{machine_id}: " if len(shown) > 1 else ""
        header += f'<p class="verdict {tone}">{badge} {_e(where + verdict_header(verdict))}</p>'
    names = [g[-1].machine_info.get("machine_id") or f"machine {i + 1}" for i, g in enumerate(groups)]
    nav = "".join(f'<a href="#m{i}">{_e(name)}</a>' for i, name in enumerate(names))
    run_labels = ", ".join(_e(r.label) for r in page.runs)
    made = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{_e(page.title)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{_e(page.title)}</h1>{header}<p><small>runs: {run_labels}; made {made} by "
        f"pytest-encperf</small></p><nav>{nav}</nav>{KEY}</header>" + "".join(body) + "</body></html>\n"
    )
