"""Was the machine busy during a round? What others took of the CPU (no pytest).

Three figures per round, each a delta between two samples of /proc:

- ``others_cpu_s``: CPU time (user + system) of every user-space process outside this run. This
  run is the pytest process (with xdist: the controller, whose children are the workers) and
  everything below it (fio, mkfs), plus the daemons the backends started (FUSE, qemu), which
  detach from it. Kernel threads (PF_KTHREAD, or children of kthreadd) are never "others": the
  crypto workers of dm-crypt and fscrypt (kcryptd, the fscrypt workqueues) do the encryption that
  is being measured. A process that exited during the round is counted through its parent's
  reaped-children time (cutime + cstime), as a shell's or make's children are.
- ``steal_s``: time the hypervisor gave the CPUs to other guests (/proc/stat, all CPUs).
- ``cpu_pressure_s``: the "some" CPU pressure stall time (/proc/pressure/cpu, PSI): how long at
  least one runnable task waited for a CPU. None where the kernel has no PSI.

A round is *busy* when others and steal together took more than the threshold of one core, on
average over the round (--encperf-busy-threshold, BUSY_SHARE by default; off: no round is busy,
the three figures are still recorded). What others took is bounded by the machine's count of every task's time
(/proc/stat user + nice + system) less this run's and the kernel threads'. Parsing is pure
(text in, numbers out) so the tests feed it scripted /proc text; ``LoadMeter`` reads the real
files.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

PF_KTHREAD = 0x00200000  # include/linux/sched.h: the task is a kernel thread
KTHREADD = 2  # the parent of every kernel thread
# A round is busy when processes outside this run (and steal) took more than this share of one
# core over it. Chosen on the development machine (2 cores, see docs/explanation/method.md): the
# quietest tenth of 1.5 s windows showed others at 0.00-0.11 of a core, every window beside one
# busy-loop process 1.38-1.99; a quarter of a core is above the one and far below the other.
BUSY_SHARE = 0.25
# --encperf-quiet-wait samples the others' share over windows of this many seconds
QUIET_WINDOW = 0.5
# The kernel counts a process's CPU time in clock ticks (10 ms): over a span of a few milliseconds
# one tick of one process looks like a whole core. A shorter span is judged as if it were this
# long, so only what others took beyond the threshold over this much time makes it busy.
SHORTEST_JUDGED = 0.5


@dataclass(frozen=True)
class ProcessTimes:
    """One process from /proc/PID/stat: its parent, kernel flags and CPU time in clock ticks."""

    pid: int
    ppid: int
    flags: int
    ticks: int  # utime + stime
    reaped_ticks: int  # cutime + cstime: children it has waited for
    start: int  # starttime (ticks after boot): tells a reused pid from the process before

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & PF_KTHREAD) or self.ppid == KTHREADD or self.pid == KTHREADD


def parse_pid_stat(text: str) -> ProcessTimes | None:
    """/proc/PID/stat; None when malformed. The command (field 2) may hold spaces and parentheses,
    so the fields are counted from its last ")"."""
    head, paren, rest = text.rpartition(")")
    if not paren or "(" not in head:
        return None
    fields = rest.split()
    try:
        pid = int(head.split("(", 1)[0])
        # rest starts at field 3 (state): ppid is field 4, flags 9, utime..cstime 14..17, start 22
        ppid, flags = int(fields[1]), int(fields[6])
        utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
        start = int(fields[19])
    except (ValueError, IndexError):
        return None
    return ProcessTimes(pid, ppid, flags, utime + stime, cutime + cstime, start)


def parse_steal_ticks(text: str) -> int | None:
    """The steal column (the 8th number) of /proc/stat's ``cpu`` line; None without it."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            with contextlib.suppress(ValueError, IndexError):
                return int(fields[8])
            return None
    return None


def parse_busy_ticks(text: str) -> int | None:
    """user + nice + system of /proc/stat's ``cpu`` line: CPU time every task used, those that
    ended too (interrupts, steal and idle apart); None without it."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            with contextlib.suppress(ValueError, IndexError):
                return int(fields[1]) + int(fields[2]) + int(fields[3])
            return None
    return None


def parse_pressure_total(text: str) -> int | None:
    """The ``some`` line's ``total=`` (microseconds) of /proc/pressure/cpu; None without it."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "some":
            for item in fields[1:]:
                key, _, value = item.partition("=")
                if key == "total":
                    with contextlib.suppress(ValueError):
                        return int(value)
    return None


@dataclass(frozen=True)
class Sample:
    """What /proc said at one moment."""

    at: float  # monotonic seconds
    processes: dict[int, ProcessTimes]
    steal_ticks: int | None
    pressure_us: int | None
    busy_ticks: int | None = None  # parse_busy_ticks: every task's CPU time, machine-wide


def descendants(processes: dict[int, ProcessTimes], roots: Iterable[int]) -> set[int]:
    """``roots`` and every process below them."""
    children: dict[int, list[int]] = {}
    for process in processes.values():
        children.setdefault(process.ppid, []).append(process.pid)
    found: set[int] = set()
    todo = [pid for pid in roots]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def others_ticks(before: Sample, after: Sample, own_roots: Iterable[int]) -> int:
    """CPU ticks that user-space processes outside the trees of ``own_roots`` used between the
    two samples (ticks_by_kind)."""
    return ticks_by_kind(before, after, own_roots)["others"]


def ticks_by_kind(before: Sample, after: Sample, own_roots: Iterable[int]) -> dict[str, int]:
    """CPU ticks used between the two samples by user-space processes outside the trees of
    ``own_roots`` ("others"), by those trees ("own") and by kernel threads ("kernel"): a process
    seen in both counts its growth, one started in between all of its time. A process that exited
    in between counts through its reaper (its parent, else init), whose reaped-children time grew
    by the whole life of it: less what it had used at the first sample, so that only the part in
    between is counted."""
    roots = list(own_roots)
    own = descendants(before.processes, roots) | descendants(after.processes, roots)

    def survives(pid: int) -> bool:
        then, now = before.processes.get(pid), after.processes.get(pid)
        return then is not None and now is not None and then.start == now.start

    def reaper(pid: int) -> int:  # the closest ancestor still alive: its reaped time holds ours
        seen: set[int] = set()
        while pid not in seen and not survives(pid):
            seen.add(pid)
            then = before.processes.get(pid)
            if then is None:
                return 1
            pid = then.ppid
        return pid if pid not in seen else 1

    counted_before: dict[int, int] = {}  # reaper -> ticks its exited descendants had used before
    for pid, earlier in before.processes.items():
        if pid in own or earlier.kernel_thread or survives(pid):
            continue
        into = reaper(earlier.ppid)
        counted_before[into] = counted_before.get(into, 0) + earlier.ticks + earlier.reaped_ticks
    totals = {"others": 0, "own": 0, "kernel": 0}
    for pid, now in after.processes.items():
        kind = "own" if pid in own else "kernel" if now.kernel_thread else "others"
        then = before.processes.get(pid)
        if then is None or then.start != now.start:  # new in the round (or a reused pid)
            totals[kind] += now.ticks + now.reaped_ticks
            continue
        reaped = max(0, now.reaped_ticks - then.reaped_ticks - counted_before.get(pid, 0))
        totals[kind] += max(0, now.ticks - then.ticks) + reaped
    return totals


@dataclass(frozen=True)
class Load:
    """What others took of the machine over one span of time (a round, or a quiet-wait window)."""

    seconds: float
    others_cpu_s: float
    steal_s: float | None
    cpu_pressure_s: float | None

    @property
    def share(self) -> float:
        """Others' CPU and steal, in cores, on average over the span."""
        taken = self.others_cpu_s + (self.steal_s or 0.0)
        return taken / self.seconds if self.seconds > 0 else 0.0

    def busy(self, threshold: float | None = BUSY_SHARE) -> bool:
        """Others took more than ``threshold`` cores over the span; never with the threshold off
        (None)."""
        if threshold is None:
            return False
        taken = self.others_cpu_s + (self.steal_s or 0.0)
        return taken > threshold * max(self.seconds, SHORTEST_JUDGED)


def load_between(before: Sample, after: Sample, own_roots: Iterable[int], hz: int) -> Load:
    """The Load between two samples, with ``hz`` clock ticks per second (USER_HZ)."""
    steal = pressure = None
    if before.steal_ticks is not None and after.steal_ticks is not None:
        steal = max(0, after.steal_ticks - before.steal_ticks) / hz
    if before.pressure_us is not None and after.pressure_us is not None:
        pressure = max(0, after.pressure_us - before.pressure_us) / 1e6
    ticks = ticks_by_kind(before, after, own_roots)
    others_ticks = ticks["others"]
    if before.busy_ticks is not None and after.busy_ticks is not None:
        # what every task used, less this run's and the kernel threads': a bound that no pid's
        # history can inflate (a reaper's grown reaped time, where its origin was not seen)
        rest = after.busy_ticks - before.busy_ticks - ticks["own"] - ticks["kernel"]
        others_ticks = min(others_ticks, max(0, rest))
    return Load(max(0.0, after.at - before.at), others_ticks / hz, steal, pressure)


def run_root() -> int:
    """The top of this run's process tree: the pytest process, or an xdist worker's controller
    (the parent of every worker)."""
    return os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:  # a process gone between listing and reading; no PSI in this kernel
        return None


class LoadMeter:
    """Samples /proc (``proc``) and tells the Load between two samples; this run's own tree is
    ``roots`` (run_root by default) plus the daemons given to ``between``. ``threshold``: the
    cores others may take before a round is busy, None for off."""

    def __init__(
        self,
        proc: Path = Path("/proc"),
        roots: tuple[int, ...] | None = None,
        clock: Callable[[], float] = time.monotonic,
        threshold: float | None = BUSY_SHARE,
    ) -> None:
        self.proc, self.clock, self.threshold = proc, clock, threshold
        self.roots = roots if roots is not None else (run_root(),)
        self.hz = os.sysconf("SC_CLK_TCK")

    def _pids(self) -> list[int]:
        if self.proc == Path("/proc"):
            return psutil.pids()
        return [int(entry.name) for entry in self.proc.iterdir() if entry.name.isdigit()]

    def sample(self) -> Sample:
        processes = {}
        for pid in self._pids():
            text = _read(self.proc / str(pid) / "stat")
            parsed = parse_pid_stat(text) if text else None
            if parsed is not None:
                processes[parsed.pid] = parsed
        stat, pressure = _read(self.proc / "stat"), _read(self.proc / "pressure" / "cpu")
        return Sample(
            at=self.clock(),
            processes=processes,
            steal_ticks=parse_steal_ticks(stat) if stat else None,
            pressure_us=parse_pressure_total(pressure) if pressure else None,
            busy_ticks=parse_busy_ticks(stat) if stat else None,
        )

    def between(self, before: Sample, after: Sample, daemons: Iterable[int] = ()) -> Load:
        return load_between(before, after, (*self.roots, *daemons), self.hz)


def wait_for_quiet(
    meter: LoadMeter,
    limit: float,
    *,
    daemons: Iterable[int] = (),
    window: float = QUIET_WINDOW,
    sleep: Callable[[float], None] = time.sleep,
    waiting: Callable[[Load], None] | None = None,
) -> float:
    """Wait until others took no more than the meter's threshold over one ``window``, or
    ``limit`` seconds passed; the seconds waited (0 when quiet at once, ``limit`` <= 0 or the
    threshold off). ``waiting`` is told each busy window's Load (the progress line)."""
    if limit <= 0 or meter.threshold is None:
        return 0.0
    pids = tuple(daemons)
    started = meter.clock()
    before = meter.sample()
    while True:
        sleep(window)
        after = meter.sample()
        load = meter.between(before, after, pids)
        waited = meter.clock() - started
        if not load.busy(meter.threshold) or waited >= limit:
            return waited
        if waiting is not None:
            waiting(load)
        before = after
