"""The tables of a volume's other costs: its life cycle, key derivation and in-place encryption."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tabulate import tabulate

from ..lifecycledata import LIFECYCLE_STEPS, lifecycle_medians, lifecycle_samples
from ..model import BASELINE
from .formats import format_seconds, format_size


def lifecycle_table(
    lifecycle: Mapping[str, Mapping[str, Any]], backends: Iterable[str] = (), tablefmt: str = "simple"
) -> str:
    """Seconds of each step of each volume's life, the median of its cycles, and how many cycles
    (plain first, then the backends in order). A step's value is a list of seconds per cycle, or
    one float (a run saved before --encperf-lifecycle-cycles)."""
    samples = lifecycle_samples(lifecycle)
    medians = lifecycle_medians(lifecycle)
    order = [BASELINE, *backends, *samples]
    rows = [
        [
            spec,
            *(format_seconds(medians[spec].get(step)) for step in LIFECYCLE_STEPS),
            str(max(len(values) for values in samples[spec].values())),
        ]
        for spec in dict.fromkeys(order)
        if spec in samples
    ]
    headers = ["backend", *LIFECYCLE_STEPS, "cycles"]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True) if rows else ""


KDF_HEADERS = (
    "backend", "fast setting", "default setting", "mount s fast", "mount s default",
    "create s fast", "create s default", "default/fast (mount)",
)  # fmt: skip


def kdf_table(
    kdf: Mapping[str, Mapping[str, Any]], backends: Iterable[str] = (), tablefmt: str = "simple"
) -> str:
    """The kdf profile (pytest_encperf.kdf, as saved): per backend, create and the mount of an
    existing volume with the fast (benchmark only) and the default key derivation, and the
    ratio of the two mounts; a backend without one says why in place of the numbers."""
    rows = []
    for spec in dict.fromkeys([BASELINE, *backends, *kdf]):
        if spec not in kdf:
            continue
        row = kdf[spec]
        settings = row.get("settings") or {}
        fast, default = settings.get("fast") or {}, settings.get("default") or {}
        if not settings:
            rows.append([spec, row.get("note", ""), "", "", "", "", "", ""])
            continue
        ratio = row.get("ratio")
        rows.append([
            spec,
            fast.get("label") or row.get("note", "-"),
            default.get("label", "-"),
            format_seconds(fast.get("mount")),
            format_seconds(default.get("mount")),
            format_seconds(fast.get("create")),
            format_seconds(default.get("create")),
            "-" if ratio is None else f"{ratio:.3g}x",
        ])  # fmt: skip
    return tabulate(rows, headers=KDF_HEADERS, tablefmt=tablefmt, disable_numparse=True) if rows else ""


def projected_time(size: int, mb_per_s: float) -> str:
    """How long ``size`` bytes take at ``mb_per_s`` (10^6 bytes/s), rounded for a person to
    read: "about 40 s", "about 12 min", "about 4 h 10 min", "about 3 d 2 h"."""
    if mb_per_s <= 0:
        return "never (nothing was encrypted)"
    seconds = size / (mb_per_s * 1e6)
    if seconds < 59.5:
        return f"about {max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"about {hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours + (minutes >= 30), 24)
    return f"about {days} d" + (f" {hours} h" if hours else "")


def inplace_table(
    inplace: Mapping[str, Mapping[str, Any]],
    project_size: int,
    backends: Iterable[str] = (),
    tablefmt: str = "simple",
) -> str:
    """The in-place encryption figures (pytest_encperf.inplace, as saved): per backend how it
    was measured, the bytes and seconds, MB/s and the time ``project_size`` bytes would take."""
    rows = []
    for spec in dict.fromkeys([BASELINE, *backends, *inplace]):
        if spec not in inplace:
            continue
        row = inplace[spec]
        check = ""
        if row.get("intact") is not None:
            check = ("data intact" if row["intact"] else "DATA CHANGED") + (
                f", {row['format_after']} after" if row.get("format_after") else ""
            )
        mb_per_s = row.get("mb_per_s", 0.0)
        rows.append([
            spec, row.get("method", ""), f"{row.get('bytes', 0) / 1e6:.4g}",
            format_seconds(row.get("seconds")), f"{mb_per_s:.4g}",
            projected_time(project_size, mb_per_s), check,
        ])  # fmt: skip
    headers = ["backend", "how", "MB", "s", "MB/s", f"{format_size(project_size)} would take", "check"]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True) if rows else ""
