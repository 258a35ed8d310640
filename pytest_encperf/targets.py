"""Where a volume lives: a container file on a loop device, a raw partition, or a plain directory.

``container``: a sparse file in the run directory, attached with ``losetup --direct-io=on`` so
that I/O reaches the disk below instead of the host's page cache (checked in sysfs).
``partition``: a block device the user names twice on the command line (``--encperf-device=/dev/X
--encperf-allow-destroy=/dev/X``); everything on it is overwritten, so it is refused when it
is, sits under or holds a mounted file system, swap, an active device-mapper/LVM/MD device, a
loop device or the stack holding /, when another loop device presents bytes it would write (one
over the same backing file or device, see loopsharing) or a partition off its path does
(overlapping partitions, rule 'no overlap'), when another program holds it, that
file, the whole disk it is a partition of or a device under it, and when it carries a file
system or partition table signature unless ``--encperf-force`` (which overrides nothing else).
The device number the path names at the start is kept: a path that names another device later
(a udev link under /dev/disk moved) is refused. Between its volumes a run holds it exclusively
(O_EXCL, see DeviceClaim).
``directory``: a directory on the host filesystem; needs no root, but only file-level
backends (plain, fscrypt where the host filesystem supports it, FUSE) can use it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import host, loopbacking, loopsharing, mounting, resources
from .blockstack import BlockStack, Step, device_number, numbers_text
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
    # the device number ``device`` named when the run started (device_number): a path under /dev
    # that names another device later (a udev link moved) is refused, never written through
    device_number: int | None = None
    # a container on a tmpfs the run mounted itself (the ladder's layer rung): memory on purpose
    ram: bool = False

    def node(self) -> Path:
        """The node tools are handed for a partition target's device: the kernel's own node of the
        device number kept at the start (``/dev/`` and the DEVNAME the kernel gives it, such as
        ``sdb1`` or ``cciss/c0d0p1``), not the path the user gave, which a udev link under
        /dev/disk can be between the rules' check and the tool's own open (it moves when a clone
        of the disk appears). Where that node is not the device (a container's own /dev), the
        path given while it still names the kept device; HostError (rule 'same device') when
        neither does. The path itself where no number was kept."""
        assert self.device is not None
        if self.device_number is None:
            return self.device
        stack = BlockStack()
        name = stack.name_of_number(self.device_number)
        devname = stack.devname(name) if name is not None else None
        if devname is not None and device_number(Path("/dev") / devname) == self.device_number:
            return Path("/dev") / devname
        now = device_number(self.device)
        if now == self.device_number:
            return self.device
        raise host.HostError(_moved_refusal(self.device, self.device_number, now))

    def problems(self) -> list[str]:
        """Why volumes cannot be made on this target; empty when they can."""
        found = []
        if self.kind == "partition":
            if self.device is None:
                return ["partition target needs --encperf-device=/dev/X"]
            found += partition_problems(self.device, force=self.force, pinned=self.device_number)
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
# What is in use is read from the kernel: the block-device stack (blockstack.py) and, last, an
# exclusive open (O_EXCL, DeviceClaim), which the kernel refuses while a mount, device-mapper or
# MD device, swap or any other program holds the device.


class DeviceClaim:
    """The partition held exclusively (``O_EXCL``) by this process between its volumes.

    The kernel grants one exclusive holder at a time: while we hold it, nothing can mount it,
    build a device-mapper or MD device on it, swap on it or format it (mkfs, wipefs and
    cryptsetup open their device O_EXCL too). It is taken after the rules pass and before the
    first write, and lent to each volume for its life (its mount or mapping then holds the
    device the same way); taking it back after a volume fails when anything else took the
    device meanwhile, and the run stops.
    """

    _held: set[int] = set()  # device numbers this process holds, so the rules' own O_EXCL probe skips them

    def __init__(self, device: Path, pinned: int | None = None) -> None:
        self.device = device
        # the device number the claim is held on: ``pinned`` (Target.device_number), else the one
        # the first acquire opened; a later acquire through a path that names another is refused
        self.number = pinned
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
        number = os.fstat(fd).st_rdev  # what was opened, not what the path names a moment later
        if self.number is not None and number != self.number:
            os.close(fd)
            raise host.HostError(_moved_refusal(self.device, self.number, number))
        # a loop device takes no exclusive hold on its backing device: one set up on ours
        # since the rules were read (during a volume's life, too) passes the open above
        stack = BlockStack()
        name = stack.name_of_number(number)  # the device opened, not the path looked up again
        # nor over the file under it: a loop device attached to that file meanwhile shares its bytes;
        # nor a partition that a table read again since then lays over it
        refusals = (
            []
            if name is None
            else [
                loopbacking.refusal(self.device, name, stack, stack.reached_above(name)),
                loopsharing.refusal(self.device, name, stack),
                *loopsharing.overlap_refusals(self.device, name, stack),
            ]
        )
        if refusal := "; ".join(filter(None, refusals)):
            os.close(fd)
            raise host.HostError(refusal)
        self._fd, self.number = fd, number
        DeviceClaim._held.add(number)

    def release(self) -> None:
        if self._fd is not None:
            DeviceClaim._held.discard(os.fstat(self._fd).st_rdev)
            os.close(self._fd)
            self._fd = None

    @classmethod
    def holds(cls, device: Path) -> bool:
        number = device_number(device)
        return number is not None and number in cls._held


def _moved_refusal(device: Path, pinned: int, now: int | None) -> str:
    named = "no block device" if now is None else f"device {numbers_text(now)}"
    return (
        f"partition rule 'same device': {device} names {named} now, not device {numbers_text(pinned)} "
        "as when the run started (a link under /dev moved, or the device was replaced): nothing is "
        "written through it"
    )


def _exclusive_refusal(device: Path, exc: OSError) -> str:
    return (
        f"partition rule 'not in use': {device} cannot be opened exclusively (O_EXCL: {exc.strerror}): "
        "something else holds it (a mount, perhaps in another mount namespace, a device-mapper, MD "
        "or btrfs member, swap, or another program)"
    )


def partition_problems(
    device: Path, *, force: bool = False, stack: BlockStack | None = None, pinned: int | None = None
) -> list[str]:
    """Why ``device`` must not be overwritten; each message names the rule that refuses it.

    Refused: a path that no longer names the device number ``pinned`` (the one it named when the
    run started); anything that is, sits under, or holds a mounted file system, swap, an active
    device-mapper, LVM or MD device, a loop device, or the stack holding / (see stack_problems);
    a device another program has open, exclusively or not (it, one of its partitions, the whole
    disk it is a partition of or any device it is built on: that program reads or writes the
    same bytes); one whose bytes a partition off its own path shares (overlapping partitions, a
    loop device over a disk at an offset: loopsharing.overlap_refusals); and, unless ``force``,
    one that carries a signature. ``force`` overrides that rule only.
    """
    if pinned is not None and (now := device_number(device)) != pinned:
        return [_moved_refusal(device, pinned, now)]
    stack = stack or BlockStack()
    name = stack.name_of(device)
    if name is None:
        return [f"partition rule 'block device': {device} is not a block device"]
    found = stack_problems(device, name, stack)
    under = stack.below(name)[1:]  # the whole disk of a partition, and every device it is built on
    for other, processes in stack.openers([name, *stack.partitions(name), *under]).items():
        if other == name:
            where = f"{device} is"
        elif other in under:
            where = f"{device} is on {stack.label(other)}, which is"
        else:
            where = f"{device} has a partition, /dev/{other}, that is"
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
    found += loopsharing.overlap_refusals(device, name, stack)
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
