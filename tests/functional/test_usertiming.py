"""encperf.time(fn) end to end through pytester, with a test file written against the documented API
only (docs/how-to/your-workload.md), on the directory target against ``fakecrypt`` (a plain
directory that calls itself encrypted, tests/functional/test_gate.py's): its rows in the summary
and the JSON, a saved run, the gate on its seconds, the exception path, xdist. The same on plain and
fscrypt: tests/integration/test_usertiming_integration.py.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from pytest_encperf.benchmarkentries import measured
from pytest_encperf.gate import EXIT_REGRESSION
from tests.functional.test_gate import CONFTEST
from tests.helpers.priors import quiet_noise_file

# documented API only: the fixtures, encperf.time and its Result; EXAMPLE_SLOWDOWN makes the
# function that much slower on the encrypted side only; EXAMPLE_RAISE_ON=<side>:<round> raises there
USER_TESTS = """
import os
import time


def test_user_work(encperf, encperf_volume):
    calls = {"n": 0}

    def setup(path):
        (path / "input.txt").write_text("data")

    def work(path):
        assert (path / "input.txt").read_text() == "data"  # setup ran, in this round's directory
        assert not (path / "output.txt").exists()  # a fresh directory each round
        (path / "output.txt").write_text("x" * 4096)
        encrypted = path.is_relative_to(encperf_volume.data_dir)
        calls["n"] += 1
        side = "encrypted" if encrypted else "plain"
        if os.environ.get("EXAMPLE_RAISE_ON") == side:
            raise ValueError("the user's function broke")
        # 0.2 s: long beside a loaded machine's scheduling jitter, which a 2x must stand out from
        time.sleep(0.2 * (float(os.environ.get("EXAMPLE_SLOWDOWN", "1")) if encrypted else 1))

    # no sync in the time: sync -f waits for whatever else the machine wrote to that file system,
    # which would swamp the 2x this gate is tested with; no cache drop before each round: beside a
    # busy machine that takes a second or more a round, and nothing here reads what it would drop
    # (test_named keeps both defaults)
    result = encperf.time(work, setup=setup, sync=False, drop_caches=False)
    assert result.workload.name == "test_user_work"
    assert len(result.rounds) == len(result.baseline_rounds) > 0
    assert all(m.seconds >= 0.2 for m in result.rounds + result.baseline_rounds)


def test_named(encperf):
    result = encperf.time(lambda path: (path / "f").write_text("x"), name="my-step")  # synced, cache dropped
    assert result.workload.name == "my-step"
"""

NAME = "test_user_work"


@pytest.fixture
def user(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_user=USER_TESTS)
    pytester.makeconftest(CONFTEST)
    monkeypatch.delenv("EXAMPLE_SLOWDOWN", raising=False)
    monkeypatch.delenv("EXAMPLE_RAISE_ON", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def run(pytester: pytest.Pytester, *args: str, **env: str) -> pytest.RunResult:
    mp = pytest.MonkeyPatch()
    try:
        for key, value in env.items():
            mp.setenv(key, value)
        return pytester.runpytest_subprocess(
            "--encperf-target=directory",
            "--encperf-backends=fakecrypt",
            f"--encperf-dir={pytester.path}",
            f"--encperf-storage={pytester.path / '.encperf'}",
            "--encperf-rounds=4",
            "--encperf-warmup=1",
            "-p",
            "no:cacheprovider",
            *args,
            timeout=300,
        )
    finally:
        mp.undo()


def test_a_timed_function_is_reported_saved_and_gated_on_its_seconds(user: pytest.Pytester) -> None:
    report = user.path / "run.json"
    html = importlib.util.find_spec("matplotlib") is not None  # the HTML report's charts need it
    first = run(
        user, "--encperf-save=ref", "--encperf-rounds=8", f"--encperf-json={report}",
        "--encperf-markdown=run.md", *(["--encperf-html=run.html"] if html else []),
    )  # fmt: skip
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["*other workloads*", f"*{NAME}*my-step*", "*fakecrypt*", "*plain*"])
    first.stdout.fnmatch_lines(["encperf: saved *0001_ref.json"])
    entries = {e["params"]["workload"]: e for e in measured(json.loads(report.read_text())["benchmarks"])}
    assert sorted(entries) == ["my-step", NAME]
    entry = entries[NAME]
    assert entry["name"] == f"{NAME}[fakecrypt] per call"
    assert entry["stats"]["rounds"] == 8 and entry["stats"]["min"] >= 0.2  # seconds per call
    assert entry["extra_info"]["vs_plain_percent"] is not None
    assert NAME in (user.path / "run.md").read_text()
    assert not html or NAME in (user.path / "run.html").read_text()
    # the function's directories went with the rounds
    assert list(user.path.rglob("encperf-time")) == []

    noise = quiet_noise_file(user.path, [(b, w) for b in ("fakecrypt", "plain") for w in (NAME, "my-step")])
    gate = (  # 8 rounds: a 2x slower function is decided whatever else the machine runs meanwhile
        "--encperf-compare=ref", f"--encperf-fail={NAME}:seconds:20%", f"--encperf-noise={noise}",
        "--encperf-rounds=8",
    )  # fmt: skip
    unchanged = run(user, *gate)
    assert unchanged.ret == pytest.ExitCode.OK, unchanged.stdout.str()
    unchanged.stdout.fnmatch_lines([f"*fakecrypt*{NAME}*seconds*pass*"])
    slower = run(user, *gate, EXAMPLE_SLOWDOWN="2")
    assert slower.ret == EXIT_REGRESSION, slower.stdout.str()
    slower.stdout.fnmatch_lines([f"*FAIL: fakecrypt {NAME} seconds*"])
    # the short form, NAME:20%, is the same check (seconds, the task's default metric)
    short = run(user, "--encperf-compare=ref", f"--encperf-fail={NAME}:20%", f"--encperf-noise={noise}",
                "--encperf-rounds=8", EXAMPLE_SLOWDOWN="2")  # fmt: skip
    assert short.ret == EXIT_REGRESSION, short.stdout.str()


@pytest.mark.parametrize("side", ["plain", "encrypted"])
def test_an_exception_in_the_function_fails_its_test_naming_backend_side_and_round(
    user: pytest.Pytester, side: str
) -> None:
    result = run(user, "-k", NAME, EXAMPLE_RAISE_ON=side)
    result.assert_outcomes(failed=1)
    # A B B A: plain runs first; the volume's first round comes after plain's (the warm-up)
    result.stdout.fnmatch_lines(
        [
            f"*UserFunctionError: encperf.time({NAME}) on fakecrypt: the function raised on the {side} "
            "side (*encperf-time) in round 1 (warm-up): ValueError: the user's function broke*"
        ]
    )
    result.stdout.fnmatch_lines(["*ValueError: the user's function broke"])  # the user's traceback
    assert list(user.path.rglob("encperf-time")) == []
    assert "could not" not in result.stdout.str()  # the volumes were torn down


def test_under_xdist_each_workers_results_reach_the_report(user: pytest.Pytester) -> None:
    report = user.path / "run.json"
    result = run(user, "-n", "2", f"--encperf-json={report}", "--encperf-backends=fakecrypt,othercrypt")
    result.assert_outcomes(passed=4)
    entries = measured(json.loads(report.read_text())["benchmarks"])
    assert sorted((e["params"]["backend"], e["params"]["workload"]) for e in entries) == [
        ("fakecrypt", "my-step"), ("fakecrypt", NAME), ("othercrypt", "my-step"), ("othercrypt", NAME)
    ]  # fmt: skip


# a parametrized test and a name given in the call: what a gate rule can name (issue 27's follow-ups)
NAMED_TESTS = """
import time

import pytest


def work(path):
    (path / "f").write_text("x")
    time.sleep(0.02)  # steady beside a loaded machine's jitter


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_sqlite(encperf, mode):
    assert encperf.time(work, sync=False, drop_caches=False).workload.name == f"test_sqlite[{mode}]"


def test_named(encperf):
    assert encperf.time(work, name="my-step", sync=False, drop_caches=False).workload.name == "my-step"
"""


@pytest.fixture
def named(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_named=NAMED_TESTS)
    pytester.makeconftest(CONFTEST)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def test_a_rule_names_a_function_by_its_name_given_in_the_call_and_a_test_by_its_name(
    named: pytest.Pytester,
) -> None:
    """A name given in the call (``name="my-step"``) is known only once the function ran: a rule
    naming it is taken (before, the run refused it at the start as an unknown part), and checked at
    the end. A test's name without parameters selects each parametrization (before, it selected
    nothing, silently)."""
    result = run(named, "--encperf-max-overhead=my-step:seconds:900%,test_sqlite:seconds:900%")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*fakecrypt*my-step*seconds*my-step:seconds:900%*"])
    for mode in ("wal", "delete"):
        result.stdout.fnmatch_lines([f"*fakecrypt*test_sqlite?{mode}?*seconds*test_sqlite:seconds:900%*"])


def test_a_rule_that_named_nothing_measured_is_a_usage_error_at_the_end(named: pytest.Pytester) -> None:
    result = run(named, "--encperf-max-overhead=my-stpe:seconds:900%")
    result.assert_outcomes(passed=3)  # the tests ran: my-stpe could have been a name given in a call
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        [
            "*--encperf-max-overhead: unknown part 'my-stpe': not a backend, metric, workload or a job "
            "section of --encperf-fio-job (none: --encperf-fio-job not given), nor a test, timed function or "
            "test's own workload measured by this run (test_sqlite?wal?, test_sqlite?delete?, my-step)*"
        ]
    )


def test_a_rule_naming_what_no_collected_test_can_measure_is_a_usage_error_at_once(
    named: pytest.Pytester,
) -> None:
    named.makepyfile(test_named="def test_other():\n    pass\n")
    result = run(named, "--encperf-fail=my-step:20%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--encperf-fail: unknown part 'my-step': *nor a test, timed function or test's own workload "
            "collected (none)*"
        ]
    )
    result.assert_outcomes()  # nothing ran
