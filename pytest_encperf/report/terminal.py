"""The terminal summary: the renderer beside the Markdown (markdown.py) and HTML (html.py) ones.

It yields lines, each ``(kind, style, text)``: kind ``line``, or the character of a separator
line (``=``, ``-``) titled ``text``; style the markup words (``red``, ``yellow bold``). ``write``
hands them to pytest's terminal reporter. What each table means is data (LEGENDS), not prose
spread through the code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from ..backends import BASELINE
from ..ceiling import from_wire
from ..gate import Verdict
from ..model import MachineRun
from ..rounds import whole_blocks
from ..settings import Settings
from ..sweep import FamilyRanking
from ..workloads import PROFILES
from .analyses import ladder_lines, sweep_report
from .tables import (
    INTERVAL_MEANING,
    MACHINES_NOTE,
    cpu_line,
    detail_table,
    machines_table,
    summary_table,
    task_steps_table,
)
from .timings import inplace_table, kdf_table, lifecycle_table
from .verdict import verdict_report

Line = tuple[str, str, str]  # (kind: "line" or a separator character, style, text)

# What each table of the summary means, said above it (below it for the detail table).
LEGENDS = {
    "profile": (
        "{title} [{name}]: {value} of the rounds; under each backend, the {value} of the plain rounds "
        "interleaved with its own and the change between the two"
    ),
    "task steps": "each task's timed steps (median seconds; vs plain: the change in speed):",
    "other workloads": (
        "other workloads: median of the rounds; under each backend the median of the plain rounds "
        "interleaved with its own, and the change between the two"
    ),
    "kdf": (
        "key derivation [kdf]: seconds to create a volume and to open (unlock and mount) it again, with "
        "the fast setting benchmark volumes use (benchmark only: not the real cost) and with the "
        "backend's default (what a real volume costs)"
    ),
    "inplace": (
        "in-place encryption [--encperf-inplace]: MB/s of encrypting existing data (LUKS2: cryptsetup "
        "reencrypt --encrypt of a filled plain volume, over its whole data area) or, where a backend "
        "cannot, of filling a fresh volume through its encryption layer; and the time the projected "
        "size would take at that rate"
    ),
    "details": (
        "vs plain: median of per-round ratios to the plain round run just before each (positive = "
        "faster than plain; the gate's vs-plain metric); never computed between different I/O modes; "
        f"{INTERVAL_MEANING}. p50/p99: total latency of each I/O, submission to completion (fio's lat, "
        "not clat); small files: create + write + fsync of each file. CV: coefficient of variation of "
        "the rounds. CPU s/GiB: system-wide busy CPU seconds per GiB moved; daemon: the backend's own "
        "processes. eff.: median MB/s / min(plain median MB/s, the speed of the backend's own cipher on "
        "this CPU), only where that cipher was measured and both sides ran in one I/O mode. "
        "device/logical: bytes the volume's block device read (r) or wrote (w) per byte the workload "
        "moved, and the average size of its requests (KiB/req); CACHED = a read round mostly served by "
        "the page cache. caveats: rounds of each side a caveat applies to. Real-work tasks and timed "
        "functions (encperf.time) take seconds: their own table shows the median seconds per round, the "
        "fewest and plain's (lower is better); a timed function moves no bytes of its own (no CPU s/GiB)."
    ),
    "lifecycle": (
        "volume life cycle, seconds (median of the cycles; benchmark volumes use a fast key derivation, "
        "not the backend's default):"
    ),
}


class Writer(Protocol):
    def write_line(self, line: str, **markup: bool) -> None: ...
    def write_sep(self, sep: str, title: str | None = None, **markup: bool) -> None: ...


def write(tr: Writer, lines: Iterable[Line]) -> None:
    """Each line to the terminal reporter, as it is rendered (a failure halfway keeps the rest)."""
    for kind, style, text in lines:
        if kind == "line":
            tr.write_line(text, **dict.fromkeys(style.split(), True))
        else:
            tr.write_sep(kind, text)


def run_notes(
    interrupted: list[str], teardown: list[str], journal_error: str | None, directory: Any
) -> Iterator[Line]:
    """What the run itself says before its tables: the interrupt's waits, teardown failures."""
    for note in interrupted:
        yield "line", "yellow", f"encperf: {note}"
    for error in teardown:
        yield "line", "red", f"encperf: teardown failed: {error}"
    if journal_error:  # the run itself was torn down; only the safety net was off
        yield "line", "yellow", f"encperf: warning: {journal_error}"
    if teardown:
        yield "line", "red", f"encperf: run `encperf cleanup --dir {directory}` once this process has exited"


def summary(
    machine_runs: list[MachineRun],
    settings: Settings,
    rankings: Callable[[MachineRun], list[FamilyRanking]],
    *,
    from_workers: bool,
    interrupted: bool,
    dist: str,
) -> Iterator[Line]:
    """Every machine's tables (``from_workers``: also what the workers' own terminals, not shown,
    would have said) and, for a fleet, the machines side by side."""
    fleet = len(machine_runs) > 1
    for machine_run in machine_runs:
        if fleet:
            yield "=", "", f"encperf: machine {machine_run.label}"
        if from_workers:
            for problem in machine_run.problems:
                yield "line", "red", f"encperf: teardown failed on {machine_run.label}: {problem}"
            for note in machine_run.notes:
                yield "line", "yellow", f"encperf: {machine_run.label}: {note}"
        yield from machine_summary(machine_run, settings, rankings, interrupted)
    if fleet:
        yield "-", "", "encperf: across machines"
        table = machines_table([(machine_run.label, machine_run.results) for machine_run in machine_runs])
        if table:
            yield "line", "", table
            yield "line", "", MACHINES_NOTE
        if dist != "each":
            yield (
                "line",
                "yellow",
                (
                    "encperf: the machines ran different tests: use --dist each so that every machine "
                    "runs every benchmark"
                ),
            )


def machine_summary(
    machine_run: MachineRun,
    s: Settings,
    rankings: Callable[[MachineRun], list[FamilyRanking]],
    interrupted: bool,
) -> Iterator[Line]:
    shown = s.backend_specs
    if (
        not machine_run.results
        and not machine_run.skipped
        and not machine_run.kdf
        and not machine_run.inplace
    ):
        return
    yield "-", "", "encperf: encryption overhead vs plain"
    yield (
        "line",
        "",
        (
            f"target: {s.target} in {machine_run.settings.get('dir', s.dir)} | "
            f"engine: {machine_run.engine} | "
            f"file: {s.size // (1024 * 1024)} MiB | "
            f"{s.rounds if s.one_volume_at_a_time else whole_blocks(s.rounds)} rounds x {s.runtime:g} s, "
            + (
                "baseline measured before and after each volume"
                if s.one_volume_at_a_time
                else "alternating with the baseline"
            )
        ),
    )
    yield "line", "", cpu_line(machine_run.machine_info)
    skipped = {k: v for k, v in machine_run.skipped.items() if k != BASELINE}
    until = [f"CV < {s.steady_cv:.0%}"] if s.steady_cv else []
    until += [f"the overhead's 95% interval is within ±{s.precision:g} points"] if s.precision else []
    steady = f"; then whole A B B A blocks until {' and '.join(until)} (at most {s.steady_budget:g} s)"
    steady = steady if until else ""
    yield "line", "", f"each workload: {s.warmup} warm-up round(s) per side discarded{steady}"
    shown_names: set[str] = set()
    # a run of the user's own workloads alone (encperf.time, fio jobs) shows no empty profile table
    in_profiles = {
        w.name for name in s.profile if name in PROFILES for w in PROFILES[name].workloads_for(s.size)
    }
    users_alone = bool(machine_run.results) and not any(
        r.workload.name in in_profiles for r in machine_run.results
    )
    for name in s.profile:
        if name not in PROFILES:  # the kdf profile: its own table below
            continue
        profile = PROFILES[name]
        workloads = profile.workloads_for(s.size)
        table = summary_table(
            machine_run.results,
            skipped,
            shown,
            workloads,
            value=profile.value,
            mean_column=profile.mean_column,
        )
        if table and not users_alone:
            yield "line", "", LEGENDS["profile"].format(title=profile.title, name=name, value=profile.value)
            yield "line", "", table
        steps = task_steps_table(machine_run.results, workloads)
        if steps:
            yield "line", "", LEGENDS["task steps"]
            yield "line", "", steps
        shown_names.update(w.name for w in workloads)
    others = [r.workload for r in machine_run.results if r.workload.name not in shown_names]
    if others:
        table = summary_table(machine_run.results, skipped, shown, others)
        if table:
            yield "line", "", LEGENDS["other workloads"]
            yield "line", "", table
    if BASELINE in machine_run.skipped:
        yield "line", "yellow", f"baseline unavailable: {BASELINE}: {machine_run.skipped[BASELINE]}"
    yield from titled(LEGENDS["kdf"], kdf_table(machine_run.kdf, shown))
    yield from titled(LEGENDS["inplace"], inplace_table(machine_run.inplace, s.project_size, shown))
    if not machine_run.results:
        return
    ceilings = from_wire(machine_run.ceilings)
    details = detail_table(machine_run.results, {cipher: c.mb_per_s for cipher, c in ceilings.items()})
    if details:
        yield "line", "", ""
        yield "line", "", details
        yield "line", "", LEGENDS["details"]
        for ceiling in ceilings.values():
            yield "line", "", f"cipher ceiling: {ceiling.describe()}"
        if interrupted:
            yield "line", "", "cipher ceiling: not measured: the run was interrupted (eff. empty)"
        elif not ceilings:
            yield (
                "line",
                "",
                "cipher ceiling: no backend here names a cipher this run can measure (eff. empty)",
            )
        yield "line", "", f"kernel xts(aes) driver: {machine_run.xts_driver}"
    yield from titled(LEGENDS["lifecycle"], lifecycle_table(machine_run.lifecycle, shown))
    lines = ladder_lines(machine_run.ladder)
    if lines:
        yield "line", "", ""
        yield "line", "bold", lines[0]
        for line in lines[1:]:
            yield "line", "", line
    for ranking in rankings(machine_run):
        yield "line", "", ""
        title, *rest = sweep_report(ranking)
        yield "line", "bold", title
        for line in rest:
            yield "line", "", line


def titled(title: str, table: str) -> Iterator[Line]:
    """A table of the summary after a blank line and its title; nothing when it is empty."""
    if table:
        yield "line", "", ""
        yield "line", "", title
        yield "line", "", table


def verdicts(found: Iterable[Verdict]) -> Iterator[Line]:
    """Each machine's verdict (verdict.verdict_report), its sections as separator lines."""
    for verdict in found:
        for kind, colour, line in verdict_report(verdict):
            yield ("-", "", line) if kind == "section" else ("line", colour, line)
