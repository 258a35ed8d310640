"""The read-ahead of a store below a stacked volume during a random read round.

A random round asks for no read-ahead on the file it reads (POSIX_FADV_RANDOM, workloads.IoPlan),
and on plain the kernel reads each 4 KiB read's 4 KiB. A volume whose daemon reads a store through
the file system below (gocryptfs and the other FUSE stores, eCryptfs) keeps that advice on its own
file: the daemon reads its ciphertext with the lower file system's default read-ahead, and once the
pages around a read are cached, the kernel reads further ahead, so later reads of the same pass find
their ciphertext in memory, more the more of a small test file a round covers. How much varies from
round to round and grows on itself: over whole passes, gocryptfs's device saw 0.42 to 1.10 requests
per 4 KiB read (0.95 to 1.00 with the limit), in either engine, and its RND4K Q1T1 read swung between
25% slower and 27% faster than plain from one repeat of three 1 s rounds to the next.

While such a round runs, each block device of ours that holds the store (Observe.store_devices: the
container's loop device under the ext4 a stacked layer's store lives on) reads ahead one page:
each read of the store is still read whole, in one request, but nothing beyond it, as the advice
gives plain. The kernel copies the setting into a file's read-ahead state when the file is opened
(the daemon opens its store file when the round opens the test file), so it is set before the
round opens the file and restored after the round has closed it. A run killed inside a round leaves
the setting on its own loop device only, which the kernel sets afresh when it is attached again.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from ..workloads import Workload
from .observe import Observe

SYS_BLOCK = Path("/sys/block")
# One page: a read of more pages is read whole (the kernel allows a read up to the device's
# request size beyond the read-ahead); 0 would read it a page at a time, slower than plain's.
ROUND_READAHEAD_KB = 4
LOOP_NAME = re.compile(r"loop\d+")


def limits_readahead(workload: Workload) -> bool:
    """Whether a round of ``workload`` reads the store below with its read-ahead limited: a block
    workload of random reads (the one that gives POSIX_FADV_RANDOM on the file)."""
    return workload.kind == "block" and workload.is_read and workload.is_random


def setting(device: str, sys_block: Path | None = None) -> Path | None:
    """The read-ahead setting (KiB) of ``device`` when it is a loop device (the only kind a store
    of ours lives on: a container's), None for any other name. ``sys_block``: SYS_BLOCK."""
    sys_block = sys_block or SYS_BLOCK
    if not LOOP_NAME.fullmatch(device) or not (sys_block / device / "loop").is_dir():
        return None
    return sys_block / device / "queue" / "read_ahead_kb"


@contextlib.contextmanager
def store_readahead_limited(devices: tuple[str, ...], sys_block: Path | None = None) -> Iterator[bool]:
    """``devices`` (loop devices of ours holding a store) reading ahead ROUND_READAHEAD_KB (or
    less, when set so) while the block runs, each restored to its setting after it, also when the
    block fails. Yields whether every device was limited (False with no devices, or when a
    setting could not be read or written: then the round reads as before)."""
    saved: list[tuple[Path, str]] = []
    limited = bool(devices)
    try:
        for device in devices:
            path = setting(device, sys_block)
            try:
                if path is None:
                    raise FileNotFoundError(device)
                before = path.read_text().strip()
                # never more than the device's own (a setting of 0 stays 0)
                path.write_text(f"{min(int(before), ROUND_READAHEAD_KB)}\n")
            except (OSError, ValueError):
                limited = False
                continue
            saved.append((path, before))
        yield limited
    finally:
        for path, before in reversed(saved):
            with contextlib.suppress(OSError):
                path.write_text(f"{before}\n")


def round_readahead_limited(
    workload: Workload, observe: Observe, sys_block: Path | None = None
) -> AbstractContextManager[bool]:
    """What both engines wrap a block round in: the store below (``observe.store_devices``) reading
    ahead one page while a round of ``workload`` that limits it runs (limits_readahead), nothing
    for any other round. Yields whether the round read with its store limited
    (workloads.round_definition)."""
    return store_readahead_limited(observe.store_devices if limits_readahead(workload) else (), sys_block)
