"""Where a volume lives: a container file on a loop device, a raw partition, or a plain directory.

``container``: a sparse file in the run directory, attached with ``losetup --direct-io=on`` so
that I/O reaches the disk below instead of the host's page cache (checked in sysfs).
``partition``: a block device the user names twice (``--encperf-device=/dev/X
--encperf-allow-destroy=/dev/X``); everything on it is overwritten, so it is refused while
mounted, when it is (on) the root disk, holds swap or is held by another device (dm, md), and
when it carries a file system or partition table signature unless ``--encperf-force``.
``directory``: a directory on the host filesystem; needs no root, but only file-level
backends (plain, fscrypt where the host filesystem supports it, FUSE) can use it.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from . import host
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

    def problems(self) -> list[str]:
        """Why volumes cannot be made on this target; empty when they can."""
        found = []
        if self.kind == "partition":
            if self.device is None:
                return ["partition target needs --encperf-device=/dev/X"]
            found += partition_problems(self.device, force=self.force)
            sysfs = _sysfs_block(self.device) if self.device.exists() else None
            if sysfs is not None and int((sysfs / "size").read_text()) * 512 < container_size(self.size):
                found.append(f"{self.device} is smaller than a volume for {self.size // MiB} MiB workloads")
        if not self.directory.is_dir():
            found.append(f"{self.directory} is not a directory")
            return found
        fstype = host.filesystem_type(self.directory)
        if fstype in PSEUDO_FILESYSTEMS:
            found.append(
                f"{self.directory} is on {fstype}, not a disk: pass --encperf-dir on the disk to measure"
            )
            return found
        if fstype in MEMORY_FILESYSTEMS:
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


def create_container(target: Target, workdir: Path, cleanup: host.Cleanup) -> host.LoopDevice:
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


def _sysfs_block(device: Path) -> Path | None:
    """/sys/class/block/<name> of a block device (follows /dev symlinks such as by-id)."""
    entry = Path("/sys/class/block") / Path(os.path.realpath(device)).name
    return entry if entry.exists() else None


def _dev_numbers(sysfs: Path) -> str:
    return (sysfs / "dev").read_text().strip()


def _family(sysfs: Path) -> tuple[Path, set[str]]:
    """The whole disk a device belongs to, and the major:minor of that disk and all its partitions."""
    disk = sysfs.resolve()
    if (disk / "partition").exists():
        disk = disk.parent
    numbers = {_dev_numbers(disk)}
    for child in disk.iterdir():
        if (child / "partition").exists():
            numbers.add(_dev_numbers(child))
    return disk, numbers


def _mounted_numbers() -> dict[str, str]:
    """major:minor -> mount point, from /proc/self/mountinfo (field 3)."""
    found = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        found.setdefault(fields[2], fields[4].replace("\\040", " "))
    return found


def partition_problems(device: Path, *, force: bool = False) -> list[str]:
    """Why ``device`` must not be overwritten; each message names the rule that refuses it."""
    sysfs = _sysfs_block(device) if device.exists() else None
    if not device.exists() or not stat.S_ISBLK(os.stat(device).st_mode) or sysfs is None:
        return [f"partition rule 'block device': {device} is not a block device"]
    found = []
    own = _dev_numbers(sysfs)
    disk, family = _family(sysfs)
    whole_disk = not (sysfs.resolve() / "partition").exists()
    mounted = _mounted_numbers()
    if own in mounted:
        found.append(f"partition rule 'not mounted': {device} is mounted on {mounted[own]}")
    elif whole_disk and family & set(mounted):
        where = sorted(mounted[n] for n in family & set(mounted))
        found.append(
            f"partition rule 'not mounted': a partition of {device} is mounted on {', '.join(where)}"
        )
    root = next((numbers for numbers, mountpoint in mounted.items() if mountpoint == "/"), None)
    if root is not None and root in family:
        found.append(f"partition rule 'not the root disk': {device} is on {disk.name}, the disk holding /")
    swaps = [line.split()[0] for line in Path("/proc/swaps").read_text().splitlines()[1:] if line.strip()]
    for swap in swaps:
        swap_sysfs = _sysfs_block(Path(swap)) if swap.startswith("/dev/") else None
        if swap_sysfs is not None and _dev_numbers(swap_sysfs) in ({own} if not whole_disk else family):
            found.append(f"partition rule 'no swap': {device} holds swap ({swap})")
    holders = sorted(p.name for p in (sysfs / "holders").iterdir()) if (sysfs / "holders").is_dir() else []
    if holders:
        found.append(f"partition rule 'not in use': {device} is held by {', '.join(holders)} (dm, md or LVM)")
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


def device_signature(device: Path) -> str:
    """What a low-level probe finds on ``device`` (file system, RAID member, partition table)."""
    try:
        out = host.run(["blkid", "-p", "-o", "export", str(device)])
    except host.HostError as exc:
        if "exit 2" in str(exc):  # blkid: nothing found
            return ""
        raise
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if "PTTYPE" in values:
        return f"a {values['PTTYPE']} partition table"
    if "TYPE" in values:
        return f"a {values['TYPE']} signature"
    return ""
