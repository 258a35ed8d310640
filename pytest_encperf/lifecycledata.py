"""A volume's life cycle as saved runs keep it: the steps timed and the reader of their seconds
(``encperf.lifecycle`` in the saved document: spec -> step -> seconds per cycle)."""

from __future__ import annotations

import statistics
from typing import Any

# A volume's life: create (format, key derivation), mount, the first durable write, unmount, destroy.
LIFECYCLE_STEPS = ("create", "mount", "first write", "unmount", "destroy")


def lifecycle_samples(data: Any) -> dict[str, dict[str, list[float]]]:
    """A saved ``encperf.lifecycle`` as spec -> step -> seconds per cycle: runs saved before
    --encperf-lifecycle-cycles kept one float per step (one cycle); anything else is left out."""
    found: dict[str, dict[str, list[float]]] = {}
    for spec, steps in (data or {}).items() if isinstance(data, dict) else ():
        if not isinstance(steps, dict):
            continue
        for step, value in steps.items():
            values = value if isinstance(value, list) else [value]
            numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
            if numbers:
                found.setdefault(str(spec), {})[str(step)] = numbers
    return found


def lifecycle_medians(data: Any) -> dict[str, dict[str, float]]:
    """spec -> step -> the median of its cycles (what the life-cycle table shows)."""
    return {
        spec: {step: statistics.median(values) for step, values in steps.items()}
        for spec, steps in lifecycle_samples(data).items()
    }
