"""Volume lifecycle and the measuring loop behind the ``encperf`` fixture (no pytest)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backends import BackendBase, BackendError, Volume
from .engines import Engine
from .host import HostError
from .model import Result
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

    def run(self, workload: Workload) -> Result:
        """Measure ``workload`` on the volume, alternating rounds with the baseline (A B A B)
        so that machine drift cancels in the ratio; the Result is recorded and returned."""
        volume_file = self.engine.prepare(self.volume.data_dir, self.size)
        baseline_file = self.engine.prepare(self.baseline.data_dir, self.size)
        direct, o_direct = io_mode_policy(self.engine, volume_file, baseline_file)
        result = Result(
            backend=self.volume.spec,
            workload=workload,
            description={**self.volume.description, "o_direct": o_direct},
        )
        for _ in range(self.rounds):
            result.baseline_rounds.append(
                self.engine.run(workload, baseline_file, runtime=self.runtime, direct=direct)
            )
            result.rounds.append(self.engine.run(workload, volume_file, runtime=self.runtime, direct=direct))
        self.record(result)
        return result
