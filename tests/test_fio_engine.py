"""The fio engine: JSON from real fio runs (tests/data: fio 3.33 with --lat_percentiles=1
--clat_percentiles=0, as fio_args asks), the command line, a real small run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_encperf.engines import select_engine
from pytest_encperf.engines.fio import FioEngine, FioError, fio_args, parse_fio_json
from pytest_encperf.engines.native import NativeEngine
from pytest_encperf.engines.observe import Observe
from pytest_encperf.workloads import CDM, DD, MATRIX, SMALLFILES, KiB, MiB, Workload

DATA = Path(__file__).parent / "data"
needs_fio = pytest.mark.skipif(
    shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)"
)


def fixture(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_sequential_read_maps_bw_iops_total_latency_percentiles_and_cpu() -> None:
    data = fixture("fio-read.json")
    job = data["jobs"][0]
    fields = parse_fio_json(data, "read")
    assert fields["bytes"] == job["read"]["io_bytes"] == 375390208
    assert fields["ios"] == job["read"]["total_ios"] == 358
    # throughput is exactly fio's bw_bytes
    assert fields["bytes"] / fields["seconds"] == pytest.approx(job["read"]["bw_bytes"])
    assert fields["lat_p50_us"] == job["read"]["lat_ns"]["percentile"]["50.000000"] / 1e3
    assert fields["lat_p99_us"] == job["read"]["lat_ns"]["percentile"]["99.000000"] / 1e3
    assert fields["lat_p999_us"] == job["read"]["lat_ns"]["percentile"]["99.900000"] / 1e3
    assert fields["engine_cpu_seconds"] == pytest.approx(
        (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1e3
    )
    assert fields["logical_read_bytes"] == fields["bytes"] and fields["logical_write_bytes"] == 0


def test_latency_is_total_latency_never_completion_latency(tmp_path: Path) -> None:
    data = fixture("fio-read.json")
    stats = data["jobs"][0]["read"]
    assert "percentile" not in stats["clat_ns"]  # asked for lat percentiles only
    args = fio_args(CDM[0], tmp_path / "f", size=64 * MiB, runtime=1.0, direct=True)
    assert option(args, "lat_percentiles") == "1" and option(args, "clat_percentiles") == "0"
    # a report with completion-latency percentiles only (fio's default) is refused, not misread
    stats["clat_ns"]["percentile"] = stats["lat_ns"].pop("percentile")
    with pytest.raises(FioError, match=r"no total-latency percentiles \(lat_ns"):
        parse_fio_json(data, "read")


def test_write_reads_the_write_section_only() -> None:
    data = fixture("fio-write.json")
    fields = parse_fio_json(data, "write")
    assert fields["bytes"] == data["jobs"][0]["write"]["io_bytes"] == 830472192
    assert fields["ios"] == 792
    assert fields["logical_write_bytes"] == fields["bytes"] and fields["logical_read_bytes"] == 0
    # end_fsync is part of the job's runtime (309 ms for a 300 ms time-based job)
    assert fields["seconds"] == pytest.approx(data["jobs"][0]["write"]["runtime"] / 1e3, rel=0.01)
    with pytest.raises(KeyError):
        parse_fio_json({"jobs": [{"jobname": "x", "error": 0}]}, "write")


def test_randrw_mixed_sums_both_directions_and_keeps_the_worst_latency() -> None:
    data = fixture("fio-randrw.json")
    job = data["jobs"][0]
    fields = parse_fio_json(data, "mixed")
    assert fields["bytes"] == job["read"]["io_bytes"] + job["write"]["io_bytes"]
    assert fields["ios"] == job["read"]["total_ios"] + job["write"]["total_ios"]
    assert fields["bytes"] / fields["seconds"] == pytest.approx(
        job["read"]["bw_bytes"] + job["write"]["bw_bytes"]
    )
    worst = max(job[s]["lat_ns"]["percentile"]["99.000000"] for s in ("read", "write")) / 1e3
    assert fields["lat_p99_us"] == worst
    assert parse_fio_json(data, "read")["bytes"] == job["read"]["io_bytes"]


def test_grouped_jobs_are_one_entry() -> None:
    data = fixture("fio-randread-4jobs-grouped.json")
    assert len(data["jobs"]) == 1
    fields = parse_fio_json(data, "read")
    assert fields["ios"] == 25147
    # CPU: the percentage is per job-second, job_runtime is summed over the 4 threads
    assert data["jobs"][0]["job_runtime"] == 1200
    assert fields["engine_cpu_seconds"] == pytest.approx((0.166667 + 11.416667) / 100 * 1.2)


def test_ungrouped_jobs_are_summed() -> None:
    data = fixture("fio-write-2jobs.json")
    assert len(data["jobs"]) == 2
    fields = parse_fio_json(data, "write")
    assert fields["bytes"] == sum(job["write"]["io_bytes"] for job in data["jobs"])
    assert fields["bytes"] / fields["seconds"] == pytest.approx(
        sum(job["write"]["bw_bytes"] for job in data["jobs"])
    )


def test_text_before_the_json_is_skipped_and_garbage_is_a_clear_error() -> None:
    text = "fio: notice something\n" + (DATA / "fio-read.json").read_text()
    assert parse_fio_json(text, "read")["ios"] == 358
    with pytest.raises(FioError, match="no JSON"):
        parse_fio_json("fio: file not found", "read")
    with pytest.raises(FioError, match="failed with error 5"):
        parse_fio_json({"jobs": [{"jobname": "x", "error": 5}]}, "read")


def option(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return values[-1] if values else None


def test_direct_rounds_use_libaio_at_the_workload_queue_depth(tmp_path: Path) -> None:
    seq_q8 = CDM[0]
    args = fio_args(seq_q8, tmp_path / "f", size=64 * MiB, runtime=2.0, direct=True)
    assert args[:2] == ["fio", "--output-format=json"]
    assert option(args, "ioengine") == "libaio" and option(args, "direct") == "1"
    assert option(args, "iodepth") == "8" and option(args, "numjobs") == "1"
    assert option(args, "rw") == "read" and option(args, "bs") == str(MiB)
    assert option(args, "time_based") == "1" and option(args, "runtime") == "2000ms"
    assert option(args, "size") == str(64 * MiB) and option(args, "invalidate") == "1"
    assert option(args, "group_reporting") == "1" and option(args, "end_fsync") is None


def test_buffered_rounds_use_one_psync_thread_per_io_in_flight(tmp_path: Path) -> None:
    rnd_q32_write = next(w for w in CDM if w.label == "RND4K Q32T1" and w.rw == "randwrite")
    args = fio_args(rnd_q32_write, tmp_path / "f", size=64 * MiB, runtime=1.0, direct=False)
    assert option(args, "ioengine") == "psync" and option(args, "direct") == "0"
    assert option(args, "iodepth") == "1" and option(args, "numjobs") == "32"
    assert option(args, "end_fsync") == "1" and option(args, "fdatasync") == str(16 * MiB // (4 * KiB))
    assert option(args, "size") == str(2 * MiB) and option(args, "offset_increment") == str(2 * MiB)
    seq = Workload("SEQ", "read", MiB, iodepth=4)
    args = fio_args(seq, tmp_path / "f", size=64 * MiB, runtime=1.0, direct=False)
    assert option(args, "size") == str(16 * MiB) and option(args, "offset_increment") == str(16 * MiB)


def test_dd_is_one_pass_and_matrix_uses_its_extent(tmp_path: Path) -> None:
    args = fio_args(DD[0], tmp_path / "f", size=32 * MiB, runtime=1.0, direct=False)
    assert option(args, "io_size") == str(32 * MiB) and option(args, "time_based") is None
    small = MATRIX[0]
    assert small.extent == 4 * MiB
    args = fio_args(small, tmp_path / "f", size=32 * MiB, runtime=1.0, direct=True)
    assert option(args, "size") == str(4 * MiB)


def test_one_pass_rounds_end_at_the_end_of_the_file_or_the_runtime(tmp_path: Path) -> None:
    seq = Workload("SEQ", "read", MiB, iodepth=4)
    args = fio_args(seq, tmp_path / "f", size=64 * MiB, runtime=1.5, direct=False, one_pass=True)
    assert option(args, "time_based") is None and option(args, "runtime") == "1500ms"
    assert option(args, "size") == str(16 * MiB)  # each thread its stripe, once
    assert (
        option(fio_args(seq, tmp_path / "f", size=64 * MiB, runtime=1.5, direct=False), "time_based") == "1"
    )


def test_engine_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(select_engine("native"), NativeEngine)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert isinstance(select_engine("auto"), NativeEngine)
    with pytest.raises(ValueError, match="fio is not installed"):
        select_engine("fio")
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert isinstance(select_engine("auto"), FioEngine)


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


@needs_fio
@pytest.mark.parametrize("workload", [CDM[0], CDM[4]], ids=str)
def test_buffered_reads_on_a_store_below_read_the_file_once(tmp_path: Path, workload: Workload) -> None:
    # a FUSE store's pages stay cached below the volume: a second pass would read memory
    engine = FioEngine()
    path = engine.prepare(tmp_path, 4 * MiB)
    m = engine.run(workload, path, runtime=30, direct=False, observe=Observe(store_below=True))
    assert m.bytes == 4 * MiB and m.seconds < 30


@needs_fio
def test_fio_delegates_the_small_files_cycle_to_the_native_engine(tmp_path: Path) -> None:
    path = FioEngine().prepare(tmp_path, MiB)
    m = FioEngine().run(SMALLFILES[0], path, runtime=0.01, direct=True)
    assert m.engine == "native" and m.ios % SMALLFILES[0].files == 0 and m.ios > 0
    assert list((tmp_path / "encperf-smallfiles").iterdir()) == []
