"""The resource journal: what a run holds, on disk, so a later process can release it.

Every session writes ``<encperf dir>/.encperf-runs/run-<pid>-<token>.json`` the moment its first
resource (container file, loop device, mount, daemon, dm name, private directory) is registered
on a ``host.Cleanup``, rewrites it atomically (temp file + rename) on every registration and
release, and removes it when the run ends with nothing left. A process killed with SIGKILL
leaves its journal behind; the next session's start and ``encperf cleanup`` find journals whose
process is dead (pid gone, or reused: the recorded psutil start time differs) and release
their resources in a safe order: unmount, stop daemons, close dm targets, detach loop devices,
remove files. A live run's journal is never touched, and nothing outside a journal is, with one
deliberate exception: mounts and loop devices *inside* a journaled run directory (that directory
is the run's own, ``encperf-<pid>-*``), which is what a kill between "losetup/mount returned" and
"registered" leaves behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from . import host

RUNS_DIR = ".encperf-runs"
FORMAT_VERSION = 1


def state_file() -> Path:
    """Where this user's runs note their directories, so ``encperf cleanup`` finds them all."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "encperf" / "run-directories"


def remember_directory(directory: Path) -> None:
    """Note ``directory`` (once), forgetting directories that no longer exist."""
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # two runs starting at once
        lines = [line for line in handle.read().splitlines() if line and os.path.isdir(line)]
        if str(directory) not in lines:
            lines.append(str(directory))
        handle.seek(0)
        handle.truncate()
        handle.write("".join(f"{line}\n" for line in lines))


def known_directories() -> list[Path]:
    """Directories runs of this user have journaled in (that still exist), oldest first."""
    try:
        lines = state_file().read_text().splitlines()
    except OSError:
        return []
    found: list[Path] = []
    for line in lines:
        path = Path(line)
        if line and path.is_dir() and path not in found:
            found.append(path)
    return found


def process_start_time(pid: int) -> float | None:
    """psutil's start time of ``pid`` (stable for the life of the process), None if gone.

    A zombie counts as gone: it has exited and holds nothing; only its parent (or an init that
    reaps) can remove its entry.
    """
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return round(process.create_time(), 2)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def is_alive(pid: int, started: float | None) -> bool:
    """Is the process that wrote a journal still running (and not a reuse of its pid)?"""
    now = process_start_time(pid)
    if now is None:
        return False
    if started is None:
        return True  # cannot tell a reused pid apart: err on the side of not touching it
    return abs(now - started) < 0.05


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class Journal:
    """This run's journal: a ``host.ResourceObserver`` written on every change.

    The file is created on the first registration only, so a session that creates nothing
    leaves nothing (not even an empty journal).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pid = os.getpid()
        self.started = process_start_time(self.pid)
        runs = directory / RUNS_DIR
        self.path = runs / f"run-{self.pid}-{secrets.token_hex(4)}.json"
        self._entries: dict[int, dict[str, Any]] = {}
        self._next_id = 1
        self._lock = threading.Lock()
        self._written = False
        self.write_error: str | None = None

    # ----------------------------------------------------------- observer

    def registered(self, resource: host.Resource, label: str) -> object:
        entry: dict[str, Any] = {
            "kind": resource.kind,
            "ident": resource.ident,
            "detail": resource.detail,
            "label": label,
        }
        if resource.kind == "process" and resource.ident.isdigit():
            entry["started"] = process_start_time(int(resource.ident))
        with self._lock:
            token = self._next_id
            self._next_id += 1
            entry["id"] = token
            self._entries[token] = entry
            self._save()
        return token

    def released(self, token: object) -> None:
        with self._lock:
            if self._entries.pop(token, None) is not None:  # type: ignore[call-overload]
                self._save()

    # ----------------------------------------------------------- file

    @property
    def resources(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._entries.values())

    def _save(self) -> None:
        """Write the journal; a failure (disk full, read-only) is remembered, never raised:
        the in-process teardown does not need the file, and a stale entry is harmless to a
        later cleanup (releasing what is already gone is a no-op)."""
        try:
            if not self._written:
                self.path.parent.mkdir(mode=0o700, exist_ok=True)
                self._written = True
                with contextlib.suppress(OSError):  # a read-only home only costs the --dir default
                    remember_directory(self.directory)
            _write_atomically(
                self.path,
                {
                    "version": FORMAT_VERSION,
                    "pid": self.pid,
                    "started": self.started,
                    "directory": str(self.directory),
                    "resources": list(self._entries.values()),
                },
            )
        except OSError as exc:
            self.write_error = f"could not write the resource journal {self.path}: {exc.strerror}"

    def release_leftovers(self) -> list[str]:
        """Release what this run registered but never released (a Volume lost to an exception
        in the middle of create): the safety net at the end of a session. Returns failures."""
        failed = []
        for entry in release_order(self.resources):
            releaser = RELEASERS.get(entry["kind"])
            if releaser is None:
                continue
            try:
                releaser(entry)
            except Exception as exc:
                failed.append(f"{entry['kind']} {entry['ident']}: {exc}")
                continue
            self.released(entry["id"])
        return failed

    def close(self) -> None:
        """Remove the file when every resource was released; otherwise keep it for cleanup."""
        with self._lock:
            if self._written and not self._entries:
                try:
                    self.path.unlink(missing_ok=True)
                except OSError as exc:  # like every journal error: reported, never fatal
                    self.write_error = self.write_error or f"could not remove {self.path}: {exc.strerror}"
                self._written = False


# --------------------------------------------------------------- releasing a dead run's resources


def _release_fscrypt_key(entry: dict[str, Any]) -> str:
    """Remove a key from the file system holding ``detail`` (a directory target's host file
    system keeps it until unmounted; a container's goes with its unmount anyway)."""
    from .backends.fscrypt import remove_key

    directory = Path(entry["detail"])
    if not directory.is_dir():
        return f"fscrypt key {entry['ident']}: its file system is gone"
    remove_key(directory, bytes.fromhex(entry["ident"]))
    return f"removed fscrypt key {entry['ident']} from {directory}"


def _release_mount(entry: dict[str, Any]) -> str:
    mountpoint = Path(entry["ident"])
    if not host.is_mounted(mountpoint):
        return f"{mountpoint}: not mounted any more"
    host.unmount(mountpoint)
    return f"unmounted {mountpoint}"


def _release_process(entry: dict[str, Any]) -> str:
    pid, name = int(entry["ident"]), entry.get("detail", "")
    if not is_alive(pid, entry.get("started")):
        return f"{name} (pid {pid}): not running any more"
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            # Exited; only its (dead run's) parent or init can reap it, and it holds nothing.
            return f"{name} (pid {pid}): exited (zombie awaiting its parent)"
        if name and process.name() != name and os.path.basename(process.exe() or "") != name:
            return f"{name} (pid {pid}): pid now runs {process.name()}, left alone"
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except psutil.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return f"{name} (pid {pid}): exited"
    return f"stopped {name} (pid {pid})"


def _release_dm(entry: dict[str, Any]) -> str:
    name = entry["ident"]
    if not Path("/dev/mapper", name).exists():
        return f"dm {name}: not active any more"
    host.run(["dmsetup", "remove", "--retry", name], timeout=60)
    return f"removed dm target {name}"


def _release_loop(entry: dict[str, Any]) -> str:
    device = Path(entry["ident"])
    backing = Path(entry["detail"]) if entry.get("detail") else None
    host.detach_loop(device, backing)
    return f"detached {device}"


def _release_path(entry: dict[str, Any]) -> str:
    path = Path(entry["ident"])
    if not path.is_absolute() or path == Path(path.anchor):
        return f"{path}: not an absolute path below /, left alone"
    if not path.exists() and not path.is_symlink():
        return f"{path}: already gone"
    if path.is_dir() and not path.is_symlink():
        # Sweep what a kill between "resource made" and "resource journaled" could leave
        # inside a directory that is ours: mounts under it, loop devices backed by its files.
        for mountpoint in sorted(host.mounts_under(path), key=lambda p: len(p.parts), reverse=True):
            host.unmount(mountpoint)
        for device in host.loops_backed_by(path):
            host.detach_loop(device)
        inside = host.mounts_under(path)
        if inside:
            raise host.HostError(f"not removing {path}: still mounted at {', '.join(map(str, inside))}")
        shutil.rmtree(path)
    else:
        path.unlink()
    return f"removed {path}"


RELEASERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "fscrypt-key": _release_fscrypt_key,
    "mount": _release_mount,
    "process": _release_process,
    "dm": _release_dm,
    "loop": _release_loop,
    "path": _release_path,
}


def release_order(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Newest first: the reverse of the order the run made them in, as its own teardown does.

    Creation order is the dependency order, including stacks that a grouping by kind gets
    wrong: qemu-luks puts a loop device on a file that a FUSE daemon exports, so that loop must
    be detached before the export is unmounted and the daemon stopped (detached afterwards, the
    loop device keeps a dead mount's file and shows "/" as its backing file). The usual result
    is still: remove keys, unmount, stop daemons, close dm, detach loops, remove files.
    """
    return sorted(entries, key=lambda entry: -int(entry.get("id", 0)))


@dataclass
class DeadRun:
    """What cleanup did with one dead run's journal."""

    journal: Path
    pid: int
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = f"run pid {self.pid} ({self.journal.name})"
        return [f"{head}: {line}" for line in self.done] + [f"{head}: FAILED {line}" for line in self.failed]


@contextlib.contextmanager
def _runs_lock(runs: Path) -> Iterator[None]:
    """Serialize cleanups (two sessions starting at once must not release the same run twice)."""
    fd = os.open(runs / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def journals(directory: Path) -> list[Path]:
    return sorted((directory / RUNS_DIR).glob("run-*.json"))


def release_dead_runs(directory: Path, *, dry_run: bool = False) -> list[DeadRun]:
    """Release every resource of runs under ``directory`` whose process is dead."""
    runs = directory / RUNS_DIR
    if not runs.is_dir():
        return []
    found: list[DeadRun] = []
    with _runs_lock(runs):
        for path in journals(directory):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # vanished meanwhile (its run ended) or being replaced: not ours to judge
            pid, started = int(data.get("pid", 0)), data.get("started")
            if pid <= 0 or is_alive(pid, started):
                continue
            dead = DeadRun(path, pid)
            remaining = []
            for entry in release_order(list(data.get("resources", []))):
                what = f"{entry.get('kind')} {entry.get('ident')}"
                releaser = RELEASERS.get(entry.get("kind", ""))
                if releaser is None:
                    dead.failed.append(f"{what}: no way to release a {entry.get('kind')!r} resource")
                    remaining.append(entry)
                    continue
                if dry_run:
                    dead.done.append(f"would release {what}")
                    continue
                try:
                    dead.done.append(releaser(entry))
                except Exception as exc:
                    dead.failed.append(f"{what}: {exc}")
                    remaining.append(entry)
            if not dry_run:
                if remaining:
                    _write_atomically(path, {**data, "resources": remaining})
                else:
                    path.unlink(missing_ok=True)
            found.append(dead)
        # half-written journals of processes killed during a write (".run-<pid>-<id>.json.<pid>.tmp")
        for tmp in runs.glob(".run-*.tmp"):
            writer = tmp.name.rsplit(".", 2)[-2]
            if writer.isdigit() and not psutil.pid_exists(int(writer)) and not dry_run:
                tmp.unlink(missing_ok=True)
    return found
