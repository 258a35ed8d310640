"""The built-in engine on a plain file: counts, alignment, modes, latency summary."""

from __future__ import annotations

import ctypes
import os
import time
import types
from pathlib import Path

import pytest

from pytest_encperf.engines import TEST_FILE_NAME, native
from pytest_encperf.engines.native import (
    HUGE_PAGE,
    PAGE,
    BufferPool,
    NativeEngine,
    native_schedule,
    percentile,
    probe_io_mode,
)
from pytest_encperf.engines.observe import Observe
from pytest_encperf.workloads import (
    CDM,
    DRAINED_DEFINITION_SUFFIX,
    ROUND_DEFINITION,
    TAKEN_TOGETHER_DEFINITION_SUFFIX,
    KiB,
    MiB,
    Workload,
)

SIZE = 4 * MiB


@pytest.fixture
def engine() -> NativeEngine:
    return NativeEngine()


@pytest.fixture
def test_file(engine: NativeEngine, tmp_path: Path) -> Path:
    return engine.prepare(tmp_path, SIZE)


def test_prepare_writes_random_file_of_exact_size_once(engine: NativeEngine, tmp_path: Path) -> None:
    path = engine.prepare(tmp_path, SIZE)
    assert path == tmp_path / TEST_FILE_NAME
    assert path.stat().st_size == SIZE
    head = path.read_bytes()[:4096]
    assert len(set(head)) > 200  # random, not zeros
    mtime = path.stat().st_mtime_ns
    assert engine.prepare(tmp_path, SIZE) == path and path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("workload", CDM, ids=str)
def test_every_cdm_workload_counts_whole_blocks(
    engine: NativeEngine, test_file: Path, workload: Workload
) -> None:
    m = engine.run(workload, test_file, runtime=0.05, direct=False)
    assert m.ios > 0
    assert m.bytes == m.ios * workload.block_size
    assert m.seconds > 0 and m.mb_per_s == pytest.approx(m.bytes / m.seconds / 1e6)
    assert 0 < m.lat_p50_us <= m.lat_p99_us <= m.lat_p999_us
    assert m.io_mode == "buffered"
    assert m.engine == "native" and m.latency == "total"  # submission to completion, as fio's lat


def test_offsets_are_block_aligned_and_inside_the_file(
    engine: NativeEngine, test_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int]] = []
    real = os.preadv

    def spy(fd: int, buffers: list, offset: int) -> int:
        seen.append((offset, len(buffers[0])))
        return real(fd, buffers, offset)

    monkeypatch.setattr(native.os, "preadv", spy)
    workload = Workload("RND4K Q4T1", "randread", 4 * KiB, 4)
    m = NativeEngine(kernel_queues=False).run(workload, test_file, runtime=0.05, direct=False)
    assert len(seen) == m.ios
    assert all(offset % (4 * KiB) == 0 and 0 <= offset <= SIZE - length for offset, length in seen)
    # a random pass visits distinct blocks (no repeats before the file is covered)
    first_pass = [offset for offset, _ in seen[: SIZE // (4 * KiB)]]
    assert len(set(first_pass)) == len(first_pass)


def test_sequential_writes_cover_the_file_in_order(
    engine: NativeEngine, test_file: Path, monkeypatch
) -> None:
    seen: list[int] = []
    real = os.pwritev

    def spy(fd: int, buffers: list, offset: int) -> int:
        seen.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(native.os, "pwritev", spy)
    engine.run(Workload("SEQ1M Q1T1", "write", MiB, 1), test_file, runtime=0.05, direct=False)
    assert seen[: SIZE // MiB] == [i * MiB for i in range(min(len(seen), SIZE // MiB))]
    assert test_file.stat().st_size == SIZE  # writes overwrite, never grow the file


def test_queue_depth_runs_that_many_ios_in_flight(engine: NativeEngine, test_file: Path, monkeypatch) -> None:
    import threading
    import time

    in_flight = 0
    peak = 0
    lock = threading.Lock()
    real = os.preadv

    def slow(fd: int, buffers: list, offset: int) -> int:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.002)
        try:
            return real(fd, buffers, offset)
        finally:
            with lock:
                in_flight -= 1

    monkeypatch.setattr(native.os, "preadv", slow)
    threads = NativeEngine(kernel_queues=False)  # without AIO and io_uring: a thread per I/O in flight
    threads.run(Workload("RND4K Q8T2", "randread", 4 * KiB, 8, 2), test_file, runtime=0.1, direct=False)
    assert peak == 16


def test_direct_io_probe_and_mode_on_a_disk_file(engine: NativeEngine, test_file: Path) -> None:
    mode = probe_io_mode(test_file)
    assert mode in ("direct", "buffered", "direct-requested-but-buffered")
    m = engine.run(Workload("SEQ1M Q1T1", "read", MiB, 1), test_file, runtime=0.05, direct=True)
    assert m.io_mode == mode


def test_percentile_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(values, 0.999) == 100
    assert percentile([], 0.5) == 0.0


def test_file_smaller_than_a_block_is_a_clear_error(engine: NativeEngine, tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"x" * 4096)
    with pytest.raises(ValueError, match="smaller than one"):
        engine.run(Workload("SEQ1M Q1T1", "read", MiB, 1), small, runtime=0.05, direct=False)


def test_dd_moves_exactly_its_amount_once(engine: NativeEngine, test_file: Path) -> None:
    from pytest_encperf.workloads import DD

    m = engine.run(DD[0], test_file, runtime=30.0, direct=False)  # not time based: returns at once
    assert m.bytes == SIZE and m.ios == SIZE // (4 * KiB)  # the file is smaller than its 64 MiB
    assert m.seconds < 30 and m.logical_write_bytes == SIZE and m.logical_read_bytes == 0
    half = Workload("DD 4K", "write", 4 * KiB, amount=SIZE // 2)
    assert engine.run(half, test_file, runtime=30.0, direct=False).bytes == SIZE // 2


def test_extent_limits_offsets_to_the_start_of_the_file(
    engine: NativeEngine, test_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = os.preadv

    def spy(fd: int, buffers: list, offset: int) -> int:
        seen.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(native.os, "preadv", spy)
    workload = Workload("F1M R64K", "randread", 64 * KiB, extent=MiB)
    # rounds until 400 reads (all 16 blocks missed by chance: p ~ 1e-10), not one round of a fixed
    # time, which a loaded machine can fill with too few reads to touch every block
    for _ in range(200):
        engine.run(workload, test_file, runtime=0.05, direct=False)
        if len(seen) >= 400 or len(set(seen)) == MiB // (64 * KiB):
            break
    assert seen and max(seen) < MiB and all(offset % (64 * KiB) == 0 for offset in seen)
    assert len(set(seen)) == MiB // (64 * KiB)


def test_small_files_cycle_creates_reads_and_deletes_everything(engine: NativeEngine, tmp_path: Path) -> None:
    from pytest_encperf.workloads import SMALL_FILE_SIZES, SMALLFILES

    workload = SMALLFILES[0]
    m = engine.run(workload, tmp_path / "unused.dat", runtime=0.01, direct=False)
    passes = m.ios // workload.files
    assert passes >= 1 and m.ios == passes * workload.files
    per_pass = sum(SMALL_FILE_SIZES[i % len(SMALL_FILE_SIZES)] for i in range(workload.files))
    assert m.logical_write_bytes == m.logical_read_bytes == passes * per_pass
    assert m.bytes == 2 * passes * per_pass and m.io_mode == "buffered"
    assert list((tmp_path / native.SMALLFILES_DIR).iterdir()) == []


@pytest.mark.skipif(not native.aio.available(), reason="Linux AIO system calls unknown on this machine")
@pytest.mark.parametrize("workload", [CDM[0], CDM[1], CDM[4], CDM[5]], ids=str)
def test_direct_rounds_go_through_linux_aio_with_the_queue_depth_in_flight(
    engine: NativeEngine, test_file: Path, workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    if probe_io_mode(test_file) != "direct":
        pytest.skip(f"O_DIRECT is not really direct on {test_file.parent}")
    depths: list[int] = []
    real = native.aio.run_queue

    def spy(fd, buffers, *args, **kwargs):
        depths.append(len(buffers))
        return real(fd, buffers, *args, **kwargs)

    monkeypatch.setattr(native.aio, "run_queue", spy)
    m = engine.run(workload, test_file, runtime=0.05, direct=True)
    assert depths == [workload.iodepth] * workload.numjobs
    assert TAKEN_TOGETHER_DEFINITION_SUFFIX not in m.round_definition  # the native loop always took them so
    assert m.io_mode == "direct" and m.ios > 0 and m.bytes == m.ios * workload.block_size
    assert 0 < m.lat_p50_us <= m.lat_p99_us
    if not workload.is_read:  # what AIO wrote is really in the file
        assert len(set(test_file.read_bytes()[: workload.block_size])) > 200
    dd = Workload("DD", "write", 4 * KiB, amount=MiB)
    assert engine.run(dd, test_file, runtime=10, direct=True).ios == MiB // (4 * KiB)


@pytest.mark.skipif(not native.aio.available(), reason="Linux AIO system calls unknown on this machine")
def test_an_aio_queue_takes_every_ready_completion_and_refills_in_one_call(
    test_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what fio is told for a queued direct random round (IoPlan.completion_batch): wait for one,
    # take up to the whole queue, submit the successors of all taken in one call
    if probe_io_mode(test_file) != "direct":
        pytest.skip(f"O_DIRECT is not really direct on {test_file.parent}")
    libc = native.aio._LIBC
    assert libc is not None
    libc.syscall.restype = ctypes.c_long
    numbers = native.aio._NUMBERS or {}
    submitted: list[int] = []  # I/Os handed over by each io_submit
    waits: list[tuple[int, int, int]] = []  # each io_getevents: (at least, at most, taken)

    def recording_syscall(number: ctypes.c_long, *args: object) -> int:
        result = libc.syscall(number, *args)
        if number.value == numbers["submit"]:
            submitted.append(getattr(args[1], "value", 0))
        elif number.value == numbers["getevents"]:
            waits.append((getattr(args[1], "value", 0), getattr(args[2], "value", 0), result))
        return result

    monkeypatch.setattr(native.aio, "_LIBC", types.SimpleNamespace(syscall=recording_syscall))
    offsets = iter(range(0, 70 * 4 * KiB, 4 * KiB))  # 70 I/Os
    latencies: list[int] = []
    fd = os.open(test_file, os.O_RDONLY | os.O_DIRECT)
    pool = BufferPool(32, 4 * KiB)
    try:
        native.aio.run_queue(
            fd, pool.addresses, 4 * KiB, True, lambda: next(offsets, None), time.perf_counter_ns,
            lambda: 2**63, latencies,
        )  # fmt: skip
    finally:
        os.close(fd)
        pool.close()
    assert len(latencies) == 70 and sum(taken for _, _, taken in waits) == 70
    assert {(least, most) for least, most, _ in waits} == {(1, 32)}
    assert submitted[0] == 32 and sum(submitted) == 70
    # after each wait, the successors of what it took (while offsets last) go in one call
    refills = [min(taken, 70 - 32 - sum(t for _, _, t in waits[:i])) for i, (_, _, taken) in enumerate(waits)]
    assert submitted[1:] == [n for n in refills if n > 0]


@pytest.mark.parametrize(("count", "size"), [(1, 4 * KiB), (8, MiB), (3, 5000), (4, 8 * MiB)])
def test_buffer_pool_gives_separate_aligned_zeroed_buffers(count: int, size: int) -> None:
    pool = BufferPool(count, size)
    try:
        assert len(pool.addresses) == len(pool.views) == count
        assert all(address % PAGE == 0 for address in pool.addresses)  # O_DIRECT needs it
        assert pool.addresses[0] % HUGE_PAGE == 0  # so whole huge pages can back it
        assert all(len(view) == size and not any(view) for view in pool.views)
        ends = [address + size for address in pool.addresses]
        assert all(end <= following for end, following in zip(ends[:-1], pool.addresses[1:], strict=True))
        pool.fill_random()
        assert len({bytes(view[:64]) for view in pool.views}) == count
    finally:
        pool.close()
    assert pool.views == [] and pool.addresses == []


@pytest.mark.parametrize("workload", [CDM[0], CDM[4]], ids=str)
def test_buffered_reads_on_a_store_below_read_the_file_once(
    engine: NativeEngine, test_file: Path, workload: Workload
) -> None:
    # a FUSE store's pages stay cached below the volume: a second pass would read memory
    below = Observe(store_below=True)
    m = engine.run(workload, test_file, runtime=30, direct=False, observe=below)
    assert m.bytes == SIZE and m.seconds < 30
    # writes, and volumes without a store below, stay time based (several passes here)
    write = Workload("SEQ", "write", MiB, iodepth=1)
    assert engine.run(write, test_file, runtime=0.3, direct=False, observe=below).bytes > SIZE
    assert engine.run(workload, test_file, runtime=0.3, direct=False).bytes > SIZE


def test_backends_whose_daemon_reads_a_store_below_say_so() -> None:
    from pytest_encperf.backends import backend_class, known_names

    below = {name for name in known_names() if backend_class(name).store_below}
    assert below == {"gocryptfs", "encfs", "cryfs", "securefs", "qemu-luks", "bitlocker", "ecryptfs"}


def test_streams_keep_to_their_stripes_and_flush_on_their_own_count(
    engine: NativeEngine, test_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    offsets: dict[int, list[int]] = {}
    real_write, real_sync = os.pwritev, os.fdatasync
    syncs: list[int] = []
    lock = threading.Lock()

    def spy(fd: int, buffers: list, offset: int) -> int:
        with lock:
            offsets.setdefault(threading.get_ident(), []).append(offset)
        return real_write(fd, buffers, offset)

    def sync(fd: int) -> None:
        with lock:
            syncs.append(sum(len(seen) for seen in offsets.values()))
        real_sync(fd)

    monkeypatch.setattr(native.os, "pwritev", spy)
    monkeypatch.setattr(native.os, "fdatasync", sync)
    monkeypatch.setattr(native, "io_plan", _small_flush(256 * KiB))
    t2 = Workload("SEQ64K Q2T2", "write", 64 * KiB, iodepth=2, numjobs=2)
    m = NativeEngine(kernel_queues=False).run(t2, test_file, runtime=0.2, direct=False)
    stripe = SIZE // 2
    assert len(offsets) == 4  # 2 streams x 2 threads
    by_stripe = {min(seen) // stripe for seen in offsets.values()}
    assert by_stripe == {0, 1}
    assert all(len({offset // stripe for offset in seen}) == 1 for seen in offsets.values())
    # each stream flushes after every 256 KiB (4 writes) of its own, and the round ends with one
    assert len(syncs) >= m.ios // 8 and syncs[-1] == m.ios


def _small_flush(flush_every: int):  # io_plan with a smaller flush interval, to see the points
    from dataclasses import replace

    from pytest_encperf.workloads import io_plan

    def plan(workload: Workload, size: int, direct: bool):
        return replace(io_plan(workload, size, direct), flush_every=flush_every)

    return plan


def test_buffered_reads_drop_the_stripe_at_every_new_pass_and_random_asks_no_read_ahead(
    engine: NativeEngine, test_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    advice: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, what: int) -> None:
        advice.append((offset, length, what))
        real(fd, offset, length, what)

    monkeypatch.setattr(native.os, "posix_fadvise", spy)
    extent = 256 * KiB  # 4 blocks a pass: many passes, however slow the machine
    rnd = Workload("RND64K Q1T1", "randread", 64 * KiB, extent=extent)
    m = engine.run(rnd, test_file, runtime=0.2, direct=False)
    passes = m.bytes // extent
    assert passes >= 2
    assert (0, 0, os.POSIX_FADV_RANDOM) in advice
    drops = [a for a in advice if a[2] == os.POSIX_FADV_DONTNEED and a[:2] == (0, extent)]
    assert len(drops) == passes - (m.bytes % extent == 0)  # at the start of every pass after the first
    advice.clear()
    engine.run(Workload("SEQ64K Q1T1", "read", 64 * KiB), test_file, runtime=0.05, direct=False)
    assert os.POSIX_FADV_RANDOM not in {a[2] for a in advice}  # sequential: the kernel's read-ahead
    advice.clear()
    write = Workload("SEQ64K Q1T1", "write", 64 * KiB, extent=extent)
    assert engine.run(write, test_file, runtime=0.1, direct=False).bytes >= 2 * extent
    assert [a for a in advice if a[:2] == (0, extent)] == []  # writes drop nothing between passes


@pytest.mark.skipif(not native.uring.available(), reason="io_uring is not usable here (x86-64, kernel 5.6+)")
@pytest.mark.parametrize("workload", [CDM[0], CDM[1], CDM[4], CDM[5]], ids=str)
def test_buffered_rounds_keep_the_queue_depth_in_flight_through_io_uring(
    engine: NativeEngine, test_file: Path, workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    depths: list[int] = []
    offsets: list[int] = []
    real = native.uring.run_queue

    one_a_call: list[bool] = []

    def spy(fd, buffers, block, is_read, next_offset, *args, **kwargs):
        depths.append(len(buffers))
        one_a_call.append(kwargs.get("one_a_call", True))

        def recorded() -> int | None:
            offset = next_offset()
            if offset is not None and offset != native.uring.PASS_END:
                offsets.append(offset)
            return offset

        return real(fd, buffers, block, is_read, recorded, *args, **kwargs)

    monkeypatch.setattr(native.uring, "run_queue", spy)
    m = engine.run(workload, test_file, runtime=0.1, direct=False)
    assert depths == [workload.iodepth] * workload.numjobs
    # sequential I/Os each in a call of their own, as fio; scattered ones together (uring.run_queue)
    assert one_a_call == [not workload.is_random] * workload.numjobs
    assert m.io_mode == "buffered" and m.ios > 0 and m.bytes == m.ios * workload.block_size
    assert m.ios >= len(offsets) - workload.iodepth  # every I/O taken was done, bar the last queue
    assert 0 < m.lat_p50_us <= m.lat_p99_us
    block = workload.block_size
    assert all(o % block == 0 and 0 <= o <= SIZE - block for o in offsets)
    first_pass = offsets[: SIZE // block]
    assert len(set(first_pass)) == len(first_pass)  # a pass visits each block once
    if not workload.is_random:
        assert first_pass == sorted(first_pass)
    if not workload.is_read:  # what io_uring wrote is really in the file
        assert len(set(test_file.read_bytes()[:block])) > 200


def test_one_io_in_flight_is_a_plain_call_and_no_queue(
    test_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_encperf.workloads import io_plan

    q1 = io_plan(CDM[2], SIZE, direct=False)  # SEQ1M Q1T1, buffered
    assert native_schedule(q1, aio_usable=True, uring_usable=True).queue == "sync"
    direct_q1 = io_plan(CDM[2], SIZE, direct=True)
    assert native_schedule(direct_q1, aio_usable=True, uring_usable=True).queue == "sync"  # fio's psync
    direct_q8 = io_plan(CDM[0], SIZE, direct=True)
    assert native_schedule(direct_q8, aio_usable=True, uring_usable=True).queue == "aio"  # fio's libaio
    q8 = io_plan(CDM[0], SIZE, direct=False)
    assert native_schedule(q8, aio_usable=True, uring_usable=True).queue == "uring"
    threads = native_schedule(q8, aio_usable=False, uring_usable=False)
    assert (threads.queue, threads.workers, threads.in_flight(0)) == ("sync", (0,) * 8, 8)


@pytest.mark.skipif(not native.uring.available(), reason="io_uring is not usable here (x86-64, kernel 5.6+)")
@pytest.mark.parametrize("workload", [CDM[0], CDM[4]], ids=str)
def test_a_pass_ends_with_every_read_in_before_its_pages_are_dropped(
    engine: NativeEngine, test_file: Path, workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue lets its reads complete, then the pass's pages go (none of them under a read, so
    none survives the drop) and the next pass starts (docs/explanation/method.md)."""
    real = native.uring.run_queue
    out_at_pass_end: list[int] = []  # reads still out when the stream was asked past a pass end

    def spy(fd, buffers, block, is_read, next_offset, clock, deadline, latencies, **kwargs):
        handed, ended = 0, False

        def recorded() -> int | None:
            nonlocal handed, ended
            if ended:
                out_at_pass_end.append(handed - len(latencies))
                ended = False
            offset = next_offset()
            if offset == native.uring.PASS_END:
                ended = True
            elif offset is not None:
                handed += 1
            return offset

        return real(fd, buffers, block, is_read, recorded, clock, deadline, latencies, **kwargs)

    monkeypatch.setattr(native.uring, "run_queue", spy)
    drops: list[int] = []
    real_advice = os.posix_fadvise

    def advise(fd: int, offset: int, length: int, what: int) -> None:
        if what == os.POSIX_FADV_DONTNEED:
            drops.append(offset)
        real_advice(fd, offset, length, what)

    monkeypatch.setattr(native.os, "posix_fadvise", advise)
    m = engine.run(workload, test_file, runtime=0.3, direct=False)
    assert m.bytes > SIZE  # more than one pass
    assert out_at_pass_end and set(out_at_pass_end) == {0}
    assert len(drops) >= len(out_at_pass_end)  # each pass end dropped the pass's pages
    assert m.round_definition == ROUND_DEFINITION + DRAINED_DEFINITION_SUFFIX


@pytest.mark.parametrize("workload", [CDM[0], CDM[4]], ids=str)
def test_a_round_that_does_not_wait_for_its_reads_at_a_pass_end_does_not_say_it_did(
    test_file: Path, workload: Workload
) -> None:
    # a thread per I/O in flight (no io_uring): the pages go while the other threads' reads are out
    m = NativeEngine(kernel_queues=False).run(workload, test_file, runtime=0.3, direct=False)
    assert m.bytes > SIZE and m.round_definition == ROUND_DEFINITION
    # one pass (a store below): no pass end at all
    one = NativeEngine().run(workload, test_file, runtime=30, direct=False, observe=Observe(store_below=True))
    assert one.bytes == SIZE and one.round_definition == ROUND_DEFINITION
