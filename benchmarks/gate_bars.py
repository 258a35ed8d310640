"""The gate on real runs and in simulation (a script, not a timed test).

    python benchmarks/gate_bars.py aa [--backends gocryptfs --runs 5 --fail 10%] [--hog START:SECONDS]
    python benchmarks/gate_bars.py quota [--backends gocryptfs --runs 3 --cpus 0.5]
    (both also: [--strict] [--compare REF] [--save NAME] [--rounds N])
    python benchmarks/gate_bars.py replay --storage DIR --compare N [--fail 10%] [--strict] [--noise FILE]
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
``--compare REF`` compares with another saved run than the baseline (a run number: its history is
then every run saved before it, so ``--compare 3`` after ``--save aa`` runs judges against 3 saved
runs); ``--save NAME`` saves each checking run too (with ``--rounds 4``, a checking run's default,
as saving alone makes them 10); ``--strict`` passes ``--encperf-strict``. Each
run's line counts the verdict's outcomes (FAIL / pass / undecided) from its header.
``replay``: ``encperf compare`` of each saved run numbered after N against run N and its history
(the runs saved before it), offline: the same gate without confirmation rounds, which only a live
run can add; ``--noise FILE`` gives it a prior of this runner's (benchmarks/noise.py writes one).
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
PART = re.compile(r"(\d+) (regressions?|within threshold|undecided)")
CGROUP_NAME = f"encperf-gate-bars-{os.getpid()}"


def benchmark_command(backends: str, directory: str, *options: str) -> list[str]:
    """The command line of one session of the shipped CrystalDiskMark benchmark."""
    return [
        sys.executable, "-m", "pytest", str(ROOT / "benchmarks" / "test_crystaldiskmark.py"), "-q",
        "-p", "no:cacheprovider", f"--encperf-backends={backends}", f"--encperf-dir={directory}", *options,
    ]  # fmt: skip


def pytest_run(
    args: argparse.Namespace, *options: str, enter: Callable[[], None] | None = None
) -> tuple[int, str, float]:
    """One benchmark session; (exit status, verdict header, seconds)."""
    command = benchmark_command(args.backends, args.dir, f"--encperf-storage={args.storage}", *options)
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
    print(f"baseline saved in {seconds:.0f} s (exit {status})", flush=True)


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


def checking_runs(args: argparse.Namespace, enter: Callable[[], None] | None = None) -> list[tuple[int, int]]:
    """(exit status, checks that FAILed) of each checking run."""
    statuses = []
    for index in range(1, args.runs + 1):
        hog = Hog(*args.hog) if args.hog else None
        if hog:
            hog.begin()
        try:
            options = [f"--encperf-compare={args.compare}", f"--encperf-fail={args.fail}"]
            options += [f"--encperf-save={args.save}"] if args.save else []
            options += [f"--encperf-rounds={args.rounds}"] if args.rounds else []
            options += ["--encperf-strict"] if args.strict else []
            status, header, seconds = pytest_run(args, *options, enter=enter)
        finally:
            if hog:
                hog.end()
        tally = outcome_counts(header)
        statuses.append((status, int(tally.split()[1])))
        print(f"run {index}: exit {status}, {seconds:.0f} s, {tally}: {header}", flush=True)
    return statuses


def replay(args: argparse.Namespace) -> None:
    """Each saved run after ``--compare`` (a number) judged against it, offline."""
    listing = subprocess.run(
        [sys.executable, "-m", "pytest_encperf.cli", "--storage", str(args.storage), "list"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    numbers = sorted(int(n) for n in re.findall(r"^\s+(\d+)_", listing, re.M))
    later = [n for n in numbers if n > int(args.compare)]
    tallies = []
    for number in later:
        command = [
            sys.executable, "-m", "pytest_encperf.cli", "--storage", str(args.storage), "compare",
            args.compare, str(number), f"--fail={args.fail}", *(["--strict"] if args.strict else []),
            *([f"--noise={args.noise}"] if args.noise else []),
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
        match = HEADER.search(proc.stdout)
        header = match.group(0) if match else f"(no verdict: {(proc.stdout + proc.stderr)[-300:]!r})"
        tallies.append(outcome_counts(header))
        print(f"run {number} vs {args.compare}: exit {proc.returncode}, {tallies[-1]}: {header}", flush=True)
    print(f"{len(later)} runs judged against run {args.compare} and the runs saved before it")


def outcome_counts(header: str) -> str:
    """``FAIL 0 / pass 14 / undecided 2`` from the verdict's header (every kind of undecided summed)."""
    counts = {"regression": 0, "within threshold": 0, "undecided": 0}
    for number, kind in PART.findall(header):
        counts[kind.rstrip("s") if kind.startswith("regression") else kind] += int(number)
    fail, passed, undecided = counts.values()
    return f"FAIL {fail} / pass {passed} / undecided {undecided}"


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
    parser.add_argument("mode", choices=("aa", "quota", "replay", "simulate"))
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
    parser.add_argument("--compare", default="gate-bars", help="the saved run to check against")
    parser.add_argument("--save", default=None, help="save each checking run under this name")
    parser.add_argument("--strict", action="store_true", help="pass --encperf-strict")
    parser.add_argument(
        "--rounds", type=int, default=None, help="checking runs' rounds (--save alone makes them 10)"
    )
    parser.add_argument("--noise", type=Path, default=None, help="replay: the between-run prior to use")
    parser.add_argument("--storage", type=Path, default=None, help="saved runs (default: a new temp dir)")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("ENCPERF_DIR", "/var/tmp")))
    args = parser.parse_args()
    if args.mode == "simulate":
        simulate(args)
        return 0
    if args.runs is None:
        args.runs = 5 if args.mode == "aa" else 3

    if args.mode == "replay":
        replay(args)
        return 0
    args.storage = (args.storage or Path(tempfile.mkdtemp(prefix="gate-bars-"))).resolve()
    print(f"{args.mode}: {args.backends} vs plain, --encperf-fail={args.fail}, storage {args.storage}")
    ensure_baseline(args)
    if args.mode == "aa":
        runs = checking_runs(args)
        print(f"runs with a FAIL (false alarms): {sum(fails > 0 for _, fails in runs)} of {len(runs)}")
    else:
        quota = CpuQuota(args.cpus)
        try:
            runs = checking_runs(args, quota.enter)
        finally:
            quota.remove()
        caught = sum(fails > 0 for _, fails in runs)
        print(f"runs with a FAIL under a {args.cpus:g}-CPU quota (caught): {caught} of {len(runs)}")
    print(f"runs with exit 7: {sum(s == 7 for s, _ in runs)} (with --strict an undecided check exits 7 too)")
    return no_verdict([status for status, _ in runs])


def no_verdict(statuses: list[int]) -> int:
    """1 when a run gave no verdict (a usage error, a crash): the counts above then say nothing."""
    broken = [s for s in statuses if s not in (0, 7)]
    if broken:
        codes = sorted(set(broken))
        print(f"{len(broken)} of {len(statuses)} runs gave no verdict (exit {codes}): see their logs")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
