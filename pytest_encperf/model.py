"""Result types shared by engines, session, storage and reports (no behaviour, no pytest)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from . import stats
from .workloads import GiB, Workload

# The unencrypted backend every other is measured against: the one name of the baseline.
BASELINE = "plain"


def is_baseline(backend: str) -> bool:
    """Whether a backend spec's text (``plain`` or ``plain:...``) names the baseline."""
    return backend.split(":", 1)[0] == BASELINE


# A read round whose device reads are below this fraction of its logical reads came from memory.
CACHED_FRACTION = 0.5
# An encrypted read whose device traffic per byte read is below this fraction of plain's was
# partly served by memory below the volume (Result.cached_below).
CACHED_BELOW_FRACTION = 0.9

# Why a round's numbers may not measure what its row says: recorded per round (``caveats``, in the
# JSON too), counted and explained in the tables.
CAVEATS = {
    "loop-dio-off": "a loop device under the volume has direct I/O off (/sys/block/loopN/loop/dio "
    "= 0): the host's page cache sits between it and the disk",
    "cache-not-dropped": "a buffered read round without root: only the test file's own pages were "
    "dropped, not the page cache below it (/proc/sys/vm/drop_caches needs root)",
    "buffered-depth-1": "a buffered round at queue depth 1: the kernel refused io_uring "
    "(kernel.io_uring_disabled), so fio could not keep the workload's I/Os in flight",
    "moved-nothing": "the engine completed no I/O in the round, in every one of its attempts "
    "(rounds.EMPTY_ROUND_ATTEMPTS): kept as measured, a round of 0 MB/s has no time per GiB and no "
    "ratio to plain, so the gate decides no check from its cell (invalid) and the saved stats leave it out",
    "measured-again": "the engine's first attempt at the round completed no I/O; the round is a "
    "later attempt, which did (rounds.EMPTY_ROUND_ATTEMPTS)",
}
# Caveats that say how a round came about, not what it measured: two runs' cells are compared
# across them (gate.cells.Cell.setup); every other caveat must match.
HOW_MEASURED_CAVEATS = frozenset({"measured-again"})

# What a round's latency percentiles measure (``latency`` of each round; "" in runs saved before
# it was recorded, when fio's figures were completion latency, clat).
LATENCY_TOTAL = "total"
LATENCY_MEANING = (
    "total latency of each I/O, from its submission to its completion (fio's lat_ns; the native "
    "engine times the same span); small files: create + write + fsync of each file"
)


@dataclass(frozen=True)
class Measurement:
    """What one round of one workload on one volume measured."""

    engine: str
    engine_version: str
    bytes: int
    seconds: float
    ios: int
    lat_p50_us: float
    lat_p99_us: float
    lat_p999_us: float
    cpu_seconds: float  # system-wide busy CPU time during the round (psutil)
    io_mode: str  # "direct", "buffered" or "direct-requested-but-buffered"
    # Bytes read/written on the volume's own block device during the round (psutil per-disk
    # counters); None when the volume has no device of its own (directory target).
    physical_read_bytes: int | None = None
    physical_write_bytes: int | None = None
    # Requests the volume's device completed in the round: bytes / requests is the size the
    # I/O reached the device at (a 1 MiB read split in two shows as 512 KiB).
    physical_read_requests: int | None = None
    physical_write_requests: int | None = None
    # (device name, bytes read, bytes written) for every observed device: the volume's device
    # first, then the devices below it (the disk under a loop device's backing file).
    physical: tuple[tuple[str, int, int], ...] = ()
    logical_read_bytes: int | None = None  # what the workload read (for the cache check)
    logical_write_bytes: int | None = None  # what the workload wrote
    engine_cpu_seconds: float | None = None  # the engine's own process(es), user + system
    daemon_cpu_seconds: float | None = None  # the backend's daemons (FUSE ...), by pid
    started: float | None = None  # wall-clock time the round started (time.time(); the round order)
    ended: float | None = None  # wall-clock time it ended (rounds of two processes never overlap)
    caveats: tuple[str, ...] = ()  # keys of CAVEATS that apply to this round
    latency: str = ""  # what lat_* measure: LATENCY_TOTAL ("" in older saved runs: fio's clat)
    round_definition: str = ""  # workloads.ROUND_DEFINITION of a block round ("" before it existed)
    steps: tuple[tuple[str, float], ...] = ()  # a task round: (step, seconds) of each timed step
    # What others took of the machine during the round (load.py; None: not measured): CPU seconds
    # of processes outside this run, steal time, CPU pressure stall time ("some"), and whether
    # that made the round busy (load.BUSY_SHARE)
    others_cpu_s: float | None = None
    steal_s: float | None = None
    cpu_pressure_s: float | None = None
    busy: bool = False
    # Where the round ran in its A B B A pair: 1 first, 2 second (None: not in a pair, or saved
    # before it was recorded); a cell's rounds in whole blocks have as many of each per side
    pair_position: int | None = None
    # Which of the run's volumes the round ran on (--encperf-volumes N: 0 the session's, 1..N-1
    # freshly made ones, the plain side's likewise); None: one volume, or saved before it was
    # recorded. A reference's blocks give its own between-volume spread (verdict.volume_groups)
    volume_block: int | None = None
    # How many times the round was run: one that moved nothing is run again (rounds.RoundMeter)
    attempts: int = 1

    @property
    def moved_nothing(self) -> bool:
        """A round that moved no bytes: not a measurement of the storage, whose I/Os, however
        slow, an engine waits for and counts. A timed function's round moves no bytes of its own
        either: rounds.RoundMeter does not ask it (Workload.is_timed_function)."""
        return self.bytes <= 0

    @property
    def cached(self) -> bool | None:
        """True when the page cache, not the storage, served the round: its reads (or, for a
        round that only wrote, its writes) reached the device far less than the workload moved
        them. None when unknown (no device of its own, or nothing moved)."""
        if self.logical_read_bytes:
            if self.physical_read_bytes is None:
                return None
            return self.physical_read_bytes < CACHED_FRACTION * self.logical_read_bytes
        if self.logical_write_bytes:
            if self.physical_write_bytes is None:
                return None
            return self.physical_write_bytes < CACHED_FRACTION * self.logical_write_bytes
        return None

    @property
    def span(self) -> float | None:
        """Seconds from the round's start to its end (the engine's setup included), if recorded."""
        return self.ended - self.started if self.started is not None and self.ended is not None else None

    @property
    def mb_per_s(self) -> float:
        """Throughput in MB/s (10^6 bytes), as CrystalDiskMark and fio report it."""
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def iops(self) -> float:
        return self.ios / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_s_per_gib(self) -> float:
        return self.cpu_seconds / (self.bytes / GiB) if self.bytes else 0.0

    @property
    def seconds_per_gib(self) -> float:
        """Time to move one GiB: pytest-benchmark's "lower is better" unit for saved stats."""
        return self.seconds / (self.bytes / GiB) if self.bytes else float("inf")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            mb_per_s=self.mb_per_s, iops=self.iops, cpu_s_per_gib=self.cpu_s_per_gib, cached=self.cached
        )
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """Inverse of to_dict; derived values (MB/s, IOPS, CPU/GiB) are recomputed, unknown keys ignored."""
        names = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        if "physical" in values:  # JSON turned the tuples into lists
            values["physical"] = tuple(tuple(device) for device in values["physical"])
        if "caveats" in values:
            values["caveats"] = tuple(values["caveats"])
        if "steps" in values:
            values["steps"] = tuple((str(name), float(seconds)) for name, seconds in values["steps"])
        return cls(**values)


@dataclass(frozen=True)
class OverheadInterval:
    """The 95% interval of a cell's overhead: the mean of its paired log ratios backend/plain
    (stats.mean_interval) as changes in speed, in percent (-24.3 is 24.3% slower than plain)."""

    estimate: float
    low: float
    high: float
    pairs: int

    @property
    def half_width(self) -> float:
        """Half the interval's width, in percentage points (the ``±1.8`` of ``-24.3% ±1.8``)."""
        return (self.high - self.low) / 2

    def to_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "half_width": self.half_width}


@dataclass
class Result:
    """One workload on one backend: its rounds and the baseline rounds interleaved with them."""

    backend: str  # the backend spec string, the result's identity
    workload: Workload
    rounds: list[Measurement] = field(default_factory=list)
    baseline_rounds: list[Measurement] = field(default_factory=list)
    description: dict[str, Any] = field(default_factory=dict)

    warmup_rounds: int = 0  # measured and discarded before the counted rounds (per side)
    stop_reason: str = ""  # how the number of rounds was decided (fixed, steady state, confirmation)
    confirm_rounds: int = 0  # pairs added at the end because the gate could not decide yet
    machine_id: str = ""  # the machine that measured it (machine.machine_id; fleets have several)
    lock_wait: float = 0.0  # seconds waited for other processes' measurements (host.measurement_lock)
    quiet_wait: float = 0.0  # seconds waited for others' CPU to fall (--encperf-quiet-wait)
    # pairs with a busy round dropped and measured again once others' CPU fell (--encperf-quiet-wait)
    busy_remeasured: int = 0

    def _values(self, metric: str, baseline: bool) -> list[float]:
        rounds = self.baseline_rounds if baseline else self.rounds
        return [getattr(m, metric) for m in rounds]

    def median(self, metric: str, baseline: bool = False) -> float:
        return statistics.median(self._values(metric, baseline))

    def best(self, metric: str, baseline: bool = False) -> float:
        """Highest value over the rounds (what CrystalDiskMark reports)."""
        return max(self._values(metric, baseline))

    def cv(self, metric: str | None = None, baseline: bool = False) -> float | None:
        """Coefficient of variation over the rounds (stdev / mean), None with fewer than 2."""
        values = self._values(metric or self.primary_metric, baseline)
        return coefficient_of_variation(values)

    @property
    def cached_rounds(self) -> tuple[int, int]:
        """How many rounds (volume, baseline) the page cache served."""
        return sum(bool(m.cached) for m in self.rounds), sum(bool(m.cached) for m in self.baseline_rounds)

    @property
    def caveats(self) -> dict[str, tuple[int, int]]:
        """Each caveat (CAVEATS) found in the rounds: how many rounds of (volume, baseline)."""
        found = sorted({key for m in (*self.rounds, *self.baseline_rounds) for key in m.caveats})

        def count(key: str, rounds: list[Measurement]) -> int:
            return sum(key in m.caveats for m in rounds)

        return {key: (count(key, self.rounds), count(key, self.baseline_rounds)) for key in found}

    @property
    def busy_rounds(self) -> int:
        """Rounds of both sides during which others kept the machine busy (Measurement.busy)."""
        return sum(m.busy for m in (*self.rounds, *self.baseline_rounds))

    @property
    def busy_share(self) -> float | None:
        """The CPU others took (and steal), in cores, over the busy rounds of both sides (per
        second of each round: from its start to its end, or its measured time if longer); None
        when no round was busy."""
        busy = [m for m in (*self.rounds, *self.baseline_rounds) if m.busy]
        seconds = sum(max(m.seconds, m.span or 0.0) for m in busy)
        taken = sum((m.others_cpu_s or 0.0) + (m.steal_s or 0.0) for m in busy)
        return taken / seconds if busy and seconds > 0 else None

    @property
    def comparable(self) -> bool:
        """Every round of both sides ran in one I/O mode; otherwise no ratio is computed."""
        return io_mode_problem(self.rounds, self.baseline_rounds) is None

    @property
    def before_after(self) -> bool:
        """Partition target: the plain rounds were measured before the volume existed and after it
        was removed, not beside each round."""
        return self.description.get("baseline") == "before/after"

    @property
    def cipher_ceiling(self) -> str | None:
        """The cipher (as ceiling.measure names it) this backend encrypts with, when it said so."""
        value = self.description.get("cipher_ceiling")
        return str(value) if value else None

    def efficiency(self, cipher_ceiling_mb_s: float | None) -> float | None:
        """Throughput / min(plain throughput, cipher ceiling): how much of what is physically
        possible (the disk, or the speed of this backend's own cipher on this CPU) it delivers.
        None without a measured ceiling for its cipher, and between different I/O modes."""
        if not self.rounds or not self.baseline_rounds or not cipher_ceiling_mb_s or not self.comparable:
            return None
        if self.workload.kind == "task":  # a task's bytes are its data, not what the cipher moved
            return None
        limit = min(self.median("mb_per_s", baseline=True), cipher_ceiling_mb_s)
        return self.median("mb_per_s") / limit if limit > 0 else None

    @property
    def primary_metric(self) -> str:
        if self.workload.kind == "task":
            return "seconds"
        return "iops" if self.workload.reports_iops else "mb_per_s"

    def ratio(self, metric: str | None = None) -> float | None:
        """Median of the per-round ratios volume/baseline (paired rounds cancel machine drift)."""
        metric = metric or self.primary_metric
        paired = self.before_after or len(self.rounds) == len(self.baseline_rounds)
        if not self.comparable or not self.baseline_rounds or not paired:
            return None
        ratios = round_ratios(self.rounds, self.baseline_rounds, metric, before_after=self.before_after)
        finite = [r for r in ratios if math.isfinite(r)]  # a plain round of 0 has no ratio
        return statistics.median(finite) if finite else None

    def pair_log_ratios(self) -> list[float]:
        """log(backend / plain) of each round's primary metric as round_ratios pairs it (plain's
        round beside it, or on a partition plain's median), where the ratio is finite and positive
        (a plain round of 0 has no ratio): what the overhead interval is the mean of."""
        ratios = round_ratios(
            self.rounds, self.baseline_rounds, self.primary_metric, before_after=self.before_after
        )
        return [math.log(r) for r in ratios if math.isfinite(r) and r > 0]

    @property
    def overhead_interval(self) -> OverheadInterval | None:
        """The 95% interval of the overhead over the paired rounds (log scale, t interval of the
        mean); None with fewer than two pairs, across I/O modes, or on the partition target
        (plain measured before and after, not beside each round)."""
        if self.before_after or not self.comparable or len(self.rounds) != len(self.baseline_rounds):
            return None
        logs = self.pair_log_ratios()
        if self.workload.lower_is_better:  # a time: plain's over the backend's is the speed
            logs = [-value for value in logs]
        interval = stats.mean_interval(logs)
        if interval is None:
            return None

        def change(log_ratio: float) -> float:
            return (math.exp(log_ratio) - 1) * 100

        low, high = change(interval.low), change(interval.high)
        return OverheadInterval(change(interval.estimate), low, high, interval.n)

    @property
    def order_problem(self) -> str | None:
        """Why the paired rounds are not whole A B B A blocks (pair_order_problem)."""
        return None if self.before_after else pair_order_problem(self.baseline_rounds)

    @property
    def change_percent(self) -> float | None:
        """Speed of the backend relative to the baseline: -12.0 means 12% slower (a task timed in
        seconds: plain's time over the backend's, so -12.0 is still slower)."""
        ratio = self.ratio()
        if ratio is None:
            return None
        return speed_change(ratio, 1.0, self.workload.lower_is_better)

    def device_per_logical(self, baseline: bool = False) -> DeviceTraffic:
        """What reached the device per byte the workload moved, over one side's rounds."""
        is_read = self.workload.is_read or self.workload.kind == "files"
        return device_traffic(self.baseline_rounds if baseline else self.rounds, is_read)

    @property
    def cached_below(self) -> bool:
        """A read that beats plain because memory below the volume served part of it: the
        backend's median beats plain's, and per byte read its device saw clearly fewer bytes
        than plain's did (below CACHED_BELOW_FRACTION of them) or, for a random read, clearly
        fewer requests: a stack whose lower file system read ahead for one I/O serves the next
        from the lower page cache, as a FUSE store on ext4 does. (Fewer requests of a
        sequential read only mean larger ones.) Such a cell is the stack's caching, not faster
        encryption; the tables and the JSON flag it."""
        if not self.workload.is_read or not self.rounds or not self.baseline_rounds or not self.comparable:
            return False
        metric = self.primary_metric
        if self.median(metric) <= self.median(metric, baseline=True):
            return False
        mine, plain = self.device_per_logical(), self.device_per_logical(baseline=True)

        def clearly_fewer(a: float | None, b: float | None) -> bool:
            return a is not None and b is not None and a < CACHED_BELOW_FRACTION * b

        return clearly_fewer(mine.bytes, plain.bytes) or (
            self.workload.is_random and clearly_fewer(mine.requests, plain.requests)
        )

    @property
    def io_modes(self) -> tuple[str, str]:
        """The I/O mode(s) of each side's rounds (``direct+buffered`` when they changed)."""

        def modes(rounds: list[Measurement]) -> str:
            return "+".join(dict.fromkeys(m.io_mode for m in rounds)) or "-"

        return modes(self.rounds), modes(self.baseline_rounds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "workload": asdict(self.workload),
            "rounds": [m.to_dict() for m in self.rounds],
            "baseline_rounds": [m.to_dict() for m in self.baseline_rounds],
            "description": self.description,
            "warmup_rounds": self.warmup_rounds,
            "stop_reason": self.stop_reason,
            "confirm_rounds": self.confirm_rounds,
            "machine_id": self.machine_id,
            "lock_wait": self.lock_wait,
            "quiet_wait": self.quiet_wait,
            "busy_remeasured": self.busy_remeasured,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """Inverse of to_dict. Raises KeyError/TypeError/ValueError on a malformed document."""
        return cls(
            backend=str(data["backend"]),
            workload=Workload(**data["workload"]),
            rounds=[Measurement.from_dict(m) for m in data["rounds"]],
            baseline_rounds=[Measurement.from_dict(m) for m in data.get("baseline_rounds", [])],
            description=dict(data.get("description", {})),
            warmup_rounds=_whole(data.get("warmup_rounds", 0)),
            stop_reason=str(data.get("stop_reason", "")),
            confirm_rounds=_whole(data.get("confirm_rounds", 0)),
            machine_id=str(data.get("machine_id", "")),
            lock_wait=float(data.get("lock_wait", 0.0)),
            quiet_wait=float(data.get("quiet_wait", 0.0)),
            busy_remeasured=_whole(data.get("busy_remeasured", 0)),
        )


def _whole(value: Any) -> int:
    """int() of a JSON value, an infinite number refused as a ValueError (int() raises
    OverflowError, which the readers' "malformed document" would not catch)."""
    try:
        return int(value)
    except OverflowError as exc:
        raise ValueError(f"not a whole number: {value!r}") from exc


@dataclass(frozen=True)
class DeviceTraffic:
    """Bytes and requests that reached a volume's own device per logical byte the workload
    moved (None where unknown: no device of its own, nothing moved)."""

    bytes: float | None
    requests: float | None
    request_size: float | None  # bytes per device request

    def to_dict(self) -> dict[str, float | None]:
        return asdict(self)


def device_traffic(rounds: Sequence[Measurement], is_read: bool) -> DeviceTraffic:
    """DeviceTraffic over ``rounds`` in one direction (reads, or writes)."""
    direction = "read" if is_read else "write"
    logical = sum((m.logical_read_bytes if is_read else m.logical_write_bytes) or 0 for m in rounds)
    moved = [getattr(m, f"physical_{direction}_bytes") for m in rounds]
    requests = [getattr(m, f"physical_{direction}_requests") for m in rounds]
    if not logical or not rounds or any(value is None for value in moved):
        return DeviceTraffic(None, None, None)
    total = sum(moved)
    if any(value is None for value in requests):
        return DeviceTraffic(total / logical, None, None)
    count = sum(requests)
    return DeviceTraffic(total / logical, count / logical, total / count if count else None)


@dataclass(frozen=True)
class RunData:
    """One run as the gate sees it: its results, the settings it was measured with, its machine."""

    label: str
    results: tuple[Result, ...]
    settings: dict[str, str] = field(default_factory=dict)  # as saved: size, runtime, target, ...
    machine_info: dict[str, Any] = field(default_factory=dict)
    lifecycle: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # spec -> step -> s


def io_mode_problem(rounds: Sequence[Measurement], baseline_rounds: Sequence[Measurement]) -> str | None:
    """Why rounds and their plain rounds cannot be divided: not all of them ran in one I/O mode."""
    mine = sorted({m.io_mode for m in rounds})
    plain = sorted({m.io_mode for m in baseline_rounds})
    if rounds and baseline_rounds and len({*mine, *plain}) > 1:
        return f"I/O mode {'/'.join(mine)} vs plain {'/'.join(plain)}"
    return None


def pair_order_problem(plain_rounds: Sequence[Measurement]) -> str | None:
    """Why paired rounds, given by their plain rounds, are not whole A B B A blocks: not as many
    pairs with plain first as with the backend first, so a constant order effect (the side run
    second finds a warmer cache) does not cancel. None when they are, or the order was not recorded."""
    positions = [m.pair_position for m in plain_rounds]
    if not positions or None in positions:
        return None
    plain_first = positions.count(1)
    if plain_first * 2 == len(positions):
        return None
    return (
        f"{plain_first} pairs with plain first and {len(positions) - plain_first} with the backend "
        "first: not whole A B B A blocks, so an order effect does not cancel"
    )


def speed_change(value: float, plain: float, lower_is_better: bool = False) -> float | None:
    """``value`` against plain's as a change in speed, in percent: positive is faster than plain.
    A time (``lower_is_better``) that is twice plain's is -50%, a throughput half of plain's too."""
    if lower_is_better:
        return (plain / value - 1.0) * 100.0 if value else None
    return (value / plain - 1.0) * 100.0 if plain else None


def round_ratios(
    rounds: Sequence[Measurement],
    baseline_rounds: Sequence[Measurement],
    attr: str,
    *,
    before_after: bool = False,
) -> list[float]:
    """Each round's ``attr`` over that of the plain round run beside it (A B B A pairs), or with
    ``before_after`` (the partition target) over the median of the plain rounds measured before
    and after the volume. A plain value of 0 gives infinity. The one definition of "ratio to
    plain" for the tables, the saved results and the gate."""
    if before_after:
        plain = statistics.median(getattr(b, attr) for b in baseline_rounds)
        return [_divide(getattr(v, attr), plain) for v in rounds]
    return [_divide(getattr(v, attr), getattr(b, attr)) for v, b in zip(rounds, baseline_rounds, strict=True)]


def _divide(value: float, plain: float) -> float:
    return value / plain if plain else math.inf


@dataclass
class MachineRun:
    """What one machine measured in a session, as an xdist worker sends it to the controller
    (the workers of one machine are merged): its results and whatever the report of that machine
    needs from the machine itself (its settings as it resolved them, engine, ceilings)."""

    machine_id: str
    machine_info: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)  # as saved: its own dir, ...
    engine: str = ""  # name and version
    results: list[Result] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # backend spec -> reason
    ceilings: dict[str, tuple[float | None, str]] = field(default_factory=dict)  # cipher -> (MB/s, how)
    xts_driver: str = ""
    problems: list[str] = field(default_factory=list)  # teardown failures (fail the run)
    notes: list[str] = field(default_factory=list)  # start-up cleanup lines, merge notes
    # spec -> LIFECYCLE_STEPS -> seconds, one per cycle (lifecycle_samples reads older runs' floats)
    lifecycle: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    kdf: dict[str, dict[str, Any]] = field(default_factory=dict)  # spec -> the kdf profile's row
    inplace: dict[str, dict[str, Any]] = field(default_factory=dict)  # spec -> in-place figure
    ladder: list[dict[str, Any]] = field(default_factory=list)  # --encperf-ladder rows (ladder.LadderRow)

    @property
    def label(self) -> str:
        node = self.machine_info.get("node")
        return f"{self.machine_id} ({node})" if node else self.machine_id

    def merge(self, other: MachineRun) -> None:
        """Add another worker's part of the same machine; a backend x workload measured twice
        (``--dist each`` with several workers on one machine) keeps the first, with a note."""
        have = {(r.backend, r.workload.name) for r in self.results}
        for result in other.results:
            key = (result.backend, result.workload.name)
            if key in have:
                self.notes.append(f"{' '.join(key)} was measured twice on this machine: the first is kept")
            else:
                self.results.append(result)
                have.add(key)
        for spec, reason in other.skipped.items():
            self.skipped.setdefault(spec, reason)
        for measured in {result.backend for result in self.results}:  # (--dist load splits a backend)
            self.skipped.pop(measured, None)  # another worker measured it: not skipped on this machine
        self.ceilings.update(other.ceilings)
        for spec, steps in other.lifecycle.items():
            self.lifecycle.setdefault(spec, steps)
        for spec, row in other.kdf.items():
            self.kdf.setdefault(spec, row)
        for spec, row in other.inplace.items():
            self.inplace.setdefault(spec, row)
        rows = {(row["backend"], row["workload"]) for row in self.ladder}
        self.ladder += [row for row in other.ladder if (row["backend"], row["workload"]) not in rows]
        self.problems += other.problems
        self.notes += [note for note in other.notes if note not in self.notes]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["results"] = [result.to_dict() for result in self.results]
        data["ceilings"] = {cipher: list(value) for cipher, value in self.ceilings.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MachineRun:
        names = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        values["results"] = [Result.from_dict(doc) for doc in data.get("results", [])]
        values["ceilings"] = {cipher: tuple(value) for cipher, value in data.get("ceilings", {}).items()}
        return cls(**values)


def coefficient_of_variation(values: list[float]) -> float | None:
    """stdev / mean; None with fewer than two values, or with one that is not finite (Python's
    statistics.stdev raises AttributeError on an infinity)."""
    if len(values) < 2 or not all(math.isfinite(value) for value in values):
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else None
