"""The native engine's io_uring is set up and fed as fio's io_uring engine sets up and feeds its own
(engines/uring.py): the same setup flags, dropped in fio's order where a kernel refuses one, and
each I/O submitted on its own (scattered ones: those ready together)."""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_encperf.engines import uring
from pytest_encperf.engines.uring import (
    IORING_SETUP_COOP_TASKRUN,
    IORING_SETUP_CQSIZE,
    IORING_SETUP_DEFER_TASKRUN,
    IORING_SETUP_SINGLE_ISSUER,
    RING_FLAGS,
    Params,
    create_ring,
    fallback,
    ring_params,
)


def test_the_ring_asks_for_what_fios_asks_for() -> None:
    # fio 3.33 fio_ioring_queue_init: CQSIZE, COOP_TASKRUN, SINGLE_ISSUER | DEFER_TASKRUN
    assert (IORING_SETUP_CQSIZE, IORING_SETUP_COOP_TASKRUN) == (0x8, 0x100)
    assert (IORING_SETUP_SINGLE_ISSUER, IORING_SETUP_DEFER_TASKRUN) == (0x1000, 0x2000)
    assert RING_FLAGS == 0x3108


def test_refused_flags_are_dropped_in_fios_order() -> None:
    steps = []
    flags: int | None = RING_FLAGS
    while flags is not None:
        steps.append(flags)
        flags = fallback(flags)
    # DEFER_TASKRUN goes with SINGLE_ISSUER (6.1 needs both), then COOP_TASKRUN, then CQSIZE
    assert steps == [0x3108, 0x108, 0x8, 0]
    assert fallback(IORING_SETUP_COOP_TASKRUN) == 0
    assert fallback(0) is None  # nothing left: the refusal is not about the flags


def test_a_ring_of_cqsize_completes_as_many_as_it_submits() -> None:
    params = ring_params(32, RING_FLAGS)
    assert (params.flags, params.cq_entries, params.sq_entries) == (RING_FLAGS, 32, 0)
    assert ring_params(32, 0).cq_entries == 0  # the kernel's default (twice the entries)


def fake_kernel(
    monkeypatch: pytest.MonkeyPatch, refused: int, fail: int = errno.EINVAL, always: bool = False
) -> list[int]:
    """io_uring_setup that refuses any of the ``refused`` flags with EINVAL (an older kernel), or
    every ring with ``fail`` when ``always``; the flags of every call, in order."""
    asked: list[int] = []

    def setup(entries: int, params: Params) -> int:
        asked.append(params.flags)
        if params.flags & refused or always:
            ctypes.set_errno(fail)
            return -1
        params.sq_entries = params.cq_entries = entries
        return 99

    monkeypatch.setattr(uring, "_setup", setup)
    return asked


def test_an_older_kernel_gets_the_ring_fio_would_get_there(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_kernel(monkeypatch, refused=IORING_SETUP_DEFER_TASKRUN)  # 5.19 to 6.0
    assert create_ring(8)[0] == 99
    assert asked == [RING_FLAGS, IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN]
    asked = fake_kernel(monkeypatch, refused=IORING_SETUP_COOP_TASKRUN | IORING_SETUP_DEFER_TASKRUN)
    fd, params = create_ring(8)
    assert fd == 99 and params.flags == IORING_SETUP_CQSIZE and params.cq_entries == 8
    assert asked == [RING_FLAGS, 0x108, 0x8]


def test_a_refusal_that_is_not_about_the_flags_is_said_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_kernel(monkeypatch, refused=0, fail=errno.EPERM, always=True)  # io_uring_disabled
    with pytest.raises(OSError, match="io_uring_setup") as raised:
        create_ring(8)
    assert raised.value.errno == errno.EPERM and asked == [RING_FLAGS]
    asked = fake_kernel(monkeypatch, refused=0, always=True)
    with pytest.raises(OSError) as raised:  # refused even without flags: EINVAL, after fio's steps
        create_ring(8)
    assert raised.value.errno == errno.EINVAL and asked == [0x3108, 0x108, 0x8, 0]


@pytest.mark.skipif(not uring.available(), reason="io_uring is not usable here (x86-64, kernel 5.6+)")
def test_this_kernel_gives_a_ring_with_the_flags_it_takes() -> None:
    fd, params = create_ring(32)
    try:
        assert params.flags in (RING_FLAGS, 0x108, 0x8, 0)  # what this kernel took of fio's flags
        assert params.sq_entries == 32
        assert params.cq_entries == (32 if params.flags & IORING_SETUP_CQSIZE else 64)
    finally:
        os.close(fd)


class RecordingLibc:
    """The C library whose ``syscall`` notes each io_uring_enter's (to_submit, min_complete)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.enters: list[tuple[int, int]] = []
        recording = self

        class Syscall:
            restype: Any = None

            def __call__(self, number: Any, *args: Any) -> Any:
                if getattr(number, "value", number) == uring.IO_URING_ENTER:
                    recording.enters.append((args[1].value, args[2].value))
                real.syscall.restype = self.restype
                return real.syscall(number, *args)

        self.syscall = Syscall()


def read_through_a_ring(
    data: bytes,
    block: int,
    depth: int,
    order: list[int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    recording: RecordingLibc | None = None,
    **options: Any,
) -> tuple[list[int], list[tuple[int, int]], list[bytes]]:
    """``run_queue`` reading ``data``'s blocks in ``order``, ``depth`` at a time: the latencies,
    every io_uring_enter's (to_submit, min_complete) and what the buffers hold at the end."""
    path = tmp_path / "data"
    path.write_bytes(data)
    recording = recording or RecordingLibc(uring._LIBC)
    monkeypatch.setattr(uring, "_LIBC", recording)
    buffers = [ctypes.create_string_buffer(block) for _ in range(depth)]
    offsets = iter(index * block for index in order)
    latencies: list[int] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        uring.run_queue(
            fd,
            [ctypes.addressof(buffer) for buffer in buffers],
            block,
            True,
            lambda: next(offsets, None),
            lambda: 0,
            lambda: 2**63,
            latencies,
            **options,
        )
    finally:
        os.close(fd)
    return latencies, recording.enters, [bytes(buffer.raw) for buffer in buffers]


@pytest.mark.skipif(not uring.available(), reason="io_uring is not usable here (x86-64, kernel 5.6+)")
def test_each_io_is_submitted_on_its_own_and_the_wait_submits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fio (iodepth_batch_submit=1) submits each I/O in a call that does not wait and runs the
    # ring's deferred work; submitted together, a buffered sequential queue read ahead less
    block, depth, count = 64 * 1024, 4, 12
    latencies, enters, _ = read_through_a_ring(
        os.urandom(block * count), block, depth, list(range(count)), tmp_path, monkeypatch
    )
    assert len(latencies) == count
    submitting = [enter for enter in enters if enter[0]]
    assert submitting == [(1, 0)] * count  # one I/O a call, none of them waiting
    assert all(enter == (0, 1) for enter in enters if not enter[0])  # a wait submits nothing


@pytest.mark.skipif(not uring.available(), reason="io_uring is not usable here (x86-64, kernel 5.6+)")
def test_scattered_ios_ready_together_go_in_one_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one call for each 4 KiB read made the Python loop the limit on a fast store (uring.run_queue)
    block, depth, count = 4096, 4, 12
    data = os.urandom(block * count)
    order = [7, 2, 11, 0, 5, 9, 3, 10, 1, 8, 4, 6]
    latencies, enters, held = read_through_a_ring(
        data, block, depth, order, tmp_path, monkeypatch, one_a_call=False
    )
    assert len(latencies) == count
    submitting = [enter for enter in enters if enter[0]]
    assert submitting[0] == (depth, 0)  # the whole queue in the first call, without waiting
    assert sum(to_submit for to_submit, _ in submitting) == count
    assert all(wait == 0 for _, wait in submitting)
    # the last reads' buffers hold their blocks (each slot's last read, the queue refilled in order)
    assert set(held) <= {data[i * block : (i + 1) * block] for i in order}


class TakesOneFewer(RecordingLibc):
    """A kernel that takes one I/O fewer than asked when asked for several (as it may, when it
    refuses an entry)."""

    def __init__(self, real: Any) -> None:
        super().__init__(real)
        recorded = self.syscall

        class Syscall:
            restype: Any = None

            def __call__(self, number: Any, *args: Any) -> Any:
                recorded.restype = self.restype
                if getattr(number, "value", number) == uring.IO_URING_ENTER and args[1].value > 1:
                    args = (args[0], ctypes.c_uint(args[1].value - 1), *args[2:])
                return recorded(number, *args)

        self.syscall = Syscall()


@pytest.mark.skipif(not uring.available(), reason="io_uring is not usable here (x86-64, kernel 5.6+)")
def test_a_submission_taken_in_part_fails_after_waiting_for_the_part_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the kernel would go on reading into the buffers of the I/Os it took: the engine must wait
    # for them before it lets the buffers go
    block, depth = 4096, 4
    recording = TakesOneFewer(uring._LIBC)
    with pytest.raises(OSError, match="io_uring took 3 of 4 I/Os"):
        read_through_a_ring(
            os.urandom(block * 8),
            block,
            depth,
            list(range(8)),
            tmp_path,
            monkeypatch,
            recording,
            one_a_call=False,
        )
    assert recording.enters[0] == (3, 0)
    assert (0, 1) in recording.enters[1:]  # waited for the three taken
