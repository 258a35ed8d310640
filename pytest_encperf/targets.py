"""Where a volume lives: a container file on a loop device, a raw partition, or a plain directory.

``container``: a sparse file in the run directory, attached with ``losetup --direct-io=on`` so
that I/O reaches the disk below instead of the host's page cache (checked in sysfs).
``partition``: a block device the user names twice on the command line (``--encperf-device=/dev/X
--encperf-allow-destroy=/dev/X``); everything on it is overwritten, so it is refused when it
is, sits under or holds a mounted file system, swap, an active device-mapper/LVM/MD device, a
loop device or the stack holding /, when another loop device presents bytes it would write (one
over the same backing file or device, see loopsharing), when another program holds it or that
file, and when it carries a file system or partition table signature unless ``--encperf-force``
(which overrides nothing else).
A run holds it exclusively (O_EXCL) from before its first write (see DeviceClaim).
``directory``: a directory on the host filesystem; needs no root, but only file-level
backends (plain, fscrypt where the host filesystem supports it, FUSE) can use it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import host, loopbacking, loopsharing, mounting, mounttable, openfiles, resources
from .workloads import MiB

KINDS = ("container", "partition", "directory")

# Filesystems whose "disk" is memory: a benchmark there measures RAM, not storage.
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")
PSEUDO_FILESYSTEMS = ("proc", "sysfs", "devtmpfs", "devpts", "cgroup2", "debugfs", "securityfs")


@dataclass(frozen=True)
class Target:
    kind: str  # one of KINDS
    directory: Path  # where containers / volume directories are created
    size: int  # bytes of the container (file system included)
    device: Path | None = None  # the block device of a partition target
    force: bool = False  # partition: overwrite even if it carries a signature
    # a container on a tmpfs the run mounted itself (the ladder's layer rung): memory on purpose
    ram: bool = False

    def problems(self) -> list[str]:
        """Why volumes cannot be made on this target; empty when they can."""
        found = []
        if self.kind == "partition":
            if self.device is None:
                return ["partition target needs --encperf-device=/dev/X"]
            found += partition_problems(self.device, force=self.force)
            size = device_size(self.device)
            if size is not None and size < container_size(self.size):
                found.append(f"{self.device} is smaller than a volume for {self.size // MiB} MiB workloads")
        if not self.directory.is_dir():
            found.append(f"{self.directory} is not a directory")
            return found
        fstype = mounting.filesystem_type(self.directory)
        if fstype in PSEUDO_FILESYSTEMS:
            found.append(
                f"{self.directory} is on {fstype}, not a disk: pass --encperf-dir on the disk to measure"
            )
            return found
        if fstype in MEMORY_FILESYSTEMS and not self.ram:
            found.append(
                f"{self.directory} is on {fstype} (memory, not a disk): "
                "pass --encperf-dir on the disk to measure"
            )
        free = shutil.disk_usage(self.directory).free
        if self.kind == "container" and free < self.size:
            found.append(
                f"{self.directory} has {free // MiB} MiB free, a volume needs {self.size // MiB} MiB"
            )
        if self.kind == "partition" and not host.is_root():
            found.append("partition target needs root (mkfs, mount)")
        if self.kind == "container":
            if not host.is_root():
                found.append("container target needs root (losetup, mount); try --encperf-target=directory")
            elif not Path("/dev/loop-control").exists():
                found.append("container target needs loop devices (/dev/loop-control missing)")
            missing = host.missing_tools("losetup", "mount", "umount")
            if missing:
                found.append(f"container target needs {', '.join(missing)} (util-linux)")
        return found


def container_size(test_file_size: int) -> int:
    """Room for the workload file plus file system metadata and journal (rounded to MiB)."""
    size = test_file_size + max(64 * MiB, test_file_size // 5)
    return (size + MiB - 1) // MiB * MiB


def create_container(target: Target, workdir: Path, cleanup: resources.Cleanup) -> host.LoopDevice:
    """Make a sparse container file in ``workdir`` and attach it to a loop device.

    Both are registered on ``cleanup`` the moment they exist.
    """
    image = workdir / "container.img"
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    cleanup.path(image)
    try:
        os.ftruncate(fd, target.size)  # sparse: costs only what is written
    finally:
        os.close(fd)
    loop = host.attach_loop(image, direct_io=True)
    cleanup.loop(loop.path, image)
    return loop


# ---------------------------------------------------------------- partitions
#
# What is in use is read from the kernel, never guessed from names or device numbers: the
# block-device stack in sysfs (each device's slaves, the devices it is built on, and its
# holders, the devices built on it, followed recursively, plus a whole disk's partitions and the
# loop devices backed by any of them, which sysfs does not count as holders: see loopbacking), the
# mount table (/proc/self/mountinfo, what findmnt reads, matched by device number and by mount
# source: a btrfs mount shows an anonymous 0:N number), the members of mounted btrfs file
# systems (/sys/fs/btrfs), /proc/swaps and, last, an exclusive open (O_EXCL), which the kernel
# refuses while a mount, device-mapper or MD device, swap or any other program holds the device.


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
        try:
            st = os.stat(device)
        except OSError:
            return None
        if not stat.S_ISBLK(st.st_mode):
            return None
        return self.by_number(f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")

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


class DeviceClaim:
    """The partition held exclusively (``O_EXCL``) by this process between its volumes.

    The kernel grants one exclusive holder at a time: while we hold it, nothing can mount it,
    build a device-mapper or MD device on it, swap on it or format it (mkfs, wipefs and
    cryptsetup open their device O_EXCL too). It is taken after the rules pass and before the
    first write, and lent to each volume for its life (its mount or mapping then holds the
    device the same way); taking it back after a volume fails when anything else took the
    device meanwhile, and the run stops.
    """

    _held: set[str] = set()  # real paths this process holds, so the rules' own O_EXCL probe skips them

    def __init__(self, device: Path) -> None:
        self.device = device
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the device; HostError naming the rule when something else holds it."""
        if self._fd is not None:
            return
        try:
            fd = os.open(self.device, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
        except OSError as exc:
            raise host.HostError(_exclusive_refusal(self.device, exc)) from None
        # a loop device takes no exclusive hold on its backing device: one set up on ours
        # since the rules were read (during a volume's life, too) passes the open above
        stack = BlockStack()
        name = stack.name_of(self.device)
        # nor over the file under it: a loop device attached to that file meanwhile shares its bytes
        refusals = (
            []
            if name is None
            else [
                loopbacking.refusal(self.device, name, stack, stack.reached_above(name)),
                loopsharing.refusal(self.device, name, stack),
            ]
        )
        if refusal := "; ".join(filter(None, refusals)):
            os.close(fd)
            raise host.HostError(refusal)
        self._fd = fd
        DeviceClaim._held.add(os.path.realpath(self.device))

    def release(self) -> None:
        if self._fd is not None:
            DeviceClaim._held.discard(os.path.realpath(self.device))
            os.close(self._fd)
            self._fd = None

    @classmethod
    def holds(cls, device: Path) -> bool:
        return os.path.realpath(device) in cls._held


def _exclusive_refusal(device: Path, exc: OSError) -> str:
    return (
        f"partition rule 'not in use': {device} cannot be opened exclusively (O_EXCL: {exc.strerror}): "
        "something else holds it (a mount, perhaps in another mount namespace, a device-mapper, MD "
        "or btrfs member, swap, or another program)"
    )


def partition_problems(device: Path, *, force: bool = False, stack: BlockStack | None = None) -> list[str]:
    """Why ``device`` must not be overwritten; each message names the rule that refuses it.

    Refused: anything that is, sits under, or holds a mounted file system, swap, an active
    device-mapper, LVM or MD device, a loop device, or the stack holding / (see stack_problems);
    a device another program has open, exclusively or not (it or one of its partitions); and,
    unless ``force``, one that carries a signature. ``force`` overrides that rule only.
    """
    stack = stack or BlockStack()
    name = stack.name_of(device)
    if name is None:
        return [f"partition rule 'block device': {device} is not a block device"]
    found = stack_problems(device, name, stack)
    for other, processes in stack.openers([name, *stack.partitions(name)]).items():
        where = f"{device} is" if other == name else f"{device} has a partition, /dev/{other}, that is"
        found.append(
            f"partition rule 'not in use': {where} open in {', '.join(processes)} "
            "(a virtual machine, dd or another program is using it)"
        )
    if not found and not DeviceClaim.holds(device):
        try:
            os.close(os.open(device, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC))
        except OSError as exc:
            found.append(_exclusive_refusal(device, exc))
    if not force:
        try:
            signature = device_signature(device)
        except host.HostError as exc:
            signature = f"something blkid could not probe ({exc})"
        if signature:
            found.append(
                f"partition rule 'no signature': {device} carries {signature} (blkid -p); "
                "pass --encperf-force to overwrite it"
            )
    return found


def stack_problems(device: Path, name: str, stack: BlockStack) -> list[str]:
    """The rules that read the block stack: ``device`` (kernel name ``name``) is refused when it,
    one of its partitions or anything built on them (a loop device backed by them included) is
    mounted or swap, when a loop device it is built on is backed by a mounted device, when
    anything is built on it, and when it shares a device with the stack holding /."""
    found = []
    own_partitions = stack.partitions(name)
    reached = stack.reached_above(name)
    up = list(reached)
    below = stack.below(name)

    def path_to(other: str) -> list[tuple[str, Step]]:
        """``other`` and the devices between it and ``name``, top down, each with its step."""
        path = []
        while (step := reached[other]) is not None:
            path.append((other, step))
            other = step.parent
        return path

    def described(other: str, step: Step) -> str:
        if step.how != "loop":
            return stack.label(other)
        offset = loopbacking.offset_words(loopbacking.offset(stack, other))
        return f"{stack.label(other)} (loop device{', ' + offset if offset else ''})"

    def relation(other: str) -> str:
        if other == name:
            return f"{device} is"
        if other in own_partitions:
            return f"{device} has a partition, /dev/{other}, that is"
        path = path_to(other)
        if any(step.how == "loop" for _, step in path):  # the chain: sysfs shows no loop device as holder
            return f"{device} is under {' on '.join(described(*pair) for pair in path)}, which is"
        return f"{device} is under {stack.label(other)}, which is"

    mounts = stack.mounts()
    for other in up:
        if other in mounts:
            found.append(
                f"partition rule 'not mounted': {relation(other)} mounted on {', '.join(mounts[other])}"
            )
    for other in below[1:]:  # a loop device's backing device, in use by its own mount
        if other in mounts:
            found.append(
                f"partition rule 'not mounted': {device} is on {stack.label(other)}, which is mounted on "
                f"{', '.join(mounts[other])}"
            )
    swaps = stack.swaps_on()
    for other in up:
        if other in swaps:
            found.append(f"partition rule 'no swap': {relation(other)} active swap ({swaps[other]})")
    held = [holder for part in (name, *own_partitions) for holder in stack.holders(part)]
    if held:
        found.append(
            f"partition rule 'not in use': {device} is held by {', '.join(map(stack.label, held))} "
            "(an active device-mapper, LVM, dm-crypt or MD device is built on it)"
        )
    found += filter(
        None, [loopbacking.refusal(device, name, stack, reached), loopsharing.refusal(device, name, stack)]
    )
    unnamed = stack.unnamed_root()
    if unnamed is not None:
        found.append(
            f"partition rule 'not the root disk': {unnamed}, so {device} cannot be shown to be apart "
            "from the disk holding /"
        )
        return found
    root_stack = stack.root_stack()
    chain = " on ".join(["/", *map(stack.label, root_stack)])
    above = up[1:]
    if name in root_stack:
        found.append(f"partition rule 'not the root disk': {device} is in the stack holding / ({chain})")
    elif any(d in root_stack for d in below):
        shared = next(d for d in below if d in root_stack)
        found.append(
            f"partition rule 'not the root disk': {device} is on {stack.label(shared)}, "
            f"in the stack holding / ({chain})"
        )
    elif any(d in root_stack for d in above):
        shared = next(d for d in above if d in root_stack)
        found.append(
            f"partition rule 'not the root disk': {device} holds {stack.label(shared)}, "
            f"in the stack holding / ({chain})"
        )
    return found


def device_size(device: Path) -> int | None:
    """Bytes of a block device, from sysfs (None when it is not one)."""
    stack = BlockStack()
    name = stack.name_of(device)
    return None if name is None else int((stack.sys_block / name / "size").read_text()) * 512


def probe_signature(device: Path) -> dict[str, str]:
    """What ``blkid -p`` (a low-level probe, no cache) finds on ``device``; empty when nothing."""
    try:
        out = host.run(["blkid", "-p", "-o", "export", str(device)])
    except host.HostError as exc:
        if "exit 2" in str(exc):  # blkid: nothing found
            return {}
        raise
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def device_signature(device: Path) -> str:
    """What a low-level probe finds on ``device`` (file system, RAID member, partition table)."""
    values = probe_signature(device)
    if "PTTYPE" in values:
        return f"a {values['PTTYPE']} partition table"
    if "TYPE" in values:
        return f"a {values['TYPE']} signature"
    return ""


def wipe_own_signature(device: Path, uuid: str) -> None:
    """Erase the signature a run wrote on the partition (ext4, LUKS), recognised by the UUID it
    gave it, so the next run finds the partition as empty as the user gave it. A format that
    failed before writing leaves no such UUID, and then nothing is wiped: a failed destructive
    step is never followed by another one. ``wipefs`` opens the device O_EXCL (no --force), so
    it refuses a device that something mounted meanwhile."""
    if probe_signature(device).get("UUID") == uuid:
        host.run(["wipefs", "--all", "--quiet", str(device)])
