"""The built-in engine: no external tool, Python threads over pread/pwrite, Linux AIO for O_DIRECT.

Direct rounds keep the queue depth in flight with Linux AIO (``aio.run_queue``, one thread
per job), like fio's libaio engine. Buffered rounds (and machines without the AIO system calls)
emulate it with one thread per outstanding I/O (iodepth x numjobs threads): os.preadv and
os.pwritev release the GIL, so the kernel sees that many requests in flight.
Buffers are page-aligned, cut from one mapping on transparent huge pages (see BufferPool).
In buffered mode a read round never re-reads what it already brought into the page cache (the
file's pages are dropped on every pass) and a write round flushes every FLUSH_BYTES and ends
with fdatasync (included in its time), so the page cache cannot inflate the numbers.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import math
import mmap
import os
import random
import threading
import time
from array import array
from pathlib import Path

from .. import __version__, host
from ..model import LATENCY_TOTAL, Measurement
from ..workloads import SMALL_FILE_SIZES, MiB, Workload
from . import TEST_FILE_NAME, aio
from .observe import Observe, Observer, busy_cpu_seconds, with_caveat

__all__ = ["NativeEngine", "busy_cpu_seconds", "percentile", "probe_io_mode"]

PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 * MiB  # a transparent huge page on x86-64 and arm64 (4 KiB base pages)
FLUSH_BYTES = 16 * MiB  # buffered writes: most dirty data a round may leave in memory
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


class NativeEngine:
    """``drop_cache=False`` keeps the page cache between rounds: only for checking that the
    cache detector notices (a real benchmark never measures that way)."""

    name = "native"

    def __init__(self, *, drop_cache: bool = True, use_aio: bool = True) -> None:
        self.drop_cache = drop_cache
        self.use_aio = use_aio  # direct rounds through Linux AIO (io_submit), where available

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
        if workload.kind == "files":
            return self.run_files(workload, path.parent / SMALLFILES_DIR, runtime=runtime, observe=observe)
        size = path.stat().st_size
        if workload.extent is not None:
            size = min(size, workload.extent)
        block = workload.block_size
        blocks = size // block
        if blocks == 0:
            raise ValueError(f"{path} ({size} bytes) is smaller than one {block}-byte block")
        # dd-style: exactly one pass over a fixed amount instead of a time limit
        limit: int | None = None  # most I/Os the round may do
        if workload.amount is not None:
            limit = max(1, min(blocks, workload.amount // block))
        time_based = limit is None
        mode = "buffered"
        flags = os.O_RDWR
        if direct:
            mode = probe_io_mode(path)
            flags |= os.O_DIRECT
        truly_direct = mode == "direct"
        if limit is None and observe.one_pass(workload.is_read, mode):
            limit = blocks

        # Order of blocks: sequential, or each block once per pass in random order (like
        # fio's random map), so a buffered pass never hits the same page twice.
        order: list[int] | range = range(blocks)
        if workload.is_random:
            order = list(range(blocks))
            random.Random(0x5EED).shuffle(order)
        cursor = itertools.count()  # next() is atomic under the GIL
        lock = threading.Lock()
        # Buffered: reads forget the file's cached pages once per pass, writes flush every few MiB.
        every = blocks if workload.is_read else max(1, FLUSH_BYTES // block)
        state = {"next": every}
        maintain = (
            (lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))
            if workload.is_read
            else (lambda: os.fdatasync(fd))
        )

        # Direct rounds: one thread per job, each keeping iodepth I/Os in flight with Linux AIO.
        # Otherwise one thread per I/O in flight (buffered AIO would block in io_submit).
        use_aio = truly_direct and self.use_aio and aio.available()
        threads_count = workload.numjobs if use_aio else workload.iodepth * workload.numjobs
        latencies: list[array] = [array("Q") for _ in range(threads_count)]
        go = threading.Event()
        deadline = [0.0]
        errors: list[BaseException] = []

        def next_offset() -> int | None:
            n = next(cursor)
            if limit is not None and n >= limit:
                return None
            return order[n % blocks] * block

        # One pool for the whole round: at most one partly used huge page, whatever the depth.
        depth = workload.iodepth if use_aio else 1
        pool = BufferPool(threads_count * depth, block)
        try:
            fd = os.open(path, flags)
        except BaseException:
            pool.close()
            raise

        def aio_worker(index: int) -> None:
            try:
                go.wait()
                aio.run_queue(
                    fd,
                    pool.addresses[index * depth : (index + 1) * depth],
                    block,
                    workload.is_read,
                    next_offset,
                    time.perf_counter_ns,
                    lambda: deadline[0] if time_based else 2**63,
                    latencies[index],
                )
            except BaseException as exc:
                errors.append(exc)

        def worker(index: int) -> None:
            view = pool.views[index]
            lat = latencies[index]
            clock = time.perf_counter_ns
            io = os.preadv if workload.is_read else os.pwritev
            go.wait()
            end = deadline[0]
            try:
                while True:
                    n = next(cursor)
                    if limit is not None and n >= limit:
                        break
                    if self.drop_cache and not truly_direct and n >= state["next"]:
                        with lock:
                            if n >= state["next"]:
                                maintain()
                                state["next"] += every
                    offset = order[n % blocks] * block
                    t0 = clock()
                    done = io(fd, [view], offset)
                    lat.append(clock() - t0)
                    if done != block:
                        raise OSError(
                            errno.EIO, f"short {'read' if workload.is_read else 'write'} at {offset}"
                        )
                    if time_based and t0 >= end:
                        break
            except BaseException as exc:
                errors.append(exc)

        target = aio_worker if use_aio else worker
        threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(threads_count)]
        try:
            if not workload.is_read:
                pool.fill_random()
            # without root only the file's own pages go: a read round then says so
            all_dropped = not truly_direct and self.drop_cache and host.drop_page_cache(path)
            if workload.is_random and not truly_direct:
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
            if not workload.is_read:
                os.fdatasync(fd)  # written means on the device, not in the page cache
            elapsed = (time.perf_counter_ns() - start) / 1e9
            observed = observer.stop()
        finally:
            go.set()
            for thread in threads:
                with contextlib.suppress(RuntimeError):
                    thread.join()
            pool.close()
            os.close(fd)
        if errors:
            raise errors[0]
        if workload.is_read and not truly_direct and not all_dropped:
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
            io_mode=mode,
            logical_read_bytes=ios * block if workload.is_read else 0,
            logical_write_bytes=0 if workload.is_read else ios * block,
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
