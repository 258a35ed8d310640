"""Stand-ins for the runner's unit tests: an engine that measures nothing and plain volumes on a
directory, so the rounds' order, blocks and tags can be checked without a disk, root or fio."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_encperf.backends import BackendSpec, Volume
from pytest_encperf.backends.plain import PlainBackend
from pytest_encperf.model import Measurement, Result
from pytest_encperf.mountedvolume import MountedVolume
from pytest_encperf.targets import Target
from pytest_encperf.workloads import CDM, MiB


def measurement(mb_per_s: float = 100.0, *, mode: str = "direct", **fields: Any) -> Measurement:
    base: dict[str, Any] = dict(
        engine="fake", engine_version="1", bytes=int(mb_per_s * 1e6), seconds=1.0, ios=int(mb_per_s),
        lat_p50_us=1.0, lat_p99_us=2.0, lat_p999_us=3.0, cpu_seconds=0.1, io_mode=mode,
    )  # fmt: skip
    base.update(fields)
    return Measurement(**base)


def fakecrypt_result(volume_mb_per_s: float, rounds: int) -> Result:
    """fakecrypt on SEQ1M-Q8T1-read at about ``volume_mb_per_s`` beside plain at 100 MB/s, the
    rounds a little apart (so their spread is not 0), for the gate's tests."""

    def measured(mb_per_s: float, k: int) -> Measurement:
        moved = int(mb_per_s * 1e6 * (1 + 0.001 * k * (-1) ** k))
        return Measurement("fio", "1", moved, 1.0, moved // MiB, 10.0, 20.0, 30.0, 0.1, "direct")

    return Result(
        "fakecrypt", CDM[0], [measured(volume_mb_per_s, k) for k in range(rounds)],
        [measured(100, k) for k in range(rounds)],
    )  # fmt: skip


class FakeEngine:
    """Returns the next value of ``values`` (MB/s) on every run; remembers each run's workload and file."""

    name = "fake"

    def __init__(self, values: Iterable[float] = (100.0,)) -> None:
        self.values = itertools.cycle(values)
        self.runs: list[tuple[str, Path]] = []

    @property
    def files(self) -> list[str]:
        """The volume (its directory's name) each run was on, in order."""
        return [path.parent.name for _, path in self.runs]

    def version(self) -> str:
        return "1"

    def prepare(self, directory: Path, size: int) -> Path:
        return directory / "f"

    def io_mode(self, path: Path) -> str:
        return "direct"

    def run(self, workload, path, *, runtime, direct, observe=None) -> Measurement:
        self.runs.append((workload.name, path))
        return measurement(next(self.values))


def mounted(tmp_path: Path, name: str) -> MountedVolume:
    """A plain volume at ``tmp_path / name``, as the fixtures hand it to a test."""
    backend = PlainBackend(BackendSpec("plain"))
    volume = Volume(backend, Target("directory", tmp_path, MiB), tmp_path / name)
    return MountedVolume(backend, volume, tmp_path / name)
