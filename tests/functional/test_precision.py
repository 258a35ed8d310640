"""Whole A B B A blocks and --encperf-precision: the stopping rule on constructed samples, the
order each round ran in, and the overhead's interval in the summary and the JSON."""

from __future__ import annotations

import json

import pytest

from pytest_encperf import benchmarkentries
from tests.functional.test_gate import CONFTEST, SCRIPTED_BENCHMARK, run

# ----------------------------------------------------------------------------- the interval


# ----------------------------------------------------------------------------- whole blocks


# ----------------------------------------------------------------------------- the stopping rule


# ----------------------------------------------------------------------------- a session


def test_a_session_with_precision_shows_the_interval_in_the_summary_and_the_json(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_bench=SCRIPTED_BENCHMARK)
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv("SCRIPTED_NOISE", "0,0.001,-0.001")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    out = pytester.path / "out.json"
    outcome = run(
        pytester, f"--encperf-json={out}", "--encperf-precision=1%", rounds=3, SCRIPTED_VOLUME_SCALE="0.75"
    )
    outcome.assert_outcomes(passed=2)
    text = outcome.stdout.str()
    assert "x 4 rounds (3 rounded up to whole A B B A blocks) of " in text  # the plan line
    assert "then whole A B B A blocks until the overhead's 95% interval is within ±1 points" in text
    entries = benchmarkentries.measured(json.loads(out.read_text())["benchmarks"])  # not plain's sides
    for entry in entries:
        interval = entry["extra_info"]["overhead_interval"]
        assert interval["pairs"] == 4 and interval["half_width"] <= 1.0
        assert interval["low"] <= interval["estimate"] <= interval["high"]
        assert entry["extra_info"]["encperf"]["stop_reason"].startswith("4 rounds, within ±1 (±")
        assert f"{entry['extra_info']['vs_plain_percent']:+.1f}% ±{interval['half_width']:.1f}" in text
        positions = [r["pair_position"] for r in entry["extra_info"]["encperf"]["baseline_rounds"]]
        assert positions == [1, 2, 1, 2]
