"""The fio engine: JSON from real fio runs (tests/helpers/data: fio 3.33 with --lat_percentiles=1
--clat_percentiles=0, as fio_args asks), the command line, a real small run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_encperf.engines.fio import (
    FioEngine,
)
from pytest_encperf.engines.observe import Observe
from pytest_encperf.workloads import (
    CDM,
    DD,
    ROUND_DEFINITION,
    MiB,
    Workload,
)
from tests.unit.test_fio_engine import needs_fio


@needs_fio
@pytest.mark.parametrize("workload", [CDM[0], CDM[1], CDM[5], DD[0]], ids=str)
def test_real_fio_run_on_a_small_file(tmp_path: Path, workload: Workload) -> None:
    engine = FioEngine()
    path = engine.prepare(tmp_path, 4 * MiB)
    m = engine.run(workload, path, runtime=0.1, direct=False)
    assert m.engine == "fio" and m.engine_version[0].isdigit() and m.latency == "total"
    assert m.bytes > 0 and m.bytes % workload.block_size == 0 and m.ios == m.bytes // workload.block_size
    assert 0 < m.lat_p50_us <= m.lat_p99_us <= m.lat_p999_us
    assert m.io_mode == "buffered" and m.cpu_seconds >= 0 and m.engine_cpu_seconds is not None
    if workload.amount is not None:
        assert m.bytes == 4 * MiB  # dd: exactly the (smaller) file, once
    assert path.stat().st_size == 4 * MiB  # fio never grew or replaced the file
    assert m.round_definition == ROUND_DEFINITION and m.caveats == ()


@needs_fio
def test_without_io_uring_a_real_buffered_round_carries_the_depth_caveat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_encperf.engines import fio

    engine = FioEngine()
    path = engine.prepare(tmp_path, 4 * MiB)
    monkeypatch.setattr(fio, "creatable", lambda: False)
    m = engine.run(CDM[0], path, runtime=0.1, direct=False)  # SEQ1M Q8T1
    assert m.caveats == ("buffered-depth-1",)
    assert engine.run(CDM[2], path, runtime=0.1, direct=False).caveats == ()  # Q1T1: nothing lost


@needs_fio
@pytest.mark.parametrize("workload", [CDM[0], CDM[4]], ids=str)
def test_buffered_reads_on_a_store_below_read_the_file_once(tmp_path: Path, workload: Workload) -> None:
    # a FUSE store's pages stay cached below the volume: a second pass would read memory
    engine = FioEngine()
    path = engine.prepare(tmp_path, 4 * MiB)
    m = engine.run(workload, path, runtime=30, direct=False, observe=Observe(store_below=True))
    assert m.bytes == 4 * MiB and m.seconds < 30
