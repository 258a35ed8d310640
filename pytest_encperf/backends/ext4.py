"""ext4 on a block device: the file system every block-level backend puts on its volume."""

from __future__ import annotations

from pathlib import Path

from .. import host, mounting
from ..resources import Cleanup
from . import Volume

# Initialise inode tables and journal now: ext4's lazy init would otherwise write in the
# background during the first rounds and skew them.
MKFS_OPTIONS = ["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"]


def make_ext4(
    device: Path,
    *,
    features: list[str] | None = None,
    label: str = "encperf",
    uuid: str | None = None,
    size: int | None = None,
) -> None:
    """ext4 on ``device``; ``size`` bytes of it only (whole KiB) when given, else all of it."""
    argv = ["mkfs.ext4", *MKFS_OPTIONS, "-L", label]
    if uuid:
        argv += ["-U", uuid]
    if features:
        argv += ["-O", ",".join(features)]
    host.run([*argv, str(device), *([f"{size // 1024}k"] if size else [])], timeout=300)


def mount_ext4(
    volume: Volume, device: Path, options: str | None = None, *, cleanup: Cleanup | None = None
) -> Path:
    """Mount ``device`` at ``<workdir>/mnt``, the unmount registered on ``cleanup`` (default
    ``volume.mounted``) before."""
    mountpoint = volume.workdir / "mnt"
    mountpoint.mkdir(exist_ok=True)
    # journaled before the call: a run killed while mount runs leaves no mount its journal lacks
    (volume.mounted if cleanup is None else cleanup).mount(mountpoint)
    mounting.mount(device, mountpoint, "ext4", options)
    return mountpoint


def e2fsprogs_version() -> str:
    return host.tool_version(["mke2fs", "-V"])
