"""The resource journal: what a run holds, on disk, so a later process can release it.

Every session writes ``<encperf dir>/.encperf-runs/run-<pid>-<token>.json`` the moment its first
resource (run directory, container file, loop device, mount, daemon, dm name, secret directory)
is registered on a ``resources.Cleanup``, rewrites it atomically (temp file + rename) on every
registration and release, and removes it when the run ends with nothing left. A process killed
with SIGKILL leaves its journal behind; the next session's start and ``encperf cleanup`` find
journals whose process is dead (pid gone, or reused: its start, in clock ticks after boot,
differs; or written in an earlier boot) and release their resources newest first, with the
same functions the run itself uses (``resources.release``): deadruns.py, under the rules below.

Nothing is trusted that this user did not write. The default directory (/var/tmp) is shared
with every local user, so, like OpenSSH's ``safe_path`` and systemd-tmpfiles:

* the directory's ancestors must not be writable by others (unless sticky, like /var/tmp);
* ``.encperf-runs`` must be ours with mode 0700 and each journal ours with mode 0600; both are
  opened without following symbolic links and checked on the open descriptor, and every later
  operation goes through that descriptor;
* a journal may name only paths inside its own run's directories (``encperf-<pid>-*`` under the
  directory, or its secret directory on the RAM file system), each directory on the way ours
  and not writable by others; dm names ``encperf-<pid>-<token>-N`` with the run token it
  records (a journal of an older version, without one, has its dm names refused); and only
  processes it started, identified by pid, start (clock ticks after boot, boot id, pid
  namespace) and executable;
* a journal is checked whole against one schema (journalschema: types, ranges, lengths, size,
  nesting) before anything in it is used; a malformed one is refused whole, and the next one read;
* a journal whose run counted its pid in another pid namespace is left alone;
* anything else is refused and reported, never released; a journal that is not ours is left
  where it is;
* the cleanup lock ``.lock`` must be our regular 0600 file too; waiting for it times out with a
  message naming its holder;
* what is made here (the directory, journals, the lock) gets its mode set after it is made,
  whatever the umask.

One deliberate sweep: mounts and loop devices *inside* a run directory that the journal names
are released with it (a kill between "losetup/mount returned" and "registered" leaves them).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import re
import secrets
import stat
import threading
import time
from pathlib import Path
from typing import Any

from . import children, footprints, host, journalschema, processes, resources, trust
from .journalschema import start_json, start_of
from .resources import Resource

RUNS_DIR = ".encperf-runs"
FORMAT_VERSION = journalschema.VERSIONS[-1]  # written; journalschema.VERSIONS are read
LOCK_TIMEOUT = 30.0  # a cleanup of dead runs waits this long for another one to finish
JOURNAL_NAME = re.compile(r"run-([0-9]+)-([0-9a-f]+)\.json")
TEMP_NAME = re.compile(r"\.run-[0-9]+-[0-9a-f]+\.json\.([0-9]+)\.tmp")


class Refused(Exception):
    """A directory or file we did not write (or cannot be sure we did); the message says why."""


def state_file() -> Path:
    """Where this user's runs note their directories, so ``encperf cleanup`` finds them all:
    ``$XDG_STATE_HOME/encperf/run-directories``, else ``~/.local/state/...``.

    As root, never a place another user controls: under ``sudo -E``, $HOME and $XDG_STATE_HOME
    are a user's, who could put a FIFO (hanging ``encperf cleanup``) or a symbolic link there.
    Root's home comes from the password database, and $XDG_STATE_HOME is taken only when no
    other user can change it (trust.unsafe_ancestor).
    """
    home = pwd.getpwuid(os.geteuid()).pw_dir if host.is_root() else os.path.expanduser("~")
    default = Path(home) / ".local" / "state"
    given = os.environ.get("XDG_STATE_HOME")
    base = Path(given) if given and os.path.isabs(given) else default
    if host.is_root() and base != default and _unsafe_to_make(base):
        base = default
    return base / "encperf" / "run-directories"


def _unsafe_to_make(path: Path) -> str | None:
    """Why ``path`` (or, when it does not exist yet, its nearest existing parent) could be changed
    by another user, or None."""
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    return trust.unsafe_ancestor(existing)


def _make_private_dirs(path: Path) -> None:
    """``mkdir -p`` (0700) that follows no symbolic link and makes nothing in, nor accepts, a
    directory another user could change; OSError otherwise."""
    problem = _unsafe_to_make(path)
    if problem:
        raise OSError(errno.EPERM, f"not using {path}: {problem}")
    missing = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            trust.make_private_dir(directory)
    problem = trust.unsafe_ancestor(path)  # one made by someone else meanwhile, a link
    if problem:
        raise OSError(errno.EPERM, f"not using {path}: {problem}")


def remember_directory(directory: Path) -> None:
    """Note ``directory`` (once), forgetting directories that no longer exist."""
    path = state_file()
    _make_private_dirs(path.parent)
    fd = host.open_own_file(path, os.O_RDWR | os.O_CREAT)
    with os.fdopen(fd, "r+") as handle:
        os.set_blocking(fd, True)
        host.wait_for_lock(fd, f"lock {path}", LOCK_TIMEOUT)  # two runs starting at once
        lines = [line for line in handle.read().splitlines() if line and os.path.isdir(line)]
        if str(directory) not in lines:
            lines.append(str(directory))
        handle.seek(0)
        handle.truncate()
        handle.write("".join(f"{line}\n" for line in lines))


def known_directories() -> list[Path]:
    """Directories runs of this user have journaled in (that still exist), oldest first. The
    state file is read only when it is our regular 0600 file (no FIFO, no symbolic link) in a
    directory nobody else can change."""
    path = state_file()
    if trust.unsafe_ancestor(path.parent):
        return []
    try:
        fd = host.open_own_file(path, os.O_RDONLY)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as handle:
        lines = handle.read(1 << 20).decode(errors="replace").splitlines()
    found: list[Path] = []
    for line in lines:
        path = Path(line)
        if line and path.is_dir() and path not in found:
            found.append(path)
    return found


def directory_refusal(directory: Path) -> str | None:
    """Why a run must not create volumes under ``directory`` (a usage error), with the remedy;
    None when it may: the directory is safe (below) and the run's journal can be written there
    (``.encperf-runs`` made now if absent; one another user made first is refused, or any local
    user could switch the journal off for root's runs in /var/tmp).

    Every release acts on names below the directory (rmtree, umount, losetup). If another user
    owns the directory or one of its parents, or may write to one without the sticky bit, they
    can rename the run directory and plant symbolic links in its place, and the run's own
    teardown would delete or unmount what those point to; and the journal refuses such a
    directory, so a killed run's leftovers could not be found either.
    """
    real = Path(os.path.realpath(directory))
    problem = trust.unsafe_ancestor(real)
    if problem is None:
        return _journal_refusal(directory, real)
    culprit = next((d for d in [real, *real.parents] if problem.startswith(f"{d} ")), real)
    who = "root" if host.is_root() else "you"
    head = (
        f"--encperf-dir {directory}: refusing to create volumes there: {problem}. Whoever can "
        "rename or replace a directory on that path can redirect this run's teardown (unmount, "
        "detach, delete) to whatever they point it at, and the run's resource journal is refused "
        f"there. Use a directory that only {who} can change, on the disk you want to measure"
    )
    with contextlib.suppress(OSError):
        if os.lstat(culprit).st_uid in (0, os.geteuid()):  # writable by others, not sticky
            return f"{head}: make {culprit} sticky like /var/tmp (`chmod +t {culprit}`), or see below"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", real.name or "root")
    mirror = f"/var/lib/encperf-{name}"
    return (
        f"{head}, e.g. `mkdir -m 700 {real}/encperf {mirror} && mount --bind {real}/encperf {mirror}` "
        f"and --encperf-dir={mirror} (a bind mount is reached through {mirror} only, whatever "
        f"happens to the names under {culprit})"
    )


def _journal_refusal(directory: Path, real: Path) -> str | None:
    """Why this run's journal cannot be written under ``real``, with the remedy, or None."""
    runs = real / RUNS_DIR
    try:
        os.close(open_runs_dir(real, create=True))
        return None
    except Refused as exc:
        why = str(exc)
    except OSError as exc:
        why = f"{runs}: {exc.strerror}"
    head = (
        f"--encperf-dir {directory}: refusing to create volumes there: the resource journal cannot "
        f"be written ({why}). Without it a run killed outright (SIGKILL, the OOM killer) leaves its "
        "loop devices, mounts, device-mapper targets and key files behind for good"
    )
    try:
        info = os.lstat(runs)
    except OSError:
        return head
    me = os.geteuid()
    if info.st_uid == me and stat.S_ISDIR(info.st_mode):
        return f"{head}. Make it private: `chmod 700 {runs}`"
    owner = f"uid {info.st_uid}" + (f" ({_user_name(info.st_uid)})" if _user_name(info.st_uid) else "")
    own = f"{real}/encperf-{_user_name(me) or me}"
    elsewhere = (
        f"or use a directory of your own: `mkdir -m 700 {own}` (it fails if someone made it first) "
        f"and --encperf-dir={own}"
    )
    if stat.S_ISLNK(info.st_mode):  # whoever made it: a link is never followed, even root's own
        try:
            target = f" to {os.readlink(runs)}"
        except OSError:
            target = ""
        return (
            f"{head}. {runs} is a symbolic link{target} (made by {owner}), and the journal is never "
            f"reached through one: remove the link (`rm {runs}`; what it points to stays), {elsewhere}"
        )
    if not stat.S_ISDIR(info.st_mode):
        return (
            f"{head}. {runs} is not a directory (made by {owner}): look at it and remove it "
            f"(`ls -la {runs}; rm {runs}`), {elsewhere}"
        )
    return (
        f"{head}. {runs} was made by {owner}, not by this user: look at what it holds and remove "
        f"it (`ls -la {runs}; rm -r {runs}`), {elsewhere}"
    )


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def open_runs_dir(directory: Path, *, create: bool = False) -> int:
    """A descriptor of ``<directory>/.encperf-runs``; Refused unless it is ours, 0700, not a
    symbolic link, in a directory chain nobody else can change. FileNotFoundError if absent."""
    os.lstat(directory)  # FileNotFoundError when it does not exist
    problem = trust.unsafe_ancestor(directory)
    if problem:
        raise Refused(f"{directory}: not safe to use ({problem})")
    runs = directory / RUNS_DIR
    if create:
        with contextlib.suppress(FileExistsError):
            trust.make_private_dir(runs)
    try:
        fd = os.open(runs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(f"{runs} is a symbolic link or not a directory") from None
        raise
    problem = trust.owned_problem(os.fstat(fd), runs, mode=0o700)
    if problem:
        os.close(fd)
        raise Refused(problem)
    return fd


def write_atomically(runs_fd: int, name: str, data: dict[str, Any]) -> None:
    tmp = f".{name}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=runs_fd)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=runs_fd)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask (0277 made 0400: refused when read back)
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1)
        os.replace(tmp, name, src_dir_fd=runs_fd, dst_dir_fd=runs_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=runs_fd)
        raise


def entry_of(resource: Resource, label: str, token: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": token, "kind": resource.kind, "ident": resource.ident}
    entry.update(detail=resource.detail, label=label)
    if resource.kind == "process":
        entry.update(start_json(resource.started), wait=resource.wait)
    elif resource.kind == "daemon":
        entry.update(wait=resource.wait)
    return entry


def resource_of(entry: dict[str, Any]) -> Resource:
    """The Resource one of this run's own entries (entry_of) describes. Entries read from a file
    are checked by journalschema instead."""
    started = start_of(entry)
    return Resource(entry["kind"], entry["ident"], entry["detail"], started, entry.get("wait", 0.0))


TEST_DELAY_VARIABLE = "ENCPERF_TEST_JOURNAL_DELAY"


def test_delay() -> None:
    """Test hook, for tests/integration/test_chaos_integration.py only:
    ``ENCPERF_TEST_JOURNAL_DELAY=<seconds>`` sleeps before every journal write, widening the window
    between a tool's start and the entry that records it, so that a test can kill the run inside it."""
    delay = os.environ.get(TEST_DELAY_VARIABLE)
    if delay:
        time.sleep(float(delay))


class Journal:
    """This run's journal: a ``resources.ResourceObserver`` written on every change.

    The file is created on the first registration only, so a session that creates nothing
    leaves nothing (not even an empty journal).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(os.path.realpath(directory))
        self.pid = os.getpid()
        self.start = processes.process_start(self.pid)
        self.token = resources.run_token()
        self.path = self.directory / RUNS_DIR / f"run-{self.pid}-{secrets.token_hex(4)}.json"
        self._entries: dict[int, dict[str, Any]] = {}
        self._next_id = 1
        self._lock = threading.Lock()
        self._written = False
        self.write_error: str | None = None

    # ----------------------------------------------------------- observer

    def registered(self, resource: Resource, label: str) -> object:
        with self._lock:
            token = self._next_id
            self._next_id += 1
            self._entries[token] = entry_of(resource, label, token)
            self._save()
        return token

    def released(self, token: object) -> None:
        with self._lock:
            # the observer protocol's token is opaque: ours are registered()'s ints
            if isinstance(token, int) and self._entries.pop(token, None) is not None:
                self._save()

    # ----------------------------------------------------------- file

    @property
    def resources(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._entries.values())

    def _save(self) -> None:
        """Write the journal; a failure (disk full, read-only, a directory that is not ours) is
        remembered, never raised: the in-process teardown does not need the file, and a stale
        entry is harmless to a later cleanup (releasing what is already gone is a no-op)."""
        test_delay()
        try:
            fd = open_runs_dir(self.directory, create=True)
        except Refused as exc:
            self.write_error = f"refusing to write the resource journal: {exc}"
            return
        except OSError as exc:
            self.write_error = f"could not write the resource journal {self.path}: {exc.strerror}"
            return
        try:
            if not self._written:
                self._written = True
                with contextlib.suppress(OSError):  # a read-only home only costs the --dir default
                    remember_directory(self.directory)
            mark = children.run_mark()  # the mark its tools carry (children.py)
            document = {
                "version": FORMAT_VERSION,
                "pid": self.pid,
                **start_json(self.start),
                "token": self.token,
                "directory": str(self.directory),
                **({"children": mark} if mark.startswith(f"encperf-{self.pid}-") else {}),
                "resources": list(self._entries.values()),
            }
            write_atomically(fd, self.path.name, document)
        except OSError as exc:
            self.write_error = f"could not write the resource journal {self.path}: {exc.strerror}"
        finally:
            os.close(fd)

    def release_leftovers(self) -> list[str]:
        """Release what this run registered but never released (a Volume lost to an exception
        in the middle of create): the safety net at the end of a session. Returns failures.
        After a failure, what may rest on it is kept for ``encperf cleanup`` (as Cleanup.release
        and a dead run's cleanup do), and named among the failures."""
        failed = []
        holdback = footprints.Holdback()
        for entry in release_order(self.resources):
            resource = resource_of(entry)
            what = f"{entry['kind']} {entry['ident']}"
            match resources.release_unless_held(holdback, what, resource):
                case footprints.Kept(blocker):
                    failed.append(f"{what}: kept for encperf cleanup, it may rest on {blocker}")
                case footprints.Failed(error):
                    failed.append(f"{what}: {error}")
                case footprints.Released():
                    self.released(entry["id"])
        return failed

    def close(self) -> None:
        """Remove the file when every resource was released; otherwise keep it for cleanup."""
        with self._lock:
            if self._written and not self._entries:
                try:
                    fd = open_runs_dir(self.directory)
                    try:
                        os.unlink(self.path.name, dir_fd=fd)
                    finally:
                        os.close(fd)
                except FileNotFoundError:
                    pass
                except (OSError, Refused) as exc:  # like every journal error: reported, never fatal
                    self.write_error = self.write_error or f"could not remove {self.path}: {exc}"
                self._written = False


def release_order(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Newest first: the reverse of the order the run made them in, as its own teardown does.

    Creation order is the dependency order, including stacks that a grouping by kind gets
    wrong: qemu-luks puts a loop device on a file that a FUSE daemon exports, so that loop must
    be detached before the export is unmounted and the daemon stopped (detached afterwards, the
    loop device keeps a dead mount's file and shows "/" as its backing file). The usual result
    is still: remove keys, unmount, stop daemons, close dm, detach loops, remove files.
    """
    return sorted(entries, key=lambda entry: -int(entry.get("id", 0)))
