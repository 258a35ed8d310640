"""Can this run's outputs be written? Asked before the first volume is made.

A report or saved run that cannot be written was found only at the end of the run, after every
measurement (minutes, or hours). Each path the options name is checked at start-up instead, the
way the writers (storage.save, storage.write_report, the Markdown report) will use it: a
directory must exist or be creatable, and take new files; a report file's directory the same,
and an existing file must be a regular file (it is replaced). Nothing is left behind: a probe
file or directory made to ask the file system itself (a read-only mount, /proc, an immutable
directory refuse there, while access(2) may say yes to root) is removed at once.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

PROBE_PREFIX = ".encperf-write-probe-"

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def kind_of(mode: int) -> str:
    """``a socket``, ``a directory``, ... for an lstat mode; ``a regular file`` for one."""
    return _KINDS.get(
        stat.S_IFMT(mode), "a regular file" if stat.S_ISREG(mode) else "an unknown kind of file"
    )


def directory_problem(path: Path) -> str | None:
    """Why new files cannot be written in directory ``path`` (made first if absent), or None."""
    existing = path
    for candidate in [path, *path.parents]:
        try:
            info = os.stat(candidate)  # a directory reached through a link is the user's choice
        except (FileNotFoundError, NotADirectoryError):
            continue  # made by the writer (the parents of a missing one, or a file on the way)
        except OSError as exc:
            return f"{candidate}: {exc.strerror}"
        existing = candidate
        break
    else:
        return f"{path}: no part of it exists"
    if not stat.S_ISDIR(info.st_mode):
        return f"{existing} is {kind_of(info.st_mode)}, not a directory"
    with contextlib.suppress(OSError):
        if os.statvfs(existing).f_flag & os.ST_RDONLY:
            return f"{existing} is on a read-only file system"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    try:
        if existing == path:
            fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=existing)
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=PROBE_PREFIX, dir=existing))
    except OSError as exc:
        what = "a file" if existing == path else f"a directory (for {path})"
        return f"{existing}: {what} cannot be created there ({exc.strerror})"
    return None


def file_problem(path: Path) -> str | None:
    """Why a report cannot be written (replaced) at ``path``, or None."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return f"{path} is {kind_of(info.st_mode)}, not a regular file to replace"
    return directory_problem(path.parent)


def output_problems(outputs: list[tuple[str, Path, str]]) -> list[str]:
    """``(option, path, "file" or "directory")`` -> one line per output that cannot be written,
    naming the option and the path."""
    problems = []
    for option, path, kind in outputs:
        problem = file_problem(path) if kind == "file" else directory_problem(path)
        if problem:
            problems.append(f"{option} {path}: cannot be written: {problem}")
    return problems
