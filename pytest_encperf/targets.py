"""Where a volume lives: a container file on a loop device, or a plain directory.

``container``: a sparse file in the run directory, attached with ``losetup --direct-io=on`` so
that I/O reaches the disk below instead of the host's page cache (checked in sysfs).
``directory``: a directory on the host filesystem; needs no root, but only file-level
backends (plain, fscrypt where the host filesystem supports it, FUSE) can use it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import host
from .workloads import MiB

KINDS = ("container", "directory")

# Filesystems whose "disk" is memory: a benchmark there measures RAM, not storage.
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")
PSEUDO_FILESYSTEMS = ("proc", "sysfs", "devtmpfs", "devpts", "cgroup2", "debugfs", "securityfs")


@dataclass(frozen=True)
class Target:
    kind: str  # one of KINDS
    directory: Path  # where containers / volume directories are created
    size: int  # bytes of the container (file system included)
    device: Path | None = None  # the block device of a partition target

    def problems(self) -> list[str]:
        """Why volumes cannot be made on this target; empty when they can."""
        found = []
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
        if free < self.size:
            found.append(
                f"{self.directory} has {free // MiB} MiB free, a volume needs {self.size // MiB} MiB"
            )
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
