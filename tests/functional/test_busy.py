"""Busy rounds (Measurement.busy) in the reports and in the gate: every table flags a cell whose
rounds were busy, the gate decides from the quiet rounds only, replaces busy ones while its
budget lasts and otherwise leaves the check UNDECIDED: machine busy (which --encperf-strict
fails); a scripted session with a faked busy reading shows it in the summary and the JSON."""

from __future__ import annotations

import json

import pytest

from pytest_encperf.benchmarkentries import measured
from tests.functional.test_gate import CONFTEST, SCRIPTED_BENCHMARK, run
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)

BUSY_BENCHMARK = (
    SCRIPTED_BENCHMARK.replace(
        "    encperf.meter = None  #", "    encperf.meter = BusyReading(encperf.meter.threshold)  #"
    )
    + '''

import time
from pytest_encperf.load import Load, Sample


class BusyReading:
    """Says others took 0.8 of a core in every round: busy at the session's threshold (its
    meter's, --encperf-busy-threshold)."""

    clock = staticmethod(time.monotonic)

    def __init__(self, threshold):
        self.threshold = threshold

    def sample(self):
        return Sample(0.0, {}, None, None)

    def between(self, before, after, daemons=()):
        return Load(1.0, 0.8, 0.0, 0.2)
'''
)


def test_a_session_with_a_busy_reading_says_so_in_the_summary_and_the_json(pytester: pytest.Pytester) -> None:
    assert BUSY_BENCHMARK != SCRIPTED_BENCHMARK
    pytester.makepyfile(test_bench=BUSY_BENCHMARK)
    pytester.makeconftest(CONFTEST)
    out = pytester.path / "out.json"
    # the suite's conftest turns the threshold off (ENCPERF_BUSY_THRESHOLD): this run sets it
    outcome = run(
        pytester, f"--encperf-json={out}", "--encperf-quiet-wait=1", "--encperf-busy-threshold=0.25", rounds=2
    )
    outcome.assert_outcomes(passed=2)
    assert "busy 4/4 (others 0.80 core)!" in outcome.stdout.str()
    (entry, _) = measured(json.loads(out.read_text())["benchmarks"])
    assert entry["extra_info"]["busy_rounds"] == 4
    first = entry["extra_info"]["encperf"]["rounds"][0]
    assert (first["busy"], first["others_cpu_s"], first["cpu_pressure_s"]) == (True, 0.8, 0.2)
    # --encperf-quiet-wait waited its whole second for quiet that never came, and says so
    assert 1.0 <= entry["extra_info"]["encperf"]["quiet_wait"] < 5.0


def test_a_session_with_the_threshold_off_flags_nothing_and_keeps_what_others_took(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_bench=BUSY_BENCHMARK)
    pytester.makeconftest(CONFTEST)
    out = pytester.path / "out.json"
    outcome = run(pytester, f"--encperf-json={out}", "--encperf-busy-threshold=0.25", rounds=2)
    assert "busy 4/4" in outcome.stdout.str()  # the reading is busy at a quarter of a core ...
    outcome = run(pytester, f"--encperf-json={out}", rounds=2, ENCPERF_BUSY_THRESHOLD="off")
    outcome.assert_outcomes(passed=2)
    text = outcome.stdout.str()
    assert "busy 4/4" not in text and "busy k/n" not in text  # ... and with the threshold off none is
    document = json.loads(out.read_text())
    (entry, _) = measured(document["benchmarks"])
    assert entry["extra_info"]["busy_rounds"] == 0
    rounds = entry["extra_info"]["encperf"]["rounds"]
    assert [(r["busy"], r["others_cpu_s"]) for r in rounds] == [(False, 0.8)] * 2  # still measured
    assert document["encperf"]["settings"]["busy_threshold"] == "off"
    # a quiet wait needs a threshold: said before anything runs, with where each setting came from
    refused = run(pytester, "--encperf-quiet-wait=5", rounds=2, ENCPERF_BUSY_THRESHOLD="0")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--encperf-busy-threshold (from ENCPERF_BUSY_THRESHOLD), which is off*"])


def test_with_a_quiet_wait_a_block_made_busy_by_others_is_measured_again_once_quiet(
    pytester: pytest.Pytester,
) -> None:
    # others take 0.8 of a core during the 2nd and 3rd reading only: the quiet wait before the
    # first round passes at once, then the first block's first pair is busy
    reading = BUSY_BENCHMARK.replace(
        "        return Load(1.0, 0.8, 0.0, 0.2)",
        "        BusyReading.calls += 1\n"
        "        return Load(1.0, 0.8 if BusyReading.calls in (2, 3) else 0.0, 0.0, 0.2)",
    )
    reading = reading.replace(
        "    clock = staticmethod(time.monotonic)", "    clock = staticmethod(time.monotonic)\n    calls = 0"
    )
    assert reading != BUSY_BENCHMARK
    pytester.makepyfile(test_bench=reading)
    pytester.makeconftest(CONFTEST)
    out = pytester.path / "out.json"
    outcome = run(
        pytester, f"--encperf-json={out}", "--encperf-quiet-wait=5", "--encperf-busy-threshold=0.25", rounds=2
    )
    outcome.assert_outcomes(passed=2)
    entries = measured(json.loads(out.read_text())["benchmarks"])
    first = entries[0]["extra_info"]
    assert first["busy_rounds"] == 0  # the busy block went whole
    assert first["encperf"]["busy_remeasured"] == 2
    assert first["encperf"]["stop_reason"] == "2 rounds, 2 busy pairs measured again after quiet"
    assert len(first["encperf"]["rounds"]) == 2
    assert entries[1]["extra_info"]["encperf"]["busy_remeasured"] == 0
