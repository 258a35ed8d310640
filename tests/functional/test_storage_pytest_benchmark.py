"""A saved run as pytest-benchmark reads it: plain's side of each pair as entries of its own, the
unit in every entry's name, and runs saved before either still loading and comparing."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from pytest_benchmark import cli as pytest_benchmark_cli

from pytest_encperf import storage
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)
from tests.unit.test_storage_pytest_benchmark import BEFORE, MACHINE, NOW, document, measured, results  # noqa: F401

# Saved by encperf before plain's side had entries and names their unit (made by the code of then)


def pytest_benchmark_compare(
    storage_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> list[str]:
    """The lines ``pytest-benchmark --storage file://DIR compare ARGS`` prints (its own CLI, run in
    a directory without a conftest.py, whose hooks could change its table)."""
    monkeypatch.chdir(storage_dir)
    monkeypatch.setattr(
        sys, "argv", ["pytest-benchmark", "--storage", f"file://{storage_dir}", "compare", *args]
    )
    capsys.readouterr()
    pytest_benchmark_cli.main()
    return capsys.readouterr().out.splitlines()


def row(lines: list[str], start: str) -> str:
    (found,) = [line for line in lines if line.startswith(start)]
    return found


def test_pytest_benchmark_compare_shows_plain_and_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    storage.save(tmp_path, MACHINE, "main", document())
    storage.save(tmp_path, MACHINE, "pr", document(scale=0.9))
    lines = pytest_benchmark_compare(tmp_path, monkeypatch, capsys)
    # pytest-benchmark's header always says time (table.py: "Name (time in {unit}s)"): each row
    # names what that time is for, one GiB moved
    header = row(lines, "Name (time in ")
    assert header.startswith("Name (time in s)")
    for name in ("gocryptfs", "fscrypt", "plain-beside-gocryptfs", "plain-beside-fscrypt"):
        for source in ("0001_main", "0002_pr"):
            assert row(lines, f"SEQ1M-Q8T1-read[{name}] per GiB ({source})")
    # 405 MB/s is 2.651 s per GiB; the plain rounds beside it, 900 MB/s: 1.193 s per GiB
    gocryptfs = row(lines, "SEQ1M-Q8T1-read[gocryptfs] per GiB (0001_main)")
    assert " 2.6512 (" in gocryptfs  # its median
    assert " 0.3771 (" in gocryptfs  # OPS, 1 / mean: GiB per second (405 MB/s)
    assert " 1.1930 (" in row(lines, "SEQ1M-Q8T1-read[plain-beside-gocryptfs] per GiB (0001_main)")


def test_pytest_benchmark_compare_between_pairs_a_run_saved_before_with_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / MACHINE / "0001_main.json"
    old.parent.mkdir()
    shutil.copy(BEFORE, old)
    storage.save(tmp_path, MACHINE, "pr", document(scale=0.9))
    lines = pytest_benchmark_compare(tmp_path, monkeypatch, capsys, "--between", "median")
    assert "ERROR" not in "\n".join(lines)
    # the same fullname in both: one row, the old median beside the new one and the change
    gocryptfs = row(lines, "SEQ1M-Q8T1-read[gocryptfs]").split()
    assert gocryptfs[-3:] == ["2.6512", "2.9458", "+11.1%"]
    # plain's side exists only in the new run
    assert row(lines, "SEQ1M-Q8T1-read[plain-beside-gocryptfs] per GiB").split()[-3:] == [
        "N/A",
        "1.1930",
        "N/A",
    ]
