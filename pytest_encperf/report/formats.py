"""How numbers read in every report: values, changes, p-values, sizes and seconds."""

from __future__ import annotations

import math
import statistics


def format_value(value: float) -> str:
    if value >= 100_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_change(percent: float | None) -> str:
    return "n/a" if percent is None else f"{percent:+.1f}%"


def format_percent(value: float | None) -> str:
    """A chart's change: like format_change, and "n/a" for NaN too."""
    return "n/a" if value is None or math.isnan(value) else f"{value:+.1f}%"


def pick(values: list[float], value: str) -> float:
    return max(values) if value == "best" else statistics.median(values)


def format_p(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


def format_size(size: int) -> str:
    for unit, factor in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size} B"


def format_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
