"""The ``encperf`` command on saved runs (no pytest session)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "encperf"  # the environment running these tests
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert all(command in proc.stdout for command in ("list", "compare", "show"))
