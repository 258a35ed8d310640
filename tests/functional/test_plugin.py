"""Plugin behaviour through pytester: options, fixtures, parametrization, skips, summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_encperf.lifecycledata import LIFECYCLE_STEPS

# plugin behaviour, not engines: the in-process engine, no warm-up (fio's start-up per round
# would make these runs ten times longer; tests/integration/test_profiles_integration.py runs fio)
QUICK = [
    "--encperf-size=1MiB", "--encperf-runtime=0.02", "--encperf-rounds=2", "--encperf-warmup=0",
    "--encperf-engine=native", "-p", "no:cacheprovider",
]  # fmt: skip

BENCHMARK = """
def test_workload(encperf, encperf_workload):
    result = encperf.run(encperf_workload)
    assert len(result.rounds) == len(result.baseline_rounds)
"""

# A backend that keeps its volume in a directory and logs each lifecycle step.
RECORDING_CONFTEST = """
from pathlib import Path
from pytest_encperf.backends import BackendBase, Param, Volume

LOG = Path(__file__).parent / "lifecycle.log"

def log(line):
    with LOG.open("a") as f:
        f.write(line + "\\n")

class Recording(BackendBase):
    params = (Param("tag", help="a label"), Param("problem", help="make problems() report this"))

    def problems(self, target):
        reason = self.spec.param_dict.get("problem")
        return [reason] if reason else []

    def create(self, target, workdir):
        log(f"create {self.spec}")
        volume = Volume(self, target, workdir)
        volume.created.push("destroy", lambda: log(f"destroy {self.spec}"))
        return volume

    def mount(self, volume):
        log(f"mount {self.spec}")
        volume.mounted.push("unmount", lambda: log(f"unmount {self.spec}"))
        volume.data_dir = volume.workdir
        return volume.data_dir

    def describe(self, volume):
        return {"encryption": "none"}

def pytest_encperf_register_backends(config):
    return {"recording": Recording}
"""


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_bench=BENCHMARK)
    return pytester


def run_directory(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--encperf-target=directory", f"--encperf-dir={pytester.path}", *QUICK, *args)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--encperf-size=12Q",
            "--encperf-size: bad size '12Q': expected e.g. 256MiB, 1GiB, 512M or a byte count",
        ),
        ("--encperf-backends=nosuch", "unknown backend 'nosuch' (available: "),
        ("--encperf-rounds=-2", "bad rounds '-2': expected a whole number from 1 to 10000"),
        ("--encperf-runtime=soon", "bad duration 'soon'"),
        ("--encperf-target=cloud", "expected one of container, partition, directory"),
        ("--encperf-engine=dd", "expected one of fio, native, auto"),
        ("--encperf-warmup=x", "bad warm-up rounds 'x': expected a whole number from 0 to 10000"),
        ("--encperf-steady-cv=200%", "expected off, or a CV such as 5% or 0.05"),
        ("--encperf-steady-budget=0", "bad duration '0': must be more than zero"),
        ("--encperf-profile=atto9", "expected a comma list of cdm, cdm-nvme, cdm-legacy, dd, atto"),
        ("--encperf-dir=/nonexistent/encperf", "does not exist"),
    ],
)
def test_bad_option_is_a_usage_error_with_accepted_forms(
    bench: pytest.Pytester, option: str, message: str
) -> None:
    result = bench.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_ini_and_environment_twins(bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    bench.makeini(
        "[pytest]\nencperf_rounds = 4\nencperf_backends = nosuch\n"
        "encperf_warmup = 0\nencperf_engine = native\nencperf_steady_cv = off\n"
    )
    monkeypatch.setenv("ENCPERF_BACKENDS", "plain")  # environment beats ini
    result = bench.runpytest(
        "--encperf-target=directory",
        f"--encperf-dir={bench.path}",
        "--encperf-size=1MiB",
        "--encperf-runtime=0.02",
    )
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*engine: native*4 rounds x 0.02 s*", "*0 warm-up round(s)*"])


def test_options_are_documented_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*encryption overhead benchmarks*", "*--encperf-backends=SPECS*"])
    assert "ENCPERF_ROUNDS" in result.stdout.str()


def test_directory_target_end_to_end_prints_the_table(bench: pytest.Pytester) -> None:
    result = run_directory(bench, "--encperf-backends=plain")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(
        [
            "*encperf: encryption overhead vs plain*",
            "*SEQ1M Q8T1*SEQ1M Q1T1*RND4K Q32T1*RND4K Q1T1*",
            "*IOPS read / write*",
            "*│ plain *│ * / *",  # the backend's row (here plain against itself) ...
            "*│ plain * / *",  # ... its own plain rounds ...
            "*│ *%*",  # ... and the change between the two
        ]
    )
    result.stdout.fnmatch_lines(["*plain*RND4K-Q1T1-write*"])
    assert not list(bench.path.glob("encperf-*")), "run directory left behind"


def test_test_ids_name_backend_and_workload(bench: pytest.Pytester) -> None:
    result = run_directory(bench, "--encperf-backends=plain", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_bench.py::test_workload[plain-SEQ1M-Q8T1-read]", "*RND4K-Q1T1-write]"])


def test_volume_life_cycle_is_timed_printed_and_saved(bench: pytest.Pytester) -> None:
    bench.makeconftest(RECORDING_CONFTEST)
    out = bench.path / "run.json"
    result = run_directory(
        bench, "--encperf-backends=recording:tag=a", f"--encperf-json={out}", "-k", "Q1T1-read"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "volume life cycle, seconds*",
            "backend * create * mount * first write * unmount * destroy * cycles",
            "plain *",
            "recording:tag=a *",
        ]
    )
    saved = json.loads(out.read_text())["encperf"]["lifecycle"]
    assert set(saved) == {"plain", "recording:tag=a"}
    for steps in saved.values():
        assert list(steps) == ["create", "mount", "first write", "unmount", "destroy"]
        # seconds per cycle; one cycle by default (--encperf-lifecycle-cycles)
        assert all(len(cycles) == 1 and cycles[0] > 0 for cycles in steps.values())
    assert not (bench.path / ".encperf-first-write").exists()


def test_more_lifecycle_cycles_follow_the_benchmark_volume_on_the_same_target(bench: pytest.Pytester) -> None:
    sized = 'log(f"create {self.spec} {target.kind} {target.size}")'
    bench.makeconftest(RECORDING_CONFTEST.replace('log(f"create {self.spec}")', sized))
    out = bench.path / "run.json"
    options = ("--encperf-backends=recording", "--encperf-lifecycle-cycles=3", f"--encperf-json={out}")
    result = run_directory(bench, *options, "-k", "SEQ1M-Q1T1")
    result.assert_outcomes(passed=2)
    lines = (bench.path / "lifecycle.log").read_text().splitlines()
    cycle = [f"create recording directory {1024 * 1024}", "mount recording", "unmount recording"]
    cycle.append("destroy recording")
    assert lines == cycle * 3  # the benchmark volume, then two fresh volumes, each gone before the next
    document = json.loads(out.read_text())["encperf"]
    assert [len(document["lifecycle"]["recording"][step]) for step in LIFECYCLE_STEPS] == [3] * 5
    assert [len(document["lifecycle"]["plain"][step]) for step in LIFECYCLE_STEPS] == [3] * 5
    assert document["settings"]["lifecycle_cycles"] == "3"


def test_volume_lifecycle_order(bench: pytest.Pytester) -> None:
    bench.makeconftest(RECORDING_CONFTEST)
    result = run_directory(
        bench, "--encperf-backends=recording:tag=a,recording:tag=b", "--encperf-profile=cdm"
    )
    result.assert_outcomes(passed=16)
    lines = (bench.path / "lifecycle.log").read_text().splitlines()
    # each volume is created once, lives through its tests, and is gone before the next one
    assert lines == [
        "create recording:tag=a",
        "mount recording:tag=a",
        "unmount recording:tag=a",
        "destroy recording:tag=a",
        "create recording:tag=b",
        "mount recording:tag=b",
        "unmount recording:tag=b",
        "destroy recording:tag=b",
    ]


def test_backend_with_problems_is_skipped_with_reason_and_listed(bench: pytest.Pytester) -> None:
    bench.makeconftest(RECORDING_CONFTEST)
    result = run_directory(bench, "--encperf-backends=recording:problem=needs a unicorn,plain", "-rs")
    result.assert_outcomes(passed=8, skipped=8)
    result.stdout.fnmatch_lines(
        [
            "*recording:problem=needs a unicorn*skipped: needs a unicorn*",
            "SKIPPED * recording:problem=needs a unicorn: needs a unicorn",
        ]
    )


def test_unavailable_baseline_skips_everything_with_reason(bench: pytest.Pytester) -> None:
    result = bench.runpytest("--encperf-target=directory", "--encperf-dir=/dev/shm", *QUICK, "-rs")
    result.assert_outcomes(skipped=8)
    result.stdout.fnmatch_lines(["*baseline unavailable: plain: /dev/shm is on tmpfs (memory, not a disk)*"])


def test_failure_in_create_is_reported_and_torn_down(bench: pytest.Pytester) -> None:
    bench.makeconftest(
        RECORDING_CONFTEST
        + """
class Broken(Recording):
    def mount(self, volume):
        super().mount(volume)
        raise RuntimeError("mount exploded")

def pytest_encperf_register_backends(config):
    return {"broken": Broken}
"""
    )
    result = run_directory(bench, "--encperf-backends=broken")
    result.assert_outcomes(errors=8)
    result.stdout.fnmatch_lines(["*mount exploded*"])
    lines = (Path(bench.path) / "lifecycle.log").read_text().splitlines()
    assert lines == ["create broken", "mount broken", "unmount broken", "destroy broken"]
