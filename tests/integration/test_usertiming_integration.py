"""encperf.time on plain and fscrypt (root, container target), through a test file written against
the documented API only: rows, JSON, a saved run, the gate failing with exit 7 when the function
is 2x slower on the encrypted side only and passing when unchanged, the exception path."""

from __future__ import annotations

import json

import pytest

from pytest_encperf.benchmarkentries import measured
from pytest_encperf.gate import EXIT_REGRESSION
from tests.functional.test_usertiming import NAME, USER_TESTS
from tests.helpers.priors import quiet_noise_file
from tests.helpers.support import disk_dir

pytestmark = pytest.mark.integration


def run(pytester: pytest.Pytester, *args: str, **env: str) -> pytest.RunResult:
    mp = pytest.MonkeyPatch()
    try:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("GITHUB_STEP_SUMMARY", raising=False)
        return pytester.runpytest_subprocess(
            f"--encperf-dir={disk_dir()}",
            f"--encperf-storage={pytester.path / '.encperf'}",
            "--encperf-backends=fscrypt",
            "--encperf-size=4MiB",
            "--encperf-rounds=4",
            "--encperf-warmup=1",
            "-p",
            "no:cacheprovider",
            *args,
            timeout=600,
        )
    finally:
        mp.undo()


def test_a_timed_function_on_plain_and_fscrypt_is_reported_saved_and_gated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    report = pytester.path / "run.json"
    first = run(
        pytester, "--encperf-save=ref", f"--encperf-json={report}", "--encperf-rounds=8", EXAMPLE_SLOWDOWN="1"
    )
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["*other workloads*", f"*{NAME}*my-step*", "*fscrypt*", "*plain*"])
    first.stdout.fnmatch_lines(["encperf: saved *0001_ref.json"])
    entries = {e["params"]["workload"]: e for e in measured(json.loads(report.read_text())["benchmarks"])}
    assert sorted(entries) == ["my-step", NAME]
    assert entries[NAME]["params"]["backend"] == "fscrypt"
    assert entries[NAME]["extra_info"]["vs_plain_percent"] is not None

    noise = quiet_noise_file(pytester.path, [(b, w) for b in ("fscrypt", "plain") for w in (NAME, "my-step")])
    gate = (  # 8 rounds: a 2x slower function is decided whatever else the machine runs meanwhile
        "--encperf-compare=ref", f"--encperf-fail={NAME}:seconds:20%", f"--encperf-noise={noise}",
        "--encperf-rounds=8",
    )  # fmt: skip
    unchanged = run(pytester, *gate, EXAMPLE_SLOWDOWN="1")
    assert unchanged.ret == pytest.ExitCode.OK, unchanged.stdout.str()
    slower = run(pytester, *gate, EXAMPLE_SLOWDOWN="2")
    assert slower.ret == EXIT_REGRESSION, slower.stdout.str()
    slower.stdout.fnmatch_lines([f"*FAIL: fscrypt {NAME} seconds*"])

    broken = run(pytester, "-k", NAME, EXAMPLE_RAISE_ON="encrypted")
    broken.assert_outcomes(failed=1)
    broken.stdout.fnmatch_lines(
        [f"*encperf.time({NAME}) on fscrypt: the function raised on the encrypted side*"]
    )
