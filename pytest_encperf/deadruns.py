"""The release of dead runs' leftovers, from journals it can trust (journal.py writes them).

``encperf cleanup`` and every session's start find journals whose process is dead (pid gone,
or reused: its start differs; or written in an earlier boot) and release their resources newest
first, with the same functions the run itself uses (``resources.release``). A journal is read
only through journal.py's checked descriptor of its directory, checked whole against one schema
(journalschema), and refused, never released, when anything in it is not what this user wrote
for that run (trust.RunScope); what a failed release may rest on is kept for a later cleanup
(footprints). See journal.py for the rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from . import children, footprints, host, journalschema, outputs, processes, resources, secretdirs, trust
from .journal import (
    JOURNAL_NAME,
    LOCK_TIMEOUT,
    RUNS_DIR,
    TEMP_NAME,
    Refused,
    open_runs_dir,
    write_atomically,
)
from .journalschema import Document, Entry, Malformed


@dataclass
class DeadRun:
    """What cleanup did with one dead run's journal (or why it would not look at it)."""

    journal: Path
    pid: int | None
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # not released: what failed may rest on it

    @property
    def head(self) -> str:
        return f"run pid {self.pid} ({self.journal.name})" if self.pid else str(self.journal)

    def lines(self) -> list[str]:
        return [f"{self.head}: {line}" for line in self.done] + self.problem_lines()

    def problem_lines(self) -> list[str]:
        """What could not be released (FAILED), was kept for a later cleanup as what failed may
        rest on it (KEPT) or was never touched (REFUSED), and why."""
        return (
            [f"{self.head}: FAILED {line}" for line in self.failed]
            + [f"{self.head}: KEPT {line}" for line in self.kept]
            + [f"{self.head}: REFUSED {line}" for line in self.refused]
        )


def _read_journal(runs_fd: int, name: str) -> Document:
    """A journal's document, checked whole (journalschema); Refused unless it is our regular
    0600 file, read without following a symbolic link, and a journal in every field."""
    try:
        fd = host.open_own_file(Path(name), os.O_RDONLY, dir_fd=runs_fd)
    except FileNotFoundError:
        raise  # its run ended meanwhile
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused("it is a symbolic link") from None
        # opening a socket fails with "No such device or address": say what the file is instead
        mode = _lstat_mode(runs_fd, name)
        if mode is not None and not stat.S_ISREG(mode):
            raise Refused(f"it is {outputs.kind_of(mode)}, not a regular file") from None
        raise Refused(exc.strerror or str(exc)) from None
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(fd).st_size > journalschema.MAX_BYTES:  # refused before it is read
            raise Refused(f"not a journal (larger than {journalschema.MAX_BYTES} bytes)")
        try:
            text = handle.read(journalschema.MAX_BYTES + 1)
        except OSError as exc:
            raise Refused(f"could not read it: {exc.strerror or exc}") from None
    try:
        return journalschema.read(text)
    except Malformed as exc:
        raise Refused(str(exc)) from None


def _lstat_mode(dir_fd: int, name: str) -> int | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return None


def _release_entries(dead: DeadRun, document: Document, bases: list[Path], dry_run: bool) -> list[Entry]:
    """Release a dead run's entries newest first; returns the entries to keep: those whose release
    failed, and every older one that one of those may rest on (footprints.overlaps: its container,
    the run directory holding it, the loop device under its mount), which is not forced from
    under it. Everything else is still released."""
    scope = trust.RunScope(document.pid, tuple(bases), document.token)
    holdback = footprints.Holdback()
    keep: list[Entry] = []
    for entry in sorted(document.entries, key=lambda entry: -entry.id):  # as release_order
        what = f"{entry.kind} {entry.ident}"
        resource = entry.resource
        kind = resources.KINDS.get(resource.kind)
        if kind is None:
            dead.failed.append(f"{what}: no way to release a {resource.kind!r} resource")
            holdback.hold(what, None)
            keep.append(entry)
            continue
        try:
            reason = kind.check(resource, scope)
        except trust.Reused as reused:
            dead.done.append(f"{what}: {reused}")
            continue
        except trust.Gone:
            dead.done.append(f"{what}: already gone")
            continue
        if reason:
            dead.refused.append(f"{what}: {reason}")
            continue
        if dry_run:
            dead.done.append(f"would release {what}")
            continue
        match resources.release_unless_held(holdback, what, resource):
            case footprints.Kept(blocker):
                dead.kept.append(f"{what}: {blocker} is not released and may rest on it")
                keep.append(entry)
            case footprints.Failed(error):
                dead.failed.append(f"{what}: {error}")
                keep.append(entry)
            case footprints.Released(done):
                dead.done.append(done)
    return keep


@contextlib.contextmanager
def _cleanup_lock(runs_fd: int, runs: Path, timeout: float) -> Iterator[None]:
    """Serialise cleanups (two sessions starting at once must not release the same run twice);
    Refused when ``.lock`` is not our regular 0600 file."""
    try:
        fd = host.open_own_file(Path(".lock"), os.O_RDWR | os.O_CREAT, dir_fd=runs_fd)
    except OSError as exc:  # a symbolic link, FIFO, directory, or a file not ours with 0600
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise Refused(f"{runs / '.lock'}: {why.removeprefix('refusing .lock: ')}") from None
    try:
        os.set_blocking(fd, True)
        host.wait_for_lock(fd, f"the cleanup lock {runs / '.lock'}", timeout)
        yield
    finally:
        os.close(fd)


def journals(directory: Path) -> list[Path]:
    """The journal files under ``directory`` (names only: read them with release_dead_runs)."""
    runs = Path(os.path.realpath(directory)) / RUNS_DIR
    try:
        names = os.listdir(runs)
    except OSError:
        return []
    return sorted(runs / name for name in names if JOURNAL_NAME.fullmatch(name))


def release_dead_runs(
    directory: Path, *, dry_run: bool = False, lock_timeout: float = LOCK_TIMEOUT
) -> list[DeadRun]:
    """Release every resource of runs under ``directory`` whose process is dead, and say what
    was refused (never touched) and why."""
    directory = Path(os.path.realpath(directory))
    runs = directory / RUNS_DIR
    try:
        runs_fd = open_runs_dir(directory)
    except FileNotFoundError:
        return []
    except Refused as exc:
        return [DeadRun(runs, None, refused=[f"not looking at any journal there: {exc}"])]
    except OSError as exc:  # not a traceback in encperf cleanup, nor an INTERNALERROR in a session
        return [DeadRun(runs, None, failed=[f"could not open it: {exc.strerror or exc}"])]
    bases = [directory, *(Path(os.path.realpath(b)) for b in secretdirs.secret_bases())]
    found: list[DeadRun] = []
    try:
        with _cleanup_lock(runs_fd, runs, lock_timeout):
            for name in sorted(os.listdir(runs_fd)):
                match = JOURNAL_NAME.fullmatch(name)
                if match:
                    dead = _release_journal(runs_fd, runs / name, int(match[1]), directory, bases, dry_run)
                    if dead is not None:
                        found.append(dead)
                elif TEMP_NAME.fullmatch(name) and not dry_run:
                    _remove_dead_writers_temp(runs_fd, name)
    except host.LockTimeout as exc:
        found.append(DeadRun(runs, None, failed=[f"{exc}; dead runs there were not released"]))
    except Refused as exc:
        found.append(DeadRun(runs, None, refused=[f"not looking at any journal there: {exc}"]))
    except OSError as exc:
        found.append(DeadRun(runs, None, failed=[f"could not read it: {exc.strerror or exc}"]))
    finally:
        os.close(runs_fd)
    return found


@dataclass
class StartCleanup:
    """What a session's start released of dead runs' leftovers, and what it could not (refused,
    failed, kept) and why."""

    released: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """As the report header and the run's notes say them."""
        return [f"released leftover of a dead run: {line}" for line in self.released] + [
            f"cleanup of dead runs: {line}" for line in self.problems
        ]


def release_at_start(directory: Path, problems: list[str]) -> StartCleanup:
    """Release the leftovers of runs under ``directory`` killed before they could tear down
    (SIGKILL, power loss, OOM), as a session starts; ``problems``: those found before, said first."""
    found = StartCleanup(problems=list(problems))
    try:
        for run in release_dead_runs(directory):
            found.released += [f"{run.head}: {line}" for line in run.done]
            found.problems += run.problem_lines()
    except OSError as exc:
        found.problems.append(f"could not check for leftovers of dead runs: {exc}")
    return found


def _release_journal(
    runs_fd: int, path: Path, pid: int, directory: Path, bases: list[Path], dry_run: bool
) -> DeadRun | None:
    dead = DeadRun(path, pid)
    try:
        document = _read_journal(runs_fd, path.name)
    except Refused as exc:
        dead.refused.append(f"journal left alone: {exc}")
        return dead
    except FileNotFoundError:
        return None  # its run ended meanwhile
    if document.pid != pid:
        dead.refused.append(f"journal left alone: it names pid {document.pid}, its file name {pid}")
        return dead
    if os.path.realpath(document.directory) != str(directory):
        dead.refused.append(f"journal left alone: it belongs to directory {document.directory!r}")
        return dead
    elsewhere = processes.another_namespace(document.started)
    if elsewhere:
        dead.refused.append(f"journal left alone: {elsewhere}")
        return dead
    if processes.is_alive(pid, document.started):
        return None  # a live run: never touched
    # the schema held the mark to encperf-<pid>-<hex>: its tools still running (dying of its
    # death, or forked by one) would go on making mounts and mappings after the releases below
    # have looked, so they are ended first; an older journal has none
    mark = document.children
    if mark is not None and not dry_run:
        dead.done += children.end_dead_runs_tools(mark)
    keep = _release_entries(dead, document, bases, dry_run)
    if dry_run:
        return dead
    if mark is not None and not keep:
        dead.done += children.end_dead_runs_leftovers(mark)
    try:
        if keep:
            kept = dataclasses.replace(document, entries=tuple(keep))
            write_atomically(runs_fd, path.name, kept.as_json())
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.name, dir_fd=runs_fd)
    except OSError as exc:  # the next journal is still looked at
        dead.failed.append(f"could not update the journal: {exc.strerror or exc}")
    return dead


def _remove_dead_writers_temp(runs_fd: int, name: str) -> None:
    """A half-written journal (".run-<pid>-<id>.json.<writer>.tmp") of a writer killed mid-write."""
    match = TEMP_NAME.fullmatch(name)
    assert match is not None
    with contextlib.suppress(OSError):
        info = os.stat(name, dir_fd=runs_fd, follow_symlinks=False)
        if (
            stat.S_ISREG(info.st_mode)
            and info.st_uid == os.geteuid()
            and not psutil.pid_exists(int(match[1]))
        ):
            os.unlink(name, dir_fd=runs_fd)
