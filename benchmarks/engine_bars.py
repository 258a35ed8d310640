"""The issue's performance bars, measured side by side (a script, not a timed test).

    python benchmarks/engine_bars.py engines [--size 256MiB --runtime 3 --repeats 3]
    python benchmarks/engine_bars.py overhead [--engine auto --repeats 3]
    python benchmarks/engine_bars.py agreement [--size 256MiB --runtime 3 --repeats 3 --rounds 3]

``engines``: on one plain container, native vs fio alternating (native, fio, native, fio ...)
for SEQ1M Q8T1 read/write (MB/s) and RND4K Q32T1 read/write (IOPS); prints native/fio.
``overhead``: the plain-vs-fscrypt sequential overheads, repeated, to see how far they spread.
``agreement``: every CrystalDiskMark workload with both engines, alternating (fio, native, then
native, fio ...), on a direct backend (plain vs qemu-luks) and a buffered one (plain vs gocryptfs);
prints each engine's overhead vs plain (median of the repeats; a repeat with a busy round marked *),
the difference in points and the busy flags (rounds measured while processes outside the run used
the CPU, load.py) of each engine;
then, over the repeats (each one's mean log ratio of its pairs), each engine's overhead with its 95%
interval and whether the engines differ beyond their intervals (a Welch test, engines_apart).
The goal on the development machine is every workload within 5 points on both backends, and on a
busy machine (``--hog``: a busy loop of one core beside the run) every cell more than 5 points
apart flagged busy.
Needs root (loop devices); everything made is torn down at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import signal
import statistics
import sys
import tempfile
from pathlib import Path

from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.engines import select_engine
from pytest_encperf.engines.fio import FioEngine
from pytest_encperf.engines.native import NativeEngine
from pytest_encperf.load import LoadMeter
from pytest_encperf.model import Result
from pytest_encperf.mountedvolume import close_volume, open_volume
from pytest_encperf.optionparsers import parse_size
from pytest_encperf.roundplan import RoundPlan
from pytest_encperf.runner import Runner, io_mode_policy
from pytest_encperf.stats import mean_interval, t_ppf
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import CDM

sys.path.insert(0, str(Path(__file__).parent))
from busy_bars import hog  # the busy loop outside this process's tree


def engines(args: argparse.Namespace, target: Target, run_dir: Path) -> None:
    plain = open_volume(make_backend(BackendSpec("plain")), target, run_dir / "plain")
    try:
        native, fio = NativeEngine(kernel_queues=args.aio == "on"), FioEngine()
        path = native.prepare(plain.data_dir, args.size)
        direct, mode = io_mode_policy(native, path, path)
        print(
            f"plain container, {args.size >> 20} MiB file, O_DIRECT: {mode}, fio {fio.version()}, "
            f"native with kernel queues (AIO, io_uring): {args.aio}"
        )
        observe = plain.observe()
        picks = [w for w in CDM if w.label in ("SEQ1M Q8T1", "RND4K Q32T1")]
        for workload in picks:
            values: dict[str, list[float]] = {"native": [], "fio": []}
            request_kib: dict[str, list[float]] = {"native": [], "fio": []}
            metric = "iops" if workload.reports_iops else "mb_per_s"
            direction = "read" if workload.is_read else "write"
            for engine in (native, fio):  # warm-up, discarded
                engine.run(workload, path, runtime=1, direct=direct, observe=observe)
            for _ in range(args.repeats):
                for engine in (native, fio):
                    m = engine.run(workload, path, runtime=args.runtime, direct=direct, observe=observe)
                    values[engine.name].append(getattr(m, metric))
                    moved = getattr(m, f"physical_{direction}_bytes")
                    requests = getattr(m, f"physical_{direction}_requests")
                    if moved and requests:  # the size the I/O reached the loop device at
                        request_kib[engine.name].append(moved / requests / 1024)
            n, f = statistics.median(values["native"]), statistics.median(values["fio"])
            print(
                f"{workload.name:22} {metric:8} native {n:10.1f}  fio {f:10.1f}  native/fio {n / f:6.1%}"
                f"   rounds native {[round(v) for v in values['native']]}"
                f" fio {[round(v) for v in values['fio']]}"
                f"   KiB/request native {[round(v) for v in request_kib['native']]}"
                f" fio {[round(v) for v in request_kib['fio']]}"
            )
    finally:
        close_volume(plain)


def overhead(args: argparse.Namespace, target: Target, run_dir: Path) -> None:
    engine = select_engine(args.engine)
    plain = open_volume(make_backend(BackendSpec("plain")), target, run_dir / "plain")
    try:
        fscrypt = open_volume(make_backend(BackendSpec("fscrypt")), target, run_dir / "fscrypt")
        try:
            sequential = [w for w in CDM if not w.is_random]
            table: dict[str, list[float]] = {w.name: [] for w in sequential}
            for repeat in range(args.repeats):
                results: list[Result] = []
                plan = RoundPlan(args.size, args.runtime, 3, 1)
                runner = Runner(engine, fscrypt, plain, plan, results.append)
                for workload in sequential:
                    runner.run(workload)
                for result in results:
                    table[result.workload.name].append(result.change_percent or 0.0)
                print(
                    f"repeat {repeat + 1}: "
                    + ", ".join(f"{r.workload.name} {r.change_percent:+.1f}%" for r in results)
                )
            print(f"engine {engine.name}: spread of the overhead (max - min) in percentage points")
            for name, changes in table.items():
                print(
                    f"  {name:20} {[round(c, 1) for c in changes]} spread {max(changes) - min(changes):.1f}"
                )
        finally:
            close_volume(fscrypt)
    finally:
        close_volume(plain)


AGREEMENT_BACKENDS = ("qemu-luks", "gocryptfs")  # a direct stack and a buffered (FUSE) one
AGREEMENT_GOAL_POINTS = 5.0


def pooled(logs: list[float]) -> str:
    """An engine's overhead over its repeats (their mean log ratios): mean, 95% t interval."""
    found = mean_interval(logs)
    if found is None:
        return "-"
    change = [(math.exp(x) - 1) * 100 for x in (found.estimate, found.low, found.high)]
    return f"{change[0]:+.1f}% [{change[1]:+.1f}..{change[2]:+.1f}]"


def engines_apart(fio_logs: list[float], native_logs: list[float]) -> tuple[float, bool] | None:
    """The difference of the engines' pooled overheads (points, at plain's speed) and whether it
    is real: its 95% Welch interval (each engine's repeats as independent samples) excludes 0.
    None with fewer than two repeats on a side."""
    if len(fio_logs) < 2 or len(native_logs) < 2:
        return None
    means = [statistics.fmean(v) for v in (fio_logs, native_logs)]
    errors = [statistics.variance(v) / len(v) for v in (fio_logs, native_logs)]
    error = math.sqrt(sum(errors))
    sides = zip(errors, (fio_logs, native_logs), strict=True)
    df = sum(errors) ** 2 / sum(e**2 / (len(v) - 1) for e, v in sides)  # Welch-Satterthwaite
    points = (math.exp(means[1]) - math.exp(means[0])) * 100
    real = error > 0 and abs(means[1] - means[0]) > t_ppf(0.975, max(df, 1.0)) * error
    return points, real


def busy_share(busy_rounds: int, rounds: int) -> str:
    """What a listed cell's busy flag rests on: the cell is flagged busy with a single busy round,
    and one round in 64 cannot move its medians as most of them can."""
    return f" (busy: {busy_rounds} of {rounds} rounds)" if busy_rounds else ""


def repeats_text(changes: list[float], busy: list[bool]) -> str:
    """A cell's repeats, each marked * where one of its rounds (either side) was busy."""
    return " ".join(f"{c:+.1f}{'*' if b else ''}" for c, b in zip(changes, busy, strict=True))


def cell_busy(busy: dict[tuple[str, str], list[int]], workload: str) -> tuple[int, int]:
    """(busy rounds, rounds) of a cell, over both engines and both sides."""
    fio, native = busy[(workload, "fio")], busy[(workload, "native")]
    return fio[0] + native[0], fio[1] + native[1]


def agreement(args: argparse.Namespace, target: Target, run_dir: Path) -> None:
    both = (FioEngine(), NativeEngine())
    workloads = [w for w in CDM if not args.only or w.name in args.only.split(",")]
    plain = open_volume(make_backend(BackendSpec("plain")), target, run_dir / "plain")
    worst = 0.0
    # cells more than the goal apart, and cells whose engines differ beyond their intervals:
    # (spec, workload, busy rounds, rounds) over both engines and sides
    apart: list[tuple[str, str, int, int]] = []
    disagree: list[tuple[str, str, int, int]] = []
    meter = LoadMeter()
    try:
        for spec in args.backends.split(","):
            volume = open_volume(make_backend(BackendSpec.parse(spec)), target, run_dir / spec)
            try:
                changes: dict[tuple[str, str], list[float]] = {}
                flagged: dict[tuple[str, str], int] = {}  # repeats whose cell is "cached below"
                busy: dict[tuple[str, str], list[int]] = {}  # (busy rounds, rounds) of both sides
                plain_values: dict[tuple[str, str], list[float]] = {}
                busy_repeats: dict[tuple[str, str], list[bool]] = {}  # a repeat with a busy round: *
                # per repeat, the mean log ratio of its pairs: a run's pairs share its level (the
                # volume, the machine's state), so the repeats, not the pairs, are the samples
                logs: dict[tuple[str, str], list[float]] = {}
                modes: set[str] = set()
                definitions: set[str] = set()  # a random read on a store below: its read-ahead limited
                for repeat in range(args.repeats):
                    order = both if repeat % 2 == 0 else both[::-1]
                    for workload in workloads:
                        for engine in order:
                            results: list[Result] = []
                            Runner(
                                engine, volume, plain, RoundPlan(args.size, args.runtime, args.rounds, 1),
                                results.append, meter=meter,
                            ).run(workload)  # fmt: skip
                            result = results[0]
                            modes.update(result.io_modes)
                            definitions.update(m.round_definition for m in result.rounds)
                            key = (workload.name, engine.name)
                            changes.setdefault(key, []).append(result.change_percent or 0.0)
                            busy_repeats.setdefault(key, []).append(result.busy_rounds > 0)
                            flagged[key] = flagged.get(key, 0) + result.cached_below
                            pairs = result.pair_log_ratios()
                            if pairs:
                                logs.setdefault(key, []).append(statistics.fmean(pairs))
                            counts = busy.setdefault(key, [0, 0])
                            counts[0] += result.busy_rounds
                            counts[1] += len(result.rounds) + len(result.baseline_rounds)
                            metric = result.primary_metric
                            plain_values.setdefault(key, []).append(
                                statistics.median(getattr(m, metric) for m in result.baseline_rounds)
                            )
                print(
                    f"\nplain vs {spec}, {args.size >> 20} MiB, {args.runtime:g} s rounds, {args.rounds} "
                    f"rounds per side, {args.repeats} repeats, engines alternating, "
                    f"I/O mode {'/'.join(sorted(modes))}, round definitions {', '.join(sorted(definitions))}"
                )
                print(
                    f"{'workload':22} {'fio overhead':>13} {'native overhead':>16} {'diff':>6}"
                    f"   {'plain fio / native':>20}   repeats fio | native   cached below fio/native"
                    "   busy fio | native"
                )
                for workload in workloads:
                    fio_changes, native_changes = (
                        changes[(workload.name, "fio")],
                        changes[(workload.name, "native")],
                    )
                    f, n = statistics.median(fio_changes), statistics.median(native_changes)
                    diff = abs(f - n)
                    worst = max(worst, diff)
                    busy_fio, busy_native = busy[(workload.name, "fio")], busy[(workload.name, "native")]
                    if diff > AGREEMENT_GOAL_POINTS:
                        apart.append((spec, workload.name, *cell_busy(busy, workload.name)))
                    plain_f = statistics.median(plain_values[(workload.name, "fio")])
                    plain_n = statistics.median(plain_values[(workload.name, "native")])
                    print(
                        f"{workload.name:22} {f:+12.1f}% {n:+15.1f}% {diff:6.1f}"
                        f"   {plain_f:9.0f} / {plain_n:<9.0f}"
                        f"   {repeats_text(fio_changes, busy_repeats[(workload.name, 'fio')])} | "
                        f"{repeats_text(native_changes, busy_repeats[(workload.name, 'native')])}"
                        f"   {flagged[(workload.name, 'fio')]}/{flagged[(workload.name, 'native')]}"
                        f"   busy {busy_fio[0]}/{busy_fio[1]} | busy {busy_native[0]}/{busy_native[1]}"
                    )
                print(
                    "over the repeats (each the mean log ratio of its A B B A pairs): each engine's "
                    "overhead [95% interval], their difference (native - fio, points) and whether "
                    "it is real (its 95% Welch interval excludes 0)"
                )
                for workload in workloads:
                    fio_logs = logs.get((workload.name, "fio"), [])
                    native_logs = logs.get((workload.name, "native"), [])
                    found = engines_apart(fio_logs, native_logs)
                    if found is not None and found[1]:
                        disagree.append((spec, workload.name, *cell_busy(busy, workload.name)))
                    said = "-"
                    if found is not None:
                        said = f"{found[0]:+5.1f}  {'REAL' if found[1] else 'within the intervals'}"
                    print(
                        f"{workload.name:22} fio {pooled(fio_logs):26} native {pooled(native_logs):26} "
                        f"{len(fio_logs)}/{len(native_logs)} repeats  {said}"
                    )
            finally:
                close_volume(volume)
    finally:
        close_volume(plain)
    verdict = "within" if worst <= AGREEMENT_GOAL_POINTS else "NOT within"
    print(f"\nlargest difference {worst:.1f} points: {verdict} the goal of {AGREEMENT_GOAL_POINTS:g} points")
    flagged_apart = sum(busy_rounds > 0 for _, _, busy_rounds, _ in apart)
    print(
        f"cells more than {AGREEMENT_GOAL_POINTS:g} points apart: {len(apart)}, flagged busy: {flagged_apart}"
        + "".join(f"\n  {spec} {name}{busy_share(*counts)}" for spec, name, *counts in apart)
    )
    print(
        f"cells whose engines differ beyond their intervals: {len(disagree)}, flagged busy: "
        f"{sum(busy_rounds > 0 for _, _, busy_rounds, _ in disagree)}"
        + "".join(f"\n  {spec} {name}{busy_share(*counts)}" for spec, name, *counts in disagree)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("engines", "overhead", "agreement"))
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--size", type=parse_size, default=parse_size("256MiB"))
    parser.add_argument("--runtime", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--rounds", type=int, default=3, help="agreement: rounds per side and engine")
    parser.add_argument("--only", default="", help="agreement: these workloads (names, comma list)")
    parser.add_argument("--backends", default=",".join(AGREEMENT_BACKENDS), help="agreement: backend specs")
    parser.add_argument(
        "--aio", choices=("on", "off"), default="on", help="native engine: AIO and io_uring (off: threads)"
    )
    parser.add_argument("--hog", action="store_true", help="a busy loop of one core beside the whole run")
    args = parser.parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):  # each table as it is measured, even into a file
        sys.stdout.reconfigure(line_buffering=True)
    # SIGTERM (a killed run) unwinds like Ctrl-C, so every volume made is torn down
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    target = Target("container", Path(args.dir), container_size(args.size))
    with contextlib.ExitStack() as stack:
        if args.hog:
            stack.enter_context(hog())
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="encperf-bars-", dir=args.dir))
        {"engines": engines, "overhead": overhead, "agreement": agreement}[args.what](args, target, Path(tmp))


if __name__ == "__main__":
    main()
