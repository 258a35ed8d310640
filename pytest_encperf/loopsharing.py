"""Devices that share what the named device writes: the siblings of a loop device, and
partitions that overlap it.

Two loop devices over the same backing file (``losetup -f g.img`` twice, or once more at an
offset) present the same bytes: formatting one writes the file system another one presents,
and nothing in the block stack links them (neither is built on the other; each takes no
exclusive hold of the file). The same goes for two loop devices over one block device.

So the bytes the named device writes are followed down the stack (a partition's start in its
disk, a loop device's offset and size limit in its backing file or device; through a
device-mapper or MD device, the whole of each device under it, since its table is not read),
and every other loop device whose backing file (the same inode: ``LOOP_GET_STATUS64``'s
``lo_device`` and ``lo_inode``; sysfs's ``backing_file`` when the record cannot be read) or
backing device is one of those, over a byte range that overlaps them, makes the device in use.
A loop device over a disjoint range of the same file (``losetup --offset``/``--sizelimit``)
shares no byte with it and is allowed. A process that has such a backing file open (a virtual
machine's image, ``dd``) makes it in use too: the file is live, and what the process reads or
writes there would be destroyed under it (an open of the device itself counts the same way,
see BlockStack.openers); so does a process that has it mapped into its memory (openfiles).
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from . import host, loopbacking, loopdev, openfiles

if TYPE_CHECKING:
    from .blockstack import BlockStack

SECTOR = 512


class LoopSpan(NamedTuple):
    """The bytes of its backing file (or device) that a loop device presents."""

    name: str  # kernel name (loop2)
    backing: tuple[object, ...]  # ("file", major, minor, inode), ("device", rdev) or ("path", path)
    path: str  # the backing file as the kernel names it, without " (deleted)"
    start: int  # lo_offset
    end: int | None  # lo_offset + lo_sizelimit; None: to the end of the file

    def presented(self, start: int, end: int | None) -> tuple[int, int | None]:
        """Bytes [start, end) of the loop device as bytes of its backing file (None: no end)."""
        last = self.end if end is None else self.start + end
        if end is not None and self.end is not None:
            last = min(self.end, self.start + end)
        return self.start + start, last


def overlaps(start: int, end: int | None, other_start: int, other_end: int | None) -> bool:
    """Do the byte ranges [start, end) and [other_start, other_end) share a byte (None: no end)?"""
    first, last = max(start, other_start), min((e for e in (end, other_end) if e is not None), default=None)
    return last is None or first < last


def _record(stack: BlockStack, name: str) -> tuple[loopdev.LoopStatus, int] | None:
    """LOOP_GET_STATUS64 of loop device ``name`` and its ``lo_rdevice`` (0: a file), read
    through its node under ``stack.dev`` only when that node is the device sysfs numbers so (a
    fake sysfs has no such nodes). A read-only open without O_EXCL: it claims nothing."""
    expected = stack.number(name)
    if expected is None:
        return None
    try:
        fd = loopdev.open_device(stack.dev / name)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_rdev != expected:
            return None
        raw = fcntl.ioctl(fd, loopdev.LOOP_GET_STATUS64, bytes(loopdev.LOOP_INFO64.size))
    except OSError:  # not bound (ENXIO), or a file the kernel cannot stat (ENOTCONN)
        return None
    finally:
        os.close(fd)
    return loopdev.LoopStatus.unpack(raw), loopbacking.parse_status(raw)


def _sysfs_int(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def span_of(stack: BlockStack, name: str) -> LoopSpan | None:
    """What loop device ``name`` presents; None when it is no attached loop device. Its kernel
    record when it can be read; else sysfs (offset, sizelimit) and the backing path: its inode
    while the path still names it, the path itself after that."""
    loop = stack.sys_block / name / "loop"
    try:
        path = (loop / "backing_file").read_text().rstrip("\n").removesuffix(host.DELETED)
    except OSError:
        return None
    backing: tuple[object, ...]
    record = _record(stack, name)
    if record is not None:
        found, rdevice = record
        backing = ("device", rdevice) if rdevice else ("file", *found.device, found.inode)
        start, limit = found.offset, found.size_limit
    else:
        start, limit = _sysfs_int(loop / "offset"), _sysfs_int(loop / "sizelimit")
        try:
            st = os.stat(path)
        except OSError:
            backing = ("path", path)
        else:
            identity = ("file", os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
            backing = ("device", st.st_rdev) if stat.S_ISBLK(st.st_mode) else identity
    return LoopSpan(name, backing, path, start, start + limit if limit else None)


def same_backing(one: LoopSpan, other: LoopSpan) -> bool:
    """The same inode or device; by the kernel's name of the file when either could not be
    identified (a fake sysfs, a removed file), which errs towards refusing."""
    if one.backing == other.backing:
        return True
    return "path" in (one.backing[0], other.backing[0]) and one.path == other.path


class Written(NamedTuple):
    """A device the named device writes through, and which bytes of it."""

    name: str
    start: int
    end: int | None  # None: to its end
    span: LoopSpan | None  # when it is a loop device: what it presents
    backing_device: str | None  # when it is a loop device over a block device: that device


def partition_bytes(stack: BlockStack, name: str) -> tuple[int, int | None] | None:
    """The bytes [start, end) of its disk that partition ``name`` is (None: where it starts is
    not known; an end of None: to the end of the disk)."""
    folder = stack.sys_block / name
    try:
        first = int((folder / "start").read_text()) * SECTOR  # sysfs counts 512-byte sectors
    except (OSError, ValueError):  # not there or not a number: where it starts is not known
        return None
    size = _sysfs_int(folder / "size") * SECTOR
    return first, first + size if size else None


def written_below(stack: BlockStack, name: str) -> list[Written]:
    """``name`` and every device under it, each with the bytes of it that writing ``name``
    writes: a partition moves them by its start in the disk, a loop device by its offset in the
    device it is backed by; a device-mapper or MD device may write any byte of its slaves."""
    found: list[Written] = []
    todo: list[tuple[str, int, int | None]] = [(name, 0, None)]
    # a device reached twice over different ranges (an MD or dm device over two loop devices on
    # one disk) is written in each of them: seen by range, not by name
    seen: set[tuple[str, int, int | None]] = set()
    while todo:
        current, start, end = todo.pop(0)
        if (current, start, end) in seen:
            continue
        seen.add((current, start, end))
        folder = stack.sys_block / current
        span = span_of(stack, current) if (folder / "loop").is_dir() else None
        backing = loopbacking.backing_of(stack, current) if span is not None else None
        found.append(Written(current, start, end, span, backing))
        if stack.is_partition(current):
            where = partition_bytes(stack, current)
            if where is not None:
                within = LoopSpan(current, (), "", *where)
                todo.append((stack.disk_of(current), *within.presented(start, end)))
            else:  # where it starts is not known: any byte of the disk
                todo.append((stack.disk_of(current), 0, None))
        if span is not None and backing is not None:
            todo.append((backing, *span.presented(start, end)))
        todo += [(slave, 0, None) for slave in stack.slaves(current)]
    return found


def sharers(stack: BlockStack, name: str) -> list[tuple[str, Written]]:
    """The other loop devices that present bytes writing ``name`` writes: (loop device, the
    device under ``name`` whose bytes it shares), each once."""
    below = written_below(stack, name)
    path = {entry.name for entry in below}
    spans = [
        span
        for entry in sorted(stack.sys_block.iterdir(), key=lambda entry: entry.name)
        if (entry / "loop").is_dir() and (span := span_of(stack, entry.name)) is not None
    ]
    loops = loopbacking.loops_on(stack)
    found: dict[str, Written] = {}
    for entry in below:
        for other in spans:
            if other.name in path or other.name in found:
                continue
            own = entry.span if entry.backing_device is None else None  # a loop device over a file
            shared_file = (
                own is not None
                and same_backing(own, other)
                and overlaps(*own.presented(entry.start, entry.end), other.start, other.end)
            )
            # backed by a device under it (one backed by the named device itself is built on it,
            # which loopbacking's rule names)
            shared_device = (
                entry.name != name
                and other.name in loops.get(entry.name, [])
                and overlaps(entry.start, entry.end, other.start, other.end)
            )
            if shared_file or shared_device:
                found[other.name] = entry
    return list(found.items())


def overlapping_partitions(
    stack: BlockStack, name: str
) -> list[tuple[str, tuple[int, int | None] | None, Written]]:
    """The partitions that share bytes with ``name`` without being on its path: (partition, its
    bytes in its disk (partition_bytes), the disk under ``name`` whose bytes they share). Two
    partitions of one disk can overlap (an isohybrid image's EFI partition lies inside its ISO 9660
    one; a table edited by hand), and a loop device over a disk at an offset can cover a partition
    of it; nothing in the block stack links them. A partition whose start is not known overlaps
    everything. The partitions of the named device itself are its own (the other rules read them),
    and so are those of a disk that a device on the path holds whole (a multipath or MD member whose
    partition table is seen through it: the kernel lets none of them be claimed while their disk is
    held)."""
    below = written_below(stack, name)
    path = {entry.name for entry in below}
    found: dict[str, tuple[str, tuple[int, int | None] | None, Written]] = {}
    for entry in below[1:]:
        if path.intersection(stack.holders(entry.name)):
            continue
        for partition in stack.partitions(entry.name):
            if partition in path or partition in found:
                continue
            where = partition_bytes(stack, partition)
            if where is None or overlaps(entry.start, entry.end, *where):
                found[partition] = (partition, where, entry)
    return list(found.values())


def overlap_refusals(device: Path, name: str, stack: BlockStack) -> list[str]:
    """The rule 'no overlap', for each partition that shares bytes with ``device`` (kernel name
    ``name``): writing the device would write it, whether or not it is in use. No option
    overrides it; the whole disk can be named instead."""
    mounts, swaps = stack.mounts(), stack.swaps_on()
    found = []
    for partition, where, via in overlapping_partitions(stack, name):
        bytes_text = "where it starts is not known" if where is None else f"bytes {byte_range(*where)}"
        uses = uses_of(stack, partition, mounts, swaps)
        in_use = f", and it is {' and '.join(uses)}" if uses else ""
        found.append(
            f"partition rule 'no overlap': writing {device} writes bytes "
            f"{byte_range(via.start, via.end)} of /dev/{via.name}, which its partition /dev/{partition} "
            f"({bytes_text}) shares{in_use}"
        )
    return found


def byte_range(start: int, end: int | None) -> str:
    """``1 MiB..33 MiB`` (whole MiB where they are), ``1 MiB..the end``."""

    def size(value: int) -> str:
        return f"{value >> 20} MiB" if value % (1 << 20) == 0 else f"{value} B"

    return f"{size(start)}..{'the end' if end is None else size(end)}"


def file_openers(stack: BlockStack, files: list[LoopSpan]) -> dict[str, list[str]]:
    """Backing file path -> the other processes that have it open or mapped (``pid 812
    (qemu-system-x86)``, see openfiles)."""
    wanted = {span.backing[1:]: span.path for span in files if span.backing[0] == "file"}
    if not wanted:
        return {}

    def backing_file(info: os.stat_result) -> str | None:
        key = (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino)
        return wanted.get(key) if stat.S_ISREG(info.st_mode) else None

    return dict(sorted(openfiles.holders(backing_file, stack.proc).items()))


def uses_of(stack: BlockStack, name: str, mounts: dict[str, list[str]], swaps: dict[str, str]) -> list[str]:
    """How device ``name`` itself is in use: ``mounted on /m``, ``active swap``, ``held by dm-0 (x)``."""
    uses = [f"mounted on {', '.join(mounts[name])}"] if name in mounts else []
    uses += ["active swap"] if name in swaps else []
    holders = stack.holders(name)
    return uses + ([f"held by {', '.join(map(stack.label, holders))}"] if holders else [])


def sharer_use(stack: BlockStack, name: str, loop: str, via: Written) -> str:
    """``/dev/loop2 shares its backing file /x/g.img (offset 1 MiB) and is mounted on /m``, then
    what is built on it and in use (a loop device on it, a partition or mapping of it mounted)."""
    mounts, swaps = stack.mounts(), stack.swaps_on()
    span = span_of(stack, loop)
    words = loopbacking.offset_words(span.start if span else 0)
    note = f" ({words})" if words else ""
    uses = uses_of(stack, loop, mounts, swaps)
    and_uses = "".join(f" and is {use}" for use in uses)
    if via.span is not None and via.backing_device is None and (span is None or same_backing(via.span, span)):
        whose = "its" if via.name == name else f"/dev/{via.name}'s"
        clause = f"/dev/{loop} shares {whose} backing file {via.span.path}{note}{and_uses}"
    else:
        clause = (
            f"/dev/{loop}{note} is backed by /dev/{via.name}, which it is on{',' if uses else ''}{and_uses}"
        )
    parts = [clause]
    reached = stack.reached_above(loop)
    for other, step in reached.items():
        if step is None:
            continue
        if step.how == "loop":  # "/dev/loop3 is backed by /dev/loop2 and mounted on /n"
            parts.append(loopbacking.loop_use(name, other, reached, stack, mounts, swaps))
            continue
        where = [f"mounted on {', '.join(mounts[other])}"] if other in mounts else []
        where += ["active swap"] if other in swaps else []
        if where:
            parts.append(f"{stack.label(other)} on /dev/{step.parent} is {' and '.join(where)}")
    return "; ".join(parts)


def refusal(device: Path, name: str, stack: BlockStack) -> str | None:
    """The rule 'not in use' for the loop devices sharing bytes with ``device`` (kernel name
    ``name``) and the processes that have its backing file open; None when there are none."""
    uses = [sharer_use(stack, name, loop, via) for loop, via in sharers(stack, name)]
    files = [entry.span for entry in written_below(stack, name) if entry.span and not entry.backing_device]
    for path, processes in file_openers(stack, files).items():
        uses.append(
            f"the backing file {path} is open in {', '.join(processes)} "
            "(a virtual machine, dd or another program is using it)"
        )
    if not uses:
        return None
    return f"partition rule 'not in use': {device} is in use: {'; '.join(uses)}"
