"""Named workload profiles (data only).

A workload says what to measure; engines decide how. Names follow CrystalDiskMark
("SEQ1M Q8T1" = sequential, 1 MiB blocks, queue depth 8, 1 thread).
"""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

RW_MODES = ("read", "write", "randread", "randwrite")


@dataclass(frozen=True)
class Workload:
    """One I/O pattern. ``size`` and ``runtime`` come from the run's settings when None."""

    label: str  # CrystalDiskMark column, e.g. "SEQ1M Q8T1"
    rw: str  # one of RW_MODES
    block_size: int
    iodepth: int = 1
    numjobs: int = 1

    def __post_init__(self) -> None:
        if self.rw not in RW_MODES:
            raise ValueError(f"rw must be one of {', '.join(RW_MODES)}, got {self.rw!r}")
        if self.block_size <= 0 or self.iodepth <= 0 or self.numjobs <= 0:
            raise ValueError("block_size, iodepth and numjobs must be positive")

    @property
    def is_read(self) -> bool:
        return self.rw in ("read", "randread")

    @property
    def is_random(self) -> bool:
        return self.rw.startswith("rand")

    @property
    def direction(self) -> str:
        return "read" if self.is_read else "write"

    @property
    def name(self) -> str:
        """Stable identity used in test ids, results and baselines, e.g. ``SEQ1M-Q8T1-read``."""
        return f"{self.label.replace(' ', '-')}-{self.direction}"

    @property
    def reports_iops(self) -> bool:
        """Small random I/O is judged by IOPS, like CrystalDiskMark's 4K rows."""
        return self.is_random and self.block_size <= 64 * KiB

    def __str__(self) -> str:
        return self.name


def _pair(label: str, random: bool, block_size: int, iodepth: int, numjobs: int = 1) -> list[Workload]:
    read, write = ("randread", "randwrite") if random else ("read", "write")
    return [
        Workload(label, read, block_size, iodepth, numjobs),
        Workload(label, write, block_size, iodepth, numjobs),
    ]


# CrystalDiskMark 8 default set (its "Default" profile), read then write per row.
CDM: tuple[Workload, ...] = (
    *_pair("SEQ1M Q8T1", False, MiB, 8),
    *_pair("SEQ1M Q1T1", False, MiB, 1),
    *_pair("RND4K Q32T1", True, 4 * KiB, 32),
    *_pair("RND4K Q1T1", True, 4 * KiB, 1),
)

PROFILES: dict[str, tuple[Workload, ...]] = {
    "cdm": CDM,
}


def profile_workloads(names: list[str]) -> list[Workload]:
    """Workloads of the named profiles, in order, without repeats."""
    seen: dict[str, Workload] = {}
    for profile in names:
        for workload in PROFILES[profile]:
            seen.setdefault(workload.name, workload)
    return list(seen.values())
