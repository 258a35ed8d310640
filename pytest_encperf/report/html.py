"""The self-contained HTML report (``--encperf-html``, ``encperf report``). No pytest.

One file that works offline: CSS in the page, every chart drawn by matplotlib (drawing.py; the
optional extra ``pytest-encperf[html]``, imported only there and only when a page is made) and
inlined as SVG, no script, no external URL, and a Content-Security-Policy that lets the browser
load nothing else. The data behind each chart comes from charts.py; the verdict's header,
messages, check table and legend from verdict.py, as in the terminal and in Markdown.

Readable in light and dark viewers: the page follows ``prefers-color-scheme``, the charts
have no background and draw text, axes and grid in the page's own text colour
(``currentColor``); bars and lines use the Okabe-Ito colours, which stay distinct for
colour-blind readers, and every bar carries its value as text.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..gate import Verdict
from ..machine import same_machine
from ..model import Result, RunData
from . import charts
from .charts import SWEEPS
from .drawing import Drawing, draw_atto, draw_cpu, draw_history, draw_latency, draw_matrix, draw_overhead
from .formats import format_percent, format_value
from .tables import TIMED_TITLE, shown_profiles, timed_table
from .verdict import CHECK_LEGEND, check_table, verdict_header, verdict_messages

# Nothing may be loaded when the page is viewed: no script, image, font or style from anywhere.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"  # data: the heatmap's pixels


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
    plain = f"plain {format_value(t.plain)}" if t.plain is not None else "no plain rounds"
    change = format_percent(t.change) if t.change is not None else "not compared"
    change += f" ±{t.half_width:.1f}" if t.change is not None and t.half_width is not None else ""
    classes = f"tile tone-{t.tone}" + (" marked" if t.marks else "")
    return (
        f'<div class="{classes}"><b>{_e(t.backend)}</b><span class="value">{format_value(t.value)}</span>'
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
        "<h4>Verdict" + (f" against {_e(verdict.reference)}" if verdict.reference else "") + "</h4>",
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
    timed = timed_table(results, tablefmt="html")
    if timed:  # the tasks' and timed functions' seconds: no other part shows them as such
        title = f"<p>{_e(TIMED_TITLE[0].upper() + TIMED_TITLE[1:])}</p>"
        section("seconds", "Seconds per round", f'{title}<div class="scroll timed">{timed}</div>')
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
    "history": "Each workload over the runs, oldest first: the median (in the unit its title names: MB/s, "
    "IOPS for the 4K rows, files/s, or seconds for a task or timed function, lower is better), then "
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
table.grid td, table.grid th, .checks td, .checks th, .timed td, .timed th {
  border: 1px solid var(--line); padding: 2px 6px;
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
.badge.incomplete { background: #8a5a00; }
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
        tone, word = (
            ("fail", "failed")
            if verdict.failed
            else (("incomplete", "undecided") if verdict.incomplete else ("pass", "passed"))
        )
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
