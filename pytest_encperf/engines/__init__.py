"""Engines turn a Workload on a directory into a Measurement.

An engine never knows which backend made the directory; a backend never runs I/O.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..model import Measurement
from ..workloads import Workload

ENGINES = ("native",)  # "auto" picks the best installed one
TEST_FILE_NAME = "encperf-test.dat"


class Engine(Protocol):
    name: str

    def version(self) -> str: ...

    def prepare(self, directory: Path, size: int) -> Path:
        """Create (or reuse) the workload file of ``size`` bytes, filled with random data."""
        ...

    def io_mode(self, path: Path) -> str:
        """What O_DIRECT on ``path`` really gives: direct, buffered (refused) or
        direct-requested-but-buffered (accepted but served through the page cache)."""
        ...

    def run(self, workload: Workload, path: Path, *, runtime: float, direct: bool) -> Measurement: ...


def select_engine(name: str) -> Engine:
    """``native`` or ``auto`` (the best engine available here)."""
    if name not in (*ENGINES, "auto"):
        raise ValueError(f"unknown engine {name!r} (accepted: {', '.join((*ENGINES, 'auto'))})")
    from .native import NativeEngine

    return NativeEngine()
