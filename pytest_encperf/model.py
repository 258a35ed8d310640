"""Result types shared by engines, session, storage and reports (no behaviour, no pytest)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .workloads import GiB, Workload


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
    physical_read_bytes: int | None = None
    physical_write_bytes: int | None = None

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
        data.update(mb_per_s=self.mb_per_s, iops=self.iops, cpu_s_per_gib=self.cpu_s_per_gib)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """Inverse of to_dict; derived values (MB/s, IOPS, CPU/GiB) are recomputed, unknown keys ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})


@dataclass
class Result:
    """One workload on one backend: its rounds and the baseline rounds interleaved with them."""

    backend: str  # the backend spec string, the result's identity
    workload: Workload
    rounds: list[Measurement] = field(default_factory=list)
    baseline_rounds: list[Measurement] = field(default_factory=list)
    description: dict[str, Any] = field(default_factory=dict)

    def median(self, metric: str, baseline: bool = False) -> float:
        rounds = self.baseline_rounds if baseline else self.rounds
        return statistics.median(getattr(m, metric) for m in rounds)

    @property
    def primary_metric(self) -> str:
        return "iops" if self.workload.reports_iops else "mb_per_s"

    def ratio(self, metric: str | None = None) -> float | None:
        """Median of the per-round ratios volume/baseline (paired rounds cancel machine drift)."""
        metric = metric or self.primary_metric
        pairs = [
            getattr(v, metric) / getattr(b, metric)
            for v, b in zip(self.rounds, self.baseline_rounds, strict=False)
            if getattr(b, metric)
        ]
        return statistics.median(pairs) if pairs else None

    @property
    def change_percent(self) -> float | None:
        """Throughput of the backend relative to the baseline: -12.0 means 12% slower."""
        ratio = self.ratio()
        return None if ratio is None else (ratio - 1.0) * 100.0

    @property
    def io_modes(self) -> tuple[str, str]:
        vol = self.rounds[-1].io_mode if self.rounds else "-"
        base = self.baseline_rounds[-1].io_mode if self.baseline_rounds else "-"
        return vol, base

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "workload": asdict(self.workload),
            "rounds": [m.to_dict() for m in self.rounds],
            "baseline_rounds": [m.to_dict() for m in self.baseline_rounds],
            "description": self.description,
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
        )
