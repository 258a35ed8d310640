"""The round settings of a run, as one value: how big each workload's test file is, how long a
round lasts, how many rounds are counted and how many warm up first (no behaviour, no imports).

Built once from the options (``Settings.round_plan``) and handed whole to whoever measures: the
runner, the partition's plain rounds, the ladder's RAM-backed rung.
"""

from __future__ import annotations

from dataclasses import dataclass

# A warm-up round settles file layout, caches and clocks; a second is plenty for that.
WARMUP_SECONDS = 1.0


@dataclass(frozen=True)
class RoundPlan:
    size: int  # bytes of each workload's test file (--encperf-size)
    runtime: float  # seconds of one counted round (--encperf-runtime)
    rounds: int  # counted rounds on each side (--encperf-rounds)
    warmup: int  # rounds (pairs) measured first and discarded (--encperf-warmup)

    @property
    def warmup_runtime(self) -> float:
        """Seconds of one warm-up round: the round's runtime, at most WARMUP_SECONDS."""
        return min(self.runtime, WARMUP_SECONDS)
