"""Between-run priors for tests of the gate's logic (pytest_encperf.verdict.PRIOR).

The shipped prior is fitted to the development machine's measured noise (24-45% between runs,
benchmarks/data/noise-*.json), against which a single reference can decide little. Tests of what
the gate does with a decision use a quiet machine's prior instead: ``quiet_prior`` (autouse where
a module imports it) sets every backend's and plain's between-run sd to QUIET_SD with QUIET_DF.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from pytest_encperf import verdict
from pytest_encperf.workloads import CDM

QUIET_SD, QUIET_DF = 0.02, 24.0


def table(sd: float = QUIET_SD, df: float = QUIET_DF) -> dict[tuple[str, str], tuple[float, float]]:
    return {(backend, w.name): (sd, df) for backend in ("gocryptfs", "plain") for w in CDM}


@pytest.fixture(autouse=True)
def quiet_prior(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(verdict, "PRIOR", table())
    yield


def quiet_noise_file(directory: Path, cells: Iterable[tuple[str, str]], sd: float = QUIET_SD) -> Path:
    """A noise file as benchmarks/noise.py writes it (its ``estimates``), of a quiet runner: every
    cell (backend, workload) with a between-run sd of ``sd`` over 10 runs; for --encperf-noise."""
    estimates = {
        f"{backend}|{workload}": {"runs": 10, "df_between": 9, "sd_between_percent": 100 * sd}
        for backend, workload in cells
    }
    path = directory / "noise-quiet.json"
    path.write_text(json.dumps({"estimates": estimates}), encoding="utf-8")
    return path
