"""Mounting and unmounting, and what the mount table says of a path (read through mounttable.py).

An unmount acts only on a path the mount table lists exactly that is no symbolic link: umount2
with UMOUNT_NOFOLLOW as root, ``fusermount -u`` or ``umount --no-canonicalize`` otherwise.
Commands run through host.run, so their errors are host.HostError, redacted.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import time
from pathlib import Path

from . import host, mounttable


def mounts_under(directory: Path) -> list[Path]:
    """Mount points at or below ``directory`` (its real path), in mount order."""
    prefix = os.path.realpath(directory)
    return [
        Path(point)
        for point in mounttable.mountpoints()
        if point == prefix or point.startswith(prefix.rstrip(os.sep) + os.sep)
    ]


def mount_path(path: Path) -> str:
    """``path`` as a mount table names it: its directory's real path and its own name, which is
    not resolved (a symbolic link put in place of a mount point is not the mount point)."""
    absolute = Path(os.path.abspath(path))
    if absolute == Path(absolute.anchor):
        return str(absolute)
    return os.path.join(os.path.realpath(absolute.parent), absolute.name)


def is_mounted(path: Path) -> bool:
    """Is ``path`` itself (see mount_path) a mount point?"""
    return mount_path(path) in mounttable.mountpoints()


def mount_type(mountpoint: Path) -> str | None:
    """The file system type mounted at ``mountpoint`` (the last mount on it), None if none."""
    exact = mount_path(mountpoint)
    found = None
    for point, fstype in mounttable.mounts():
        if point == exact:
            found = fstype
    return found


def mount(device: Path, mountpoint: Path, fstype: str, options: str | None = None) -> None:
    argv = ["mount", "-t", fstype]
    if options:
        argv += ["-o", options]
    host.run([*argv, str(device), str(mountpoint)])


def fusermount_binary() -> str | None:
    """fusermount3 (fuse3) or fusermount (fuse 2), whichever is installed."""
    for name in ("fusermount3", "fusermount"):
        if shutil.which(name):
            return name
    return None


MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8


def _umount2(target: str, flags: int) -> None:
    """umount2(2) with UMOUNT_NOFOLLOW: a symbolic link at ``target`` is refused, never followed
    (``umount`` and ``umount --no-canonicalize`` follow it to whatever it points to)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(target), flags | UMOUNT_NOFOLLOW) != 0:
        code = ctypes.get_errno()
        raise host.HostError(f"umount {target}: {os.strerror(code)}")


def _unmountable(target: str) -> None:
    """HostError unless ``target`` is what a mount point of ours is: a directory or a file (FUSE
    exports mount on files), not a symbolic link, listed in the mount table exactly."""
    try:
        info = os.lstat(target)
    except OSError as exc:
        if exc.errno == errno.ENOTCONN and target in mounttable.mountpoints():
            return  # the root of a FUSE mount whose daemon died (with its run): nothing to follow
        raise host.HostError(f"not unmounting {target}: {exc.strerror}") from None
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        raise host.HostError(f"not unmounting {target}: it is not a directory or file (a symbolic link?)")
    if target not in mounttable.mountpoints():
        raise host.HostError(f"not unmounting {target}: not a mount point")


def unmount(mountpoint: Path, *, retries: int = 10) -> bool:
    """Unmount if mounted; retry while busy, then unmount lazily. Returns True when it had to be lazy.

    Only a path the mount table lists exactly (see mount_path) that is no symbolic link, through
    umount2 with UMOUNT_NOFOLLOW as root; ``fusermount -u`` for a FUSE mount otherwise (works
    without root, and refuses to follow a link itself), ``umount`` for anything else.
    """
    target = mount_path(mountpoint)
    if host.is_root():
        argv: list[str] = []
    elif (mount_type(mountpoint) or "").startswith("fuse") and fusermount_binary() is not None:
        argv = [fusermount_binary() or "fusermount", "-u"]
    else:
        argv = ["umount", "--no-canonicalize"]

    def attempt(lazy: bool) -> None:
        _unmountable(target)
        if not argv:
            _umount2(target, MNT_DETACH if lazy else 0)
        else:
            host.run(
                [*argv, *(["-z" if argv[0] != "umount" else "--lazy"] if lazy else []), target], timeout=30
            )

    for _ in range(retries):
        if not is_mounted(mountpoint):
            return False
        try:
            attempt(lazy=False)
            return False
        except host.HostError:
            time.sleep(0.2)
    if not is_mounted(mountpoint):
        return False
    attempt(lazy=True)
    return True


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding ``path`` (longest matching mount point)."""
    real = os.path.realpath(path)
    best, fstype = "", "unknown"
    for mountpoint, kind in mounttable.mounts():
        inside = real == mountpoint or real.startswith(mountpoint.rstrip(os.sep) + os.sep)
        if inside and len(mountpoint) >= len(best):
            best, fstype = mountpoint, kind
    return fstype
