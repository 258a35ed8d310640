"""The built-in engine: no external tool; Linux AIO for O_DIRECT, io_uring for buffered queues.

It runs a round as workloads.io_plan defines it (the same definition fio is driven by), and
issues it as fio does (native_schedule): direct rounds keep each stream's queue depth in
flight with Linux AIO (``aio.run_queue``, one thread per stream), like fio's libaio engine;
buffered rounds through io_uring (``uring.run_queue``), like fio's io_uring engine; one I/O at
a time, in either mode, as plain preadv/pwritev calls, like fio's psync.
Where AIO or io_uring cannot be used, each stream gets ``outstanding`` threads that take its
offsets in turn (os.preadv and os.pwritev release the GIL). Buffers are page-aligned, cut from
one mapping on transparent huge pages (see BufferPool). Flush points, page drops and the random order are
the plan's (see IoPlan), so the page cache cannot inflate the numbers.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import itertools
import math
import mmap
import os
import random
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, host
from ..model import LATENCY_TOTAL, Measurement
from ..workloads import SMALL_FILE_SIZES, IoPlan, MiB, Workload, io_plan, round_definition
from . import TEST_FILE_NAME, aio, uring
from .observe import Observe, Observer, busy_cpu_seconds, with_caveat
from .readahead import round_readahead_limited

__all__ = [
    "NativeEngine",
    "busy_cpu_seconds",
    "native_schedule",
    "percentile",
    "probe_io_mode",
]

PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 * MiB  # a transparent huge page on x86-64 and arm64 (4 KiB base pages)
SMALLFILES_DIR = "encperf-smallfiles"


def percentile(sorted_values: list[int] | array, fraction: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, math.ceil(round(fraction * len(sorted_values), 9)) - 1))
    return float(sorted_values[rank])


def probe_io_mode(path: Path) -> str:
    """Reopen ``path`` with O_DIRECT and see what the kernel really does with it.

    An unaligned read must fail with EINVAL under true direct I/O; if it succeeds, the file
    system accepted O_DIRECT but serves it from the page cache (fscrypt without inline crypto).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return "buffered"
        raise
    try:
        aligned = mmap.mmap(-1, PAGE)
        try:
            os.preadv(fd, [aligned], 0)
        except OSError:
            return "buffered"
        finally:
            aligned.close()
        try:
            os.pread(fd, 1, 1)  # unaligned length, offset and buffer
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return "direct"
            raise
        return "direct-requested-but-buffered"
    finally:
        os.close(fd)


class BufferPool:
    """``count`` I/O buffers of ``size`` bytes, cut from one private anonymous mapping that
    starts on a 2 MiB boundary and asks for transparent huge pages (MADV_HUGEPAGE).

    Why: a direct I/O reaches the device as one request only if its pages fit the queue's
    segment limit. A loop device takes 128 segments of at most 64 KiB, so a 1 MiB buffer made
    of scattered 4 KiB pages is split into two 512 KiB requests, and whether it is depends on
    how fragmented memory happens to be: SEQ1M Q8T1 reads here were bimodal (about 1.1 or
    2.1 GB/s). Huge pages are physically contiguous, so every 1 MiB I/O is one request. Where
    the kernel refuses huge pages the buffers are ordinary pages, which is still correct.
    The pages are touched before the round, so no page fault lands in the timed part.
    """

    def __init__(self, count: int, size: int) -> None:
        self.size = size
        stride = -(-max(size, 1) // PAGE) * PAGE  # every buffer page-aligned, for O_DIRECT
        total = count * stride
        whole_pages = -(-total // HUGE_PAGE) * HUGE_PAGE  # only whole huge pages are granted
        self._map = mmap.mmap(-1, whole_pages + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        start = ctypes.c_char.from_buffer(self._map)
        first = -ctypes.addressof(start) % HUGE_PAGE
        del start
        if hasattr(mmap, "MADV_HUGEPAGE"):
            with contextlib.suppress(OSError):
                self._map.madvise(mmap.MADV_HUGEPAGE, first, whole_pages)
        self._map[first : first + total] = bytes(total)  # fault every page in now
        offsets = [first + i * stride for i in range(count)]
        self._anchors = [ctypes.c_char.from_buffer(self._map, offset) for offset in offsets]
        self.addresses = [ctypes.addressof(anchor) for anchor in self._anchors]
        whole = memoryview(self._map)
        self.views = [whole[offset : offset + size] for offset in offsets]
        whole.release()

    def fill_random(self) -> None:
        for view in self.views:
            view[:] = os.urandom(self.size)

    def close(self) -> None:
        for view in self.views:
            view.release()
        self.views, self._anchors, self.addresses = [], [], []
        self._map.close()


@dataclass(frozen=True)
class NativeSchedule:
    """How the native engine issues an IoPlan: ``workers[i]`` is the stream worker i serves;
    each keeps ``depth`` I/Os in flight through ``queue`` ("aio": Linux AIO, "uring":
    io_uring), or with ``queue`` "sync" one at a time in its own thread (a stream's
    ``outstanding`` I/Os are then that many threads)."""

    workers: tuple[int, ...]
    depth: int
    queue: str

    def in_flight(self, stream: int) -> int:
        return self.depth * self.workers.count(stream)


def native_schedule(plan: IoPlan, aio_usable: bool, uring_usable: bool) -> NativeSchedule:
    """As fio issues the plan: one I/O at a time is a plain synchronous call in either mode
    (fio's psync); more than one in flight, one Linux AIO queue per stream when direct (fio's
    libaio) and one io_uring per stream when buffered (fio's io_uring; AIO would block in
    io_submit). Without AIO or io_uring: ``outstanding`` threads per stream taking its offsets
    in turn."""
    streams = tuple(range(plan.streams))
    if plan.outstanding > 1:
        if plan.direct and aio_usable:
            return NativeSchedule(streams, plan.outstanding, "aio")
        if not plan.direct and uring_usable:
            return NativeSchedule(streams, plan.outstanding, "uring")
    workers = tuple(stream for stream in streams for _ in range(plan.outstanding))
    return NativeSchedule(workers, 1, "sync")


class _Stream:
    """One stream of an IoPlan: its own open file (so its own read-ahead state, as a fio job),
    its offsets in order, shared by the workers that serve it, and its flush (buffered writes)
    or page drop (buffered reads, at each new pass) points."""

    def __init__(
        self,
        plan: IoPlan,
        index: int,
        drop_cache: bool,
        limit: int | None,
        fd: int = -1,
        *,
        drain_at_pass_end: bool = False,
    ) -> None:
        self.fd = fd
        self.block = plan.block_size
        self.first = index * plan.stripe
        self.blocks = plan.blocks
        self.order: list[int] | range = range(plan.blocks)
        if plan.random:  # every block once per pass, shuffled (like fio's random map)
            self.order = list(range(plan.blocks))
            random.Random(0x5EED + index).shuffle(self.order)
        self.limit = limit
        self.cursor = itertools.count()  # next() is atomic under the GIL
        self.lock = threading.Lock()
        self.every: int | None = None  # I/Os between two maintenance points
        if not plan.direct and drop_cache:
            self.every = plan.blocks if plan.is_read else (plan.flush_every or 0) // plan.block_size or None
        self.next_point = self.every or 0
        # a queue's reads: the pass's last reads complete before its pages are dropped
        # (uring.PASS_END), so no page still under a read survives the drop into the next pass.
        # fio 3.33's time-based loop drops them with its reads still out (io_u.c,
        # get_next_seq_offset): on plain, SEQ1M Q8T1 read of 16 MiB, a fifth of its reads then
        # came from the cache (device/logical 0.80; with the drain 1.00, docs/explanation/method.md).
        self.drain_at_pass_end = drain_at_pass_end and plan.is_read
        self.pending: int | None = None  # the I/O that met a pass end, issued after the drain
        self.is_read = plan.is_read
        self.stripe = plan.stripe

    def next_offset(self) -> int | None:
        """The next I/O's offset, None when the stream is done; first the stream's maintenance
        when its count passes a point: fdatasync (writes) or dropping the stripe's cached pages
        at a new pass (reads)."""
        if self.pending is not None:  # drained: this pass's end now, then its I/O
            n, self.pending = self.pending, None
        else:
            n = next(self.cursor)
            if self.limit is not None and n >= self.limit:
                return None
            if self.drain_at_pass_end and self.every and n >= self.next_point:
                self.pending = n
                return uring.PASS_END
        if self.every and n >= self.next_point:
            with self.lock:
                if n >= self.next_point:
                    if self.is_read:
                        os.posix_fadvise(self.fd, self.first, self.stripe, os.POSIX_FADV_DONTNEED)
                    else:
                        os.fdatasync(self.fd)
                    self.next_point += self.every
        return self.first + self.order[n % self.blocks] * self.block


class NativeEngine:
    """``drop_cache=False`` keeps the page cache between rounds: only for checking that the
    cache detector notices (a real benchmark never measures that way)."""

    name = "native"

    def __init__(self, *, drop_cache: bool = True, kernel_queues: bool = True) -> None:
        self.drop_cache = drop_cache
        # I/Os in flight through Linux AIO (direct) and io_uring (buffered) where available;
        # False: one thread per I/O in flight (see native_schedule)
        self.kernel_queues = kernel_queues

    def version(self) -> str:
        return __version__

    def prepare(self, directory: Path, size: int) -> Path:
        path = directory / TEST_FILE_NAME
        if path.exists() and path.stat().st_size == size:
            return path
        chunk = 4 * MiB
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            written = 0
            pattern = os.urandom(chunk)  # incompressible, so no layer below can shortcut it
            while written < size:
                count = min(chunk, size - written)
                written += os.write(fd, pattern[:count])
            os.fdatasync(fd)
        finally:
            os.close(fd)
        host.drop_page_cache(path)
        return path

    def io_mode(self, path: Path) -> str:
        return probe_io_mode(path)

    def run(
        self,
        workload: Workload,
        path: Path,
        *,
        runtime: float,
        direct: bool,
        observe: Observe | None = None,
    ) -> Measurement:
        observe = observe or Observe()
        if workload.kind == "job":  # the user's own fio job: fio runs it, whichever engine is chosen
            from ..fiojob import run_job

            return run_job(workload, path, runtime=runtime, observe=observe)
        if workload.kind == "files":
            return self.run_files(workload, path.parent / SMALLFILES_DIR, runtime=runtime, observe=observe)
        with round_readahead_limited(workload, observe) as limited:  # before the round opens the file
            return self.run_block(
                workload, path, runtime=runtime, direct=direct, observe=observe, limited=limited
            )

    def run_block(
        self, workload: Workload, path: Path, *, runtime: float, direct: bool, observe: Observe, limited: bool
    ) -> Measurement:
        """One round of a block workload (``limited``: the store below reads ahead one page)."""
        mode = probe_io_mode(path) if direct else "buffered"
        truly_direct = mode == "direct"
        plan = io_plan(workload, path.stat().st_size, truly_direct)
        queues = self.kernel_queues
        schedule = native_schedule(plan, queues and aio.available(), queues and uring.available())
        block = plan.block_size
        one_pass = workload.amount is None and observe.one_pass(workload.is_read, mode)
        # most I/Os one stream may do: dd moves its amount once, a one-pass round its stripe
        limit: int | None = plan.amount // block if plan.amount is not None else None
        if one_pass:
            limit = plan.blocks
        time_based = plan.amount is None

        latencies: list[array[int]] = [array("Q") for _ in schedule.workers]
        go = threading.Event()
        deadline = [0]  # ns, set when the workers start
        errors: list[BaseException] = []
        # One pool for the whole round: at most one partly used huge page, whatever the depth.
        pool = BufferPool(len(schedule.workers) * schedule.depth, block)
        fds: list[int] = []
        access = os.O_RDONLY if plan.is_read else os.O_RDWR  # as fio opens it (a FUSE daemon sees it)
        try:  # O_DIRECT only where it is direct: served through the cache, it is a buffered round
            for _ in range(plan.streams):
                fds.append(os.open(path, access | (os.O_DIRECT if truly_direct else 0)))
        except BaseException:
            for fd in fds:
                os.close(fd)
            pool.close()
            raise
        drain = schedule.queue == "uring"  # one queue a stream: it can wait for its reads
        streams = [
            _Stream(plan, index, self.drop_cache, limit, fds[index], drain_at_pass_end=drain)
            for index in range(plan.streams)
        ]

        def queue_worker(index: int) -> None:
            stream = streams[schedule.workers[index]]
            run_queue = (
                aio.run_queue
                if schedule.queue == "aio"
                else functools.partial(uring.run_queue, one_a_call=not plan.random)  # see run_queue
            )
            try:
                go.wait()
                run_queue(
                    stream.fd,
                    pool.addresses[index * schedule.depth : (index + 1) * schedule.depth],
                    block,
                    plan.is_read,
                    stream.next_offset,
                    time.perf_counter_ns,
                    lambda: deadline[0] if time_based else 2**63,
                    latencies[index],
                )
            except BaseException as exc:
                errors.append(exc)

        def worker(index: int) -> None:
            stream = streams[schedule.workers[index]]
            view = pool.views[index]
            lat = latencies[index]
            clock = time.perf_counter_ns
            io = os.preadv if plan.is_read else os.pwritev
            go.wait()
            end = deadline[0]
            try:
                while True:
                    offset = stream.next_offset()
                    if offset is None:
                        break
                    t0 = clock()
                    done = io(stream.fd, [view], offset)
                    lat.append(clock() - t0)
                    if done != block:
                        raise OSError(errno.EIO, f"short {'read' if plan.is_read else 'write'} at {offset}")
                    if time_based and t0 >= end:
                        break
            except BaseException as exc:
                errors.append(exc)

        target = worker if schedule.queue == "sync" else queue_worker
        threads = [
            threading.Thread(target=target, args=(i,), daemon=True) for i in range(len(schedule.workers))
        ]
        try:
            if not plan.is_read:
                pool.fill_random()
            # without root only the file's own pages go: a read round then says so
            all_dropped = not truly_direct and self.drop_cache and host.drop_page_cache(path)
            if plan.advice == "random":  # per open file, as read-ahead state is
                for fd in fds:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            for thread in threads:
                thread.start()
            observer = Observer(observe)
            observer.start()
            start = time.perf_counter_ns()
            deadline[0] = start + int(runtime * 1e9)
            go.set()
            for thread in threads:
                thread.join()
            if plan.end_flush:  # written means on the device, not in the page cache
                for fd in fds:  # each stream, as each fio job (end_fsync)
                    os.fdatasync(fd)
            elapsed = (time.perf_counter_ns() - start) / 1e9
            observed = observer.stop()
        finally:
            go.set()
            for thread in threads:
                with contextlib.suppress(RuntimeError):
                    thread.join()
            pool.close()
            for fd in fds:
                os.close(fd)
        if errors:
            raise errors[0]
        if plan.is_read and not truly_direct and not all_dropped:
            observed = with_caveat(observed, "cache-not-dropped")

        merged = sorted(itertools.chain.from_iterable(latencies))
        ios = len(merged)
        return Measurement(
            engine=self.name,
            engine_version=self.version(),
            bytes=ios * block,
            seconds=elapsed,
            ios=ios,
            lat_p50_us=percentile(merged, 0.50) / 1e3,
            lat_p99_us=percentile(merged, 0.99) / 1e3,
            lat_p999_us=percentile(merged, 0.999) / 1e3,
            latency=LATENCY_TOTAL,  # each I/O from its submission to its completion
            round_definition=round_definition(
                limited, pass_ends_drained=drain and plan.reads_out_at_pass_ends and limit is None
            ),
            io_mode=mode,
            logical_read_bytes=ios * block if plan.is_read else 0,
            logical_write_bytes=0 if plan.is_read else ios * block,
            **observed,
        )

    def run_files(
        self, workload: Workload, directory: Path, *, runtime: float, observe: Observe
    ) -> Measurement:
        """The small-files cycle: per pass, create + write + fsync ``workload.files`` files of
        mixed sizes, drop the page cache (untimed), read every file back, delete them all and
        fsync the directory. Passes repeat until ``runtime``; ios count files."""
        directory.mkdir(exist_ok=True)
        sizes = [SMALL_FILE_SIZES[i % len(SMALL_FILE_SIZES)] for i in range(workload.files)]
        payload = os.urandom(max(sizes))
        latencies = array("Q")
        clock = time.perf_counter_ns
        timed = 0
        files = written = read = 0
        all_dropped = True
        observer = Observer(observe)
        observer.start()
        try:
            while True:
                t_pass = clock()
                for index, size in enumerate(sizes):
                    t0 = clock()
                    fd = os.open(directory / f"f{index:05d}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    try:
                        written += os.write(fd, payload[:size])
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    latencies.append(clock() - t0)
                timed += clock() - t_pass
                # read back from the storage, not from memory (every clean page: root only)
                all_dropped = self.drop_cache and host.drop_page_cache() and all_dropped
                t_pass = clock()
                for index, size in enumerate(sizes):
                    fd = os.open(directory / f"f{index:05d}", os.O_RDONLY)
                    try:
                        data = os.read(fd, size + 1)
                    finally:
                        os.close(fd)
                    if len(data) != size:
                        raise OSError(errno.EIO, f"{directory}/f{index:05d}: read {len(data)} of {size}")
                    read += size
                for index in range(len(sizes)):
                    os.unlink(directory / f"f{index:05d}")
                dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dir_fd)  # the deletes are on the device too
                finally:
                    os.close(dir_fd)
                timed += clock() - t_pass
                files += len(sizes)
                if timed >= runtime * 1e9:
                    break
            observed = observer.stop()
        finally:
            for leftover in directory.glob("f*"):
                leftover.unlink(missing_ok=True)
        if not all_dropped:
            observed = with_caveat(observed, "cache-not-dropped")
        merged = sorted(latencies)
        return Measurement(
            engine=self.name,
            engine_version=self.version(),
            bytes=written + read,
            seconds=timed / 1e9,
            ios=files,
            lat_p50_us=percentile(merged, 0.50) / 1e3,
            lat_p99_us=percentile(merged, 0.99) / 1e3,
            lat_p999_us=percentile(merged, 0.999) / 1e3,
            latency=LATENCY_TOTAL,  # of each file: create + write + fsync
            io_mode="buffered",
            logical_read_bytes=read,
            logical_write_bytes=written,
            **observed,
        )
