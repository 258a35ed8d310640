"""The quiet-wait bar (issue 25), measured (a script, not a timed test).

    python benchmarks/quietwait_bars.py [--backends gocryptfs --wait 120 --hog 25:60 --storage DIR]
                                        [--name quiet-wait-hog --reuse]

Runs ``pytest benchmarks/test_crystaldiskmark.py`` three times with the same settings, one after
the other: a quiet run (the reference), a second quiet run (the control: how far two quiet runs
differ by themselves), and a run with ``--encperf-quiet-wait=--wait`` beside a busy loop of one core
(a process outside the run's tree, as another user's job) that starts ``START`` seconds into the run
and stops ``SECONDS`` later. For every cell (backend x workload) it prints each run's overhead
against plain with its 95% interval (``extra_info.overhead_interval``), the quiet wait and the busy
rounds, and counts the cells whose overhead lies within the reference's interval. The goal: the
quiet-wait run's cells within the reference's interval as often as the control's are. Both intervals
are within one run; ``apart`` also counts the cells whose two runs differ by less than the two
half-widths combined (sqrt(h1^2 + h2^2)), the test of a difference between two runs.
``--reuse`` takes the quiet run and the control from ``--storage`` where an earlier call left them
(another hog, same quiet runs); ``--name`` names the third run's report.
Needs root (loop devices, FUSE); each run tears down what it made.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gate_bars import Hog, benchmark_command

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Cell:
    estimate: float
    low: float
    high: float
    half_width: float
    busy_rounds: int
    quiet_wait: float

    def holds(self, estimate: float) -> bool:
        return self.low <= estimate <= self.high

    def agrees_with(self, other: Cell) -> bool:
        return abs(self.estimate - other.estimate) <= math.hypot(self.half_width, other.half_width)


def cells(path: Path) -> dict[str, Cell]:
    found = {}
    for entry in json.loads(path.read_text())["benchmarks"]:
        info = entry["extra_info"]
        interval = info.get("overhead_interval")
        if entry["params"]["backend"] == "plain" or not interval:
            continue
        found[f"{entry['params']['backend']} {entry['params']['workload']}"] = Cell(
            estimate=interval["estimate"],
            low=interval["low"],
            high=interval["high"],
            half_width=interval["half_width"],
            busy_rounds=info.get("busy_rounds") or 0,
            quiet_wait=float(info["encperf"].get("quiet_wait") or 0.0),
        )
    return found


def run(args: argparse.Namespace, name: str, *options: str, hog: Hog | None = None) -> dict[str, Cell]:
    report = args.storage / f"{name}.json"
    if args.reuse and hog is None and report.exists():
        print(f"{name}: {report} (from an earlier call)", flush=True)
        return cells(report)
    command = benchmark_command(args.backends, args.dir, f"--encperf-json={report}", *options)
    started = time.monotonic()
    if hog:
        hog.begin()
    try:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    finally:
        if hog:
            hog.end()
    (args.storage / f"{name}.log").write_text(proc.stdout + proc.stderr)
    print(f"{name}: exit {proc.returncode} in {time.monotonic() - started:.0f} s", flush=True)
    if proc.returncode != 0 or not report.exists():
        sys.exit(f"{name} gave no report; see {args.storage / (name + '.log')}")
    return cells(report)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="gocryptfs")
    parser.add_argument("--wait", type=float, default=120.0, help="--encperf-quiet-wait, seconds")
    parser.add_argument("--hog", default="25:60", help="START:SECONDS of the busy loop in the third run")
    parser.add_argument("--storage", type=Path, default=None, help="where the reports and logs go")
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--name", default="quiet-wait-hog", help="the third run's report name")
    parser.add_argument("--reuse", action="store_true", help="the quiet runs of an earlier call")
    args = parser.parse_args()
    args.storage = args.storage or Path(tempfile.mkdtemp(prefix="encperf-quietwait-bars-"))
    args.storage.mkdir(parents=True, exist_ok=True)
    start, seconds = (float(part) for part in args.hog.split(":"))
    reference = run(args, "quiet")
    control = run(args, "control")
    waited = run(args, args.name, f"--encperf-quiet-wait={args.wait:g}", hog=Hog(start, seconds))
    header = f"{'quiet (reference)':>24} {'control':>9} {'quiet-wait + hog':>17} {'waited s':>9} busy"
    print(f"\n{'cell':32} {header}")
    counts = {"control within": 0, "waited within": 0, "control apart-ok": 0, "waited apart-ok": 0}
    for name, ref in sorted(reference.items()):
        ctl, hogged = control.get(name), waited.get(name)
        if ctl is None or hogged is None:
            print(f"{name:32} missing from a run")
            continue
        counts["control within"] += ref.holds(ctl.estimate)
        counts["waited within"] += ref.holds(hogged.estimate)
        counts["control apart-ok"] += ref.agrees_with(ctl)
        counts["waited apart-ok"] += ref.agrees_with(hogged)
        print(
            f"{name:32} {ref.estimate:+7.1f} [{ref.low:+6.1f},{ref.high:+6.1f}] "
            f"{ctl.estimate:+8.1f}{'' if ref.holds(ctl.estimate) else '!'} "
            f"{hogged.estimate:+16.1f}{'' if ref.holds(hogged.estimate) else '!'} "
            f"{hogged.quiet_wait:9.1f} {ref.busy_rounds}/{ctl.busy_rounds}/{hogged.busy_rounds}"
        )
    total = len(reference)
    print(
        f"\ncells: {total}; within the reference's interval: control {counts['control within']}, "
        f"quiet-wait + hog {counts['waited within']}; two runs within their combined half-widths: "
        f"control {counts['control apart-ok']}, quiet-wait + hog {counts['waited apart-ok']}; "
        f"reports and logs in {args.storage}"
    )


if __name__ == "__main__":
    main()
