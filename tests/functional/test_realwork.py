"""Real-work tasks run with the real tools on plain directories (tar, gzip, coreutils: always on
Debian); what runs them in a session is in tests/integration/test_realwork_integration.py."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from pytest_encperf import host, realwork
from pytest_encperf.workloads import PROFILES, MiB, Workload, with_tree

STEPS = {
    "archive": ["create tar.gz", "extract tar.gz"],
    "untar": ["extract"],
    "metadata": ["ls -lR", "rename", "rm -rf"],
    "copy": ["cp -a in", "cp -a out"],
}


@pytest.fixture(scope="module")
def reference_tree(tmp_path_factory: pytest.TempPathFactory) -> realwork.ReferenceTree:
    directory = tmp_path_factory.mktemp("reference")
    directory.chmod(0o700)
    return realwork.prepare_reference_tree(directory, MiB, seed=3)


def task(name: str) -> Workload:
    (workload,) = [w for w in PROFILES["realwork"].workloads if w.task == name]
    return with_tree(workload, MiB, 3)


def test_the_reference_holds_the_tree_and_the_source_archive(reference_tree: realwork.ReferenceTree) -> None:
    assert reference_tree.tree.is_dir() and reference_tree.source_archive.is_file()
    assert 0 < reference_tree.tree_bytes <= MiB and reference_tree.tree_files > 10
    assert reference_tree.source_bytes == realwork.source_size(MiB) and reference_tree.source_files > 10
    listing = host.run(["tar", "-tzf", reference_tree.source_archive]).split()
    assert sum(not name.endswith("/") for name in listing) == reference_tree.source_files


@pytest.mark.parametrize("name", list(STEPS))
def test_each_task_times_its_steps_and_leaves_nothing(
    name: str, reference_tree: realwork.ReferenceTree, tmp_path: Path
) -> None:
    before = sorted(p.name for p in reference_tree.directory.iterdir())
    measured = realwork.run_task(task(name), tmp_path, reference_tree)
    assert [step for step, _ in measured.steps] == STEPS[name]
    assert all(seconds > 0 for _, seconds in measured.steps)
    assert measured.seconds == pytest.approx(sum(seconds for _, seconds in measured.steps))
    assert measured.bytes > 0 and measured.ios > 0 and measured.engine == "tools"
    assert list(tmp_path.iterdir()) == []  # the volume's work directory is gone
    assert sorted(p.name for p in reference_tree.directory.iterdir()) == before  # no copy left out


def test_a_failing_step_leaves_nothing_and_says_which_command(
    reference_tree: realwork.ReferenceTree, tmp_path: Path
) -> None:
    broken = dataclasses.replace(reference_tree, directory=tmp_path / "missing")
    with pytest.raises(host.HostError, match=r"cp -a .*missing/tree"):
        realwork.run_task(task("copy"), tmp_path, broken)
    assert list(tmp_path.iterdir()) == []


def test_missing_tools_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "gzip" else f"/usr/bin/{tool}")
    with pytest.raises(host.HostError, match=r"real-work workloads need gzip"):
        realwork.prepare_reference_tree(tmp_path, MiB, 1)


# What each task runs, in order: "drop" is a page-cache drop, then each command's first words;
# the set-up before the first drop is untimed, every timed write step ends with sync -f
COMMANDS = {
    "archive": ["cp -a", "sync -f", "drop", "tar -czf", "sync -f", "drop", "tar -xzf", "sync -f"],
    "untar": ["cp", "sync -f", "drop", "tar -xzf", "sync -f"],
    "metadata": ["tar -xzf", "sync -f", "drop", "ls -lR", "drop", "sync -f", "drop", "rm -rf", "sync -f"],
    "copy": ["sync -f", "drop", "cp -a", "sync -f", "drop", "cp -a", "sync -f"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_task_drops_the_cache_before_each_step_and_syncs_inside_it(
    name: str, reference_tree: realwork.ReferenceTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done: list[str] = []
    real_run = host.run

    def recording_run(argv: list[str], **kwargs: object) -> str:
        words = [str(a) for a in argv]
        done.append(" ".join(words[:2]) if words[1].startswith("-") else words[0])
        return real_run(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(host, "run", recording_run)
    monkeypatch.setattr(host, "drop_page_cache", lambda path=None: done.append("drop") or True)
    measured = realwork.run_task(task(name), tmp_path, reference_tree)
    assert done == COMMANDS[name]
    assert "cache-not-dropped" not in measured.caveats


def test_a_task_whose_cache_could_not_be_dropped_says_so(
    reference_tree: realwork.ReferenceTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "drop_page_cache", lambda path=None: False)  # not root
    assert "cache-not-dropped" in realwork.run_task(task("untar"), tmp_path, reference_tree).caveats


def test_the_source_tree_is_a_quarter_of_the_reference_tree() -> None:
    assert realwork.source_size(64 * MiB) == 16 * MiB
    assert realwork.source_size(MiB) == 256 * 1024  # the smallest
