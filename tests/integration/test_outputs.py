"""Outputs (saved runs, reports) that cannot be written are found at start-up, with nothing left
behind by the check."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_encperf.outputs import directory_problem, file_problem


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only tmpfs needs root")
def test_a_read_only_file_system_is_refused(tmp_path: Path) -> None:
    mountpoint = tmp_path / "ro"
    mountpoint.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "encperf-test-ro", str(mountpoint)], check=True
    )
    try:
        assert file_problem(mountpoint / "r.json") == f"{mountpoint} is on a read-only file system"
        assert directory_problem(mountpoint / "runs") == f"{mountpoint} is on a read-only file system"
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)
