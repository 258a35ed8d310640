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
    DRAINED_DEFINITION_SUFFIX,
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
    drained = workload.is_read and workload.iodepth > 1  # SEQ1M Q8T1: its pass ends wait for its reads
    assert m.round_definition == ROUND_DEFINITION + (DRAINED_DEFINITION_SUFFIX if drained else "")
    assert m.caveats == ()


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


FAKE_FIO = """\
#!{python}
import pathlib, sys
here = pathlib.Path(__file__).parent
(here / "args").write_text("\\n".join(sys.argv[1:]))
(here / "stdin").write_text(sys.stdin.read())
if "--fail" in sys.argv:
    sys.stderr.write("fio: boom\\n")
    sys.exit(3)
print("note: a notice before the report")
print((here / "report.json").read_text())
"""


def test_run_fio_gives_the_job_on_stdin_reads_the_json_and_names_what_failed(tmp_path: Path) -> None:
    """engines.fio.run_fio, the one runner of FioEngine's rounds and of the user's jobs (fiojob.run_job):
    the job text on fio's standard input (nothing there without one), the JSON after fio's notices read
    as a Measurement with the caller's caveats, a failure naming what ran."""
    import shutil
    import sys

    from pytest_encperf.engines.fio import FioError, run_fio
    from tests.unit.test_fio_engine import DATA

    fake = tmp_path / "fio"
    fake.write_text(FAKE_FIO.format(python=sys.executable))
    fake.chmod(0o755)
    shutil.copy(DATA / "fio-read.json", tmp_path / "report.json")
    common = {
        "direction": "read", "runtime": 0.1, "observe": Observe(), "version": "3.33",
        "round_definition": "fio-job abc", "io_mode": "buffered",
    }  # fmt: skip
    m = run_fio(
        [str(fake), "-"], what="fio job [db]", caveats=("cache-not-dropped",), job_text="[db]\nrw=read\n",
        **common,  # type: ignore[arg-type]
    )  # fmt: skip
    assert (tmp_path / "stdin").read_text() == "[db]\nrw=read\n"
    assert (m.engine, m.engine_version, m.latency, m.round_definition) == (
        "fio",
        "3.33",
        "total",
        "fio-job abc",
    )
    assert m.bytes > 0 and m.lat_p99_us > 0 and m.engine_cpu_seconds is not None
    assert m.caveats == ("cache-not-dropped",)
    assert run_fio([str(fake), "--rw=read"], what="x", **common).caveats == ()  # type: ignore[arg-type]
    assert (tmp_path / "stdin").read_text() == "" and (tmp_path / "args").read_text() == "--rw=read"
    with pytest.raises(FioError, match=r"^fio job \[db\]: exit 3: fio: boom$"):
        run_fio([str(fake), "--fail"], what="fio job [db]", job_text="[db]\n", **common)  # type: ignore[arg-type]
