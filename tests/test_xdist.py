"""pytest-xdist: the controller alone reports, one measurement per disk at a time, fleets.

Plugin behaviour through pytester with the scripted engine of test_gate (exact numbers, no
disks); the engine here also sleeps through each round (SCRIPTED_SLEEP seconds), so rounds of
two workers would overlap in time if nothing kept them apart. Workers "on two machines" are two
``--tx popen`` workers whose machine info a conftest hook changes (FAKE_MACHINE).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import storage
from pytest_encperf.model import Result

from .support import loop_device
from .test_gate import CONFTEST, LOW_NOISE, SCRIPTED_BENCHMARK

pytest.importorskip("xdist")

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
        machine_info["node"] = os.environ["FAKE_MACHINE"]
"""
)
XDIST_WARNING = "Benchmarks are automatically disabled"


@pytest.fixture
def bench(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_bench=BENCHMARK)
    pytester.makeconftest(FLEET_CONFTEST)
    monkeypatch.setenv("SCRIPTED_NOISE", LOW_NOISE)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("FAKE_MACHINE", raising=False)
    return pytester


def run(pytester: pytest.Pytester, *args: str, directory: Path | None = None) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--encperf-target=directory",
        "--encperf-backends=fakecrypt,othercrypt",
        *([f"--encperf-dir={directory}"] if directory else []),
        f"--encperf-storage={pytester.path / '.encperf'}",
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
    """The encperf part of the terminal output (the summary tables and the gate)."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "encperf: encryption overhead vs plain" in line)
    end = next(i for i in range(start, len(lines)) if re.search(r"=+ .*(passed|failed)", lines[i]))
    return lines[start:end]


def saved_results(path: Path) -> list[Result]:
    return [result for run in storage.list_runs(path) for result in storage.load(run.path)[1]]


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
    rows = {mode: [b["name"] for b in doc["benchmarks"]] for mode, doc in docs.items()}
    assert rows["2"] == rows["no:xdist"] and len(rows["2"]) == 8
    machine_id = docs["2"]["machine_info"]["machine_id"]
    assert {b["extra_info"]["encperf"]["machine_id"] for b in docs["2"]["benchmarks"]} == {machine_id}


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
        result = run(
            bench, "-n", "2", f"--encperf-dir={bench.path}", f"--encperf-json={out}", *flag,
            "--encperf-rounds=2",
        )  # fmt: skip
        result.assert_outcomes(passed=8)
        results = storage.results_of(json.loads(out.read_text()))
        assert len(rounds_of(results)) == 8 * 2 * 2
        assert overlaps(results) == []
        # waiting for the other worker happened, outside every round
        longest_round = max(end - start for _, start, end in rounds_of(results))
        assert longest_round < sleep + 0.09
        assert max(r.lock_wait for r in results) > 2 * sleep
        workers = {line.split()[1] for line in result.stdout.lines if line.startswith("[gw")}
        assert len(workers) <= 2


def test_only_parallel_devices_lets_rounds_on_two_disks_overlap(
    bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers, each with --encperf-dir on its own disk (ext4 on a loop device over a file in
    RAM: nothing below it is shared), given through the workers' environment."""
    if os.geteuid() != 0:
        pytest.skip("needs root: loop devices and mounts")
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm to put the two disks' images on")
    monkeypatch.setenv("ENCPERF_DIR", str(bench.path))  # the controller's own
    monkeypatch.setenv("SCRIPTED_SLEEP", "0.1")
    with two_disks(bench.path) as (first, second):
        found = {}
        for flag in ((), ("--encperf-parallel-devices",)):
            out = bench.path / f"two{len(flag)}.json"
            result = run(
                bench, "--tx", f"popen//env:ENCPERF_DIR={first}", "--tx", f"popen//env:ENCPERF_DIR={second}",
                "--dist", "load", f"--encperf-json={out}", "-W", "ignore::pytest.PytestWarning", *flag,
            )  # fmt: skip
            result.assert_outcomes(passed=8)
            # each disk is a machine id of its own (the disk's model is part of it): a file each
            files = sorted(bench.path.glob(f"two{len(flag)}.*.json"))
            assert len(files) == 2
            found[bool(flag)] = overlaps(
                [r for f in files for r in storage.results_of(json.loads(f.read_text()))]
            )
        assert found[False] == []
        assert found[True] != []


@contextlib.contextmanager
def two_disks(base: Path) -> Iterator[tuple[Path, Path]]:
    """Two ext4 file systems, each on a loop device over an image in /dev/shm, mounted under base."""
    with contextlib.ExitStack() as stack:
        mounts = []
        for name in ("disk-a", "disk-b"):
            image = Path(tempfile.mkdtemp(prefix="encperf-test-", dir="/dev/shm")) / "image"
            stack.callback(shutil.rmtree, image.parent)
            device = stack.enter_context(loop_device(image, 64 * 1024 * 1024))
            subprocess.run(["mkfs.ext4", "-q", "-F", str(device)], check=True)
            mountpoint = base / name
            mountpoint.mkdir()
            subprocess.run(["mount", str(device), str(mountpoint)], check=True)
            stack.callback(subprocess.run, ["umount", str(mountpoint)], check=True)
            mounts.append(mountpoint)
        yield mounts[0], mounts[1]
