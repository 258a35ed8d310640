"""io_uring through ctypes, for buffered rounds with more than one I/O in flight.

Linux AIO cannot keep buffered I/O in flight (its submit blocks), and threads pay for the GIL at
tens of thousands of I/Os per second. io_uring can: a read that finds its pages is done at
once, one that has to wait is finished by the kernel (retried once its pages are read, or by one
of its io-wq workers). fio's io_uring engine does the same for buffered rounds, so both engines
issue them alike (see workloads.IoPlan), on a ring set up as fio sets up its own (RING_FLAGS):
how a read that has to wait is finished depends on it.

Only on x86-64: the rings are shared memory read and written without atomic instructions
from Python, which x86's ordering of stores and loads makes safe and weaker orderings do not.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import struct
from collections.abc import Callable, MutableSequence
from typing import Literal

from .aio import libc_with_syscall

# next_offset's answer at the end of a pass over the file: submit nothing more until every read
# out is in, then ask again (the stream drops the pass's pages in between, none of them under a read)
PASS_END = -1
IO_URING_SETUP, IO_URING_ENTER = 425, 426  # the same numbers on every architecture
IORING_OFF_SQ_RING, IORING_OFF_CQ_RING, IORING_OFF_SQES = 0, 0x8000000, 0x10000000
IORING_ENTER_GETEVENTS = 1
IORING_FEAT_SINGLE_MMAP = 1
IORING_OP_READ, IORING_OP_WRITE = 22, 23  # kernel 5.6
SQE_SIZE, CQE_SIZE = 64, 16
# struct io_uring_sqe up to user_data: opcode, flags, ioprio, fd, off, addr, len, rw_flags, user_data
SQE_HEAD = struct.Struct("<BBHiQQIIQ")


class SqringOffsets(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_uint32) for name in ("head", "tail", "ring_mask", "ring_entries", "flags")),
        *((name, ctypes.c_uint32) for name in ("dropped", "array", "resv1")),
        ("user_addr", ctypes.c_uint64),
    ]


class CqringOffsets(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_uint32) for name in ("head", "tail", "ring_mask", "ring_entries", "overflow")),
        *((name, ctypes.c_uint32) for name in ("cqes", "flags", "resv1")),
        ("user_addr", ctypes.c_uint64),
    ]


class Params(ctypes.Structure):
    """struct io_uring_params."""

    _fields_ = [
        *((name, ctypes.c_uint32) for name in ("sq_entries", "cq_entries", "flags", "sq_thread_cpu")),
        *((name, ctypes.c_uint32) for name in ("sq_thread_idle", "features", "wq_fd")),
        ("resv", ctypes.c_uint32 * 3),
        ("sq_off", SqringOffsets),
        ("cq_off", CqringOffsets),
    ]


_LIBC = libc_with_syscall()
_created: bool | None = None
_features: int | None = None  # IORING_FEAT_* of this kernel, once a ring was created
IORING_FEAT_SUBMIT_STABLE, IORING_FEAT_RW_CUR_POS = 1 << 2, 1 << 3
NEEDED = IORING_FEAT_SUBMIT_STABLE | IORING_FEAT_RW_CUR_POS


def _setup(entries: int, params: Params) -> int:
    assert _LIBC is not None
    _LIBC.syscall.restype = ctypes.c_long
    return int(_LIBC.syscall(ctypes.c_long(IO_URING_SETUP), ctypes.c_uint(entries), ctypes.byref(params)))


# io_uring_setup flags (linux/io_uring.h), the kernel that brought each
IORING_SETUP_CQSIZE = 1 << 3  # 5.5: the completion ring has params.cq_entries entries
IORING_SETUP_COOP_TASKRUN = 1 << 8  # 5.19: no interrupt to the task when a completion waits
IORING_SETUP_SINGLE_ISSUER = 1 << 12  # 6.0: one task submits
IORING_SETUP_DEFER_TASKRUN = 1 << 13  # 6.1: completion work runs when the task waits for it
# The ring fio's io_uring engine sets up (fio 3.33, engines/io_uring.c, fio_ioring_queue_init), so
# a buffered queued round is issued alike by both engines. It changes more than the CPU it saves:
# with DEFER_TASKRUN the completion work of a read that had to wait for its pages runs when this
# thread next waits in io_uring_enter; without it, that work interrupts the thread as it arrives.
# RND4K Q32T1 read on gocryptfs (kernel 6.18): without the flags about 5 completion-work runs per
# read, a quarter of the reads handed to io-wq workers (fio: 0.5%), 47 µs of this process's CPU
# per read (fio 32) and an overhead vs plain 15 points larger than fio's; with them 0.2% to io-wq,
# 22 µs, and the two engines 1 to 4 points apart (docs/explanation/method.md).
RING_FLAGS = (
    IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
)


def fallback(flags: int) -> int | None:
    """The flags to ask for once the kernel refused ``flags`` (EINVAL: it predates one), in fio's
    order: without DEFER_TASKRUN and SINGLE_ISSUER, then without COOP_TASKRUN, then without
    CQSIZE; None when nothing is left to drop (the refusal is not about the flags)."""
    for dropped in (
        IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SINGLE_ISSUER,
        IORING_SETUP_COOP_TASKRUN,
        IORING_SETUP_CQSIZE,
    ):
        if flags & dropped:
            return flags & ~dropped
    return None


def ring_params(entries: int, flags: int) -> Params:
    """What io_uring_setup is given for a ring of ``entries`` with ``flags``: with CQSIZE, as many
    completion entries as submission entries (fio's: no more than can be in flight)."""
    params = Params()
    params.flags = flags
    if flags & IORING_SETUP_CQSIZE:
        params.cq_entries = entries
    return params


def create_ring(entries: int) -> tuple[int, Params]:
    """A ring of ``entries`` set up as fio's (RING_FLAGS, less what this kernel refuses, see
    fallback): its file descriptor and the parameters the kernel filled in. The thread that
    creates it must be the one that submits to it and reaps it (SINGLE_ISSUER)."""
    flags: int | None = RING_FLAGS
    while flags is not None:
        params = ring_params(entries, flags)
        ring_fd = _setup(entries, params)
        if ring_fd >= 0:
            return ring_fd, params
        err = ctypes.get_errno()
        flags = fallback(flags) if err == errno.EINVAL else None
    raise OSError(err, f"io_uring_setup: {os.strerror(err)}")


def creatable() -> bool:
    """Whether this process may create an io_uring (kernel 5.1+, not refused by
    kernel.io_uring_disabled or a seccomp filter): what fio's io_uring engine needs. Asked once."""
    global _created, _features
    if _created is None:
        _created = False
        if _LIBC is not None and platform.system() == "Linux":
            params = Params()
            fd = _setup(1, params)
            if fd >= 0:
                os.close(fd)
                _created, _features = True, params.features
    return _created


def available() -> bool:
    """Whether the native engine can run its buffered queues here: x86-64 (see the module's
    note) and a kernel whose rings take IORING_OP_READ/WRITE (5.6, which also brought
    IORING_FEAT_RW_CUR_POS) and copy each entry at submission (IORING_FEAT_SUBMIT_STABLE)."""
    return platform.machine() == "x86_64" and creatable() and (_features or 0) & NEEDED == NEEDED


def run_queue(
    fd: int,
    buffers: list[int],
    block: int,
    is_read: bool,
    next_offset: Callable[[], int | None],
    clock: Callable[[], int],
    deadline: Callable[[], int],
    latencies: MutableSequence[int],
    *,
    one_a_call: bool = True,
) -> None:
    """aio.run_queue's contract (the native engine calls either), through an io_uring of
    ``len(buffers)`` entries. ``one_a_call``: each I/O submitted in a call of its own, as fio
    does (iodepth_batch_submit=1); False: the I/Os ready to go are submitted in one call (for
    scattered blocks, where the Python loop and not the store would otherwise set the pace).
    ``next_offset`` may answer PASS_END: nothing more is submitted until every I/O out is done,
    then it is asked again (so that a pass's pages are dropped with none of them under a read,
    see native._Stream)."""
    assert _LIBC is not None
    syscall = _LIBC.syscall
    syscall.restype = ctypes.c_long
    depth = len(buffers)
    ring_fd, params = create_ring(depth)  # here: the thread that submits and reaps
    maps: list[mmap.mmap] = []
    views: list[memoryview] = []
    in_flight = 0
    sq_off, cq_off = params.sq_off, params.cq_off
    sq_tail_at, sq_array = sq_off.tail // 4, sq_off.array // 4
    cq_head_at, cq_tail_at = cq_off.head // 4, cq_off.tail // 4
    nr_enter, c_ring = ctypes.c_long(IO_URING_ENTER), ctypes.c_int(ring_fd)
    c_zero, c_one, getevents = ctypes.c_uint(0), ctypes.c_uint(1), ctypes.c_uint(IORING_ENTER_GETEVENTS)
    no_size = ctypes.c_size_t(0)

    def submit(count: int) -> None:
        nonlocal in_flight
        taken = enter(count, c_zero)
        in_flight += taken  # also when it took fewer: the cleanup waits for the ones it took
        if taken != count:
            raise OSError(errno.EAGAIN, f"io_uring took {taken} of {count} I/Os")

    def enter(to_submit: int, wait: ctypes.c_uint) -> int:
        while True:
            done = syscall(nr_enter, c_ring, ctypes.c_uint(to_submit), wait, getevents, None, no_size)
            if done >= 0:
                return int(done)
            err = ctypes.get_errno()
            if err != errno.EINTR:
                raise OSError(err, f"io_uring_enter: {os.strerror(err)}")

    try:
        sq_size = sq_off.array + params.sq_entries * 4
        cq_size = cq_off.cqes + params.cq_entries * CQE_SIZE
        if params.features & IORING_FEAT_SINGLE_MMAP:
            sq_size = cq_size = max(sq_size, cq_size)
        shared = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        both = mmap.PROT_READ | mmap.PROT_WRITE

        def mapped(size: int, offset: int) -> mmap.mmap:
            maps.append(mmap.mmap(ring_fd, size, shared, both, offset=offset))
            return maps[-1]

        sq = mapped(sq_size, IORING_OFF_SQ_RING)
        cq = sq if params.features & IORING_FEAT_SINGLE_MMAP else mapped(cq_size, IORING_OFF_CQ_RING)
        sqes = mapped(params.sq_entries * SQE_SIZE, IORING_OFF_SQES)

        def view(ring: mmap.mmap, kind: Literal["I", "q", "i"]) -> memoryview:
            whole = memoryview(ring)
            try:  # whole items only: a ring's length need not be a multiple of 8
                views.append(whole[: len(whole) // 8 * 8].cast(kind))
            finally:
                whole.release()
            return views[-1]

        cq_words = view(cq, "I")  # first: the cleanup below reads the completions through it
        sq_words, cq_quads, cq_ints, sqe_quads = view(sq, "I"), view(cq, "q"), view(cq, "i"), view(sqes, "q")
        sq_mask = sq_words[sq_off.ring_mask // 4]
        cq_mask = cq_words[cq_off.ring_mask // 4]
        cqes = cq_off.cqes
        opcode = IORING_OP_READ if is_read else IORING_OP_WRITE
        for slot, address in enumerate(buffers):  # every field but the offset stays
            SQE_HEAD.pack_into(sqes, slot * SQE_SIZE, opcode, 0, 0, fd, 0, address, block, 0, slot)
        offsets = [0] * depth
        started = [0] * depth
        append = latencies.append
        tail = sq_words[sq_tail_at]
        batch: list[int] = []
        idle: list[int] = []  # slots held back until the pass's reads are all in (PASS_END)
        draining = stopping = False

        def take(slot: int) -> None:
            """The slot's next I/O into the batch; at a pass end, the slot waits (idle)."""
            nonlocal draining, stopping
            offset = PASS_END if draining else next_offset()
            if offset is None:
                stopping = True
            elif offset == PASS_END:
                draining = True
                idle.append(slot)
            else:
                offsets[slot] = offset
                batch.append(slot)

        for slot in range(depth):
            take(slot)
            if stopping:
                break
        while batch or in_flight:
            # As fio (iodepth_batch_submit=1): each I/O submitted on its own, without waiting;
            # the kernel runs the work the ring deferred (DEFER_TASKRUN: the retries of reads
            # whose pages were missing) in each call, so the I/Os before it progress, and start
            # their read-ahead, before the next is issued. Submitted in one call, SEQ1M Q8T1 read
            # (buffered, one pass over 1 GiB on plain) reached the loop device in 1.3-1.4 requests
            # per read to fio's 1.0-1.1, at 72-75% of fio's MB/s; one a call: 1.1-1.2, 90-119%.
            # Scattered 4 KiB blocks have nothing to merge, and there a call for each made the
            # loop the limit on a fast store (plain, RND4K Q32T1 read, buffered: the thread never
            # waited for the ring, 14.7 us of its CPU an I/O, 80% of fio's IOPS); one call for
            # the ready ones: 7.1 us an I/O, and the thread waits for the store.
            for slot in batch:
                sqe_quads[slot * 8 + 1] = offsets[slot]
                sq_words[sq_array + (tail & sq_mask)] = slot
                tail = (tail + 1) & 0xFFFFFFFF
                started[slot] = clock()
                if one_a_call:
                    sq_words[sq_tail_at] = tail  # after the entry: the kernel reads it in enter()
                    submit(1)
            if batch and not one_a_call:
                sq_words[sq_tail_at] = tail
                submit(len(batch))
            batch = []
            head, ready = cq_words[cq_head_at], cq_words[cq_tail_at]
            if head == ready:  # nothing done yet: wait for the first (fio reaps at least one)
                enter(0, c_one)
                head, ready = cq_words[cq_head_at], cq_words[cq_tail_at]
                if head == ready:
                    continue
            now = clock()
            stopping = stopping or now >= deadline()
            try:
                while head != ready:
                    at = cqes + (head & cq_mask) * CQE_SIZE
                    slot, result = cq_quads[at // 8], cq_ints[at // 4 + 2]
                    head = (head + 1) & 0xFFFFFFFF
                    in_flight -= 1
                    append(now - started[slot])
                    if result != block:
                        err = -result if result < 0 else errno.EIO
                        what = "read" if is_read else "write"
                        raise OSError(err, f"{what} of {block} bytes at {offsets[slot]}: {os.strerror(err)}")
                    if not stopping:
                        take(slot)
            finally:  # consumed, also when one of them failed (the cleanup counts from here)
                cq_words[cq_head_at] = head
            if draining and not in_flight and not batch:  # the pass's reads are all in: go on
                draining, waiting = False, idle[:]
                idle.clear()
                for slot in waiting:
                    if stopping:
                        break
                    take(slot)
    finally:
        if in_flight > 0 and views:  # an error with I/Os still out: wait for them before the buffers go
            cq_words = views[0]
            while in_flight > 0:
                try:
                    enter(0, c_one)
                except OSError:
                    break
                head, ready = cq_words[cq_head_at], cq_words[cq_tail_at]
                in_flight -= (ready - head) & 0xFFFFFFFF
                cq_words[cq_head_at] = ready
        try:
            for item in views:
                item.release()
            for ring in maps:
                ring.close()
        finally:
            os.close(ring_fd)
