"""Volume lifecycle and the measuring loop behind the ``encperf`` fixture (no pytest)."""

from __future__ import annotations

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
from .host import HostError
from .model import Measurement, Result
from .targets import Target
from .workloads import Workload


class Unavailable(Exception):
    """The backend cannot run here; the message is the skip reason."""


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
        return Observe(devices=self.devices, daemon_pids=self.daemon_pids)


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
        raise BackendError(f"{backend.spec}: {exc}") from exc
    except BaseException:
        if volume is not None:
            backend.destroy(volume)
        raise


def close_volume(mounted: MountedVolume) -> None:
    mounted.backend.destroy(mounted.volume)


def io_mode_policy(engine: Engine, volume_file: Path, baseline_file: Path) -> tuple[bool, str]:
    """Use O_DIRECT only when both sides really get it, so they are compared in one mode.

    Returns (direct, what O_DIRECT gives on the volume).
    """
    on_volume = engine.io_mode(volume_file)
    on_baseline = engine.io_mode(baseline_file)
    return on_volume == "direct" and on_baseline == "direct", on_volume


@dataclass
class Runner:
    """What a benchmark test measures with: ``encperf.run(workload)``."""

    engine: Engine
    volume: MountedVolume
    baseline: MountedVolume
    size: int
    runtime: float
    rounds: int
    record: Callable[[Result], None]
    warmup: int = 1  # pairs of rounds measured first and discarded (file layout, caches, clocks)
    steady_cv: float | None = None  # keep adding rounds until both sides' CV is below this ...
    steady_budget: float = 60.0  # ... or this many seconds have been spent on the extra rounds

    def run(self, workload: Workload) -> Result:
        """Measure ``workload`` on the volume, alternating rounds with the baseline (A B A B)
        so that machine drift cancels in the ratio; the Result is recorded and returned."""
        volume_file = self.engine.prepare(self.volume.data_dir, self.size)
        baseline_file = self.engine.prepare(self.baseline.data_dir, self.size)
        direct, o_direct = io_mode_policy(self.engine, volume_file, baseline_file)
        if workload.kind == "files":
            direct = False  # small unaligned files: buffered by nature
        volume_observe, baseline_observe = self.volume.observe(), self.baseline.observe()
        result = Result(
            backend=self.volume.spec,
            workload=workload,
            description={**self.volume.description, "o_direct": o_direct},
            warmup_rounds=self.warmup,
        )

        def pair() -> tuple[Measurement, Measurement]:
            base = self.engine.run(
                workload, baseline_file, runtime=self.runtime, direct=direct, observe=baseline_observe
            )
            vol = self.engine.run(
                workload, volume_file, runtime=self.runtime, direct=direct, observe=volume_observe
            )
            return base, vol

        for _ in range(self.warmup):
            pair()
        for _ in range(self.rounds):
            base, vol = pair()
            result.baseline_rounds.append(base)
            result.rounds.append(vol)
        result.stop_reason = f"{self.rounds} rounds"
        if self.steady_cv is not None:
            result.stop_reason = self._steady_state(result, pair)
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
