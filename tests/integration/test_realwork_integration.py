"""The realwork profile end to end on plain and fscrypt (root, container target, a tiny tree):
comparable rows, saved, and a second run gated against the first."""

from __future__ import annotations

import json
import os

import pytest

from pytest_encperf import realwork
from pytest_encperf.benchmarkentries import measured
from pytest_encperf.realwork import TASKS
from tests.helpers.support import TINY_BENCHMARK, disk_dir

pytestmark = pytest.mark.integration


def test_realwork_on_plain_and_fscrypt_is_compared_saved_and_gated(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = disk_dir()
    made: list[int] = []
    prepare = realwork.prepare_reference_tree

    def counted(directory, size, seed):  # type: ignore[no-untyped-def]
        made.append(size)
        assert directory.stat().st_mode & 0o777 == 0o700 and directory.parent.stat().st_mode & 0o777 == 0o700
        return prepare(directory, size, seed)

    monkeypatch.setattr(realwork, "prepare_reference_tree", counted)  # runpytest runs in this process
    pytester.makepyfile(test_bench=TINY_BENCHMARK)
    report = pytester.path / "run.json"
    common = (
        f"--encperf-dir={base}",
        f"--encperf-storage={pytester.path / '.encperf'}",
        "--encperf-backends=fscrypt",
        "--encperf-profile=realwork",
        "--encperf-tree-size=2MiB",
        "--encperf-size=1MiB",
        "--encperf-rounds=3",
        "--encperf-warmup=0",
        "-p",
        "no:cacheprovider",
    )
    first = pytester.runpytest(*common, "--encperf-save=ref", f"--encperf-json={report}")
    first.assert_outcomes(passed=len(TASKS))
    assert made == [2 * 1024 * 1024]  # the tree: once for the run's four tasks, in a private directory
    first.stdout.fnmatch_lines(["real work with tar, ls, rm and cp (seconds, lower is better) [[]realwork]*"])
    first.stdout.fnmatch_lines(["*archive tar.gz*untar source*", "*s mixed*", "*fscrypt*", "*plain *", "*%*"])
    first.stdout.fnmatch_lines(["each task's timed steps*", "*fscrypt*archive*create tar.gz*%*"])
    entries = {e["params"]["workload"]: e for e in measured(json.loads(report.read_text())["benchmarks"])}
    assert sorted(entries) == sorted(TASKS)
    for name, entry in entries.items():
        info = entry["extra_info"]
        assert info["vs_plain_percent"] is not None, name  # comparable: paired with plain rounds
        rounds = info["encperf"]["rounds"]
        plain = info["encperf"]["baseline_rounds"]
        assert len(rounds) == len(plain) == 4  # 3 rounded up to whole A B B A blocks
        assert all(r["seconds"] > 0 and r["steps"] for r in rounds + plain), name
        assert info["encperf"]["description"]["reference_tree"]["seed"] == 1
    # the reference tree went with the run's private directory
    assert list(base.glob(f"encperf-{os.getpid()}-*")) == []

    # a 2 MiB tree takes tens of milliseconds, which a machine shared with other work moves by
    # tens of percent: the gate's direction for seconds is checked with exact numbers in
    # tests/functional/test_gate.py; here, that real rounds are compared on seconds and pass
    second = pytester.runpytest(*common, "--encperf-compare=ref", "--encperf-fail=90%")
    assert second.ret == pytest.ExitCode.OK, second.stdout.str()
    second.stdout.fnmatch_lines(["*compared with *_ref.json*"])
    for name in TASKS:
        second.stdout.fnmatch_lines([f"*fscrypt*{name}*seconds*x plain*"])
    assert "not comparable" not in second.stdout.str()


def test_a_reference_that_cannot_be_made_fails_every_task_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda tool, **kw: None if tool == "gzip" else which(tool, **kw))
    pytester.makepyfile(test_bench=TINY_BENCHMARK)
    result = pytester.runpytest(
        f"--encperf-dir={disk_dir()}",
        "--encperf-backends=fscrypt",
        "--encperf-profile=realwork",
        "--encperf-tree-size=1MiB",
        "--encperf-size=1MiB",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=len(TASKS))
    result.stdout.fnmatch_lines(["*reference tree could not be made: real-work workloads need gzip*"])
    # each task says why, not only the first (no "File exists" from a second attempt)
    assert result.stdout.str().count("could not be made: real-work workloads need gzip") >= len(TASKS)
    assert "File exists" not in result.stdout.str()
    assert list(disk_dir().glob(f"encperf-{os.getpid()}-*")) == []
