"""Configuration sweeps: expansion (pure), ranking (pure, and by simulation with a stated noise
model), the option, and the report/JSON/Markdown of a plugin run (pytester, scripted engine)."""

from __future__ import annotations

import json
import random

import pytest

from pytest_encperf import sweep
from tests.unit.test_sweep import TRIALS, WORKLOADS, measurement, result, simulated  # noqa: F401

# ---------------------------------------------------------------- expansion


# ---------------------------------------------------------------- recommendation commands


# ---------------------------------------------------------------- ranking


# Simulation: 8 workloads x 3 rounds, round noise CV 5% (this machine's CPU-bound FUSE rounds
# show 2-20%), seeded. Bonferroni over the ordered pairs bounds the false "slower" rate by ALPHA.


def false_alarm_rate(configurations: int, margin: float, volume_sd: float = 0.0) -> float:
    rng = random.Random(2026)
    alarms = 0
    for _ in range(TRIALS):
        specs = [f"x:a={i}" for i in range(configurations)]
        results = [r for spec in specs for r in simulated(spec, 0.6, rng, 0.05, volume_sd=volume_sd)]
        (ranking,) = sweep.rank(results, specs, margin=margin)
        alarms += ranking.decided
    return alarms / TRIALS


@pytest.mark.parametrize("configurations", [2, 4, 8])
def test_equally_fast_configurations_are_rarely_called_slower_even_without_a_margin(
    configurations: int,
) -> None:
    assert false_alarm_rate(configurations, margin=0.0) <= 0.06


def test_the_margin_absorbs_a_per_volume_shift_the_rounds_cannot_see() -> None:
    # each volume's ratios shifted together by a lognormal factor: the rounds alone are fooled
    assert false_alarm_rate(4, margin=0.0, volume_sd=0.03) > 0.3
    # the default margin: at most 5% false "slower" calls for 8 configurations (luks-tuning) when
    # a volume's own shift has a 3% spread; beyond that the assumption no longer holds
    assert false_alarm_rate(8, margin=sweep.DEFAULT_MARGIN, volume_sd=0.03) <= 0.05
    assert false_alarm_rate(8, margin=sweep.DEFAULT_MARGIN, volume_sd=0.05) > 0.05


# ---------------------------------------------------------------- plugin run

SPEED_BENCHMARK = """
from pytest_encperf.model import Measurement


class BySpeed:
    name = "scripted"

    def version(self):
        return "1"

    def prepare(self, directory, size):
        path = directory / "file.dat"
        path.touch()
        return path

    def io_mode(self, path):
        return "direct"

    def run(self, workload, path, *, runtime, direct, observe=None):
        marker = path.parent / "speed"
        factor = float(marker.read_text()) if marker.exists() else 1.0
        moved = int(100e6 * factor)
        return Measurement(
            engine="scripted", engine_version="1", bytes=moved, seconds=1.0, ios=moved // workload.block_size,
            lat_p50_us=1.0, lat_p99_us=1.0, lat_p999_us=1.0, cpu_seconds=0.1, io_mode="direct",
        )


ENGINE = BySpeed()


def test_workload(encperf, encperf_workload):
    encperf.engine = ENGINE
    encperf.meter = None  # rounds of no time: what else runs on the machine is not the question here
    encperf.run(encperf_workload)
"""

SPEED_CONFTEST = """
from pytest_encperf.backends import Param
from pytest_encperf.backends.plain import PlainBackend


class SpeedCrypt(PlainBackend):
    params = (Param("speed", help="throughput factor of the scripted engine"),)

    def mount(self, volume):
        data_dir = super().mount(volume)
        (data_dir / "speed").write_text(self.spec.param_dict.get("speed", "1"))
        return data_dir


def pytest_encperf_register_backends(config):
    return {"speedcrypt": SpeedCrypt}
"""


def test_a_sweep_run_prints_ranks_and_writes_the_ranking_to_json_and_markdown(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_bench=SPEED_BENCHMARK)
    pytester.makeconftest(SPEED_CONFTEST)
    out = pytester.path / "out.json"
    markdown = pytester.path / "out.md"
    result = pytester.runpytest(
        "--encperf-target=directory",
        "--encperf-backends=speedcrypt:speed=0.5|0.9|0.3",
        f"--encperf-dir={pytester.path}",
        "--encperf-size=1MiB",
        "--encperf-rounds=3",
        "--encperf-warmup=0",
        f"--encperf-json={out}",
        f"--encperf-markdown={markdown}",
        "-k",
        "Q8T1",
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    )
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "sweep: speedcrypt, 3 configurations ranked over 2 workloads",
            "*1*speed=0.9*-10.0%*best*",
            "*2*speed=0.5*-50.0%*slower*",
            "*3*speed=0.3*-70.0%*slower*",
            "recommendation for speedcrypt: speed=0.9 (-10.0% vs plain)",
        ]
    )
    (ranking,) = json.loads(out.read_text())["encperf"]["sweeps"]
    assert [c["spec"] for c in ranking["configurations"]] == [
        "speedcrypt:speed=0.9", "speedcrypt:speed=0.5", "speedcrypt:speed=0.3",
    ]  # fmt: skip
    assert ranking["configurations"][0]["geomean_ratio"] == pytest.approx(0.9)
    text = markdown.read_text()
    assert "**sweep: speedcrypt, 3 configurations ranked over 2 workloads**" in text
    assert "recommendation for speedcrypt: speed=0.9" in text
