"""The ``encperf`` command on saved runs (no pytest session)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_encperf import cli, storage
from pytest_encperf.compare import EXIT_REGRESSION
from pytest_encperf.model import Measurement, Result
from pytest_encperf.workloads import CDM

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def save(root: Path, name: str, mb_per_s: float, machine_id: str = "m1") -> Path:
    rounds = [
        Measurement("native", "0.1", int(mb_per_s * 1e6 * f), 1.0, 100, 10.0, 20.0, 30.0, 0.5, "direct")
        for f in (1.0, 1.001, 0.999)
    ]
    results = [Result("fscrypt", CDM[0], rounds, rounds)]
    doc = storage.document(
        results, {"cpu_model": "test cpu"}, machine_id, {"id": "c0ffee"}, {"rounds": "3"}, NOW
    )
    return storage.save(root, machine_id, name, doc)


def encperf(root: Path, *args: str) -> int:
    return cli.main(["--storage", str(root), *args])


def test_list_shows_runs_per_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    save(tmp_path, "pr", 100, machine_id="m2")
    (tmp_path / "m2" / "0002_broken.json").write_text("{")
    assert encperf(tmp_path, "list") == 0
    out = capsys.readouterr().out
    assert "m1:\n  0001_main.json  2026-01-02T03:04:05+00:00  commit c0ffee  1 results  fscrypt" in out
    assert "m2:\n  0001_pr.json" in out
    assert "0002_broken.json  unreadable:" in out
    assert encperf(tmp_path / "none", "list") == 0
    assert "no saved runs" in capsys.readouterr().out


def test_compare_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    save(tmp_path, "same", 100)
    save(tmp_path, "slow", 80)
    assert encperf(tmp_path, "compare", "main", "same", "--fail", "10%") == 0
    assert "gate: 0 failed, 1 passed" in capsys.readouterr().out
    assert encperf(tmp_path, "compare", "main", "slow", "--fail", "10%") == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "FAIL: fscrypt SEQ1M-Q8T1-read throughput: baseline 100.0 MB/s -> now 80.0 MB/s (-20.0%" in out
    assert encperf(tmp_path, "compare", "main", "slow") == 0  # no rule: a table, no verdict
    assert "-20.0%" in capsys.readouterr().out


def test_compare_across_machines_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    save(tmp_path, "other", 100, machine_id="m2")
    assert (
        encperf(tmp_path, "compare", "m1/1", "m2/1", "--fail", "10%", "--markdown", str(tmp_path / "r.md"))
        == 0
    )
    assert "the runs come from different machines (m1, m2)" in capsys.readouterr().out
    assert "**Gate: ✅ passed**" in (tmp_path / "r.md").read_text()


def test_show_prints_machine_and_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    assert encperf(tmp_path, "show", "main") == 0
    out = capsys.readouterr().out
    assert "m1/0001_main.json" in out and "machine: test cpu" in out
    (row,) = [line for line in out.splitlines() if "SEQ1M-Q8T1-read" in line]
    assert row.split()[:3] == ["fscrypt", "SEQ1M-Q8T1-read", "100.0"]


def test_errors_are_messages_with_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    assert encperf(tmp_path, "show", "nope") == 1
    assert "encperf: error: no saved run matches 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        encperf(tmp_path, "compare", "main", "main", "--fail", "seq-reed:5%")
    assert info.value.code == 2
    assert "unknown part 'seq-reed'" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "encperf"  # the environment running these tests
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert all(command in proc.stdout for command in ("list", "compare", "show"))


def test_backends_doctor_lists_every_backend_with_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["backends", "--target", "directory", "--dir", "/dev/shm"]) == 0
    out = capsys.readouterr().out
    assert "target: directory in /dev/shm" in out
    assert "plain" in out and "fscrypt" in out
    assert "/dev/shm is on tmpfs (memory, not a disk)" in out


def test_backends_doctor_bad_target_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["backends", "--target", "cloud"])
    assert exc.value.code == 2
    assert "expected one of container, directory" in capsys.readouterr().err
