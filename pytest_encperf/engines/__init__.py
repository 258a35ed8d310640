"""Engines turn a Workload on a directory into a Measurement.

An engine never knows which backend made the directory; a backend never runs I/O. What the
engine should watch besides the I/O (device counters, daemon pids) comes as plain data
(:class:`observe.Observe`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Protocol

from ..model import Measurement
from ..workloads import Workload
from .observe import Observe

ENGINES = ("fio", "native")  # "auto" picks fio when installed, native otherwise
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

    def run(
        self, workload: Workload, path: Path, *, runtime: float, direct: bool, observe: Observe | None = None
    ) -> Measurement: ...


def select_engine(name: str) -> Engine:
    """``fio``, ``native`` or ``auto`` (fio when installed, the native engine otherwise).

    Raises ValueError for an unknown name or ``fio`` when fio is not installed.
    """
    if name not in (*ENGINES, "auto"):
        raise ValueError(f"unknown engine {name!r} (accepted: {', '.join((*ENGINES, 'auto'))})")
    if name == "fio" or (name == "auto" and shutil.which("fio")):
        if not shutil.which("fio"):
            raise ValueError("engine 'fio': fio is not installed (apt-get install fio), or use native")
        from .fio import FioEngine

        return FioEngine()
    from .native import NativeEngine

    return NativeEngine()
