"""benchmarks/engine_bars.py agreement: whether two engines' overheads differ beyond their intervals.

Noise model: each repeat's mean log ratio is normal around the engine's overhead, with the sd of
the repeats measured here (SEQ1M Q8T1 read on gocryptfs, 4 repeats: fio's 0.12 on the log scale, the
native engine's 0.05). The check is a Welch test at 95%, so with equal overheads it calls
about one cell in 20 a real difference.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def engine_bars() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its neighbour busy_bars
    try:
        spec = importlib.util.spec_from_file_location("engine_bars", BENCHMARKS / "engine_bars.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def repeats(rng: random.Random, overhead: float, sd: float, n: int = 4) -> list[float]:
    return [rng.gauss(math.log(1 + overhead), sd) for _ in range(n)]


def test_equal_overheads_are_called_apart_about_one_time_in_twenty(engine_bars: ModuleType) -> None:
    rng = random.Random(25)
    runs = 2000
    apart = sum(
        engine_bars.engines_apart(repeats(rng, -0.35, 0.12), repeats(rng, -0.35, 0.05))[1]
        for _ in range(runs)
    )
    assert 0.03 <= apart / runs <= 0.075


def test_a_difference_far_beyond_the_noise_is_real_and_given_in_points(engine_bars: ModuleType) -> None:
    rng = random.Random(26)
    points, real = engine_bars.engines_apart(repeats(rng, -0.40, 0.01), repeats(rng, -0.30, 0.01))
    assert real and 8 < points < 12  # native - fio, at plain's speed


def test_fewer_than_two_repeats_decide_nothing(engine_bars: ModuleType) -> None:
    assert engine_bars.engines_apart([0.1], [0.1, 0.2]) is None
    assert engine_bars.pooled([math.log(0.6)]) == "-"


def test_the_interval_is_of_the_mean_overhead(engine_bars: ModuleType) -> None:
    text = engine_bars.pooled([math.log(0.6), math.log(0.6)])
    assert text == "-40.0% [-40.0..-40.0]"


def test_a_listed_cell_says_how_many_of_its_rounds_were_busy(engine_bars: ModuleType) -> None:
    assert engine_bars.busy_share(1, 64) == " (busy: 1 of 64 rounds)"
    assert engine_bars.busy_share(0, 64) == ""


def test_a_cells_busy_rounds_are_summed_over_both_engines_and_sides(engine_bars: ModuleType) -> None:
    busy = {("SEQ1M-Q8T1-read", "fio"): [1, 32], ("SEQ1M-Q8T1-read", "native"): [2, 32]}
    assert engine_bars.cell_busy(busy, "SEQ1M-Q8T1-read") == (3, 64)
