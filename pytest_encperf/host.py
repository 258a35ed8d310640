"""The host system as backends and targets see it: commands, loop devices, mounts, caches.

Every helper raises :class:`HostError` with the command and its stderr, never a bare
CalledProcessError, so a failing step names itself in the test report.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Protocol

DEFAULT_TIMEOUT = 120.0


class HostError(RuntimeError):
    """A host command or system call failed; the message says which and why."""


def is_root() -> bool:
    return os.geteuid() == 0


def missing_tools(*names: str) -> list[str]:
    return [name for name in names if shutil.which(name) is None]


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    input: bytes | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    env: dict[str, str] | None = None,
) -> str:
    """Run a command non-interactively (stdin closed unless ``input``), return its stdout.

    Secrets go through ``input`` or files, never ``argv``: argv is world-readable in /proc.
    The command runs in its own process group: a tool that hangs (a password prompt, a stuck
    device) is killed with everything it started after ``timeout``, and so is it when this
    process is interrupted (Ctrl-C, SIGTERM) while waiting for it.
    """
    args = [os.fspath(a) for a in argv]
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise HostError(f"{args[0]}: not installed") from exc
    try:
        stdout, stderr = proc.communicate(input if input is not None else b"", timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise HostError(
            f"{' '.join(args)}: no answer after {timeout:g} s (killed; waiting for input or hung?)"
        ) from None
    except BaseException:
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        detail = (stderr or stdout).decode(errors="replace").strip()
        raise HostError(f"{' '.join(args)}: exit {proc.returncode}: {detail}")
    return stdout.decode(errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a command started by run() and whatever it started, then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    # SIGKILL cannot end a process stuck in the kernel (D state on a dead device): don't hang
    # with it, the caller's error names the command
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@dataclass(frozen=True)
class Resource:
    """What a release action frees, in a form a later process can act on (journal, cleanup).

    kind: "loop" (ident = device, detail = backing file), "mount" (mount point), "process"
    (pid, detail = executable name), "dm" (device-mapper name), "path" (file or directory),
    "fscrypt-key" (key identifier, detail = a directory on its file system), or "other" (only
    this process can release it). ``journal.RELEASERS`` says how a later process releases each
    kind; a new kind needs an entry there.
    """

    kind: str
    ident: str
    detail: str = ""


class ResourceObserver(Protocol):
    """Told about every resource a Cleanup registers and releases (the run's journal)."""

    def registered(self, resource: Resource, label: str) -> object:
        """Record ``resource``; the returned token is handed back to ``released``."""
        ...

    def released(self, token: object) -> None: ...


_observers: list[ResourceObserver] = []
_observers_lock = threading.Lock()


def install_observer(observer: ResourceObserver) -> None:
    """Every Cleanup created from now on reports to ``observer`` (the newest one installed)."""
    with _observers_lock:
        _observers.append(observer)


def remove_observer(observer: ResourceObserver) -> None:
    with _observers_lock:
        if observer in _observers:
            _observers.remove(observer)


def current_observer() -> ResourceObserver | None:
    with _observers_lock:
        return _observers[-1] if _observers else None


class Cleanup:
    """A last-in-first-out stack of release actions, registered the moment a resource exists.

    ``release()`` runs every action even when some fail, empties the stack (so a second call
    is a no-op) and then raises one HostError naming every failure. Use the typed helpers
    (``loop``, ``mount``, ``process``, ``path``) where they fit: they record a Resource that a
    later run can release if this process dies. Each typed registration is reported to the
    observer (the run's journal, installed by the session) when the Cleanup is created; an
    action that fails to release stays in the journal for ``encperf cleanup``.
    """

    def __init__(self, observer: ResourceObserver | None = None) -> None:
        self._actions: list[tuple[str, Callable[[], None], Resource, object]] = []
        self._observer = observer if observer is not None else current_observer()

    def push(self, label: str, action: Callable[[], None], resource: Resource | None = None) -> None:
        resource = resource or Resource("other", label)
        token = None
        if self._observer is not None and resource.kind != "other":
            # the journal is a second line of defence: failing to write it (disk full) must
            # never keep the release action from being registered
            with contextlib.suppress(Exception):
                token = self._observer.registered(resource, label)
        self._actions.append((label, action, resource, token))

    def loop(self, device: Path, backing_file: Path) -> None:
        self.push(
            f"detach {device}",
            lambda: detach_loop(device, backing_file),
            Resource("loop", str(device), str(backing_file)),
        )

    def mount(self, mountpoint: Path) -> None:
        self.push(f"unmount {mountpoint}", lambda: unmount(mountpoint), Resource("mount", str(mountpoint)))

    def dm(self, name: str) -> None:
        """A device-mapper mapping (dm-crypt, tcrypt, bitlk), closed by name."""
        self.push(f"close dm {name}", lambda: remove_dm(name), Resource("dm", name))

    def path(self, path: Path) -> None:
        def remove() -> None:
            inside = mounts_under(path)
            if inside:  # never delete through a mount that failed to come off
                raise HostError(f"not removing {path}: still mounted at {', '.join(map(str, inside))}")
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

        self.push(f"remove {path}", remove, Resource("path", str(path)))

    def process(self, proc: subprocess.Popen[bytes], *, stop: Callable[[], None] | None = None) -> None:
        """Register a daemon: ``stop`` (e.g. fusermount -u) first, then terminate, kill, wait.

        Start daemons with ``stdin=subprocess.DEVNULL`` (never a terminal to prompt on) and the
        secret on a pipe or in a PrivateDir file, never in argv: the test suite scans every
        process's /proc/<pid>/cmdline and environ while a volume is mounted.
        """

        def release() -> None:
            if stop is not None and proc.poll() is None:
                stop()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)  # FUSE daemons exit on their own after the unmount
            stop_process(proc)

        name = os.path.basename(str(proc.args[0] if isinstance(proc.args, list) else proc.args))
        self.push(f"stop {name} (pid {proc.pid})", release, Resource("process", str(proc.pid), name))

    def __len__(self) -> int:
        return len(self._actions)

    @property
    def labels(self) -> list[str]:
        return [label for label, _, _, _ in self._actions]

    @property
    def resources(self) -> list[Resource]:
        return [resource for _, _, resource, _ in self._actions]

    def release(self) -> None:
        errors: list[str] = []
        while self._actions:
            label, action, _, token = self._actions.pop()
            try:
                action()
            except Exception as exc:  # keep releasing the rest, report all at the end
                errors.append(f"{label}: {exc}")
                continue
            if token is not None and self._observer is not None:
                with contextlib.suppress(Exception):  # never let the journal stop a teardown
                    self._observer.released(token)
        if errors:
            raise HostError("cleanup failed: " + "; ".join(errors))


# Signals that stop a run with a teardown (the session maps TERM and HUP to KeyboardInterrupt).
TEARDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Let a teardown finish before Ctrl-C / SIGTERM / SIGHUP interrupt: a release cut in half (an
    unmount done, its loop device not yet detached) is what leaves resources behind. The
    signal is raised as KeyboardInterrupt right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def remember(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {
        sig: signal.signal(sig, remember)
        for sig in TEARDOWN_SIGNALS
        if signal.getsignal(sig) not in (signal.SIG_IGN, None)  # ignored stays ignored
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            raise KeyboardInterrupt(f"signal {received[0]} (deferred until teardown finished)")


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM a process unless it has exited, SIGKILL it after ``timeout``, reap it."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


# ---------------------------------------------------------------- loop devices


@dataclass(frozen=True)
class LoopDevice:
    path: Path
    backing_file: Path
    direct_io: bool  # what the kernel reports in /sys/block/loopN/loop/dio, not what was asked

    @property
    def name(self) -> str:
        return self.path.name


def loop_direct_io(device: Path) -> bool:
    try:
        return (Path("/sys/block") / device.name / "loop" / "dio").read_text().strip() == "1"
    except OSError:
        return False


LOOP_LOCK = Path("/run/lock/encperf-losetup.lock")


@contextlib.contextmanager
def machine_lock(path: Path) -> Iterator[None]:
    """An exclusive lock shared by every encperf process on this machine (flock: released
    by the kernel when the holder dies, so a killed run never leaves it held)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def attach_loop(backing_file: Path, *, direct_io: bool = True) -> LoopDevice:
    """Attach a file to a free loop device.

    Two ``losetup --find`` started at once can pick the same free device and one then fails
    with EBUSY: concurrent encperf sessions take a machine-wide lock, and a busy answer caused
    by anyone else is retried.
    """
    argv = ["losetup", "--find", "--show"]
    if direct_io:
        argv.append("--direct-io=on")
    argv.append(str(backing_file))
    for attempt in range(5):
        try:
            with machine_lock(LOOP_LOCK):
                device = Path(run(argv).strip())
            break
        except HostError as exc:
            if "busy" not in str(exc).lower() or attempt == 4:
                raise
            time.sleep(0.1 * (attempt + 1))
    return LoopDevice(device, backing_file, loop_direct_io(device))


def detach_loop(device: Path, backing_file: Path | None = None, *, timeout: float = 10.0) -> None:
    """Detach a loop device and wait until it is really free.

    A no-op when it is already gone or now backs another file. ``losetup --detach`` of a device
    that something still holds open (udev's probe after an unmount) only sets autoclear and
    returns; the device is released when the last holder closes it, so wait for that.
    """
    backing = Path("/sys/block") / device.name / "loop" / "backing_file"

    def current() -> str | None:
        try:
            return backing.read_text().strip()
        except OSError:
            return None

    attached = current()
    if attached is None:
        return
    # a backing file removed while attached shows as "<path> (deleted)"
    attached = attached.removesuffix(" (deleted)")
    if backing_file is not None and os.path.realpath(attached) != os.path.realpath(backing_file):
        return  # reused by someone else since: never touch it
    deadline = time.monotonic() + timeout
    while True:
        try:
            run(["losetup", "--detach", str(device)])
        except HostError:
            if current() is None:
                return
            if time.monotonic() > deadline:
                raise
        for _ in range(20):
            if current() is None:
                return
            time.sleep(0.05)
        if time.monotonic() > deadline:
            raise HostError(f"{device} still attached to {attached} after {timeout:g} s")


def block_device_of(path: Path) -> str | None:
    """Kernel name ("vda1", "loop3") of the block device holding ``path``'s file system, or
    None when it has none (tmpfs, overlay)."""
    try:
        dev = os.stat(path).st_dev
        link = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
        return link.resolve().name if link.exists() else None
    except OSError:
        return None


def devices_below(device_name: str) -> list[str]:
    """Device names under a block device, nearest first: for a loop device, the device holding
    its backing file (and so on); for a stacked device (dm), its slaves."""
    below: list[str] = []
    current = device_name
    for _ in range(8):  # bounded: stacks are shallow
        sys_dir = Path("/sys/block") / current
        nxt: str | None = None
        try:
            backing = (sys_dir / "loop" / "backing_file").read_text().strip()
            nxt = block_device_of(Path(backing))
        except OSError:
            slaves = sorted(p.name for p in (sys_dir / "slaves").glob("*")) if sys_dir.exists() else []
            nxt = slaves[0] if slaves else None
        if nxt is None or nxt in below or nxt == device_name:
            break
        below.append(nxt)
        current = nxt
    return below


def loops_backed_by(directory: Path) -> list[Path]:
    """Loop devices whose backing file lies under ``directory`` (for leftover checks)."""
    found = []
    prefix = os.path.realpath(directory) + os.sep
    for entry in Path("/sys/block").glob("loop*"):
        with contextlib.suppress(OSError):
            backing = (entry / "loop" / "backing_file").read_text().strip().removesuffix(" (deleted)")
            if os.path.realpath(backing).startswith(prefix):
                found.append(Path("/dev") / entry.name)
    return found


# ---------------------------------------------------------------- device-mapper


def dm_exists(name: str) -> bool:
    return (Path("/dev/mapper") / name).exists()


def remove_dm(name: str) -> None:
    """Close a device-mapper mapping if it exists: ``cryptsetup close``, else ``dmsetup remove``.

    ``--retry`` because udev may still hold the device for a moment after an unmount.
    """
    if not dm_exists(name):
        return
    try:
        run(["cryptsetup", "close", name])
    except HostError:
        if not dm_exists(name):
            return
        run(["dmsetup", "remove", "--retry", name])


# ---------------------------------------------------------------- mounts


def mounts_under(directory: Path) -> list[Path]:
    prefix = os.path.realpath(directory)
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        mountpoint = line.split()[1].replace("\\040", " ")
        if mountpoint == prefix or mountpoint.startswith(prefix + os.sep):
            found.append(Path(mountpoint))
    return found


def is_mounted(path: Path) -> bool:
    return Path(os.path.realpath(path)) in mounts_under(path)


def mount(device: Path, mountpoint: Path, fstype: str, options: str | None = None) -> None:
    argv = ["mount", "-t", fstype]
    if options:
        argv += ["-o", options]
    run([*argv, str(device), str(mountpoint)])


def unmount(mountpoint: Path, *, retries: int = 10) -> None:
    """Unmount if mounted; retry while busy, then fall back to a lazy unmount."""
    for _ in range(retries):
        if not is_mounted(mountpoint):
            return
        try:
            run(["umount", str(mountpoint)])
            return
        except HostError:
            time.sleep(0.2)
    if is_mounted(mountpoint):
        run(["umount", "--lazy", str(mountpoint)])


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding ``path`` (longest matching mount point)."""
    real = os.path.realpath(path)
    best, fstype = "", "unknown"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        mountpoint = fields[1].replace("\\040", " ")
        inside = real == mountpoint or real.startswith(mountpoint.rstrip(os.sep) + os.sep)
        if inside and len(mountpoint) >= len(best):
            best, fstype = mountpoint, fields[2]
    return fstype


# ---------------------------------------------------------------- caches


def drop_page_cache(path: Path | None = None) -> bool:
    """Evict ``path`` from the page cache, and every clean page when root.

    Returns True when the system-wide drop was done (root), False when only the file's own
    pages could be dropped.
    """
    if path is not None:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    if not is_root():
        return False
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


@dataclass
class PrivateDir:
    """A 0700 directory for key files and other secrets, removed with its content."""

    path: Path
    files: list[Path] = field(default_factory=list)

    @classmethod
    def create(cls, cleanup: Cleanup, prefix: str = "encperf-secret-") -> PrivateDir:
        """Make one in memory (/dev/shm) when possible, so secrets never reach a disk, and
        register its removal on ``cleanup`` (so a journal can remove it after a crash)."""
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))  # mkdtemp makes it 0700
        cleanup.path(path)
        return cls(path)

    def write_secret(self, name: str, data: bytes) -> Path:
        target = self.path / name
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        self.files.append(target)
        return target

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def tool_version(argv: Sequence[str]) -> str:
    """First version-looking word a tool prints about itself (stdout or stderr), or "unknown"."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (proc.stdout + proc.stderr).decode(errors="replace")
    match = re.search(r"\d+\.\d+(?:\.\d+)*", text)
    return match.group(0) if match else "unknown"
