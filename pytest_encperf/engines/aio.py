"""Linux native AIO (io_setup / io_submit / io_getevents) through ctypes, for O_DIRECT rounds.

Threads reach a queue depth but submit one I/O at a time, so the block layer never sees a
batch it could plug and merge; io_submit hands it ``iodepth`` requests at once, as fio's libaio
engine does. ctypes releases the GIL during each system call. Only truly direct I/O is
asynchronous under Linux AIO (buffered submits block), so the native engine uses this module
for direct rounds only and threads otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Callable, MutableSequence

# system call numbers (asm-generic on arm64/riscv64, the x86-64 table otherwise)
_SYSCALLS = {
    "x86_64": {"setup": 206, "destroy": 207, "getevents": 208, "submit": 209},
    "aarch64": {"setup": 0, "destroy": 1, "submit": 2, "getevents": 4},
    "riscv64": {"setup": 0, "destroy": 1, "submit": 2, "getevents": 4},
}
IOCB_CMD_PREAD = 0
IOCB_CMD_PWRITE = 1


class IOCB(ctypes.Structure):
    """struct iocb (linux/aio_abi.h), little-endian field order."""

    _fields_ = [
        ("aio_data", ctypes.c_uint64),
        ("aio_key", ctypes.c_uint32),
        ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16),
        ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64),
        ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64),
        ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32),
    ]


class IOEvent(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


def libc_with_syscall() -> ctypes.CDLL | None:
    """The C library with errno kept, if it has syscall(2) (the AIO and io_uring calls have no
    wrappers of their own in glibc)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "syscall") else None


_LIBC = libc_with_syscall()
_NUMBERS = _SYSCALLS.get(platform.machine())


def available() -> bool:
    return _LIBC is not None and _NUMBERS is not None and platform.system() == "Linux"


def _call(name: str, *args: object) -> int:
    assert _LIBC is not None and _NUMBERS is not None
    _LIBC.syscall.restype = ctypes.c_long
    result = _LIBC.syscall(ctypes.c_long(_NUMBERS[name]), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"io_{name}: {os.strerror(err)}")
    return result


IOCB_SIZE = ctypes.sizeof(IOCB)  # 64
OFFSET_INDEX = IOCB.aio_offset.offset // 8  # aio_offset as the n-th int64 of an iocb
EVENT_INT64S = ctypes.sizeof(IOEvent) // 8  # data, obj, res, res2


def run_queue(
    fd: int,
    buffers: list[int],
    block: int,
    is_read: bool,
    next_offset: Callable[[], int | None],
    clock: Callable[[], int],
    deadline: Callable[[], int],
    latencies: MutableSequence[int],
) -> None:
    """Keep ``len(buffers)`` I/Os in flight on ``fd`` until ``next_offset()`` returns None or
    the clock passes ``deadline()``; append each I/O's latency (ns) to ``latencies``.

    ``buffers`` are addresses of aligned buffers of ``block`` bytes, one per slot. The loop
    touches the kernel structures through memoryviews (not ctypes attribute access): at tens
    of thousands of I/Os per second the Python work per I/O is what limits the queue.
    """
    assert _LIBC is not None and _NUMBERS is not None
    syscall = _LIBC.syscall
    syscall.restype = ctypes.c_long
    nr_submit, nr_getevents = ctypes.c_long(_NUMBERS["submit"]), ctypes.c_long(_NUMBERS["getevents"])
    one = ctypes.c_long(1)
    depth = len(buffers)
    ctx = ctypes.c_ulong(0)
    _call("setup", ctypes.c_int(depth), ctypes.byref(ctx))
    iocbs = (IOCB * depth)()
    pointers = (ctypes.c_uint64 * depth)()
    events = (IOEvent * depth)()
    c_depth = ctypes.c_long(depth)
    iocb_words = memoryview(iocbs).cast("B").cast("q")
    event_words = memoryview(events).cast("B").cast("q")
    base = ctypes.addressof(iocbs)
    started = [0] * depth
    opcode = IOCB_CMD_PREAD if is_read else IOCB_CMD_PWRITE
    for slot, address in enumerate(buffers):
        cb = iocbs[slot]
        cb.aio_data, cb.aio_lio_opcode, cb.aio_fildes = slot, opcode, fd
        cb.aio_buf, cb.aio_nbytes = address, block
    append = latencies.append
    in_flight = 0

    def fail(what: str) -> OSError:
        err = ctypes.get_errno()
        return OSError(err, f"{what}: {os.strerror(err)}")

    try:
        batch = []
        for slot in range(depth):
            offset = next_offset()
            if offset is None:
                break
            iocb_words[slot * 8 + OFFSET_INDEX] = offset
            batch.append(slot)
        stopping = False
        while batch or in_flight:
            if batch:
                now = clock()
                for i, slot in enumerate(batch):
                    pointers[i] = base + slot * IOCB_SIZE
                    started[slot] = now
                submitted = syscall(nr_submit, ctx, ctypes.c_long(len(batch)), pointers)
                if submitted < 0:
                    raise fail("io_submit")
                in_flight += submitted
                if submitted != len(batch):
                    raise OSError(errno.EAGAIN, f"io_submit took {submitted} of {len(batch)}")
                batch = []
            done = syscall(nr_getevents, ctx, one, c_depth, events, None)
            if done < 0:
                if ctypes.get_errno() == errno.EINTR:
                    continue
                raise fail("io_getevents")
            now = clock()
            stopping = stopping or now >= deadline()
            in_flight -= done
            for i in range(done):
                slot = event_words[i * EVENT_INT64S]
                result = event_words[i * EVENT_INT64S + 2]
                append(now - started[slot])
                if result != block:
                    what = "read" if is_read else "write"
                    err = -result if result < 0 else errno.EIO
                    at = iocb_words[slot * 8 + OFFSET_INDEX]
                    raise OSError(err, f"{what} of {block} bytes at {at}: {os.strerror(err)}")
                if not stopping:
                    offset = next_offset()
                    if offset is None:
                        stopping = True
                    else:
                        iocb_words[slot * 8 + OFFSET_INDEX] = offset
                        batch.append(slot)
    finally:
        while in_flight > 0:  # an error with I/Os still out: wait for them before the buffers go
            done = syscall(nr_getevents, ctx, one, c_depth, events, None)
            if done < 0 and ctypes.get_errno() != errno.EINTR:
                break
            in_flight -= max(0, done)
        del iocb_words, event_words
        _call("destroy", ctx)
