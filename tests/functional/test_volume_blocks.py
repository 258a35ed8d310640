"""--encperf-volumes end to end with the scripted engine (tests/functional/test_gate.py's): a
baseline saved on fresh volume pairs records each round's block, and the gate then takes the
between-run part from the blocks' spread instead of the built-in prior."""

from __future__ import annotations

import json

import pytest

from pytest_encperf.gate import EXIT_REGRESSION
from tests.functional.test_gate import baseline, gate, run, saved  # noqa: F401 (gate: a fixture)


def test_a_baseline_saved_on_fresh_volumes_records_each_rounds_block(gate: pytest.Pytester) -> None:
    baseline(gate, "--encperf-volumes=3", SCRIPTED_VOLUME_SCALE="0.5")
    (saved_run,) = saved(gate)
    doc = json.loads(saved_run.path.read_text())
    assert doc["encperf"]["settings"]["volumes"] == "3"
    entry = next(e for e in doc["benchmarks"] if e["name"] == "SEQ1M-Q8T1-read[fakecrypt] per GiB")
    saved_rounds = entry["extra_info"]["encperf"]
    # 10 rounds (a baseline's) over 3 volume pairs: 4 on each, in whole A B B A blocks, both sides
    for side in ("rounds", "baseline_rounds"):
        assert [r["volume_block"] for r in saved_rounds[side]] == [0] * 4 + [1] * 4 + [2] * 4
    assert "4 rounds on each of 2 more fresh volume pairs" in saved_rounds["stop_reason"]
    assert not list(gate.path.rglob("[0-9][0-9]-fakecrypt"))  # every volume (NN-spec) was removed


def test_the_gate_decides_against_the_blocks_spread_without_the_prior(gate: pytest.Pytester) -> None:
    baseline(gate, "--encperf-volumes=3", SCRIPTED_VOLUME_SCALE="0.5")
    result = run(gate, "--encperf-fail=10%", SCRIPTED_VOLUME_SCALE="0.3")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(["*FAIL: fakecrypt SEQ1M-Q8T1-read throughput*"])
    assert "between-run prior" not in result.stdout.str()  # no check used a prior
    same = run(gate, "--encperf-fail=10%", "--encperf-strict", SCRIPTED_VOLUME_SCALE="0.5")
    assert same.ret == pytest.ExitCode.OK


def test_the_volumes_option_is_refused_on_the_partition_target(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--encperf-target=partition", "--encperf-device=/dev/sdz9", "--encperf-allow-destroy=/dev/sdz9",
        "--encperf-volumes=2", "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--encperf-volumes: the partition target holds one volume at a time*"])
