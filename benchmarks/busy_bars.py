"""The busy-machine bar (issue 25), measured (a script, not a timed test).

    python benchmarks/busy_bars.py [--backend gocryptfs --size 64MiB --runtime 1.5 --rounds 3 --passes 2]
                                   [--threshold 0.25]

plain vs ``--backend``, the CrystalDiskMark workloads, ``--passes`` times over, each round
metered as a session meters it (load.LoadMeter). A CPU hog of one core (a busy loop in a
process outside this one's tree) starts when half of the workloads are done and stops when
three quarters are. Prints the share of the rounds measured while the hog ran that were flagged
busy (goal: >= 95%) and the share of the other rounds (goal: <= 5%), with what others took in
each. Rounds that overlap the hog's start or stop are counted apart. Holds the machine's
measurement lock around each workload, as a session does. Needs root (loop devices, FUSE).
``--threshold`` is --encperf-busy-threshold's (cores; the default's, BUSY_SHARE, unless given),
to try another on a machine whose background differs from the one the default was chosen on.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from pytest_encperf import host
from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.engines import select_engine
from pytest_encperf.load import BUSY_SHARE, LoadMeter
from pytest_encperf.model import Measurement, Result
from pytest_encperf.mountedvolume import close_volume, open_volume
from pytest_encperf.optionparsers import parse_busy_threshold, parse_size
from pytest_encperf.roundplan import RoundPlan
from pytest_encperf.runner import Runner
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import CDM

HOG = "while True: pass"


@contextlib.contextmanager
def hog() -> Iterator[tuple[float, psutil.Process]]:
    """A busy loop of one core in a process outside this one's tree (its shell parent exits, so
    init adopts it), as another user's job would be; yields (start time, process), killed after."""
    shell = subprocess.run(
        ["sh", "-c", f'{sys.executable} -c "{HOG}" >/dev/null 2>&1 & echo $!'],
        capture_output=True,
        text=True,
        check=True,
    )
    process = psutil.Process(int(shell.stdout.strip()))
    try:
        yield time.time(), process
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()  # psutil checks the process is still the one it started as
            process.wait(5)


def classify(rounds: list[Measurement], spans: list[tuple[float, float]]) -> dict[str, list[Measurement]]:
    """Rounds wholly inside a hog span, wholly outside every span, and overlapping one."""
    found: dict[str, list[Measurement]] = {"hog": [], "other": [], "edge": []}
    for m in rounds:
        assert m.started is not None and m.ended is not None
        inside = any(start <= m.started and m.ended <= stop for start, stop in spans)
        outside = all(m.ended <= start or m.started >= stop for start, stop in spans)
        found["hog" if inside else "other" if outside else "edge"].append(m)
    return found


def describe(name: str, rounds: list[Measurement]) -> str:
    if not rounds:
        return f"{name}: no rounds"
    flagged = sum(m.busy for m in rounds)
    shares = sorted((m.others_cpu_s or 0.0) / max(m.seconds, m.span or 0.0) for m in rounds if m.seconds)
    return (
        f"{name}: {flagged}/{len(rounds)} flagged busy ({flagged / len(rounds):.0%}); others' share of a "
        f"core min {shares[0]:.2f}, median {statistics.median(shares):.2f}, max {shares[-1]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--backend", default="gocryptfs")
    parser.add_argument("--size", type=parse_size, default=parse_size("64MiB"))
    parser.add_argument("--runtime", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=2, help="times over the CrystalDiskMark workloads")
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--threshold", type=parse_busy_threshold, default=BUSY_SHARE, help="cores, or off")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    target = Target("container", Path(args.dir), container_size(args.size))
    engine = select_engine(args.engine)
    meter = LoadMeter(threshold=args.threshold)
    todo = [w for _ in range(args.passes) for w in CDM]
    start_at, stop_at = len(todo) // 2, 3 * len(todo) // 4
    results: list[Result] = []
    spans: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="encperf-busy-", dir=args.dir) as tmp:
        run_dir = Path(tmp)
        plain = open_volume(make_backend(BackendSpec("plain")), target, run_dir / "plain")
        try:
            volume = open_volume(make_backend(BackendSpec.parse(args.backend)), target, run_dir / "volume")
            try:
                runner = Runner(
                    engine, volume, plain, RoundPlan(args.size, args.runtime, args.rounds, 1), results.append,
                    meter=meter, lock=lambda: host.measurement_lock(None),
                    between_measurements=lambda: host.measurement_lock(None, shared=True),
                )  # fmt: skip
                with contextlib.ExitStack() as stack:
                    for index, workload in enumerate(todo):
                        if index == start_at:
                            started, _ = stack.enter_context(hog())
                        if index == stop_at:
                            stack.close()
                            spans.append((started, time.time()))
                        runner.run(workload)
                        last = results[-1]
                        print(
                            f"{index + 1:2}/{len(todo)} {workload.name:20} {last.change_percent or 0:+6.1f}% "
                            f"busy rounds {last.busy_rounds}/{2 * len(last.rounds)}",
                            flush=True,
                        )
            finally:
                close_volume(volume)
        finally:
            close_volume(plain)
    rounds = [m for r in results for m in (*r.rounds, *r.baseline_rounds)]
    found = classify(rounds, spans)
    print(
        f"\nplain vs {args.backend}, {engine.name}, {args.size >> 20} MiB, {args.runtime:g} s rounds, "
        f"{args.rounds} per side, {args.passes} passes over CDM; "
        f"busy above {args.threshold or 0:g} of a core (0: off); "
        f"hog from workload {start_at + 1} to {stop_at} ({spans[0][1] - spans[0][0]:.0f} s)"
    )
    print(describe("rounds while the hog ran (goal >= 95% busy)", found["hog"]))
    print(describe("rounds without the hog (goal <= 5% busy)", found["other"]))
    print(describe("rounds across the hog's start or stop", found["edge"]))


if __name__ == "__main__":
    main()
