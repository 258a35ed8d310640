"""The reference tree of the real-work workloads: deterministic from its seed (pure code, files)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pytest_encperf import reftree
from pytest_encperf.reftree import KiB, MiB


def snapshot(root: Path) -> list[tuple[str, int, int, int, str]]:
    """Every entry under ``root``: (path, mode, size, mtime, sha256 of a file's bytes)."""
    entries = []
    for directory, dirs, files in os.walk(root):
        for name in sorted(dirs) + sorted(files):
            path = Path(directory) / name
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            size = info.st_size if path.is_file() else 0
            entries.append((str(path.relative_to(root)), info.st_mode, size, int(info.st_mtime), digest))
    return sorted(entries)


def test_same_seed_and_size_give_a_byte_identical_tree(tmp_path: Path) -> None:
    reftree.write_tree(tmp_path / "a", 4 * MiB, seed=11)
    reftree.write_tree(tmp_path / "b", 4 * MiB, seed=11)
    first, second = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    assert first == second
    assert len(first) > 50  # names, modes, sizes, mtimes and contents of every file and directory


def test_another_seed_gives_another_tree(tmp_path: Path) -> None:
    reftree.write_tree(tmp_path / "a", 4 * MiB, seed=11)
    reftree.write_tree(tmp_path / "b", 4 * MiB, seed=12)
    digests = {entry[4] for entry in snapshot(tmp_path / "a") if entry[4] != "dir"}
    assert digests.isdisjoint(entry[4] for entry in snapshot(tmp_path / "b"))


def test_the_mixed_tree_has_many_small_files_some_medium_and_a_few_large() -> None:
    files = reftree.plan_tree(64 * MiB, seed=1)
    sizes = [f.size for f in files]
    small = [s for s in sizes if s <= 16 * KiB]
    medium = [s for s in sizes if 16 * KiB < s <= MiB]
    large = [s for s in sizes if s > MiB]
    assert len(small) > 5 * len(medium) > 5 * len(large) > 0
    assert 0.95 * 64 * MiB <= sum(sizes) <= 64 * MiB
    assert {f.mode for f in files} == {0o644, 0o755}  # scripts are executable
    assert any("/sub" in f.path for f in files)  # nested directories


def test_the_source_tree_is_small_files_only() -> None:
    files = reftree.plan_tree(2 * MiB, seed=1, kind="source")
    assert files and max(f.size for f in files) <= 24 * KiB
    assert sum(f.size for f in files) <= 2 * MiB


@pytest.mark.parametrize(("size", "kind"), [(0, "mixed"), (MiB, "photos")])
def test_bad_tree_requests_are_refused(size: int, kind: str) -> None:
    with pytest.raises(ValueError):
        reftree.plan_tree(size, 1, kind)


def test_an_existing_root_is_never_written_into(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    with pytest.raises(FileExistsError):
        reftree.write_tree(tmp_path / "tree", MiB, 1)
