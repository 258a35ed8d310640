"""pytest-xdist: the controller alone reports, one measurement per disk at a time, fleets.

Plugin behaviour through pytester with the scripted engine of test_gate (exact numbers, no
disks); the engine here also sleeps through each round (SCRIPTED_SLEEP seconds), so rounds of
two workers would overlap in time if nothing kept them apart. Workers "on two machines" are two
``--tx popen`` workers whose machine info a conftest hook changes (FAKE_MACHINE).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_encperf import storage
from pytest_encperf.benchmarkentries import measured
from pytest_encperf.gate import EXIT_REGRESSION
from pytest_encperf.model import Result
from pytest_encperf.workloads import CDM
from tests.functional.test_gate import CONFTEST, LOW_NOISE, SCRIPTED_BENCHMARK, gate  # noqa: F401 (a fixture)
from tests.helpers.priors import quiet_noise_file

pytest.importorskip("xdist")
CHARTS = importlib.util.find_spec("matplotlib") is not None  # the [html] extra

BENCHMARK = "import time\n" + SCRIPTED_BENCHMARK.replace(
    "ENGINE = Scripted()",
    '''
class Sleeping(Scripted):
    """Sleeps through each round: a round takes SCRIPTED_SLEEP seconds of wall time."""

    def run(self, workload, path, *, runtime, direct, observe=None):
        time.sleep(float(os.environ.get("SCRIPTED_SLEEP", "0")))
        return super().run(workload, path, runtime=runtime, direct=direct, observe=observe)


ENGINE = Sleeping()''',
)
# Every worker (and the controller) is the machine FAKE_MACHINE names, when set.
FLEET_CONFTEST = (
    CONFTEST
    + """

def pytest_encperf_update_machine_info(config, machine_info):
    if os.environ.get("FAKE_MACHINE"):
        machine_info["device_model"] = os.environ["FAKE_MACHINE"]
        machine_info["node"] = os.environ.get("FAKE_NODE", os.environ["FAKE_MACHINE"])


import pytest


@pytest.fixture(scope="session", autouse=True)
def _workers_start_together(request):
    # START_TOGETHER=<dir>: each worker waits (before its volumes) until both are there, so
    # that their first measurements are due at the same moment
    barrier = os.environ.get("START_TOGETHER")
    workerinput = getattr(request.config, "workerinput", None)
    if not barrier or workerinput is None:
        return
    import pathlib
    import time

    (pathlib.Path(barrier) / workerinput["workerid"]).touch()
    deadline = time.monotonic() + 60
    while len(list(pathlib.Path(barrier).iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
"""
)
XDIST_WARNING = "Benchmarks are automatically disabled"


@pytest.fixture
def bench(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """test_gate's scripted benchmark, sleeping, with the machine of FAKE_MACHINE."""
    scripted: pytest.Pytester = request.getfixturevalue("gate")
    scripted.makepyfile(test_bench=BENCHMARK)
    scripted.makeconftest(FLEET_CONFTEST)
    monkeypatch.delenv("FAKE_MACHINE", raising=False)
    return scripted


def run(
    pytester: pytest.Pytester, *args: str, directory: Path | None = None, storage: bool = True
) -> pytest.RunResult:
    """``storage``: pass --encperf-storage (else each process takes its own, from ENCPERF_STORAGE)."""
    return pytester.runpytest_subprocess(
        "--encperf-target=directory",
        "--encperf-backends=fakecrypt,othercrypt",
        *([f"--encperf-dir={directory}"] if directory else []),
        *([f"--encperf-storage={pytester.path / '.encperf'}"] if storage else []),
        "--encperf-size=1MiB",
        "--encperf-rounds=3",
        "--encperf-warmup=0",
        "-k",
        "SEQ1M",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        *args,
        timeout=300,
    )


def summary(result: pytest.RunResult) -> list[str]:
    """The encperf part of the terminal output (the summary tables and the gate); of the volume
    life cycle table, which times each run anew, only its column names and which volumes it
    lists (its column widths follow the times too)."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "encperf: encryption overhead vs plain" in line)
    end = next(i for i in range(start, len(lines)) if re.search(r"=+ .*(passed|failed)", lines[i]))
    shown = lines[start:end]
    if any(line.startswith("volume life cycle") for line in shown):
        first = next(i for i, line in enumerate(shown) if line.startswith("volume life cycle")) + 3
        rows = range(first, len(shown))
        last = next((i for i in rows if not shown[i].strip() or shown[i].startswith(("-", "="))), len(shown))
        shown[first:last] = [line.split()[0] for line in shown[first:last]]
        shown[first - 2] = " ".join(shown[first - 2].split())
        shown[first - 1] = "-" * 3
    return shown


def rounds_of(results: list[Result]) -> list[tuple[str, float, float]]:
    """(owner, start, end) of every round of both sides, the owner being its result."""
    return [
        (f"{r.backend} {r.workload.name}", m.started, m.ended)
        for r in results
        for m in (*r.rounds, *r.baseline_rounds)
        if m.started is not None and m.ended is not None
    ]


def overlaps(results: list[Result]) -> list[str]:
    """Pairs of rounds of different results that ran at the same time."""
    found = []
    for (a, a0, a1), (b, b0, b1) in itertools.combinations(rounds_of(results), 2):
        if a != b and a0 < b1 and b0 < a1:
            found.append(f"{a} [{a0:.3f}, {a1:.3f}] and {b} [{b0:.3f}, {b1:.3f}]")
    return found


# ----------------------------------------------------------------------------- the controller reports


def test_with_and_without_xdist_the_report_is_the_same_and_the_verdict_is_set_once(
    bench: pytest.Pytester,
) -> None:
    outputs = {}
    for mode in (("-p", "no:xdist"), ("-n", "2")):
        result = run(
            bench,
            *mode,
            f"--encperf-dir={bench.path}",
            f"--encperf-json={bench.path / f'{mode[1]}.json'}",
            "--encperf-max-overhead=50%",
        )
        result.assert_outcomes(passed=8)
        assert result.ret == pytest.ExitCode.OK
        assert XDIST_WARNING not in result.stdout.str() + result.stderr.str()
        outputs[mode[1]] = summary(result)
    assert outputs["2"] == outputs["no:xdist"]
    assert sum("encperf: gate" in line for line in outputs["2"]) == 1  # the verdict, once
    assert any("8 within threshold" in line for line in outputs["2"])
    docs = {mode: json.loads((bench.path / f"{mode}.json").read_text()) for mode in outputs}
    rows = {mode: [b["name"] for b in measured(doc["benchmarks"])] for mode, doc in docs.items()}
    assert rows["2"] == rows["no:xdist"] and len(rows["2"]) == 8
    machine_id = docs["2"]["machine_info"]["machine_id"]
    assert {b["extra_info"]["encperf"]["machine_id"] for b in measured(docs["2"]["benchmarks"])} == {
        machine_id
    }


def test_a_worker_saves_nothing_the_controller_saves_once(bench: pytest.Pytester) -> None:
    result = run(bench, "-n", "2", f"--encperf-dir={bench.path}", "--encperf-save=parallel")
    result.assert_outcomes(passed=8)
    (saved,) = storage.list_runs(bench.path / ".encperf")
    assert len(storage.load(saved.path)[1]) == 8
    assert result.stdout.str().count("encperf: saved ") == 1


def test_a_backend_skipped_on_a_worker_has_its_row_and_reason(bench: pytest.Pytester) -> None:
    bench.makeconftest(
        FLEET_CONFTEST
        + """

class Missing(FakeCrypt):
    def problems(self, target):
        return ["needs the frobnicator"]


def pytest_encperf_register_backends(config):
    return {"fakecrypt": FakeCrypt, "othercrypt": Missing}
"""
    )
    outputs = {}
    for mode in (("-p", "no:xdist"), ("-n", "2")):
        result = run(bench, *mode, f"--encperf-dir={bench.path}", "--encperf-max-overhead=50%")
        result.assert_outcomes(passed=4, skipped=4)
        outputs[mode[1]] = summary(result)
    assert outputs["2"] == outputs["no:xdist"]
    assert any("skipped: needs the frobnicator" in line for line in outputs["2"])


# ----------------------------------------------------------------------------- one measurement at a time


def test_rounds_of_two_workers_on_one_disk_never_overlap(
    bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleep = 0.1
    monkeypatch.setenv("SCRIPTED_SLEEP", str(sleep))
    for flag in ((), ("--encperf-parallel-devices",)):  # one disk: parallel devices change nothing
        out = bench.path / f"rounds{len(flag)}.json"
        barrier = bench.mkdir(f"start{len(flag)}")  # so that one worker must wait for the other
        monkeypatch.setenv("START_TOGETHER", str(barrier))
        result = run(
            bench, "-n", "2", f"--encperf-dir={bench.path}", f"--encperf-json={out}", *flag,
            "--encperf-rounds=2",
        )  # fmt: skip
        result.assert_outcomes(passed=8)
        results = storage.results_of(json.loads(out.read_text()))
        assert len(rounds_of(results)) == 8 * 2 * 2
        assert overlaps(results) == []
        # waiting for the other worker happened (their first workloads were due together: one
        # waited for at least the other's rounds), outside every round: a round that waited would
        # hold the other worker's rounds and overlap them (not a duration bound: a round of 0.1 s
        # took 0.24 s with the suite beside a benchmark on 2 cores)
        assert sorted(path.name for path in barrier.iterdir()) == ["gw0", "gw1"]
        assert max(r.lock_wait for r in results) > 2 * sleep
        workers = {line.split()[1] for line in result.stdout.lines if line.startswith("[gw")}
        assert len(workers) <= 2


# ----------------------------------------------------------------------------- fleets


def fleet(bench: pytest.Pytester, *args: str, beta: str = "") -> pytest.RunResult:
    """Two popen workers pretending to be the machines alpha and beta, every test on each."""
    return run(
        bench, "--tx", "popen//env:FAKE_MACHINE=alpha", "--tx", f"popen//env:FAKE_MACHINE=beta{beta}",
        "--dist", "each", f"--encperf-dir={bench.path}", *args,
    )  # fmt: skip


def quiet_runner(bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet's runners measured quiet (ENCPERF_NOISE, the --encperf-noise twin, reaches every
    process): the built-in prior, a loaded development machine's, would decide none of it."""
    cells = [(b, w.name) for b in ("fakecrypt", "othercrypt", "plain") for w in CDM]
    monkeypatch.setenv("ENCPERF_NOISE", str(quiet_noise_file(bench.path, cells)))


def test_a_fleet_reports_each_machine_saves_each_under_its_id_and_gates_each_against_its_own(
    bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Then: a worker without the baseline in its own storage gets no confirmation rounds."""
    quiet_runner(bench, monkeypatch)
    result = fleet(bench, "--encperf-save=fleet")
    result.assert_outcomes(passed=16)
    out = result.stdout.str()
    runs = storage.list_runs(bench.path / ".encperf")
    assert len(runs) == 2 and {run.name for run in runs} == {"fleet"}
    ids = {}
    for saved in runs:
        doc, results = storage.load(saved.path)
        ids[doc["machine_info"]["device_model"]] = saved.machine_id
        assert {r.machine_id for r in results} == {saved.machine_id}  # results carry their machine
        assert len(results) == 8
    assert set(ids) == {"alpha", "beta"}
    sections = [line for line in result.stdout.lines if re.search(r"=+ encperf: machine ", line)]
    assert [s.split("machine ")[1].split()[0] for s in sections] == [ids["alpha"], ids["beta"]]
    result.stdout.fnmatch_lines(["*encperf: across machines*", f"*{ids['alpha']}*{ids['beta']}*"])
    assert "the machines ran different tests" not in out

    # beta's encrypted backends get twice as slow: only beta fails, each against its own run
    pages = ["--encperf-markdown=pr.md", *(["--encperf-html=page.html"] if CHARTS else [])]
    checked = fleet(
        bench, "--encperf-compare=fleet", "--encperf-fail=10%", *pages, beta="//env:SCRIPTED_VOLUME_SCALE=0.5"
    )
    print(checked.stdout.str())
    assert checked.ret == EXIT_REGRESSION
    markdown = (bench.path / "pr.md").read_text()
    order = [markdown.index(f"encperf: machine {ids[m]}") for m in ("alpha", "beta")]
    assert order == sorted(order) and "encperf: across machines" in markdown
    if CHARTS:  # the page: a section per machine, each with its own verdict
        page = (bench.path / "page.html").read_text()
        assert page.count('<section class="machine"') == 2
        assert re.search(rf"gate passed</span> {ids['alpha']}: encperf: 0 regressions", page)
        assert re.search(rf"gate failed</span> {ids['beta']}: encperf: 8 regressions", page)
    checked.stdout.fnmatch_lines(
        [
            f"*encperf: machine {ids['alpha']} (alpha): compared with {ids['alpha']}/0001_fleet.json*",
            "encperf: 0 regressions, 12 within threshold*",  # plain's 4 too (its prior)
            f"*encperf: machine {ids['beta']} (beta): compared with {ids['beta']}/0001_fleet.json*",
            "encperf: 8 regressions, 4 within threshold*",
            "*Holm's correction over the 24 gated checks of all machines*",
        ]
    )

    # A worker without the baseline in its own storage gets no confirmation rounds: the controller
    # saves and judges from its storage; confirmation rounds are asked for on the worker, from the
    # worker's own --encperf-storage (a remote machine's, relative to //chdir=). (The run saved
    # above is the baseline: one fleet session fewer than a test of its own.)
    monkeypatch.setenv("ENCPERF_STORAGE", str(bench.path / ".encperf"))  # the controller's
    slower = "//env:SCRIPTED_VOLUME_SCALE=0.5"  # both machines' backends twice as slow
    checked = run(
        bench, "--tx", f"popen//env:FAKE_MACHINE=alpha{slower}",
        "--tx", f"popen//env:FAKE_MACHINE=beta{slower}//env:ENCPERF_STORAGE={bench.path / 'empty'}",
        "--dist", "each", f"--encperf-dir={bench.path}", "--encperf-fail=10%", storage=False,
    )  # fmt: skip
    verdicts = checked.stdout.str().split("(beta): compared with")
    alpha, beta = verdicts[0].split("(alpha): compared with")[-1], verdicts[-1]
    assert "8 regressions" in alpha and "8 regressions" in beta  # a quiet runner's prior decides 50%
    assert "to confirm" not in beta  # confirmation rounds: tests/functional/test_gate.py
    assert "4 vs 4 rounds (4 rounds (3 rounded up to whole A B B A blocks))" in beta


def test_identical_servers_of_a_fleet_are_two_machines(bench: pytest.Pytester) -> None:
    """One server model twice: the same hardware, so the same machine id; told apart by host name."""
    result = run(
        bench, "--tx", "popen//env:FAKE_MACHINE=gen8//env:FAKE_NODE=gen8a",
        "--tx", "popen//env:FAKE_MACHINE=gen8//env:FAKE_NODE=gen8b",
        "--dist", "each", f"--encperf-dir={bench.path}", "--encperf-save=fleet",
    )  # fmt: skip
    result.assert_outcomes(passed=16)
    runs = storage.list_runs(bench.path / ".encperf")
    assert sorted(run.machine_id.rsplit("-", 1)[1] for run in runs) == ["gen8a", "gen8b"]
    assert len({run.machine_id.rsplit("-", 1)[0] for run in runs}) == 1  # one hardware id
    for saved in runs:
        assert len(storage.load(saved.path)[1]) == 8  # nothing dropped as "measured twice"
    assert "measured twice" not in result.stdout.str()
    assert len([line for line in result.stdout.lines if re.search(r"=+ encperf: machine ", line)]) == 2


def test_a_worker_that_dies_before_sending_its_results_fails_the_run(bench: pytest.Pytester) -> None:
    bench.makeconftest(
        FLEET_CONFTEST
        + """

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if getattr(session.config, "workerinput", {}).get("workerid") == "gw1":  # (not the env: an outer
        os._exit(3)  # xdist run sets it for this controller too) after its tests, before it sends them
"""
    )
    result = run(bench, "-n", "2", f"--encperf-dir={bench.path}", "--encperf-save=x")
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*encperf: the results of worker gw1 are missing from this report, the saved run and the gate: *"]
    )


def test_machines_that_ran_different_tests_are_told_so(bench: pytest.Pytester) -> None:
    result = run(
        bench, "--tx", "popen//env:FAKE_MACHINE=alpha", "--tx", "popen//env:FAKE_MACHINE=beta",
        "--dist", "load", f"--encperf-dir={bench.path}",
    )  # fmt: skip
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*the machines ran different tests: use --dist each*"])


# ----------------------------------------------------------------------------- warnings


@pytest.mark.parametrize(
    ("args", "warned"),
    [
        (("-n", "2"), None),
        (("-n", "2", "--encperf-parallel-devices"), "--encperf-parallel-devices with 2 xdist workers"),
        (("-p", "no:xdist", "--encperf-parallel-devices"), None),
        (("--tx", "popen", "--tx", "popen", "--dist", "each", "--encperf-parallel-devices"), None),
        (
            (
                "-n",
                "2",
                "--encperf-target=partition",
                "--encperf-device=/dev/null",
                "--encperf-allow-destroy=/dev/null",
            ),
            "--encperf-target=partition with 2 xdist workers",
        ),
    ],
)
def test_a_warning_only_for_benchmarks_under_a_configuration_that_cannot_measure_reliably(
    bench: pytest.Pytester, args: tuple[str, ...], warned: str | None
) -> None:
    bench.makepyfile(test_other="def test_other():\n    pass\n")
    for selected, benchmarks in (("test_bench.py", True), ("test_other.py", False)):
        result = run(bench, *args, f"--encperf-dir={bench.path}", selected)
        text = result.stdout.str() + result.stderr.str()
        assert XDIST_WARNING not in text
        if warned and benchmarks:
            assert result.stdout.str().count(warned) == 1, text
            assert "EncperfWarning" in text
        else:
            assert "EncperfWarning" not in text


# ----------------------------------------------------------------------------- a fleet over ssh


def test_the_room_check_counts_a_baseline_and_a_volume_per_worker(bench: pytest.Pytester) -> None:
    free = shutil.disk_usage(bench.path).free
    size = max(1, free // 3 // (1024 * 1024))  # room for one worker's two volumes, not for two workers'
    result = run(bench, "-n", "2", f"--encperf-dir={bench.path}", f"--encperf-size={size}MiB")
    needs = (
        "*this run needs * MiB (the baseline and one backend volume of * each, for each of 2 xdist workers)*"
    )
    assert any(fnmatch.fnmatch(line, needs) for line in result.stdout.lines + result.stderr.lines), (
        result.stdout.str() + result.stderr.str()
    )
    assert not list(bench.path.glob("encperf-*")), "something was created"


def test_volumes_are_made_and_removed_beside_each_other_never_beside_a_round(
    bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making and removing volumes takes the lock shared: a worker's slow mount and unmount (each
    stamped in setups.log) never run during the other worker's rounds."""
    bench.makeconftest(
        FLEET_CONFTEST
        + """

import time


class Slow(FakeCrypt):
    def stamped(self, what):
        started = time.time()
        time.sleep(0.3)
        with open("setups.log", "a") as log:
            log.write(f"{what} {started} {time.time()}\\n")

    def mount(self, volume):
        self.stamped("mount")
        return super().mount(volume)

    def unmount(self, volume):
        self.stamped("unmount")
        return super().unmount(volume)


def pytest_encperf_register_backends(config):
    return {"fakecrypt": Slow, "othercrypt": Slow}
"""
    )
    monkeypatch.setenv("SCRIPTED_SLEEP", "0.1")
    out = bench.path / "rounds.json"
    result = run(bench, "-n", "2", "--dist", "load", f"--encperf-dir={bench.path}", f"--encperf-json={out}")
    result.assert_outcomes(passed=8)
    setups = [line.split() for line in (bench.path / "setups.log").read_text().splitlines()]
    assert {what for what, _, _ in setups} == {"mount", "unmount"}
    during = [
        f"{what} [{s0}, {s1}] during {owner} [{r0:.3f}, {r1:.3f}]"
        for what, s0, s1 in setups
        for owner, r0, r1 in rounds_of(storage.results_of(json.loads(out.read_text())))
        if float(s0) < r1 and r0 < float(s1)
    ]
    assert during == []
