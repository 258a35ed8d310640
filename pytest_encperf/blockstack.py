"""The host's block-device stack as the partition rules read it (targets.partition_problems).

What is in use is read from the kernel, never guessed from names or device numbers: the
block-device stack in sysfs (each device's slaves, the devices it is built on, and its
holders, the devices built on it, followed recursively, plus a whole disk's partitions and the
loop devices backed by any of them, which sysfs does not count as holders: see loopbacking), the
mount table (/proc/self/mountinfo, what findmnt reads, matched by device number and by mount
source: a btrfs mount shows an anonymous 0:N number), the members of mounted btrfs file
systems (/sys/fs/btrfs), /proc/swaps and, last (targets.DeviceClaim), an exclusive open
(O_EXCL), which the kernel refuses while a mount, device-mapper or MD device, swap or any other
program holds the device.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import loopbacking, mounttable, openfiles


def device_number(device: Path) -> int | None:
    """The device number (st_rdev) of the block device ``device`` names now; None when it names none."""
    try:
        info = os.stat(device)
    except OSError:
        return None
    return info.st_rdev if stat.S_ISBLK(info.st_mode) else None


def numbers_text(number: int) -> str:
    """``8:17``: a device number as sysfs writes it."""
    return f"{os.major(number)}:{os.minor(number)}"


# file systems that live on a block device: a root of one of these that sysfs cannot name hides the disk
DISK_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "jfs", "reiserfs", "bcachefs", "vfat", "exfat", "ntfs3"}
)


class MountEntry(NamedTuple):
    point: str
    fstype: str
    source: str
    names: list[str]  # kernel names of the devices it is on


class Step(NamedTuple):
    """How a device built on another was reached from it."""

    parent: str
    how: str  # "partition", "holder" (device-mapper, MD) or "loop" (a loop device backed by it)


@dataclass(frozen=True)
class BlockStack:
    """The host's block devices, mounts and swaps as the partition rules read them.

    The paths are parameters so that tests can lay out what this machine does not have (a root
    file system on LVM or LUKS, btrfs); devices are named by their kernel names (``sda1``,
    ``dm-0``, ``loop3p1``).
    """

    sys_block: Path = Path("/sys/class/block")
    mountinfo: tuple[Path, ...] = (Path("/proc/self/mountinfo"),)
    # where "/" is looked up: this process's mount namespace and init's (a container's root
    # is an overlay; the host's root disk is in init's namespace when it is visible)
    root_mountinfo: tuple[Path, ...] = (Path("/proc/self/mountinfo"), Path("/proc/1/mountinfo"))
    swaps: Path = Path("/proc/swaps")
    btrfs: Path = Path("/sys/fs/btrfs")
    proc: Path = Path("/proc")
    dev: Path = Path("/dev")  # the device nodes, for the loop devices' own record (LOOP_GET_STATUS64)

    def name_of(self, device: Path) -> str | None:
        """Kernel name of a block device node, by its device number (None when it is not one)."""
        number = device_number(device)
        return None if number is None else self.name_of_number(number)

    def name_of_number(self, number: int) -> str | None:
        """Kernel name of the block device with device number ``number`` (st_rdev)."""
        return self.by_number(numbers_text(number))

    def devname(self, name: str) -> str | None:
        """The node the kernel names for the device, under /dev (``DEVNAME`` of its uevent:
        ``sdb1``, ``cciss/c0d0p1``); None when sysfs does not say."""
        try:
            lines = (self.sys_block / name / "uevent").read_text().splitlines()
        except OSError:
            return None
        found = next((line.partition("=")[2] for line in lines if line.startswith("DEVNAME=")), "")
        return found if found and ".." not in Path(found).parts and not found.startswith("/") else None

    def _entries(self, name: str, folder: str) -> list[str]:
        path = self.sys_block / name / folder
        return sorted(entry.name for entry in path.iterdir()) if path.is_dir() else []

    def holders(self, name: str) -> list[str]:
        return self._entries(name, "holders")

    def slaves(self, name: str) -> list[str]:
        return self._entries(name, "slaves")

    def is_partition(self, name: str) -> bool:
        return (self.sys_block / name / "partition").exists()

    def disk_of(self, name: str) -> str:
        """The whole disk a partition belongs to (the device itself otherwise)."""
        return (self.sys_block / name).resolve().parent.name if self.is_partition(name) else name

    def partitions(self, name: str) -> list[str]:
        if self.is_partition(name):
            return []
        folder = (self.sys_block / name).resolve()
        return sorted(child.name for child in folder.iterdir() if (child / "partition").exists())

    def label(self, name: str) -> str:
        """``dm-3 (vg-root)`` for device-mapper devices (their mapper name), else the name."""
        try:
            return f"{name} ({(self.sys_block / name / 'dm' / 'name').read_text().strip()})"
        except OSError:
            return name

    @staticmethod
    def _closure(name: str, step: Callable[[str], list[str]]) -> list[str]:
        """``name`` and every device reached from it by ``step``, breadth first, each once."""
        found: list[str] = []
        todo = [name]
        while todo:
            current = todo.pop(0)
            if current not in found:
                found.append(current)
                todo += step(current)
        return found

    def reached_above(self, name: str) -> dict[str, Step | None]:
        """The device, its partitions and everything built on them (holders, and loop devices
        backed by them, which sysfs does not count as holders), recursively, breadth first;
        each with the step it was reached by."""
        loops = loopbacking.loops_on(self)
        reached: dict[str, Step | None] = {name: None}
        todo = [name]
        while todo:
            current = todo.pop(0)
            steps = [
                *((other, "partition") for other in self.partitions(current)),
                *((other, "holder") for other in self.holders(current)),
                *((other, "loop") for other in loops.get(current, [])),
            ]
            for other, how in steps:
                if other not in reached:
                    reached[other] = Step(current, how)
                    todo.append(other)
        return reached

    def above(self, name: str) -> list[str]:
        """The device, its partitions and everything built on them (see reached_above)."""
        return list(self.reached_above(name))

    def below(self, name: str) -> list[str]:
        """The device, the disk it is a partition of and everything it is built on (slaves and a
        loop device's backing device, recursively). A loop device's backing file is not below
        it: writing the loop device writes only that file (and what holds the file is mounted)."""

        def step(current: str) -> list[str]:
            backing = loopbacking.backing_of(self, current)
            return [self.disk_of(current), *self.slaves(current), *([backing] if backing else [])]

        return self._closure(name, step)

    def by_number(self, numbers: str) -> str | None:
        for entry in self.sys_block.iterdir():
            with contextlib.suppress(OSError):
                if (entry / "dev").read_text().strip() == numbers:
                    return entry.name
        return None

    def by_source(self, source: str) -> str | None:
        """The device a mount or swap source names (``/dev/mapper/NAME``, ``/dev/sda2``)."""
        if not source.startswith("/dev/"):
            return None
        if source.startswith("/dev/mapper/"):
            wanted = source.removeprefix("/dev/mapper/")
            for entry in self.sys_block.glob("dm-*"):
                with contextlib.suppress(OSError):
                    if (entry / "dm" / "name").read_text().strip() == wanted:
                        return entry.name
        for candidate in (Path(os.path.realpath(source)).name, Path(source).name):
            if (self.sys_block / candidate).exists():
                return candidate
        return None

    def _mount_entries(self, files: tuple[Path, ...]) -> Iterator[MountEntry]:
        """One entry per mountinfo line, with the devices it is on (by device number and by source)."""
        for path in files:
            try:
                rows = mounttable.lines(path)  # split on single spaces, decoded: any name is found
            except OSError:
                continue
            for fields in rows:
                if "-" not in fields[6:]:
                    continue
                separator = fields.index("-", 6)
                fstype = fields[separator + 1] if len(fields) > separator + 1 else ""
                source = fields[separator + 2] if len(fields) > separator + 2 else ""
                names = [self.by_number(fields[2]), self.by_source(source)]
                yield MountEntry(
                    fields[4],
                    fstype,
                    source,
                    [name for name in dict.fromkeys(names) if name is not None],
                )

    def _mounts(self, files: tuple[Path, ...]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for mountpoint, _, _, names in self._mount_entries(files):
            for name in names:
                points = found.setdefault(name, [])
                if mountpoint not in points:
                    points.append(mountpoint)
        return found

    def mounts(self) -> dict[str, list[str]]:
        """Device name -> its mount points; every member of a mounted multi-device btrfs counts."""
        found = self._mounts(self.mountinfo)
        filesystems = sorted(self.btrfs.iterdir()) if self.btrfs.is_dir() else []
        for fs in filesystems:  # /sys/fs/btrfs/<fsid> exists while that file system is mounted
            members = [entry.name for entry in (fs / "devices").glob("*")]
            points = sorted({point for member in members for point in found.get(member, [])})
            for member in members:
                found.setdefault(member, points or [f"(btrfs {fs.name}, mounted in another namespace)"])
        return found

    def swaps_on(self) -> dict[str, str]:
        """Device name -> the swap area /proc/swaps names on it."""
        found = {}
        with contextlib.suppress(OSError):
            # the name is escaped like a mount table's (no space or tab in it), then padded
            for row in self.swaps.read_bytes().split(b"\n")[1:]:
                if row.strip():
                    source = mounttable.unescape(re.split(rb"[ \t]", row, maxsplit=1)[0])
                    name = self.by_source(source)
                    if name is not None:
                        found[name] = source
        return found

    def root_entries(self) -> list[MountEntry]:
        """The mounts on / (this process's mount namespace and init's)."""
        return [entry for entry in self._mount_entries(self.root_mountinfo) if entry.point == "/"]

    def root_devices(self) -> list[str]:
        """The devices mounted on / (by number and by source, as for any mount)."""
        return list(dict.fromkeys(name for entry in self.root_entries() for name in entry.names))

    def root_stack(self) -> list[str]:
        """The devices holding / and everything below them, root first."""
        return list(dict.fromkeys(d for root in self.root_devices() for d in self.below(root)))

    def unnamed_root(self) -> str | None:
        """Why the devices holding / cannot be known, when they cannot: no readable mount of /,
        or / on a disk file system that no device in sysfs matches. A root on
        no disk (network, hostfs, tmpfs, an overlay whose layers are mounts of their own) is
        not a reason: no block device holds it."""
        entries = self.root_entries()
        if not entries:
            return "the mount of / cannot be read"
        for entry in entries:
            if not entry.names and entry.fstype in DISK_FILE_SYSTEMS:  # hostfs says /dev/root too
                return f"/ is {entry.fstype} on {entry.source}, which matches no block device in sysfs"
        return None

    def number(self, name: str) -> int | None:
        """The device number (``st_rdev``) of a device by its kernel name."""
        try:
            major, minor = (self.sys_block / name / "dev").read_text().strip().split(":")
        except (OSError, ValueError):
            return None
        return os.makedev(int(major), int(minor))

    def openers(self, names: list[str]) -> dict[str, list[str]]:
        """Device name -> the other processes that have it open or mapped (``pid 812
        (qemu-system-x86)``).

        A virtual machine, dd or a backup tool opens a disk without O_EXCL, which the exclusive
        probe cannot see; their open descriptors and memory maps can (see openfiles: every path
        to the node counts)."""
        wanted = {number: name for name in names if (number := self.number(name)) is not None}

        def device(info: os.stat_result) -> str | None:
            return wanted.get(info.st_rdev) if stat.S_ISBLK(info.st_mode) else None

        return openfiles.holders(device, self.proc)
