"""Whether a file or directory may be acted on: ours, with the mode we set, reached through
directories nobody else can change, and, for a dead run's journal, inside that run's own
directories (:class:`RunScope`).

Root runs next to other local users in shared directories (/var/tmp): a name another user can
change may lead anywhere, so every release acts only on what these rules let through.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from . import mounttable


@dataclass(frozen=True)
class RunScope:
    """What a dead run's journal may name: paths inside its own run directories
    (``<base>/encperf-<pid>-*``: the run directory under --encperf-dir, its secret directory on
    the RAM file system) and names carrying its pid and its run token (None: the journal, of an
    older version, recorded none)."""

    pid: int
    bases: tuple[Path, ...]
    token: str | None = None

    def outside(self, path_text: str) -> str | None:
        """Why ``path_text`` does not name something inside the run's directories, by its text
        alone (for a path the release does not act on through the file system)."""
        path = Path(path_text)
        if not path.is_absolute() or os.path.normpath(path_text) != path_text:
            return f"{path_text!r} is not a normalised absolute path"
        if self._run_relative(path) is None:
            where = " or ".join(f"{base}/encperf-{self.pid}-*" for base in self.bases)
            return f"{path_text} is outside the run's own directories ({where})"
        return None

    def unsafe(self, path_text: str) -> str | None:
        """Why acting on ``path_text`` could touch something the run did not make, or None.

        Besides :meth:`outside`: the run directory must be ours and 0700, and every directory
        from it down to the path's parent ours, a real directory (no symbolic link) and writable
        by us only; then nobody else can have made or redirect anything below it. (The path
        itself is not examined: a mount point shows what is mounted on it.) Raises Gone when a
        directory on the way no longer exists: there is nothing to release, and a name that
        may be made again by someone else must not be acted on.
        """
        reason = self.outside(path_text)
        if reason:
            return reason
        base, parts = self._run_relative(Path(path_text)) or (Path("/"), ())
        current = base
        for depth, part in enumerate(parts[:-1] if len(parts) > 1 else parts):
            current = current / part
            try:
                info = os.lstat(current)
            except FileNotFoundError:
                raise Gone(path_text) from None
            except OSError as exc:
                if exc.errno == errno.ENOTCONN and str(current) in mounttable.mountpoints():
                    continue  # a FUSE mount of the run whose daemon died with it; its parents are checked
                return f"{current}: {exc.strerror}"
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                return f"{current} is not a directory"
            problem = owned_problem(info, current, mode=0o700 if depth == 0 else None)
            if problem:
                return problem
            if info.st_mode & 0o022:
                return f"{current} is writable by other users"
        return None

    def _run_relative(self, path: Path) -> tuple[Path, tuple[str, ...]] | None:
        pattern = re.compile(rf"encperf-{self.pid}-[A-Za-z0-9_]+")
        for base in self.bases:
            try:
                parts = path.relative_to(base).parts
            except ValueError:
                continue
            if parts and pattern.fullmatch(parts[0]):
                return base, parts
        return None


class Gone(Exception):
    """A dead run's path whose directory no longer exists: nothing there to release."""


class Reused(Gone):
    """A dead run's resource whose name now belongs to something else (its loop device is
    attached to another file): nothing of the run's is there, and it is left alone. The
    message says so."""


def unsafe_ancestor(path: Path) -> str | None:
    """Why ``path``'s directory chain could be changed under us by another user, or None.

    OpenSSH's ``safe_path``: every directory from ``path`` up to / must be owned by root or by
    us and not writable by group or others, unless it has the sticky bit (/tmp, /var/tmp:
    others cannot rename or remove what we own in it).
    """
    me = os.geteuid()
    current = Path(os.path.abspath(path))
    for directory in [current, *current.parents]:
        try:
            info = os.lstat(directory)
        except OSError as exc:
            return f"{directory}: {exc.strerror}"
        if stat.S_ISLNK(info.st_mode):
            return f"{directory} is a symbolic link"
        if info.st_uid not in (0, me):
            return f"{directory} is owned by uid {info.st_uid}"
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            return f"{directory} is writable by other users"
    return None


def make_private_dir(path: Path, mode: int = 0o700) -> Path:
    """``mkdir`` with exactly ``mode``, whatever the umask; FileExistsError if ``path`` exists.

    mkdir's mode goes through the umask: under ``umask 0277`` a 0700 directory comes out 0500
    (and a later check of ours refuses it for ever), under ``umask 0`` a plain mkdir() makes
    0777, writable by everybody. Our own new directory is set explicitly, on its descriptor.
    """
    os.mkdir(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def owned_problem(info: os.stat_result, path: object, *, mode: int | None = None) -> str | None:
    """Why a file we opened (``info`` from fstat/lstat) is not ours to act on, or None."""
    me = os.geteuid()
    if info.st_uid != me:
        return f"{path} is owned by uid {info.st_uid}, not by this user (uid {me})"
    if mode is not None and stat.S_IMODE(info.st_mode) != mode:
        return f"{path} has mode {stat.S_IMODE(info.st_mode):04o}, not {mode:04o}"
    return None
