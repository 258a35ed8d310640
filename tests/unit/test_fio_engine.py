"""The fio engine: JSON from real fio runs (tests/helpers/data: fio 3.33 with --lat_percentiles=1
--clat_percentiles=0, as fio_args asks), the command line, a real small run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_encperf.engines import native, select_engine
from pytest_encperf.engines.fio import (
    UNTIL_RUNTIME_LOOPS,
    FioEngine,
    FioError,
    buffered_depth_caveat,
    fio_args,
    fio_environment,
    parse_fio_json,
)
from pytest_encperf.engines.native import NativeEngine, native_schedule
from pytest_encperf.engines.observe import Observe
from pytest_encperf.workloads import (
    CDM,
    CDM_NVME,
    DD,
    DRAINED_DEFINITION_SUFFIX,
    MATRIX,
    PROFILES,
    ROUND_DEFINITION,
    SMALLFILES,
    TAKEN_TOGETHER_DEFINITION_SUFFIX,
    IoPlan,
    KiB,
    MiB,
    Workload,
    io_plan,
)

DATA = Path(__file__).resolve().parents[1] / "helpers" / "data"
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


def test_buffered_rounds_keep_the_queue_depth_of_one_stream_in_flight_with_io_uring(tmp_path: Path) -> None:
    rnd_q32_write = next(w for w in CDM if w.label == "RND4K Q32T1" and w.rw == "randwrite")
    args = fio_args(rnd_q32_write, tmp_path / "f", size=64 * MiB, runtime=1.0, direct=False)
    assert option(args, "ioengine") == "io_uring" and option(args, "direct") == "0"
    assert option(args, "iodepth") == "32" and option(args, "numjobs") == "1"
    assert option(args, "end_fsync") == "1" and option(args, "fdatasync") == str(16 * MiB // (4 * KiB))
    assert option(args, "size") == str(64 * MiB) and option(args, "offset_increment") is None
    assert option(args, "fadvise_hint") == "random"
    assert option(args, "random_generator") == "lfsr"  # each block once a pass, no neighbour runs
    assert option(args, "invalidate") == "0"  # a write round drops nothing between its passes
    seq = Workload("SEQ", "read", MiB, iodepth=4)
    args = fio_args(seq, tmp_path / "f", size=64 * MiB, runtime=1.0, direct=False)
    assert option(args, "iodepth") == "4" and option(args, "numjobs") == "1"
    assert option(args, "fadvise_hint") == "0"  # the kernel's own read-ahead, no doubled window
    assert option(args, "invalidate") == "1"  # a read round drops the stripe at every new pass


def test_without_io_uring_buffered_rounds_run_at_depth_one_and_say_so(tmp_path: Path) -> None:
    seq = Workload("SEQ", "read", MiB, iodepth=8)
    args = fio_args(seq, tmp_path / "f", size=64 * MiB, runtime=1.0, direct=False, uring=False)
    assert option(args, "ioengine") == "psync" and option(args, "iodepth") == "1"
    assert option(args, "numjobs") == "1"  # not 8 streams under the name of one
    assert buffered_depth_caveat(seq, direct=False, uring=False)
    assert not buffered_depth_caveat(seq, direct=True, uring=False)
    assert not buffered_depth_caveat(seq, direct=False, uring=True)
    assert not buffered_depth_caveat(Workload("SEQ", "read", MiB), direct=False, uring=False)


def test_threads_are_streams_each_on_its_own_stripe(tmp_path: Path) -> None:
    t16 = next(w for w in CDM_NVME if w.label == "RND4K Q32T16" and w.rw == "randread")
    for direct in (True, False):
        args = fio_args(t16, tmp_path / "f", size=64 * MiB, runtime=1.0, direct=direct)
        assert option(args, "numjobs") == "16" and option(args, "iodepth") == "32"
        assert option(args, "size") == option(args, "offset_increment") == str(4 * MiB)


def test_dd_is_one_pass_and_matrix_uses_its_extent(tmp_path: Path) -> None:
    args = fio_args(DD[0], tmp_path / "f", size=32 * MiB, runtime=1.0, direct=False)
    assert option(args, "io_size") == str(32 * MiB) and option(args, "time_based") is None
    small = MATRIX[0]
    assert small.extent == 4 * MiB
    args = fio_args(small, tmp_path / "f", size=32 * MiB, runtime=1.0, direct=True)
    assert option(args, "size") == str(4 * MiB)


def test_buffered_reads_with_more_than_one_out_run_pass_by_pass_never_dropping_under_a_read(
    tmp_path: Path,
) -> None:
    """fio's time-based loop drops a pass's pages with its last reads out, and the kernel keeps
    pages under a read: such rounds run by passes (--loops), each ending with its reads done,
    until the runtime; all others stay time based."""
    for name in ("SEQ1M-Q8T1-read", "RND4K-Q32T1-read"):
        workload = next(w for w in CDM if w.name == name)
        args = fio_args(workload, tmp_path / "f", size=64 * MiB, runtime=1.5, direct=False)
        assert option(args, "time_based") is None and option(args, "runtime") == "1500ms"
        assert option(args, "loops") == str(UNTIL_RUNTIME_LOOPS) and option(args, "invalidate") == "1"
        for kept in (
            fio_args(workload, tmp_path / "f", size=64 * MiB, runtime=1.5, direct=True),  # no pages
            fio_args(
                workload, tmp_path / "f", size=64 * MiB, runtime=1.5, direct=False, uring=False
            ),  # depth 1
        ):
            assert option(kept, "time_based") == "1" and option(kept, "loops") is None
    for workload in CDM:
        if workload.name not in ("SEQ1M-Q8T1-read", "RND4K-Q32T1-read"):  # depth 1, or writes
            args = fio_args(workload, tmp_path / "f", size=64 * MiB, runtime=1.5, direct=False)
            assert option(args, "time_based") == "1" and option(args, "loops") is None


@pytest.mark.parametrize(
    ("uring", "observe", "drained"),
    [(True, Observe(), True), (False, Observe(), False), (True, Observe(store_below=True), False)],
    ids=["by passes", "depth 1 without io_uring", "one pass"],
)
def test_a_round_says_its_pass_ends_were_drained_exactly_when_fio_ran_it_by_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uring: bool, observe: Observe, drained: bool
) -> None:
    from pytest_encperf.engines import fio

    ran: list[tuple[list[str], str]] = []

    def stand_in(args: list[str], **kwargs: Any) -> None:
        ran.append((args, kwargs["round_definition"]))

    monkeypatch.setattr(fio, "run_fio", stand_in)
    monkeypatch.setattr(fio, "creatable", lambda: uring)
    monkeypatch.setattr(fio.host, "drop_page_cache", lambda path: True)
    path = tmp_path / "f"
    path.write_bytes(bytes(4 * MiB))
    engine = FioEngine()
    engine._version = "3.33"
    engine.run(CDM[0], path, runtime=0.5, direct=False, observe=observe)  # SEQ1M Q8T1 read
    ((args, definition),) = ran
    assert (option(args, "loops") is not None) is drained
    assert definition == ROUND_DEFINITION + (DRAINED_DEFINITION_SUFFIX if drained else "")


@pytest.mark.parametrize("mode", ["direct", "buffered"])
@pytest.mark.parametrize("workload", [CDM[4], CDM[5], CDM[0], CDM[6]], ids=str)
def test_a_round_says_fio_took_its_completions_together_exactly_when_it_was_told_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workload: Workload, mode: str
) -> None:
    from pytest_encperf.engines import fio

    ran: list[tuple[list[str], str]] = []
    monkeypatch.setattr(fio, "run_fio", lambda args, **kwargs: ran.append((args, kwargs["round_definition"])))
    monkeypatch.setattr(fio, "probe_io_mode", lambda path: mode)
    monkeypatch.setattr(fio.host, "drop_page_cache", lambda path: True)
    path = tmp_path / "f"
    path.write_bytes(bytes(4 * MiB))
    engine = FioEngine()
    engine._version = "3.33"
    engine.run(workload, path, runtime=0.5, direct=True, observe=Observe(store_below=True))
    ((args, definition),) = ran
    together = mode == "direct" and workload.is_random and workload.iodepth > 1  # RND4K Q32T1
    assert (option(args, "iodepth_batch_complete_max") == "32") is together
    assert definition.endswith(TAKEN_TOGETHER_DEFINITION_SUFFIX) is together


def test_one_pass_rounds_end_at_the_end_of_the_file_or_the_runtime(tmp_path: Path) -> None:
    seq = Workload("SEQ", "read", MiB, iodepth=4)
    args = fio_args(seq, tmp_path / "f", size=64 * MiB, runtime=1.5, direct=False, one_pass=True)
    assert option(args, "time_based") is None and option(args, "runtime") == "1500ms"
    assert option(args, "size") == str(64 * MiB) and option(args, "numjobs") == "1"  # one stream, once
    assert option(args, "loops") is None
    assert (
        option(fio_args(seq, tmp_path / "f", size=64 * MiB, runtime=1.5, direct=False), "loops")
        == str(UNTIL_RUNTIME_LOOPS)  # by passes until the runtime (4 reads out at each pass end)
    )


def test_engine_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(select_engine("native"), NativeEngine)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert isinstance(select_engine("auto"), NativeEngine)
    with pytest.raises(ValueError, match="fio is not installed"):
        select_engine("fio")
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert isinstance(select_engine("auto"), FioEngine)


def test_fio_runs_with_huge_page_buffers_and_keeps_the_users_glibc_tunables(tmp_path: Path) -> None:
    args = fio_args(CDM[0], tmp_path / "f", size=64 * MiB, runtime=1.0, direct=True)
    assert option(args, "iomem_align") == str(2 * MiB)  # past the head of fio's allocation
    assert fio_environment({})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    mine = fio_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "HOME": "/root"})
    assert mine == {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1", "HOME": "/root"}
    assert fio_environment({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})["GLIBC_TUNABLES"] == (
        "glibc.malloc.hugetlb=0"  # the user's own choice stands
    )


@needs_fio
def test_fio_delegates_the_small_files_cycle_to_the_native_engine(tmp_path: Path) -> None:
    path = FioEngine().prepare(tmp_path, MiB)
    m = FioEngine().run(SMALLFILES[0], path, runtime=0.01, direct=True)
    assert m.engine == "native" and m.ios % SMALLFILES[0].files == 0 and m.ios > 0
    assert list((tmp_path / "encperf-smallfiles").iterdir()) == []


def fio_translation(args: list[str]) -> dict[str, object]:
    """What a fio command line does, in IoPlan's terms."""
    block = int(option(args, "bs") or 0)
    fdatasync = option(args, "fdatasync")
    stripe = int(option(args, "size") or 0)
    streams = int(option(args, "numjobs") or 1)
    if streams > 1:
        assert option(args, "offset_increment") == str(stripe)  # stripes side by side
    return {
        "block_size": block,
        "streams": streams,
        "outstanding": int(option(args, "iodepth") or 1),
        "stripe": stripe,
        "random": (option(args, "rw") or "").startswith("rand"),
        "flush_every": None if fdatasync is None else int(fdatasync) * block,
        "end_flush": option(args, "end_fsync") == "1",
        "advice": "random" if option(args, "fadvise_hint") == "random" else "normal",
        "amount": None if option(args, "io_size") is None else int(option(args, "io_size") or 0),
        "completion_batch": batch_of(args),
    }


def batch_of(args: list[str]) -> int:
    """The most completions fio takes in one call, whose successors it submits in one call."""
    submit, complete = option(args, "iodepth_batch_submit"), option(args, "iodepth_batch_complete_max")
    assert submit == complete, (submit, complete)  # taken and refilled together
    assert option(args, "iodepth_batch_complete_min") is None  # waits for one: the queue stays full
    return int(complete or 1)


def native_translation(plan: IoPlan) -> dict[str, object]:
    """What the native engine does for ``plan``, in the same terms."""
    schedule = native_schedule(plan, aio_usable=True, uring_usable=True)
    streams = [native._Stream(plan, index, True, None) for index in range(plan.streams)]
    depths = {schedule.in_flight(index) for index in range(plan.streams)}
    assert len(depths) == 1 and sorted(set(schedule.workers)) == list(range(plan.streams))
    first = streams[0]
    starts = [stream.first for stream in streams]
    assert starts == [index * first.stripe for index in range(plan.streams)]  # side by side
    return {
        "block_size": first.block,
        "streams": len(streams),
        "outstanding": depths.pop(),
        "stripe": first.stripe,
        "random": isinstance(first.order, list),
        "flush_every": None if plan.is_read or not first.every else first.every * first.block,
        "end_flush": plan.end_flush,
        "advice": plan.advice,
        "amount": plan.amount,
        # the AIO loop takes every ready completion, up to its queue (aio.run_queue, tested in
        # test_native_engine): what fio is told for random direct queues, fio's default elsewhere
        "completion_batch": plan.completion_batch,
    }


EVERY_BLOCK_WORKLOAD = [w for profile in PROFILES.values() for w in profile.workloads if w.kind == "block"]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
@pytest.mark.parametrize("workload", EVERY_BLOCK_WORKLOAD, ids=lambda w: f"{w.name}-{w.numjobs}")
def test_both_engines_translate_the_one_definition_of_a_round(
    tmp_path: Path, workload: Workload, direct: bool
) -> None:
    # same block size, streams, outstanding I/O, stripes, order and flush points in both engines
    size = 64 * MiB
    plan = io_plan(workload, size, direct)
    expected = {key: getattr(plan, key) for key in fio_translation([])}
    args = fio_args(workload, tmp_path / "f", size=size, runtime=1.0, direct=direct)
    assert fio_translation(args) == expected
    assert native_translation(plan) == expected
    queue = "libaio" if direct else "io_uring"
    assert option(args, "ioengine") == (queue if workload.iodepth > 1 else "psync")  # Q1: plain calls
