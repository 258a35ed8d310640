"""Saving, comparing and gating through pytester, with a scripted engine (no disks, exact numbers).

The benchmark file swaps the runner's engine for one whose throughput is 100 MB/s times
SCRIPTED_SCALE (volume side also times SCRIPTED_VOLUME_SCALE), with per-call noise from
SCRIPTED_NOISE, so each scenario knows exactly what the gate sees.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_encperf import storage
from pytest_encperf.compare import EXIT_REGRESSION

SCRIPTED_BENCHMARK = """
import os
from pytest_encperf.model import Measurement


class Scripted:
    name = "scripted"

    def __init__(self):
        self.calls = 0
        self.prepared = 0

    def version(self):
        return "1"

    def prepare(self, directory, size):
        # Runner.run prepares the volume's file first, then the baseline's
        side = "volume" if self.prepared % 2 == 0 else "baseline"
        self.prepared += 1
        path = directory / f"{side}.dat"
        path.touch()
        return path

    def io_mode(self, path):
        return "direct"

    def run(self, workload, path, *, runtime, direct, observe=None):
        noise = [float(x) for x in os.environ.get("SCRIPTED_NOISE", "0").split(",")]
        scale = float(os.environ.get("SCRIPTED_SCALE", "1"))
        if path.name == "volume.dat":
            scale *= float(os.environ.get("SCRIPTED_VOLUME_SCALE", "1"))
        factor = scale * (1 + noise[self.calls % len(noise)])
        self.calls += 1
        moved = int(100e6 * factor)
        return Measurement(
            engine="scripted", engine_version="1", bytes=moved, seconds=1.0,
            ios=moved // workload.block_size, lat_p50_us=50 / factor, lat_p99_us=100 / factor,
            lat_p999_us=200 / factor, cpu_seconds=0.1, io_mode="direct",
        )


ENGINE = Scripted()


def test_workload(encperf, encperf_workload):
    encperf.engine = ENGINE
    encperf.run(encperf_workload)
"""

LOW_NOISE = "0,0.001,-0.001"  # volume rounds get +0.1%, 0, -0.1%: median exactly the scale
# Spread of +-20%: a 6% median drop is well inside it.
HIGH_NOISE = "0.2,-0.15,0.05,-0.2,0.15,-0.05,0.1,-0.1,0.0,0.18,-0.18,0.03"


@pytest.fixture
def gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_bench=SCRIPTED_BENCHMARK)
    monkeypatch.setenv("SCRIPTED_NOISE", LOW_NOISE)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def run(pytester: pytest.Pytester, *args: str, rounds: int = 3, **env: str) -> pytest.RunResult:
    mp = pytest.MonkeyPatch()
    try:
        for key, value in env.items():
            mp.setenv(key, value)
        return pytester.runpytest(
            "--encperf-target=directory",
            "--encperf-backends=plain",
            f"--encperf-dir={pytester.path}",
            f"--encperf-storage={pytester.path / '.encperf'}",
            "--encperf-size=1MiB",
            f"--encperf-rounds={rounds}",
            "--encperf-warmup=0",  # the scripted noise sequence starts with the counted rounds
            "-k",
            "Q8T1",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",  # this module imports pytest_encperf
            *args,
        )
    finally:
        mp.undo()


def saved(pytester: pytest.Pytester) -> list[storage.SavedRun]:
    return storage.list_runs(pytester.path / ".encperf")


def test_save_writes_a_numbered_file_with_every_round(gate: pytest.Pytester) -> None:
    result = run(gate, "--encperf-save=main")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["encperf: saved *0001_main.json"])
    (run_file,) = saved(gate)
    doc = json.loads(run_file.path.read_text())
    assert set(doc) >= {"machine_info", "commit_info", "datetime", "version", "benchmarks"}
    entry = doc["benchmarks"][0]
    assert entry["group"] == "SEQ1M-Q8T1-read"
    assert entry["stats"]["rounds"] == 3
    # stats in seconds per GiB: 100 MB/s moves a GiB in 10.74 s
    assert entry["stats"]["median"] == pytest.approx(2**30 / 100e6, rel=0.01)
    assert len(entry["extra_info"]["encperf"]["rounds"]) == 3
    assert len(entry["extra_info"]["encperf"]["baseline_rounds"]) == 3
    assert doc["machine_info"]["machine_id"] == run_file.machine_id


def test_identical_run_passes_the_gate(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*compared with *0001_main.json*", "*gate: 0 failed, 2 passed*"])


def test_twenty_percent_regression_fails_with_status_and_message(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%", SCRIPTED_SCALE="0.8")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        [
            "*FAIL: plain SEQ1M-Q8T1-read throughput: baseline 100.0 MB/s -> now 80.0 MB/s (-20.0%; rule 10%)"
            ": worse by 20.0% > 10%, p=0.050 <= 0.05*Mann-Whitney U p=0.050 (3 vs 3 rounds), ratio 95% CI*",
            "*gate: 2 failed, 0 passed*",
            "*exit status 7 (performance gate failed)*",
            "*= 2 passed, 6 deselected in *",  # pytest's own result line survives
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_noisy_six_percent_drop_is_not_significant_and_says_why(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main", rounds=6, SCRIPTED_NOISE=HIGH_NOISE).assert_outcomes(passed=2)
    result = run(
        gate,
        "--encperf-compare",
        "--encperf-fail=5%",
        rounds=6,
        SCRIPTED_NOISE=HIGH_NOISE,
        SCRIPTED_SCALE="0.94",
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*not significant: plain SEQ1M-Q8T1-read throughput*(-6.0%; rule 5%): worse by 6.0% > 5%, "
            "but not significant: p=* > 0.05 (round-to-round CV *",
            "*gate: 0 failed, 0 passed, 2 over the threshold but not significant*",
        ]
    )


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        ("10%", pytest.ExitCode.OK),
        ("10.0%", pytest.ExitCode.OK),
        ("9.9%", EXIT_REGRESSION),
        ("0%", EXIT_REGRESSION),
    ],
)
def test_boundary_thresholds(gate: pytest.Pytester, threshold: str, expected: int) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    result = run(gate, "--encperf-compare=1", f"--encperf-fail={threshold}", SCRIPTED_SCALE="0.9")
    assert result.ret == expected  # exactly 10% worse: within a 10% threshold


def test_improvement_never_fails_and_latency_is_direction_aware(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    faster = run(gate, "--encperf-compare", "--encperf-fail=1%,latency-p99:1%", SCRIPTED_SCALE="1.5")
    assert faster.ret == pytest.ExitCode.OK
    # 0.8x throughput = 1.25x latency: the latency rule catches it, the loose throughput rule does not
    slower = run(
        gate, "--encperf-compare", "--encperf-fail=30%,seq-read:latency-p99:20%", SCRIPTED_SCALE="0.8"
    )
    assert slower.ret == EXIT_REGRESSION
    slower.stdout.fnmatch_lines(
        ["*FAIL: plain SEQ1M-Q8T1-read latency-p99: baseline 100.0 µs -> now 125.0 µs*"]
    )
    assert "FAIL: plain SEQ1M-Q8T1-write" not in slower.stdout.str()


def test_too_few_rounds_is_reported_not_failed(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main", rounds=2).assert_outcomes(passed=2)
    result = run(gate, "--encperf-compare", "--encperf-fail=5%", rounds=2, SCRIPTED_SCALE="0.5")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*2 vs 2 rounds cannot show significance at 0.05 (at least 3 rounds*"])


def test_failing_test_keeps_its_own_exit_status(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    gate.makepyfile(test_broken="def test_broken():\n    assert False\n")
    result = run(
        gate, "--encperf-compare", "--encperf-fail=10%", "-k", "Q8T1 or broken", SCRIPTED_SCALE="0.5"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAIL: plain SEQ1M-Q8T1-read throughput*"])


def test_max_overhead_within_one_run(gate: pytest.Pytester) -> None:
    result = run(gate, "--encperf-max-overhead=plain:seq-read:15%", SCRIPTED_VOLUME_SCALE="0.8")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        ["*FAIL: plain SEQ1M-Q8T1-read throughput: plain in this run 100.0 MB/s -> now 80.0 MB/s (-20.0%*"]
    )
    assert (
        "SEQ1M-Q8T1-write throughput: plain in this run" not in result.stdout.str()
    )  # rule is seq-read only
    within = run(gate, "--encperf-max-overhead=25%", SCRIPTED_VOLUME_SCALE="0.8")
    assert within.ret == pytest.ExitCode.OK


def test_missing_baseline_is_a_clear_message_not_a_failure(gate: pytest.Pytester) -> None:
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*no baseline to compare with: no saved run matches 'main' in *nothing was gated*"]
    )


def test_corrupted_baseline_names_the_file_and_overwrites_nothing(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    (baseline,) = saved(gate)
    baseline.path.write_text('{"benchmarks": [')
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%", "--encperf-save=main")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines([f"*cannot use the baseline: {baseline.path}: corrupted (not valid JSON*"])
    assert baseline.path.read_text() == '{"benchmarks": ['
    assert [r.path.name for r in saved(gate)] == ["0001_main.json", "0002_main.json"]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--encperf-fail=10", "it must end with a percentage such as 10%"),
        ("--encperf-fail=seq-reed:5%", "unknown part 'seq-reed'"),
        ("--encperf-fail=latency-p99:seq-read:5%", "workload 'seq-read' repeated or out of order"),
        ("--encperf-max-overhead=luks2:seq-read:-5%", "it must end with a percentage"),
        ("--encperf-save=../escape", "bad run name '../escape'"),
    ],
)
def test_bad_gate_options_are_usage_errors_with_the_grammar(
    gate: pytest.Pytester, option: str, message: str
) -> None:
    result = gate.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    if "fail" in option or "overhead" in option:
        assert "[BACKEND:][WORKLOAD:][METRIC:]PERCENT%" in result.stderr.str()


def test_bad_switch_in_environment_is_a_usage_error(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENCPERF_AUTOSAVE", "maybe")
    result = gate.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--encperf-autosave (from ENCPERF_AUTOSAVE): bad switch value 'maybe'" in result.stderr.str()


def test_command_line_flag_beats_environment(gate: pytest.Pytester) -> None:
    result = run(gate, "--encperf-autosave", ENCPERF_AUTOSAVE="no")
    result.assert_outcomes(passed=2)
    assert len(saved(gate)) == 1


def test_reports_json_markdown_github_summary_and_junit(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = gate.path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(
        gate,
        f"--encperf-json={gate.path / 'out/results.json'}",
        f"--encperf-markdown={gate.path / 'report.md'}",
        f"--junitxml={gate.path / 'junit.xml'}",
        "--encperf-max-overhead=50%",
    )
    result.assert_outcomes(passed=2)
    results = storage.results_of(json.loads((gate.path / "out/results.json").read_text()))
    assert sorted(r.workload.name for r in results) == ["SEQ1M-Q8T1-read", "SEQ1M-Q8T1-write"]
    markdown = (gate.path / "report.md").read_text()
    assert "| plain     | SEQ1M-Q8T1-read" in markdown
    assert "**Gate: ✅ passed**" in markdown
    assert summary.read_text() == "earlier step\n" + markdown
    properties = {
        prop.get("name"): prop.get("value")
        for prop in ET.parse(gate.path / "junit.xml").getroot().iter("property")
    }
    assert float(properties["encperf.plain.SEQ1M-Q8T1-read.mb_per_s"]) == pytest.approx(100.0, rel=0.01)
    assert "encperf.plain.SEQ1M-Q8T1-write.vs_plain_percent" in properties
    assert "encperf.plain.SEQ1M-Q8T1-read.lat_p99_us" in properties


def test_autosave_from_environment_names_the_run_after_commit_and_time(gate: pytest.Pytester) -> None:
    result = run(gate, ENCPERF_AUTOSAVE="yes")
    result.assert_outcomes(passed=2)
    (run_file,) = saved(gate)
    assert run_file.path.name.startswith("0001_")
    assert len(run_file.name.split("_")) >= 3  # <commit>_<date>_<time>


def test_update_machine_info_hook_changes_info_and_id(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=before").assert_outcomes(passed=2)
    gate.makeconftest(
        "def pytest_encperf_update_machine_info(config, machine_info):\n"
        "    machine_info['device_model'] = 'ci-pool-a'\n"
        "    machine_info['runner'] = 'r1'\n"
    )
    run(gate, "--encperf-save=after").assert_outcomes(passed=2)
    before, after = sorted(saved(gate), key=lambda r: r.name)[::-1]
    assert before.name == "before" and after.name == "after"
    assert before.machine_id != after.machine_id  # device_model is part of the id
    doc = json.loads(after.path.read_text())
    assert doc["machine_info"]["runner"] == "r1"


def test_other_machines_baseline_is_used_with_a_warning(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    (original,) = saved(gate)
    other = original.path.parent.parent / "x86_64-000000000000"
    other.mkdir()
    original.path.rename(other / original.path.name)
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*warning: baseline x86_64-000000000000/0001_main.json comes from another machine*"]
    )


def test_xdist_workers_results_reach_the_controller(gate: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    gate.makepyfile(
        test_bench=SCRIPTED_BENCHMARK.replace("encperf_workload):", "encperf_workload, worker_id):")
    )
    result = gate.runpytest_subprocess(
        "-n",
        "2",
        "--encperf-target=directory",
        "--encperf-backends=plain",
        f"--encperf-dir={gate.path}",
        f"--encperf-storage={gate.path / '.encperf'}",
        "--encperf-size=1MiB",
        "--encperf-save=parallel",
        f"--junitxml={gate.path / 'junit.xml'}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=8)
    (run_file,) = saved(gate)
    assert len(storage.load(run_file.path)[1]) == 8
    names = {p.get("name") for p in ET.parse(gate.path / "junit.xml").getroot().iter("property")}
    assert "encperf.plain.RND4K-Q1T1-write.iops" in names


def test_pytest_benchmark_compare_reads_saved_runs(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    (run_file,) = saved(gate)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_benchmark",
            "--storage",
            f"file://{gate.path / '.encperf'}",
            "compare",
            f"{run_file.machine_id}/0001",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "SEQ1M-Q8T1-read[plain]" in proc.stdout
    assert "Median" in proc.stdout
    assert "Failed to load" not in proc.stdout + proc.stderr


def test_gate_files_live_where_asked(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main").assert_outcomes(passed=2)
    assert Path(gate.path / ".encperf").is_dir()
    assert not list(gate.path.glob("encperf-*")), "run directory left behind"


def test_gate_error_is_printed_even_without_results(gate: pytest.Pytester) -> None:
    storage_dir = gate.path / ".encperf" / "m"
    storage_dir.mkdir(parents=True)
    (storage_dir / "0001_main.json").write_text("not json")
    result = run(gate, f"--encperf-compare={storage_dir / '0001_main.json'}", "-k", "nothing-matches")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED  # pytest's own status stays
    result.stdout.fnmatch_lines(["*cannot use the baseline: *0001_main.json: corrupted*"])
