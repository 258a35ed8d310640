"""Saving, comparing and gating through pytester, with a scripted engine (no disks, exact numbers).

The benchmark file swaps the runner's engine for one whose throughput is 100 MB/s times
SCRIPTED_SCALE (the volume side also times SCRIPTED_VOLUME_SCALE), with per-call noise from
SCRIPTED_NOISE, so each scenario knows exactly what the gate sees. ``fakecrypt`` and
``othercrypt`` are plain directories that call themselves encrypted: the gate judges them by
their paired ratio to plain, like any encrypted backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_encperf import storage
from pytest_encperf.gate import EXIT_REGRESSION
from tests.helpers.priors import quiet_noise_file, quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)

SCRIPTED_BENCHMARK = """
import os
from pytest_encperf.model import Measurement


class Scripted:
    def __init__(self):
        self.calls = 0

    @property
    def name(self):
        return os.environ.get("SCRIPTED_ENGINE", "scripted")

    def version(self):
        return "1"

    def prepare(self, directory, size):
        side = "baseline" if directory.parent.name.endswith("-plain") else "volume"
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
            engine=self.name, engine_version="1", bytes=moved, seconds=1.0,
            ios=moved // workload.block_size, lat_p50_us=50 / factor, lat_p99_us=100 / factor,
            lat_p999_us=200 / factor, cpu_seconds=0.1, io_mode=os.environ.get("SCRIPTED_IO_MODE", "direct"),
        )


ENGINE = Scripted()


def test_workload(encperf, encperf_workload):
    encperf.engine = ENGINE
    encperf.meter = None  # rounds of no time: what else runs on the machine is not the question here
    encperf.run(encperf_workload)
"""

CONFTEST = """
import os
import time
from pytest_encperf.backends.plain import PlainBackend


class FakeCrypt(PlainBackend):
    def describe(self, volume):
        return {**super().describe(volume), "encryption": "fake"}

    def open(self, volume):
        time.sleep(float(os.environ.get("SCRIPTED_MOUNT_DELAY", "0")))  # a slower unlock
        return super().open(volume)


def pytest_encperf_register_backends(config):
    return {"fakecrypt": FakeCrypt, "othercrypt": FakeCrypt}


def pytest_encperf_update_machine_info(config, machine_info):
    for key in ("kernel", "cpu_model"):
        if os.environ.get(f"SCRIPTED_{key.upper()}"):
            machine_info[key] = os.environ[f"SCRIPTED_{key.upper()}"]
"""

# Rounds get +0.1% and -0.1% in turn: each A B B A block gives each side one of each, so its
# medians are exactly the scale whichever call a worker starts from.
LOW_NOISE = "0.001,-0.001"
# Spread of +-20%: a 6% median drop is well inside it.
HIGH_NOISE = "0.2,-0.15,0.05,-0.2,0.15,-0.05,0.1,-0.1,0.0,0.18,-0.18,0.03"


@pytest.fixture
def gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_bench=SCRIPTED_BENCHMARK)
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv("SCRIPTED_NOISE", LOW_NOISE)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def run(
    pytester: pytest.Pytester, *args: str, rounds: int | None = 4, backends: str = "fakecrypt", **env: str
) -> pytest.RunResult:
    mp = pytest.MonkeyPatch()
    try:
        for key, value in env.items():
            mp.setenv(key, value)
        return pytester.runpytest(
            "--encperf-target=directory",
            f"--encperf-backends={backends}",
            f"--encperf-dir={pytester.path}",
            f"--encperf-storage={pytester.path / '.encperf'}",
            "--encperf-size=1MiB",
            *([f"--encperf-rounds={rounds}"] if rounds else []),
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


def baseline(pytester: pytest.Pytester, *args: str, backends: str = "fakecrypt", **env: str) -> None:
    """Save a baseline the default way (10 rounds per workload)."""
    result = run(pytester, "--encperf-save=main", *args, rounds=None, backends=backends, **env)
    result.assert_outcomes(passed=2 * len(backends.split(",")))


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
    assert entry["stats"]["rounds"] == 4
    # stats in seconds per GiB: 100 MB/s moves a GiB in 10.74 s
    assert entry["stats"]["median"] == pytest.approx(2**30 / 100e6, rel=0.01)
    assert len(entry["extra_info"]["encperf"]["rounds"]) == 4
    assert len(entry["extra_info"]["encperf"]["baseline_rounds"]) == 4
    assert entry["name"] == "SEQ1M-Q8T1-read[fakecrypt] per GiB"  # the unit of its stats
    # plain's side of the pair has an entry of its own for pytest-benchmark, which encperf reads past
    plain = next(
        e for e in doc["benchmarks"] if e["name"] == "SEQ1M-Q8T1-read[plain-beside-fakecrypt] per GiB"
    )
    assert plain["stats"]["rounds"] == 4 and plain["group"] == "SEQ1M-Q8T1-read"
    assert len(storage.load(run_file.path)[1]) == 2
    assert doc["machine_info"]["machine_id"] == run_file.machine_id
    assert doc["encperf"]["settings"]["size"] == str(1024 * 1024)


def test_saving_a_baseline_takes_more_rounds_unless_rounds_are_given(gate: pytest.Pytester) -> None:
    baseline(gate)
    run(gate, "--encperf-save=main", rounds=None, ENCPERF_ROUNDS="4").assert_outcomes(passed=2)
    run(gate, "--encperf-save=main", "--encperf-save-rounds=6", rounds=None).assert_outcomes(passed=2)
    counts = [len(storage.load(r.path)[1][0].rounds) for r in saved(gate)]
    assert counts == [10, 4, 6]


def test_rounds_run_abba_and_their_start_times_are_saved(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main", rounds=4).assert_outcomes(passed=2)
    (result, *_) = storage.load(saved(gate)[0].path)[1]
    order = sorted(
        [(m.started, "plain") for m in result.baseline_rounds]
        + [(m.started, "fakecrypt") for m in result.rounds]
    )
    assert [side for _, side in order] == ["plain", "fakecrypt", "fakecrypt", "plain"] * 2


def test_identical_run_passes_the_gate(gate: pytest.Pytester) -> None:
    baseline(gate)
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*encperf: compared with *0001_main.json*",
            "encperf: 0 regressions, 4 within threshold",
            "*fakecrypt*SEQ1M-Q8T1-read*throughput*x plain*x plain*4/10*paired ratios*10%*pass",
            "*plain*SEQ1M-Q8T1-read*throughput*MB/s*MB/s*4/10*rounds + run prior*10%*pass",
        ]
    )


def test_encrypted_regression_fails_with_status_and_message(gate: pytest.Pytester) -> None:
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5")
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%", SCRIPTED_VOLUME_SCALE="0.4")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        [
            "encperf: 2 regressions, 2 within threshold",
            "*FAIL: fakecrypt SEQ1M-Q8T1-read throughput: reference run 0.500 x plain -> now 0.400 x plain "
            "(-20.0%, 95% interval *; rule 10%): worse by 20.0% > 10% (at least *% worse, adjusted p=* <= "
            "0.01); detects >= *% here; evidence: paired ratios, adjusted p=*, 4 vs 10 rounds (4 rounds)",
            "*exit status 7 (performance gate failed)*",
            "*= 2 passed, 6 deselected in *",  # pytest's own result line survives
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_drift_of_the_whole_machine_does_not_fail_an_encrypted_backend(gate: pytest.Pytester) -> None:
    # both sides 30% slower: the encryption's ratio did not move; plain's own throughput is a finding
    # about the machine (one reference: plain's between-run prior), and fails the gate as such
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5")
    result = run(gate, "--encperf-fail=10%", SCRIPTED_VOLUME_SCALE="0.5", SCRIPTED_SCALE="0.7")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        [
            "encperf: 2 regressions, 2 within threshold",
            "*plain*SEQ1M-Q8T1-read*100.0 MB/s*70.0 MB/s*-30.0%*rounds + run prior*FAIL",
            "*FAIL: plain SEQ1M-Q8T1-read throughput*a finding about the machine (disk, kernel, load), "
            "not the encryption*",
        ]
    )
    assert "FAIL: fakecrypt" not in result.stdout.str()


def test_confirmation_rounds_decide_an_open_check_and_are_reported(gate: pytest.Pytester) -> None:
    noise = {"SCRIPTED_NOISE": "0.06,-0.06,0.03,-0.03"}
    baseline(gate, "--encperf-save-rounds=5", SCRIPTED_VOLUME_SCALE="0.5", **noise)
    # 2 noisy rounds against 6 (5 in whole A B B A blocks) leave a 34% drop undecided at 0.01 / 4
    # (4 gated checks: fakecrypt's and plain's of the two workloads; a 40% drop is decided there
    # already); the runner adds a block of pairs until it is decided
    result = run(gate, "--encperf-fail=10%", rounds=2, SCRIPTED_VOLUME_SCALE="0.33", **noise)
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        [
            "*SEQ1M-Q8T1-write*4/6 (+2 decided)*paired ratios*FAIL",
            "*4 vs 6 rounds (2 rounds + 2 to confirm, decided)",
        ]
    )
    options = ("--encperf-fail=10%", "--encperf-confirm-budget=0")
    off = run(gate, *options, rounds=2, SCRIPTED_VOLUME_SCALE="0.33", **noise)
    off.stdout.fnmatch_lines(["*SEQ1M-Q8T1-write*2/6 *paired ratios*"])  # no pairs added
    assert "to confirm" not in off.stdout.str()


def test_plain_is_gated_against_the_history_of_saved_runs(gate: pytest.Pytester) -> None:
    for noise in ("0.01,0.011,0.009", "-0.01,-0.011,-0.009", "0,0.001,-0.001"):  # medians 101, 99, 100
        baseline(gate, SCRIPTED_VOLUME_SCALE="0.5", SCRIPTED_NOISE=noise)
    # 3 saved runs alone give their spread 2 degrees of freedom: a quiet runner's own prior
    # (--encperf-noise) adds its 18, and 20% down is then decided
    cells = [("plain", w) for w in ("SEQ1M-Q8T1-read", "SEQ1M-Q8T1-write")]
    quiet = f"--encperf-noise={quiet_noise_file(gate.path, cells)}"
    result = run(gate, "--encperf-fail=10%", quiet, SCRIPTED_SCALE="0.8", SCRIPTED_VOLUME_SCALE="0.5")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        [
            "encperf: 2 regressions, 2 within threshold",
            "*history: 3 saved runs (*0003_main.json, *0002_main.json, *0001_main.json)",
            "*FAIL: plain SEQ1M-Q8T1-read throughput: reference run 100.0 MB/s -> now 80.0 MB/s*"
            "evidence: history*",
        ]
    )
    assert "FAIL: fakecrypt" not in result.stdout.str()  # its ratio to plain did not change
    # two saved runs are no history: plain is then judged by its between-run prior
    fewer = run(gate, "--encperf-fail=10%", "--encperf-history=2", SCRIPTED_SCALE="0.8")
    fewer.stdout.fnmatch_lines(["*FAIL: plain SEQ1M-Q8T1-read throughput*evidence: rounds + run prior*"])


def test_the_gate_names_the_users_prior_under_its_header_for_that_run_only(gate: pytest.Pytester) -> None:
    # --encperf-noise reaches the gate through the settings, not process state: the next run in
    # this process (pytester runs in-process) without it is judged with the built-in prior
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5")
    cells = [(b, w) for b in ("fakecrypt", "plain") for w in ("SEQ1M-Q8T1-read", "SEQ1M-Q8T1-write")]
    quiet = f"--encperf-noise={quiet_noise_file(gate.path, cells)}"
    users = run(gate, "--encperf-fail=10%", quiet, SCRIPTED_VOLUME_SCALE="0.5")
    users.stdout.fnmatch_lines(["*encperf: between-run prior: noise-quiet.json (10 runs, --encperf-noise)"])
    builtin = run(gate, "--encperf-fail=10%", SCRIPTED_VOLUME_SCALE="0.5")
    builtin.stdout.fnmatch_lines(
        ["*encperf: between-run prior: built-in, measured on the development machine*"]
    )
    assert "noise-quiet.json" not in builtin.stdout.str()


def test_noisy_drop_is_undecided_says_why_and_fails_under_strict(gate: pytest.Pytester) -> None:
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5", SCRIPTED_NOISE=HIGH_NOISE)
    options = ("--encperf-fail=5%", "--encperf-confirm-budget=0")
    env = {"SCRIPTED_NOISE": HIGH_NOISE, "SCRIPTED_VOLUME_SCALE": "0.47"}
    result = run(gate, *options, rounds=6, **env)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "encperf: 0 regressions, * undecided*",
            "*UNDECIDED: fakecrypt SEQ1M-Q8T1-*throughput*too noisy for 5%: detects >= *% here*",
            "*not checked: fakecrypt SEQ1M-Q8T1-* throughput: UNDECIDED*",
        ]
    )
    assert run(gate, *options, "--encperf-strict", rounds=6, **env).ret == EXIT_REGRESSION


@pytest.mark.parametrize(("threshold", "expected"), [("25%", pytest.ExitCode.OK), ("10%", EXIT_REGRESSION)])
def test_boundary_thresholds(gate: pytest.Pytester, threshold: str, expected: int) -> None:
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5")
    result = run(gate, "--encperf-compare=1", f"--encperf-fail={threshold}", SCRIPTED_VOLUME_SCALE="0.4")
    assert result.ret == expected  # 20% worse: within a 25% threshold, beyond a 10% one


def test_exactly_at_the_threshold_is_undecided_and_strict_fails(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main", rounds=2, SCRIPTED_VOLUME_SCALE="0.5").assert_outcomes(passed=2)
    options = ("--encperf-fail=20%", "--encperf-confirm-budget=0")
    result = run(gate, *options, rounds=2, SCRIPTED_VOLUME_SCALE="0.4")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*UNDECIDED: fakecrypt SEQ1M-Q8T1-read throughput*worse by 20.0%: neither*"])
    assert (
        run(gate, *options, "--encperf-strict", rounds=2, SCRIPTED_VOLUME_SCALE="0.4").ret == EXIT_REGRESSION
    )


def test_failing_test_keeps_its_own_exit_status(gate: pytest.Pytester) -> None:
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5")
    gate.makepyfile(test_broken="def test_broken():\n    assert False\n")
    result = run(gate, "--encperf-fail=10%", "-k", "Q8T1 or broken", SCRIPTED_VOLUME_SCALE="0.25")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAIL: fakecrypt SEQ1M-Q8T1-read throughput*"])


def test_max_overhead_within_one_run(gate: pytest.Pytester) -> None:
    # 2 vs 2 rounds cannot decide (p >= 1/6): a confirmation block makes it 4 vs 4
    result = run(gate, "--encperf-max-overhead=fakecrypt:seq-read:15%", rounds=2, SCRIPTED_VOLUME_SCALE="0.8")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        [
            "*FAIL: fakecrypt SEQ1M-Q8T1-read throughput: plain in this run 100.0 MB/s -> now 80.0 MB/s "
            "(-20.*%*evidence: this run's plain rounds*",
        ]
    )
    assert "SEQ1M-Q8T1-write throughput: plain in this run" not in result.stdout.str()  # seq-read only
    within = run(gate, "--encperf-max-overhead=25%", SCRIPTED_VOLUME_SCALE="0.8")
    assert within.ret == pytest.ExitCode.OK


def test_missing_baseline_is_said_and_fails_only_under_strict(gate: pytest.Pytester) -> None:
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "encperf: nothing was checked (no reference run to compare with: no saved run matches 'main' "
            "in *",
            "*not checked: no reference run to compare with*nothing was gated*",
            "*--encperf-strict fails then",
        ]
    )
    strict = run(gate, "--encperf-fail=10%", "--encperf-strict")
    assert strict.ret == EXIT_REGRESSION
    strict.stdout.fnmatch_lines(
        ["*not checked: no reference run to compare with: no saved run matches 'latest'*"]
    )


def test_a_backend_that_vanished_since_the_baseline_is_listed(gate: pytest.Pytester) -> None:
    baseline(gate, backends="fakecrypt,othercrypt")
    gone = run(gate, "--encperf-fail=10%")
    assert gone.ret == pytest.ExitCode.OK
    gone.stdout.fnmatch_lines(
        [
            "encperf: 0 regressions, 4 within threshold, 2 missing now",
            "*not checked: othercrypt SEQ1M-Q8T1-read: in *0001_main.json, not in this run",
        ]
    )
    assert run(gate, "--encperf-fail=10%", "--encperf-strict").ret == EXIT_REGRESSION
    assert run(gate, "--encperf-fail=10%", ENCPERF_STRICT="1").ret == EXIT_REGRESSION
    assert run(gate, "--encperf-fail=10%", backends="fakecrypt,othercrypt", ENCPERF_STRICT="1").ret == 0


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"args": ("--encperf-size=2MiB",)}, "size 1 MiB -> 2 MiB"),
        ({"env": {"SCRIPTED_ENGINE": "other"}}, "engine scripted -> other"),
        ({"env": {"SCRIPTED_IO_MODE": "buffered"}}, "I/O mode direct -> buffered"),
    ],
)
def test_runs_measured_differently_are_not_comparable(
    gate: pytest.Pytester, change: dict, expected: str
) -> None:
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5")
    args, env = change.get("args", ()), change.get("env", {})
    result = run(gate, "--encperf-fail=10%", *args, SCRIPTED_VOLUME_SCALE="0.25", **env)
    assert result.ret == pytest.ExitCode.OK  # a 50% drop, but not comparable: not a failure ...
    result.stdout.fnmatch_lines(
        [
            "encperf: 0 regressions, 0 within threshold, 4 not comparable",
            f"*not comparable: fakecrypt SEQ1M-Q8T1-read throughput: *{expected}*",
        ]
    )
    assert not [line for line in result.stdout.lines if line.endswith(" pass")]  # ... and never a pass
    assert run(gate, "--encperf-fail=10%", "--encperf-strict", *args, **env).ret == EXIT_REGRESSION


def test_a_kernel_update_still_compares_and_shows_what_changed(gate: pytest.Pytester) -> None:
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5", SCRIPTED_KERNEL="6.1.0-1-amd64")
    result = run(gate, "--encperf-fail=10%", SCRIPTED_VOLUME_SCALE="0.4", SCRIPTED_KERNEL="6.1.0-2-amd64")
    assert result.ret == EXIT_REGRESSION  # the new kernel made the backend slower: caught
    result.stdout.fnmatch_lines(
        [
            "*encperf: compared with x86_64-*/0001_main.json*",
            "*this machine differs from the reference run's: kernel 6.1.0-1-amd64 -> 6.1.0-2-amd64*",
            "*FAIL: fakecrypt SEQ1M-Q8T1-read*",
        ]
    )
    assert "comes from another machine" not in result.stdout.str()


def test_other_hardware_is_used_only_when_named_and_with_a_warning(gate: pytest.Pytester) -> None:
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5", SCRIPTED_CPU_MODEL="Other CPU")
    latest = run(gate, "--encperf-fail=10%")
    latest.stdout.fnmatch_lines(
        ["*not checked: no reference run to compare with: no saved run matches 'latest'*"]
    )
    named = run(gate, "--encperf-compare=main", "--encperf-fail=10%")
    named.stdout.fnmatch_lines(
        ["*warning: reference run x86_64-*/0001_main.json comes from another machine*"]
    )
    # a difference from it may be the hardware's: not checked, so strict fails unless it is accepted
    assert named.ret == pytest.ExitCode.OK
    named.stdout.fnmatch_lines(
        [
            "*not checked: reference run x86_64-*/0001_main.json was measured on other hardware "
            "(cpu_model Other CPU*"
        ]
    )
    strict = run(gate, "--encperf-compare=main", "--encperf-fail=10%", "--encperf-strict")
    assert strict.ret == EXIT_REGRESSION
    allowed = run(
        gate,
        "--encperf-compare=main",
        "--encperf-fail=10%",
        "--encperf-strict",
        "--encperf-allow-other-hardware",
    )
    assert allowed.ret == pytest.ExitCode.OK
    allowed.stdout.fnmatch_lines(
        ["*other hardware (cpu_model Other CPU*accepted by --encperf-allow-other-hardware*"]
    )
    assert "not checked" not in allowed.stdout.str()
    from_env = run(
        gate,
        "--encperf-compare=main",
        "--encperf-fail=10%",
        ENCPERF_STRICT="1",
        ENCPERF_ALLOW_OTHER_HARDWARE="1",
    )
    assert from_env.ret == pytest.ExitCode.OK


def test_corrupted_baseline_names_the_file_and_overwrites_nothing(gate: pytest.Pytester) -> None:
    baseline(gate)
    (first,) = saved(gate)
    first.path.write_text('{"benchmarks": [')
    result = run(gate, "--encperf-compare=main", "--encperf-fail=10%", "--encperf-save=main")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines([f"*cannot use the reference run: {first.path}: corrupted (not valid JSON*"])
    assert first.path.read_text() == '{"benchmarks": ['
    assert [r.path.name for r in saved(gate)] == ["0001_main.json", "0002_main.json"]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--encperf-fail=10", "it must end with a percentage such as 10%"),
        ("--encperf-fail=seq-reed:5%", "unknown part 'seq-reed'"),
        ("--encperf-fail=latency-p99:seq-read:5%", "workload 'seq-read' repeated or out of order"),
        ("--encperf-max-overhead=luks2:seq-read:-5%", "it must end with a percentage"),
        ("--encperf-save=../escape", "bad run name '../escape'"),
        ("--encperf-confirm-budget=soon", "bad duration 'soon'"),
        ("--encperf-history=-1", "bad saved runs '-1': expected a whole number from 0 to 1000"),
        ("--encperf-save-rounds=0", "bad rounds '0'"),
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
    assert markdown.startswith("## encperf\n\n**✅ encperf: 0 regressions, 2 within threshold**\n")
    assert "| fakecrypt | SEQ1M-Q8T1-read" in markdown
    assert "| this run's plain rounds | 50%    | pass      |" in markdown  # the check table
    assert summary.read_text() == "earlier step\n" + markdown
    properties = {
        prop.get("name"): prop.get("value")
        for prop in ET.parse(gate.path / "junit.xml").getroot().iter("property")
    }
    assert float(properties["encperf.fakecrypt.SEQ1M-Q8T1-read.mb_per_s"]) == pytest.approx(100.0, rel=0.01)
    assert "encperf.fakecrypt.SEQ1M-Q8T1-write.vs_plain_percent" in properties
    assert "encperf.fakecrypt.SEQ1M-Q8T1-read.lat_p99_us" in properties


def test_markdown_of_a_failed_gate_leads_with_the_verdict(gate: pytest.Pytester) -> None:
    baseline(gate, SCRIPTED_VOLUME_SCALE="0.5")
    run(gate, "--encperf-fail=10%", f"--encperf-markdown={gate.path / 'r.md'}", SCRIPTED_VOLUME_SCALE="0.4")
    lines = (gate.path / "r.md").read_text().splitlines()
    assert lines[2] == "**❌ encperf: 2 regressions, 2 within threshold** (reference run " + (
        f"`{saved(gate)[0].label}`)"
    )
    assert any(line.startswith("- FAIL: fakecrypt SEQ1M-Q8T1-read throughput") for line in lines)


def test_autosave_from_environment_names_the_run_after_commit_and_time(gate: pytest.Pytester) -> None:
    result = run(gate, ENCPERF_AUTOSAVE="yes")
    result.assert_outcomes(passed=2)
    (run_file,) = saved(gate)
    assert run_file.path.name.startswith("0001_")
    assert len(run_file.name.split("_")) >= 3  # <commit>_<date>_<time>


def test_update_machine_info_hook_changes_info_and_id(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=before").assert_outcomes(passed=2)
    gate.makeconftest(
        CONFTEST + "\n\ndef pytest_encperf_update_machine_info(config, machine_info):\n"
        "    machine_info['device_model'] = 'ci-pool-a'\n"
        "    machine_info['runner'] = 'r1'\n"
    )
    run(gate, "--encperf-save=after").assert_outcomes(passed=2)
    before, after = sorted(saved(gate), key=lambda r: r.name)[::-1]
    assert before.name == "before" and after.name == "after"
    assert before.machine_id != after.machine_id  # device_model is part of the id
    doc = json.loads(after.path.read_text())
    assert doc["machine_info"]["runner"] == "r1"


def test_xdist_workers_results_reach_the_controller(gate: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    gate.makepyfile(
        test_bench=SCRIPTED_BENCHMARK.replace("encperf_workload):", "encperf_workload, worker_id):")
    )
    result = gate.runpytest_subprocess(
        "-n",
        "2",
        "--encperf-target=directory",
        "--encperf-backends=fakecrypt",
        f"--encperf-dir={gate.path}",
        f"--encperf-storage={gate.path / '.encperf'}",
        "--encperf-size=1MiB",
        "--encperf-rounds=3",
        "--encperf-save=parallel",
        f"--junitxml={gate.path / 'junit.xml'}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=8)
    (run_file,) = saved(gate)
    assert len(storage.load(run_file.path)[1]) == 8
    names = {p.get("name") for p in ET.parse(gate.path / "junit.xml").getroot().iter("property")}
    assert "encperf.fakecrypt.RND4K-Q1T1-write.iops" in names


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
    assert "SEQ1M-Q8T1-read[fakecrypt]" in proc.stdout
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
    result.stdout.fnmatch_lines(["*cannot use the reference run: *0001_main.json: corrupted*"])


SCRIPTED_TASK_BENCHMARK = """
import os
from pathlib import Path
from pytest_encperf.model import Measurement
from pytest_encperf.realwork import ReferenceTree

REFERENCE = ReferenceTree(Path("."), 1 << 20, 1, 1 << 20, 10, 1 << 18, 20)
CALLS = [0]


def scripted_task(workload, data_dir, reference_tree, observe):
    noise = [float(x) for x in os.environ.get("SCRIPTED_NOISE", "0").split(",")]
    seconds = 10.0 * (1 + noise[CALLS[0] % len(noise)])
    CALLS[0] += 1
    if not data_dir.parent.name.endswith("-plain"):
        seconds *= float(os.environ.get("SCRIPTED_VOLUME_TIME", "1"))
    return Measurement(
        engine="tools", engine_version="1", bytes=reference_tree.tree_bytes, seconds=seconds, ios=10,
        lat_p50_us=0.0, lat_p99_us=0.0, lat_p999_us=0.0, cpu_seconds=0.1, io_mode="buffered",
        steps=(("create tar.gz", seconds / 2), ("extract tar.gz", seconds / 2)),
    )


def test_workload(encperf, encperf_workload):
    encperf.task = scripted_task
    encperf.reference_tree = lambda: REFERENCE
    encperf.run(encperf_workload)
"""


def run_task(pytester: pytest.Pytester, *args: str, **env: str) -> pytest.RunResult:
    """The scripted ``archive`` task on plain and fakecrypt: 10 s a round on plain, that times
    SCRIPTED_VOLUME_TIME on fakecrypt (run's session, its ``-k`` replaced by the later one)."""
    return run(
        pytester, "--encperf-profile=realwork", "--encperf-tree-size=1MiB", "-k", "archive", *args, **env
    )


def test_a_task_is_gated_on_its_seconds_lower_is_better(gate: pytest.Pytester) -> None:
    gate.makepyfile(test_bench=SCRIPTED_TASK_BENCHMARK)
    saved_run = run_task(gate, "--encperf-save=main", SCRIPTED_VOLUME_TIME="1.25")
    saved_run.assert_outcomes(passed=1)
    # the table: seconds, and vs plain as a change in speed (12.5 s against plain's 10 s: -20%)
    saved_run.stdout.fnmatch_lines(
        ["*archive tar.gz*", "*s mixed*", "*fakecrypt*12.5*", "*plain 10.0*", "*-20.0%*"]
    )
    (result, *_) = storage.load(saved(gate)[0].path)[1]
    assert result.workload.task == "archive" and result.workload.tree_size == 1024 * 1024
    first = result.rounds[0]
    assert [name for name, _ in first.steps] == ["create tar.gz", "extract tar.gz"]
    assert sum(seconds for _, seconds in first.steps) == pytest.approx(first.seconds)
    assert result.change_percent == pytest.approx(-20.0, abs=0.2)

    faster = run_task(gate, "--encperf-compare=main", "--encperf-fail=10%", SCRIPTED_VOLUME_TIME="1.0")
    assert faster.ret == pytest.ExitCode.OK
    faster.stdout.fnmatch_lines(["*fakecrypt*archive*seconds*x plain*x plain*pass*"])

    slower = run_task(gate, "--encperf-compare=main", "--encperf-fail=10%", SCRIPTED_VOLUME_TIME="1.6")
    assert slower.ret == EXIT_REGRESSION
    slower.stdout.fnmatch_lines(
        [
            "*FAIL: fakecrypt archive seconds: reference run 1.2* x plain -> now 1.[56]* x plain "
            "(+28.0%*worse by 28.0% > 10%*"
        ]
    )


def test_a_task_shows_in_the_markdown_report(gate: pytest.Pytester) -> None:
    gate.makepyfile(test_bench=SCRIPTED_TASK_BENCHMARK)
    markdown = gate.path / "report.md"
    result = run_task(gate, f"--encperf-markdown={markdown}", SCRIPTED_VOLUME_TIME="2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    text = markdown.read_text()
    # seconds, plain's beside them, and twice plain's time as half its speed
    assert "archive tar.gz" in text and "20.0<br>plain 10.0<br>-50.0% ±" in text


def test_lifecycle_cycles_are_saved_and_a_slower_mount_fails_the_gate(gate: pytest.Pytester) -> None:
    # a mount of 60 ms (a sleep), saved three times: the spread a life-cycle step is gated
    # against; at 20 ms, a few ms of scheduling on a busy runner made an unchanged mount +33%
    for _ in range(3):
        baseline(gate, "--encperf-lifecycle-cycles=5", SCRIPTED_MOUNT_DELAY="0.06")
    doc = json.loads(saved(gate)[0].path.read_text())
    assert doc["encperf"]["settings"]["lifecycle_cycles"] == "5"
    for steps in doc["encperf"]["lifecycle"].values():
        assert [len(cycles) for cycles in steps.values()] == [5] * 5
    # a quiet runner's prior of the step (--encperf-noise): 3 saved runs alone give its spread 2
    # degrees of freedom, too few to decide at the family's 1%
    quiet = f"--encperf-noise={quiet_noise_file(gate.path, [('fakecrypt', 'lifecycle-mount')], sd=0.05)}"
    rule = "--encperf-fail=10%,fakecrypt:lifecycle-mount:50%"
    one_saved = run(
        gate, "--encperf-compare=main", rule, "--encperf-lifecycle-cycles=5", "--encperf-history=1",
        SCRIPTED_MOUNT_DELAY="0.3",
    )  # fmt: skip
    assert one_saved.ret == pytest.ExitCode.OK  # one run against one is no evidence
    one_saved.stdout.fnmatch_lines(
        ["*fakecrypt*lifecycle-mount*lifecycle*5/5*cycles of both runs*50%*not gated*"]
    )
    same = run(
        gate,
        "--encperf-compare=main",
        rule,
        quiet,
        "--encperf-lifecycle-cycles=5",
        SCRIPTED_MOUNT_DELAY="0.06",
    )
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()
    same.stdout.fnmatch_lines(["*fakecrypt*lifecycle-mount*lifecycle*5/5*history*50%*pass*"])
    slower = run(
        gate,
        "--encperf-compare=main",
        rule,
        quiet,
        "--encperf-lifecycle-cycles=5",
        SCRIPTED_MOUNT_DELAY="0.3",
    )
    assert slower.ret == EXIT_REGRESSION
    slower.stdout.fnmatch_lines(
        [
            "encperf: 1 regression*",
            "*FAIL: fakecrypt lifecycle-mount lifecycle: reference run * s -> now 0.3* s *",
        ]
    )


def test_lifecycle_rules_with_one_cycle_say_the_life_cycle_is_not_gated(gate: pytest.Pytester) -> None:
    baseline(gate)
    result = run(gate, "--encperf-compare=main", "--encperf-fail=lifecycle:50%")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*fakecrypt: life cycle not gated: 1 cycles (this run 1, *0001_main.json 1; needs 3; "
         "--encperf-lifecycle-cycles)*"]
    )  # fmt: skip
