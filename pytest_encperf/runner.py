"""Volume lifecycle and the measuring loop behind the ``encperf`` fixture (no pytest)."""

from __future__ import annotations

import errno
import hashlib
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import host
from .backends import BackendBase, BackendError, Volume
from .engines import Engine
from .engines.observe import Observe
from .host import HostError, signals_deferred
from .model import Measurement, Result
from .targets import Target
from .workloads import Workload


class Unavailable(Exception):
    """The backend cannot run here; the message is the skip reason."""


class RunError(RuntimeError):
    """A workload could not run (disk full, I/O error); the message says where and what to do."""


class IntegrityError(RuntimeError):
    """Data written through a backend did not read back intact after unmount + mount."""


# What a failing write means for the user, by errno (a full disk under a loop device shows as EIO).
_STORAGE_ERRORS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "I/O error (is the disk under --encperf-dir full?)",
}

VERIFY_FILE = "encperf-verify.bin"
VERIFY_BYTES = 4 * 1024 * 1024


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text)[:60]


@dataclass
class MountedVolume:
    """A created and mounted volume, as fixtures hand it to tests."""

    backend: BackendBase
    volume: Volume
    data_dir: Path
    description: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        return str(self.backend.spec)

    @property
    def devices(self) -> tuple[str, ...]:
        """Block devices whose counters tell what reached the storage: the volume's own device
        ("device" in the backend's state, e.g. its loop device) or the one holding its data
        directory, then the devices below it."""
        device = self.volume.state.get("device")
        name = Path(device).name if device else host.block_device_of(self.data_dir)
        return (name, *host.devices_below(name)) if name else ()

    @property
    def daemon_pids(self) -> tuple[int, ...]:
        """The backend's own processes (FUSE daemons), from what its cleanups registered."""
        resources = [*self.volume.created.resources, *self.volume.mounted.resources]
        return tuple(int(r.ident) for r in resources if r.kind == "process" and r.ident.isdigit())

    def observe(self) -> Observe:
        return Observe(
            devices=self.devices, daemon_pids=self.daemon_pids, store_below=self.backend.store_below
        )


def open_volume(backend: BackendBase, target: Target, workdir: Path) -> MountedVolume:
    """Check, create and mount; on any failure everything made so far is torn down."""
    problems = backend.problems(target)
    if problems:
        raise Unavailable("; ".join(problems))
    workdir.mkdir(parents=True, exist_ok=False)
    volume: Volume | None = None
    try:
        volume = backend.create(target, workdir)
        data_dir = backend.mount(volume)
        return MountedVolume(backend, volume, data_dir, backend.describe(volume))
    except (BackendError, HostError, OSError) as exc:
        if volume is not None:
            backend.destroy(volume)
        message = str(exc)
        if not message.startswith(f"{backend.spec}:"):  # backends' own errors name it already
            message = f"{backend.spec}: {message}"
        raise BackendError(message) from exc
    except BaseException:  # Ctrl-C / SIGTERM: a second one must not cut the teardown in half
        if volume is not None:
            with signals_deferred():
                backend.destroy(volume)
        raise


def close_volume(mounted: MountedVolume) -> None:
    mounted.backend.destroy(mounted.volume)


def remount_volume(mounted: MountedVolume) -> None:
    """Unmount and mount again (both through the backend), so reads come from the disk."""
    mounted.backend.unmount(mounted.volume)
    mounted.data_dir = mounted.backend.mount(mounted.volume)


def _sha256(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return "missing"


def verify_after_remount(mounted: MountedVolume, names: list[str]) -> None:
    """Checksum ``names`` (files in the data directory) and a known pattern file, remount the
    volume, checksum again: any difference raises IntegrityError naming the file."""
    size = VERIFY_BYTES
    pattern = random.Random(f"encperf-verify {mounted.spec}").randbytes(size)
    with (mounted.data_dir / VERIFY_FILE).open("wb") as handle:
        handle.write(pattern)
        handle.flush()
        os.fsync(handle.fileno())
    expected = {VERIFY_FILE: hashlib.sha256(pattern).hexdigest()}
    expected.update({name: _sha256(mounted.data_dir / name) for name in names})
    remount_volume(mounted)
    got = {name: _sha256(mounted.data_dir / name) for name in expected}
    bad = [
        f"{name}: sha256 {expected[name][:16]}... written, {got[name][:16]}... read back"
        for name in expected
        if got[name] != expected[name]
    ]
    if bad:
        raise IntegrityError(
            f"{mounted.spec}: data did not read back intact after unmount + mount: {'; '.join(bad)}"
        )


def io_mode_policy(engine: Engine, volume_file: Path, baseline_file: Path) -> tuple[bool, str]:
    """Use O_DIRECT only when both sides really get it, so they are compared in one mode.

    Returns (direct, what O_DIRECT gives on the volume).
    """
    on_volume = engine.io_mode(volume_file)
    on_baseline = engine.io_mode(baseline_file)
    return on_volume == "direct" and on_baseline == "direct", on_volume


# A warm-up round settles file layout, caches and clocks; a second is plenty for that.
WARMUP_SECONDS = 1.0


@dataclass
class Runner:
    """What a benchmark test measures with: ``encperf.run(workload)``."""

    engine: Engine
    volume: MountedVolume
    baseline: MountedVolume | None  # None on a partition: see measured_baseline
    size: int
    runtime: float
    rounds: int
    record: Callable[[Result], None]
    verify: bool = False  # --encperf-verify: checksums across a remount after write workloads
    # Partition target: baseline rounds measured on the partition before this volume existed
    measured_baseline: dict[str, list[Measurement]] = field(default_factory=dict)
    warmup: int = 1  # pairs of rounds measured first and discarded (file layout, caches, clocks)
    steady_cv: float | None = None  # keep adding rounds until both sides' CV is below this ...
    steady_budget: float = 60.0  # ... or this many seconds have been spent on the extra rounds

    @property
    def warmup_runtime(self) -> float:
        return min(self.runtime, WARMUP_SECONDS)

    def run(self, workload: Workload) -> Result:
        """Measure ``workload`` on the volume, alternating rounds with the baseline (A B A B)
        so that machine drift cancels in the ratio; the Result is recorded and returned."""
        if self.baseline is None:
            return self._run_against_measured_baseline(workload)
        baseline: MountedVolume = self.baseline
        side = self.volume  # which volume a storage error came from
        try:
            volume_file = self.engine.prepare(self.volume.data_dir, self.size)
            side = baseline
            baseline_file = self.engine.prepare(baseline.data_dir, self.size)
            direct, o_direct = io_mode_policy(self.engine, volume_file, baseline_file)
            if workload.kind == "files":
                direct = False  # small unaligned files: buffered by nature
            volume_observe, baseline_observe = self.volume.observe(), baseline.observe()
            result = Result(
                backend=self.volume.spec,
                workload=workload,
                description={**self.volume.description, "o_direct": o_direct},
                warmup_rounds=self.warmup,
            )

            def pair(runtime: float = self.runtime) -> tuple[Measurement, Measurement]:
                nonlocal side
                side = baseline
                base = self.engine.run(
                    workload, baseline_file, runtime=runtime, direct=direct, observe=baseline_observe
                )
                side = self.volume
                vol = self.engine.run(
                    workload, volume_file, runtime=runtime, direct=direct, observe=volume_observe
                )
                return base, vol

            for _ in range(self.warmup):
                pair(self.warmup_runtime)
            for _ in range(self.rounds):
                base, vol = pair()
                result.baseline_rounds.append(base)
                result.rounds.append(vol)
            result.stop_reason = f"{self.rounds} rounds"
            if self.steady_cv is not None:
                result.stop_reason = self._steady_state(result, pair)
        except OSError as exc:
            problem = _STORAGE_ERRORS.get(exc.errno or 0)
            if problem is None:
                raise
            raise RunError(
                f"{workload.name} on {side.spec} ({side.data_dir}): {problem}: {exc.strerror}; "
                "free space under --encperf-dir or pass a smaller --encperf-size"
            ) from exc
        if self.verify and not workload.is_read:
            verify_after_remount(self.volume, [volume_file.name])
        self.record(result)
        return result

    def _run_against_measured_baseline(self, workload: Workload) -> Result:
        """One block device holds one volume at a time: the baseline rounds were measured on it
        before the volume was created (and more are added after it is removed)."""
        volume_file = self.engine.prepare(self.volume.data_dir, self.size)
        o_direct = self.engine.io_mode(volume_file)
        direct = o_direct == "direct" and workload.kind != "files"
        observe = self.volume.observe()
        result = Result(
            backend=self.volume.spec,
            workload=workload,
            description={**self.volume.description, "o_direct": o_direct, "baseline": "before/after"},
            warmup_rounds=self.warmup,
        )
        result.baseline_rounds.extend(self.measured_baseline.get(workload.name, []))
        for _ in range(self.warmup):
            self.engine.run(
                workload, volume_file, runtime=self.warmup_runtime, direct=direct, observe=observe
            )
        for _ in range(self.rounds):
            result.rounds.append(
                self.engine.run(workload, volume_file, runtime=self.runtime, direct=direct, observe=observe)
            )
        result.stop_reason = f"{self.rounds} rounds"
        self.record(result)
        return result

    def _steady_state(self, result: Result, pair: Callable[[], tuple[Measurement, Measurement]]) -> str:
        """Add rounds until the coefficient of variation of both sides is below the target."""
        assert self.steady_cv is not None
        deadline = time.monotonic() + self.steady_budget

        def steady() -> bool:
            cvs = (result.cv(), result.cv(baseline=True))
            return all(cv is not None and cv < self.steady_cv for cv in cvs)  # type: ignore[operator]

        while not steady():
            if time.monotonic() >= deadline:
                return f"{len(result.rounds)} rounds, CV target not reached in {self.steady_budget:g} s"
            base, vol = pair()
            result.baseline_rounds.append(base)
            result.rounds.append(vol)
        return f"{len(result.rounds)} rounds, CV < {self.steady_cv:.0%}"


def measure_all(
    engine: Engine,
    mounted: MountedVolume,
    workloads: list[Workload],
    size: int,
    runtime: float,
    rounds: int,
    warmup: int = 0,
) -> dict[str, list[Measurement]]:
    """Every workload's rounds on one volume (the partition target's baseline)."""
    path = engine.prepare(mounted.data_dir, size)
    o_direct = engine.io_mode(path)
    observe = mounted.observe()
    measured = {}
    for workload in workloads:
        direct = o_direct == "direct" and workload.kind != "files"
        for _ in range(warmup):
            engine.run(workload, path, runtime=runtime, direct=direct, observe=observe)
        measured[workload.name] = [
            engine.run(workload, path, runtime=runtime, direct=direct, observe=observe) for _ in range(rounds)
        ]
    return measured
