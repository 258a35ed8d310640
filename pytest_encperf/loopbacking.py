"""What a loop device is backed by: the one edge of the block stack that sysfs does not show.

A loop device over a block device (``losetup -f /dev/sdb1``, or over another loop device)
writes that device, yet the loop driver takes no exclusive open of it (``O_EXCL`` succeeds),
registers no holder in sysfs and keeps no process file descriptor. Only the loop device's own
record names its backing file: ``/sys/block/loopN/loop/backing_file`` (the kernel's path, which
may be stale: removed, in another mount namespace) and, exactly, ``LOOP_GET_STATUS64``, whose
``lo_rdevice`` is the device number of the backing inode (0 for a regular file).
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from . import host, loopdev
from .loopdev import LOOP_GET_STATUS64, LOOP_INFO64
from .workloads import MiB

if TYPE_CHECKING:
    from .blockstack import BlockStack, Step


class LoopRecord(NamedTuple):
    """A loop device's backing file as the kernel records it."""

    path: str  # backing_file from sysfs, without " (deleted)"
    number: int | None  # st_rdev of the backing inode from LOOP_GET_STATUS64 (0: not a device); None: unread


def decode_device_number(value: int) -> int:
    """The kernel's ``huge_encode_dev`` (loop_info64's numbers) as ``os.makedev`` encodes it."""
    return os.makedev(*loopdev.decode_device(value))


def parse_status(raw: bytes) -> int:
    """``lo_rdevice`` of a ``struct loop_info64``."""
    return decode_device_number(LOOP_INFO64.unpack(raw[: LOOP_INFO64.size])[2])


def backing_number(node: Path, expected: int | None) -> int | None:
    """``lo_rdevice`` of the loop device at ``node``; None when ``node`` is not the block device
    numbered ``expected`` (a missing /dev, a fake sysfs) or the ioctl fails. A read-only open
    without O_EXCL: it neither claims the device nor changes it."""
    if expected is None:
        return None
    try:
        fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISBLK(st.st_mode) or st.st_rdev != expected:
            return None
        return parse_status(fcntl.ioctl(fd, LOOP_GET_STATUS64, bytes(LOOP_INFO64.size)))
    except OSError:
        return None
    finally:
        os.close(fd)


def read_record(sys_device: Path, node: Path, number: int | None) -> LoopRecord | None:
    """The record of loop device ``sys_device`` (its sysfs folder); None when it is no attached
    loop device. ``node`` and ``number``: its device node and number, for the ioctl."""
    try:
        path = (sys_device / "loop" / "backing_file").read_text().rstrip("\n")
    except OSError:
        return None
    return LoopRecord(path.removesuffix(host.DELETED), backing_number(node, number))


def backing_device_number(record: LoopRecord) -> int | None:
    """The device number of the block device a loop device is backed by; None for a file.

    The ioctl's number when it was read; otherwise the backing path, when it still names a
    block device (a node made anywhere, ``/dev/disk/by-id/...``: stat follows the link)."""
    if record.number is not None:
        return record.number or None
    try:
        st = os.stat(record.path)
    except OSError:
        return None
    return st.st_rdev if stat.S_ISBLK(st.st_mode) else None


def offset_words(offset: int) -> str:
    """``offset 1 MiB``; empty for a loop device over its backing device from the start."""
    if not offset:
        return ""
    return f"offset {offset // MiB} MiB" if offset % MiB == 0 else f"offset {offset} bytes"


# ---------------------------------------------------------------- in the block stack


def backing_of(stack: BlockStack, name: str) -> str | None:
    """The block device loop device ``name`` is backed by (None: a file, or no loop device).

    Its kernel record's device number when it can be read; else its backing path, by name
    under /dev or by the device number of the node it names."""
    record = read_record(stack.sys_block / name, stack.dev / name, stack.number(name))
    if record is None:
        return None
    if record.number is None and (named := stack.by_source(record.path)) is not None:
        return named
    number = backing_device_number(record)
    return None if number is None else stack.by_number(f"{os.major(number)}:{os.minor(number)}")


def offset(stack: BlockStack, name: str) -> int:
    """Where loop device ``name`` starts in its backing file (0 when it is no loop device)."""
    try:
        return int((stack.sys_block / name / "loop" / "offset").read_text())
    except (OSError, ValueError):
        return 0


def loops_on(stack: BlockStack) -> dict[str, list[str]]:
    """Block device name -> the loop devices backed by it."""
    found: dict[str, list[str]] = {}
    for entry in sorted(stack.sys_block.iterdir(), key=lambda path: path.name):
        if (entry / "loop").is_dir() and (backing := backing_of(stack, entry.name)) is not None:
            found.setdefault(backing, []).append(entry.name)
    return found


def refusal(device: Path, name: str, stack: BlockStack, reached: dict[str, Step | None]) -> str | None:
    """The rule 'not in use' for the loop devices built on ``device`` (kernel name ``name``),
    its partitions or anything on them (``reached``: see BlockStack.reached_above); None when
    there are none."""
    loops = [other for other, step in reached.items() if step is not None and step.how == "loop"]
    if not loops:
        return None
    mounts, swaps = stack.mounts(), stack.swaps_on()
    uses = "; ".join(loop_use(name, loop, reached, stack, mounts, swaps) for loop in loops)
    return f"partition rule 'not in use': {device} is in use: {uses}"


def loop_use(
    name: str,
    loop: str,
    reached: dict[str, Step | None],
    stack: BlockStack,
    mounts: dict[str, list[str]],
    swaps: dict[str, str],
) -> str:
    """``/dev/loop2 (offset 1 MiB) is backed by it and mounted on /mnt/h``: a loop device built
    on device ``name`` or on something built on it (``reached``: see BlockStack.reached_above),
    and what uses it."""
    step = reached[loop]
    assert step is not None
    parent_step = reached[step.parent]
    if step.parent == name:
        backing = "it"
    elif parent_step is not None and parent_step.how == "partition" and parent_step.parent == name:
        backing = f"its partition /dev/{step.parent}"
    else:
        backing = f"/dev/{step.parent}"
    uses = [f"mounted on {', '.join(mounts[loop])}"] if loop in mounts else []
    uses += ["active swap"] if loop in swaps else []
    holders = stack.holders(loop)
    uses += [f"held by {', '.join(map(stack.label, holders))}"] if holders else []
    words = offset_words(offset(stack, loop))
    return f"/dev/{loop}{f' ({words})' if words else ''} is backed by {backing}" + "".join(
        f" and {use}" for use in uses
    )
