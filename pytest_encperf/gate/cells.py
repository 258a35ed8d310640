"""Runs and cells: the rounds of one backend x workload of a run (plain's pooled), busy rounds
left out, and what has to match for two runs' cells to be compared (no pytest)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache, cached_property
from typing import Any, TypeVar, cast

from .. import stats
from ..model import (
    BASELINE,
    HOW_MEASURED_CAVEATS,
    Measurement,
    Result,
    io_mode_problem,
    pair_order_problem,
    round_ratios,
)
from ..workloads import MiB, Workload
from .rules import Metric

# Run-wide settings that change what a workload measures (engine, I/O mode and the workload's
# own definition are compared per cell, from the rounds themselves).
COMPARED_SETTINGS = ("size", "runtime", "target")

T = TypeVar("T")


@dataclass(frozen=True)
class Cell:
    """The rounds of one backend x workload of a run. Plain's cell pools the plain rounds that
    every backend of the run was paired with (they come from the one baseline volume)."""

    backend: str
    workload: Workload
    rounds: tuple[Measurement, ...]
    baseline_rounds: tuple[Measurement, ...] = ()  # paired plain rounds (encrypted backends)
    stop_reason: str = ""
    confirm_rounds: int = 0
    # partition target: the plain rounds were measured before the volume existed and after it
    # was removed, not beside each round
    before_after: bool = False
    busy: int = 0  # rounds (both sides) left out because the machine was busy (cells_of quiet_only)
    # what the cell figured of its rounds, which never change: its samples and their logs per
    # metric, its setups, ... (a verdict reads the reference's samples for its check and its
    # history; verdicts may share a saved run's cells: gate.SortedRuns)
    _figured: dict[object, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _once(self, key: object, figure: Callable[[], T]) -> T:
        """``figure()`` the first time ``key`` is asked for, the value kept then after (one look-up
        when it is kept: a verdict asks a saved run's cells millions of times in the simulations)."""
        try:
            return cast(T, self._figured[key])
        except KeyError:
            pass
        found = self._figured[key] = figure()
        return found

    @cached_property  # the backend never changes
    def plain(self) -> bool:
        return self.backend.split(":", 1)[0] == BASELINE

    def samples(self, metric: Metric) -> list[float]:
        """One value per round: the metric, or for a paired metric on an encrypted backend its
        ratio to the plain round beside it (on the partition target: to the median of the plain
        rounds measured before and after the volume)."""
        return list(self._samples(metric))

    def _samples(self, metric: Metric) -> tuple[float, ...]:
        return self._once(("samples", metric), lambda: tuple(self._figure_samples(metric)))

    def _figure_samples(self, metric: Metric) -> list[float]:
        attr = metric.attr_for(self.workload)
        if not metric.paired or self.plain:
            return [float(getattr(m, attr)) for m in self.rounds]
        if self.pairing_problem():
            return []
        return round_ratios(self.rounds, self.baseline_rounds, attr, before_after=self.before_after)

    def log_samples(self, metric: Metric) -> list[float] | None:
        """The log of each sample, when there are samples and all are positive and finite (what a
        history keeps of a saved run's cell); None otherwise."""
        found = self._once(("logs", metric), lambda: self._figure_logs(metric))
        return None if found is None else list(found)

    def _figure_logs(self, metric: Metric) -> tuple[float, ...] | None:
        values = self._samples(metric)
        usable = values and not stats.invalid_values(values)
        return tuple(math.log(v) for v in values) if usable else None

    @property
    def volume_blocks(self) -> tuple[int | None, ...]:
        """The volume block of each round (one per sample: --encperf-volumes), None where not recorded."""
        return self._once("volume blocks", lambda: tuple(m.volume_block for m in self.rounds))

    def pairing_problem(self) -> str | None:
        """Why the backend's rounds cannot be divided by plain rounds, if they cannot: a round
        without its plain partner, or plain rounds in another I/O mode."""
        return self._once("pairing problem", self._pairing_problem)

    def _pairing_problem(self) -> str | None:
        if not self.before_after and len(self.rounds) != len(self.baseline_rounds):
            return f"{len(self.rounds)} rounds but {len(self.baseline_rounds)} plain rounds beside them"
        if not self.baseline_rounds:
            return "no plain rounds"
        return io_mode_problem(self.rounds, self.baseline_rounds)

    @property
    def order_problem(self) -> str | None:
        """Why this cell's paired rounds are not whole A B B A blocks (model.pair_order_problem: its
        plain rounds' recorded pair positions; plain's cell: its own rounds'), e.g. after busy pairs
        were left out; None when they are, unrecorded, or on the partition target (no pairs)."""
        if self.before_after:
            return None
        return self._once(
            "order problem", lambda: pair_order_problem(self.rounds if self.plain else self.baseline_rounds)
        )

    def setup(self, metric: Metric) -> dict[str, str]:
        """What has to match for two cells to be compared on ``metric``."""
        return dict(self._setup_for(metric))

    def _setup_for(self, metric: Metric) -> dict[str, str]:
        # the gate compares a cell's setup with each saved run's: figured once per cell
        return self._once(("setup", metric), lambda: self._setup_of(metric))

    def _setup_of(self, metric: Metric) -> dict[str, str]:
        with_plain = metric.paired and not self.plain
        return self._setup(with_plain, metric.attr_for(self.workload).startswith("lat_"))

    def _setup(self, with_plain: bool, latency: bool) -> dict[str, str]:
        rounds = [*self.rounds, *(self.baseline_rounds if with_plain else ())]
        caveats = {c for m in rounds for c in m.caveats} - HOW_MEASURED_CAVEATS  # what they measured
        setup = {
            "engine": "/".join(sorted({m.engine for m in rounds})) or "-",
            "I/O mode": "/".join(sorted({m.io_mode for m in rounds})) or "-",
            "caveats": "/".join(sorted(caveats)) or "none",
            **_workload_fields(self.workload),
        }
        if self.workload.kind == "block":  # what a round of the workload does (workloads.io_plan)
            setup["round definition"] = "/".join(sorted({m.round_definition or "1" for m in rounds}))
        if latency:  # total latency, or fio's older clat
            setup["latency"] = "/".join(sorted({m.latency or "completion" for m in rounds}))
        return setup


@cache
def _workload_fields(workload: Workload) -> dict[str, str]:
    """The workload's definition (what its profile made of it), field by field, without its label."""
    return {f"workload {key}": str(value) for key, value in asdict(workload).items() if key != "label"}


def quiet_rounds(
    rounds: Sequence[Measurement], baseline_rounds: Sequence[Measurement], before_after: bool = False
) -> tuple[tuple[Measurement, ...], tuple[Measurement, ...], int]:
    """The rounds and plain rounds without the busy ones (Measurement.busy), and how many rounds
    were left out: a pair goes whole when either of its rounds was busy (on the partition
    target, whose plain rounds are not paired, each busy round alone)."""
    if not any(m.busy for m in rounds) and not any(m.busy for m in baseline_rounds):  # the usual case
        return tuple(rounds), tuple(baseline_rounds), 0
    if before_after or len(rounds) != len(baseline_rounds):
        kept, plain = [m for m in rounds if not m.busy], [m for m in baseline_rounds if not m.busy]
        return tuple(kept), tuple(plain), len(rounds) + len(baseline_rounds) - len(kept) - len(plain)
    pairs = [(v, b) for v, b in zip(rounds, baseline_rounds, strict=True) if not (v.busy or b.busy)]
    return tuple(v for v, _ in pairs), tuple(b for _, b in pairs), 2 * (len(rounds) - len(pairs))


def cells_of(results: Iterable[Result], quiet_only: bool = False) -> dict[tuple[str, str], Cell]:
    """Every backend x workload of a run, plus plain's cell per workload (its pooled rounds).
    ``quiet_only`` (the gate): without the rounds during which the machine was busy (quiet_rounds),
    a cell all of whose rounds were busy kept with none."""
    cells: dict[tuple[str, str], Cell] = {}
    plain: dict[str, list[Measurement]] = {}
    plain_busy: dict[str, int] = {}
    workloads: dict[str, Workload] = {}
    for result in results:
        if not result.rounds:
            continue
        name = result.workload.name
        workloads.setdefault(name, result.workload)
        rounds, baseline_rounds, busy = tuple(result.rounds), tuple(result.baseline_rounds), 0
        if quiet_only:
            rounds, baseline_rounds, busy = quiet_rounds(rounds, baseline_rounds, result.before_after)
        plain.setdefault(name, []).extend(baseline_rounds)
        if result.backend.split(":", 1)[0] == BASELINE:
            plain[name].extend(rounds)
            plain_busy[name] = plain_busy.get(name, 0) + busy
            continue
        dropped = len(result.baseline_rounds) - len(baseline_rounds)  # plain rounds left out
        plain_busy[name] = plain_busy.get(name, 0) + dropped
        cells[(result.backend, name)] = Cell(
            result.backend, result.workload, rounds, baseline_rounds,
            result.stop_reason, result.confirm_rounds, result.before_after, busy,
        )  # fmt: skip
    for name, plain_rounds in plain.items():
        if plain_rounds or plain_busy.get(name):
            cells[(BASELINE, name)] = Cell(
                BASELINE, workloads[name], tuple(plain_rounds), busy=plain_busy.get(name, 0)
            )
    return cells


def setting_differences(
    before: dict[str, str], now: dict[str, str], keys: Sequence[str] = COMPARED_SETTINGS
) -> list[str]:
    """``size 1073741824 -> 268435456`` for each compared setting (``keys``) both runs recorded
    differently."""
    found = []
    for key in keys:
        old, new = before.get(key), now.get(key)
        if old is not None and new is not None and str(old) != str(new):
            found.append(f"{key} {_setting_display(key, old)} -> {_setting_display(key, new)}")
    return found


def _setting_display(key: str, value: str) -> str:
    if key == "size" and str(value).isdigit():
        return f"{int(value) // MiB} MiB"
    if key == "runtime":
        return f"{value} s"
    return str(value)


def cell_differences(before: Cell, now: Cell, metric: Metric) -> list[str]:
    a, b = before._setup_for(metric), now._setup_for(metric)
    if a == b:  # the usual case, fast
        return []
    return [f"{key} {a[key]} -> {b[key]}" for key in a if a[key] != b[key]]
