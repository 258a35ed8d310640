"""A saved run as pytest-benchmark shows it: the entries of ``benchmarks[]``, their names, their unit
(no pytest).

pytest-benchmark's table knows one unit, time: its header ``Name (time in s)`` (``ms``, ``us``, ``ns``
by the size of the numbers) is fixed in pytest_benchmark/table.py; no field of a saved document
changes it (``options["unit"]`` is kept, not read), only a ``pytest_benchmark_scale_unit`` hook in the
``conftest.py`` of the directory ``pytest-benchmark compare`` runs in, and that one only scales it.
So the stats are the time of a named operation, moving one GiB (lower is better), and each entry's
name says so: ``SEQ1M-Q8T1-read[gocryptfs] per GiB`` under ``Name (time in s)`` reads as seconds per
GiB, and pytest-benchmark's ``OPS`` (1 / mean) is GiB per second. The fullname keeps the form of
documents saved before the name had its unit (``encperf::SEQ1M-Q8T1-read[gocryptfs]``), so
``compare --between`` still pairs an old run's entry with a new one's.

Plain's side of each pair has entries of its own: ``SEQ1M-Q8T1-read[plain-beside-gocryptfs] per
GiB`` holds the plain rounds measured beside that backend's rounds (on the partition target: before
and after its volume), in the workload's group, so pytest-benchmark's table shows a backend and the
plain rounds it was divided by one above the other. They carry PLAIN_SIDE (the backend) in
``extra_info`` and no ``encperf`` part: encperf's reader skips them (the backend's entry has every
round of both sides, storage.results_of).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pytest_benchmark.stats import Stats  # the same statistics pytest-benchmark saves

from .model import BASELINE as PLAIN
from .model import LATENCY_MEANING, Measurement, Result, is_baseline
from .workloads import Workload

UNIT = "per GiB"  # what one operation of an entry is: its stats are seconds to move a GiB
CALL_UNIT = "per call"  # ... or one call of the user's function (encperf.time)
OPTIONS = {"timer": "encperf", "unit": "seconds per GiB", "warmup": False}
PLAIN_SIDE = "plain_side_of"  # extra_info key of a plain-side entry: the backend it was paired with


def plain_beside(backend: str) -> str:
    """The parameter naming plain's side of ``backend``'s pairs: ``plain-beside-gocryptfs``."""
    return f"{PLAIN}-beside-{backend}"


def entry_names(workload: str, backend: str, unit: str = UNIT) -> dict[str, str]:
    """``name`` (with the unit), ``fullname`` (as documents had it before), ``param`` of an entry."""
    return {
        "name": f"{workload}[{backend}] {unit}",
        "fullname": f"encperf::{workload}[{backend}]",
        "param": f"{backend}-{workload}",
    }


def unit_of(workload: Workload, rounds: Sequence[Measurement]) -> str:
    """An entry's unit: UNIT, or CALL_UNIT for rounds of a timed function (encperf.time,
    Workload.is_timed_function), which count no bytes: their stats are the seconds of one call."""
    return CALL_UNIT if rounds and workload.is_timed_function else UNIT


def _stat_values(rounds: Sequence[Measurement], per_call: bool) -> list[float | None]:
    """Each round's value for the stats (seconds per GiB, or ``per_call``), None where it has none:
    a round that moved nothing takes forever per GiB, which no mean or standard deviation takes
    (Python's statistics.stdev raises AttributeError on an infinity)."""
    values = (m.seconds if per_call else m.seconds_per_gib for m in rounds)
    return [value if math.isfinite(value) and value >= 0 else None for value in values]


def seconds_per_gib_stats(rounds: Sequence[Measurement], per_call: bool = False) -> dict[str, Any]:
    """pytest-benchmark's stats of the rounds, in seconds per GiB moved ({} without rounds); a
    timed function's in seconds per call (``per_call``: Workload.is_timed_function). A round
    without a finite value (it moved nothing) is left out of them; stats_left_out says which."""
    stats = Stats()
    for value in _stat_values(rounds, per_call):
        if value is not None:
            stats.update(value)
    # "iterations" is what pytest-benchmark adds to Stats.as_dict(); its compare table needs it
    return {**stats.as_dict(), "iterations": 1, "data": list(stats.data)} if stats else {}


def stats_left_out(rounds: Sequence[Measurement], per_call: bool = False) -> list[str]:
    """The rounds seconds_per_gib_stats leaves out, each counted from 1 with why."""
    return [
        f"round {index} moved nothing: no time per GiB" if not m.bytes else f"round {index}: no finite time"
        for index, (m, value) in enumerate(zip(rounds, _stat_values(rounds, per_call), strict=True), start=1)
        if value is None
    ]


def plain_entry(result: Result) -> dict[str, Any] | None:
    """The entry of the plain rounds paired with an encrypted backend's rounds (None for plain
    itself, or without plain rounds)."""
    if is_baseline(result.backend) or not result.baseline_rounds or not result.rounds:
        return None
    workload, per_call = result.workload.name, result.workload.is_timed_function
    return {
        "group": workload,
        **entry_names(
            workload, plain_beside(result.backend), unit_of(result.workload, result.baseline_rounds)
        ),
        "params": {"backend": PLAIN, "workload": workload, "beside": result.backend},
        "options": dict(OPTIONS),
        "stats": seconds_per_gib_stats(result.baseline_rounds, per_call),
        "extra_info": {
            PLAIN_SIDE: result.backend,
            # plain measured before and after the volume (partition target), not beside each round
            "before_after": result.before_after,
            "mb_per_s": result.median("mb_per_s", baseline=True),
            "iops": result.median("iops", baseline=True),
            "lat_p99_us": result.median("lat_p99_us", baseline=True),
            "cpu_s_per_gib": result.median("cpu_s_per_gib", baseline=True),
            "latency": LATENCY_MEANING,
            "busy_rounds": sum(m.busy for m in result.baseline_rounds),
            "stats_left_out": stats_left_out(result.baseline_rounds, per_call),
        },
    }


def is_plain_side(entry: Any) -> bool:
    """Whether a ``benchmarks[]`` entry is plain's side of a pair (its rounds are in the backend's)."""
    extra = entry.get("extra_info") if isinstance(entry, dict) else None
    return isinstance(extra, dict) and PLAIN_SIDE in extra and "encperf" not in extra


def measured(entries: Sequence[Any]) -> list[Any]:
    """The entries encperf reads: one per backend x workload, without plain's sides."""
    return [entry for entry in entries if not is_plain_side(entry)]
