"""The gate on real runs and in simulation (a script, not a timed test).

    python benchmarks/gate_bars.py aa [--backends gocryptfs --runs 5 --fail 10%] [--hog START:SECONDS]
    python benchmarks/gate_bars.py quota [--backends gocryptfs --runs 3 --cpus 0.5]
    python benchmarks/gate_bars.py simulate [--runs 1000]

Both save a baseline first (the default way: 10 rounds per workload) unless ``--storage`` already
holds one, then run ``pytest benchmarks/test_crystaldiskmark.py`` ``--runs`` times with
``--encperf-fail`` against it and print, per run, its exit status, the verdict's header line and
its wall time. ``aa`` changes nothing between the runs (every failure is a false alarm);
``--hog START:SECONDS`` starts a busy loop of one core (a process outside the run's tree, as another
user's job) START seconds into each checking run and stops it SECONDS later (issue 25's busy A/A runs).
``quota`` runs each checking run in a cgroup limited to ``--cpus`` CPUs (cgroup v2 ``cpu.max``,
or v1 ``cpu.cfs_quota_us``): a FUSE backend's crypto runs in its daemon inside that cgroup and
slows down, plain's I/O barely does. Needs root; every run tears down what it made.
``simulate``: the test suite's simulated gate (tests/helpers/simulation.py) under other assumptions than
the suite's: more run-level noise, a history of saved runs, one slowed workload instead of all.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = re.compile(r"^encperf: (\d+ regressions?.*|nothing was checked.*)$", re.M)
CGROUP_NAME = f"encperf-gate-bars-{os.getpid()}"


def pytest_run(
    args: argparse.Namespace, *options: str, enter: Callable[[], None] | None = None
) -> tuple[int, str, float]:
    """One benchmark session; (exit status, verdict header, seconds)."""
    command = [
        sys.executable, "-m", "pytest", str(ROOT / "benchmarks" / "test_crystaldiskmark.py"), "-q",
        "-p", "no:cacheprovider", f"--encperf-backends={args.backends}", f"--encperf-storage={args.storage}",
        f"--encperf-dir={args.dir}", *options,
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, preexec_fn=enter, check=False)
    seconds = time.monotonic() - started
    (args.storage / "logs").mkdir(parents=True, exist_ok=True)
    log = args.storage / "logs" / f"run-{int(time.time())}-{proc.returncode}.log"
    log.write_text(proc.stdout + proc.stderr)
    match = HEADER.search(proc.stdout)
    header = match.group(0) if match else f"(no verdict; see {log})"
    busy = proc.stdout.count("machine busy")
    return proc.returncode, f"{header} [lines naming 'machine busy': {busy}; log {log.name}]", seconds


class Hog:
    """A busy loop of one core from ``start`` seconds after ``begin()`` for ``seconds``, in a process
    outside this one's tree (its shell parent exits, so init adopts it); ``end()`` stops it early."""

    def __init__(self, start: float, seconds: float) -> None:
        self.start, self.seconds = start, seconds
        self.pid: int | None = None
        self.timers: list[threading.Timer] = []

    def begin(self) -> None:
        self.timers = [
            threading.Timer(self.start, self._spawn),
            threading.Timer(self.start + self.seconds, self.end),
        ]
        for timer in self.timers:
            timer.start()

    def _spawn(self) -> None:
        shell = subprocess.run(
            ["sh", "-c", f'{sys.executable} -c "while True: pass" >/dev/null 2>&1 & echo $!'],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        self.pid = int(shell.stdout.strip())

    def end(self) -> None:
        for timer in self.timers:
            timer.cancel()
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.pid = None


def ensure_baseline(args: argparse.Namespace) -> None:
    if list(args.storage.glob("*/*_gate-bars.json")):
        return
    status, _, seconds = pytest_run(args, "--encperf-save=gate-bars")
    print(f"baseline saved in {seconds:.0f} s (exit {status})")


class CpuQuota:
    """A cgroup limited to ``cpus`` CPUs; ``enter`` moves the calling process into it."""

    def __init__(self, cpus: float) -> None:
        period = 100_000
        quota = int(cpus * period)
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        if v2.exists():
            self.path = Path("/sys/fs/cgroup") / CGROUP_NAME
            self.path.mkdir()
            (self.path / "cpu.max").write_text(f"{quota} {period}\n")
            self.procs = self.path / "cgroup.procs"
        else:
            self.path = Path("/sys/fs/cgroup/cpu") / CGROUP_NAME
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(f"{period}\n")
            (self.path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
            self.procs = self.path / "tasks"

    def enter(self) -> None:
        self.procs.write_text(f"{os.getpid()}\n")

    def remove(self) -> None:
        self.path.rmdir()  # empty again: every process of the run has exited


def checking_runs(args: argparse.Namespace, enter: Callable[[], None] | None = None) -> list[int]:
    statuses = []
    for index in range(1, args.runs + 1):
        hog = Hog(*args.hog) if args.hog else None
        if hog:
            hog.begin()
        try:
            status, header, seconds = pytest_run(
                args, "--encperf-compare=gate-bars", f"--encperf-fail={args.fail}", enter=enter
            )
        finally:
            if hog:
                hog.end()
        statuses.append(status)
        print(f"run {index}: exit {status}, {seconds:.0f} s: {header}")
    return statuses


def simulate(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.simulation import NoiseModel, Scenario, failure_rate

    one = (CDM_FIRST,)
    cases = [
        (f"unchanged, run-level sd {sd:.0%}, {saved} saved run(s)", Scenario(saved=saved), sd)
        for sd in (0.02, 0.03, 0.04)
        for saved in (1, 3, 5)
    ] + [
        (f"{1 - slow:.0%} slower, {what}, {saved} saved run(s)", Scenario(slow, workloads, saved), 0.02)
        for slow in (0.8, 0.85)
        for what, workloads in (("every workload", Scenario().workloads), ("one workload", one))
        for saved in (1, 3)
    ]
    for seed, (label, scenario, sd) in enumerate(cases):
        rates = failure_rate(seed, args.runs or 1000, scenario, NoiseModel(encrypted_run=sd))
        print(f"{label:55} failed in {rates.failed:6.1%} of runs, confirmation {rates.mean_spent:4.1f} s")


CDM_FIRST = "SEQ1M-Q8T1-read"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("aa", "quota", "simulate"))
    parser.add_argument("--backends", default="gocryptfs")
    parser.add_argument("--runs", type=int, default=None, help="checking runs (aa: 5, quota: 3)")
    parser.add_argument("--fail", default="10%")
    parser.add_argument(
        "--hog",
        type=lambda text: tuple(float(part) for part in text.split(":", 1)),
        default=None,
        help="aa: START:SECONDS, a one-core busy loop during each checking run",
    )
    parser.add_argument("--cpus", type=float, default=0.5, help="quota: CPUs the checking runs get")
    parser.add_argument("--storage", type=Path, default=None, help="saved runs (default: a new temp dir)")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("ENCPERF_DIR", "/var/tmp")))
    args = parser.parse_args()
    if args.mode == "simulate":
        simulate(args)
        return 0
    if args.runs is None:
        args.runs = 5 if args.mode == "aa" else 3

    args.storage = (args.storage or Path(tempfile.mkdtemp(prefix="gate-bars-"))).resolve()
    print(f"{args.mode}: {args.backends} vs plain, --encperf-fail={args.fail}, storage {args.storage}")
    ensure_baseline(args)
    if args.mode == "aa":
        statuses = checking_runs(args)
        print(f"false failures: {sum(s == 7 for s in statuses)} of {len(statuses)}")
    else:
        quota = CpuQuota(args.cpus)
        try:
            statuses = checking_runs(args, quota.enter)
        finally:
            quota.remove()
        print(f"caught under a {args.cpus:g}-CPU quota: {sum(s == 7 for s in statuses)} of {len(statuses)}")
    return no_verdict(statuses)


def no_verdict(statuses: list[int]) -> int:
    """1 when a run gave no verdict (a usage error, a crash): the counts above then say nothing."""
    broken = [s for s in statuses if s not in (0, 7)]
    if broken:
        codes = sorted(set(broken))
        print(f"{len(broken)} of {len(statuses)} runs gave no verdict (exit {codes}): see their logs")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
