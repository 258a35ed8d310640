"""The three examples of benchmarks/examples run on plain and fscrypt at small sizes, each in under
a minute (root, container target)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_encperf.benchmarkentries import measured
from tests.helpers.support import disk_dir

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "benchmarks" / "examples"


@pytest.mark.parametrize("example", ["test_sqlite.py", "test_git.py", "test_fio_job.py"])
def test_each_example_runs_on_plain_and_fscrypt_in_under_a_minute(example: str, tmp_path: Path) -> None:
    tool = {"test_git.py": "git", "test_fio_job.py": "fio"}.get(example)
    if tool and shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", str(EXAMPLES / example), "--encperf-backends=fscrypt",
            f"--encperf-dir={disk_dir()}", f"--encperf-storage={tmp_path / '.encperf'}",
            "--encperf-size=16MiB", "--encperf-runtime=0.3", "--encperf-rounds=2", "--encperf-warmup=0",
            f"--encperf-json={tmp_path / 'r.json'}", "-p", "no:cacheprovider", "-q",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ENCPERF_EXAMPLE_SCALE": "0.02"},
    )  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fscrypt" in proc.stdout and "plain" in proc.stdout
    entries = measured(json.loads((tmp_path / "r.json").read_text())["benchmarks"])
    assert entries and all(e["params"]["backend"] == "fscrypt" for e in entries)
    assert took < 60, f"{example} took {took:.0f} s"
