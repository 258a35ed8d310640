"""Directories for secrets that must be files (a key file a tool reads): 0700, on a RAM file
system, named like a run directory (``encperf-<pid>-*``) and registered for removal like any
directory, so a killed run's journal removes them too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from . import host, mounting
from .host import HostError
from .resources import Cleanup, Resource
from .trust import make_private_dir

MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")
RUN_SECRETS = Path("/run/encperf")  # root's: not world-writable, unlike /dev/shm


def secret_bases() -> list[Path]:
    """Directories on a RAM file system where this user's secret directories may live, best
    first: /run/encperf (root, if /run is a tmpfs), $XDG_RUNTIME_DIR (if it is ours), /dev/shm."""
    found: list[Path] = []
    if host.is_root():
        found.append(RUN_SECRETS)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        found.append(Path(runtime))
    found.append(Path("/dev/shm"))
    return found


def _usable_base(base: Path) -> bool:
    try:
        if base == RUN_SECRETS and mounting.filesystem_type(base.parent) in MEMORY_FILESYSTEMS:
            with contextlib.suppress(FileExistsError):
                make_private_dir(base)
        info = os.lstat(base)
    except OSError:
        return False
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return False
    if mounting.filesystem_type(base) not in MEMORY_FILESYSTEMS or not os.access(base, os.W_OK | os.X_OK):
        return False
    if info.st_uid == os.geteuid() and not info.st_mode & 0o077:
        return True  # ours alone (/run/encperf, $XDG_RUNTIME_DIR)
    return info.st_uid == 0 and bool(info.st_mode & stat.S_ISVTX)  # /dev/shm: sticky, shared


def secret_base() -> Path:
    """The first usable directory of :func:`secret_bases`; HostError if none is on a RAM
    file system (a key file must never reach a disk)."""
    for base in secret_bases():
        if _usable_base(base):
            return base
    tried = ", ".join(map(str, secret_bases()))
    raise HostError(f"no RAM file system for key files (tried {tried}): mount a tmpfs on /dev/shm")


def private_directory(cleanup: Cleanup, base: Path) -> Path:
    """A new 0700 directory ``<base>/encperf-<pid>-<random>``, registered (journaled) before it
    is made: a run killed in between leaves a journal entry for a path that does not exist
    (released as "already gone"), never a directory no journal names."""
    for _ in range(100):
        path = base / f"encperf-{os.getpid()}-{secrets.token_hex(8)}"
        cleanup.path(path)
        try:
            os.mkdir(path, 0o700)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchmod(fd, 0o700)  # whatever the umask
            finally:
                os.close(fd)
            return path
        except FileExistsError:
            cleanup.drop_last(Resource("path", str(path)))  # someone else's: never release it
        except BaseException:
            cleanup.drop_last(Resource("path", str(path)))
            raise
    raise HostError(f"could not make a directory of ours in {base}: every name taken")


@dataclass
class SecretDir:
    """A 0700 directory on a RAM file system for one volume's key files, removed with its content.

    Named ``encperf-<pid>-*`` like a run directory and registered as a path on the Cleanup, so
    a killed run's journal removes it too. Remove each file as soon as its tool has read it.
    """

    path: Path

    @classmethod
    def create(cls, cleanup: Cleanup) -> SecretDir:
        return cls(private_directory(cleanup, secret_base()))

    def write(self, name: str, data: bytes) -> Path:
        """Write ``data`` to a new 0600 file ``name`` (replacing an old one)."""
        target = self.path / name
        target.unlink(missing_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # whatever the umask
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return target

    def discard(self, name: str) -> None:
        (self.path / name).unlink(missing_ok=True)
