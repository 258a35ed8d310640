"""The host system as backends and targets see it: commands, loop devices, locks, caches (mounts:
mounting.py).

Every helper raises :class:`HostError` with the command and its stderr, never a bare
CalledProcessError, so a failing step names itself in the test report.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import psutil

from . import children, loopdev
from .redaction import redact

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
    secrets: Sequence[bytes | str] = (),
    daemons: bool = False,
    cwd: Path | None = None,
) -> str:
    """Run a command non-interactively (stdin closed unless ``input``), return its stdout;
    ``cwd``: its working directory (default: this process's), for a tool that writes there.

    Secrets go through ``input`` or files, never ``argv``: argv is world-readable in /proc.
    Where a tool takes one in argv only (and the user accepted that), name it in ``secrets``:
    an error message shows <secret> instead of it, as it does for what went to stdin.
    The command runs in its own process group: a tool that hangs (a password prompt, a stuck
    device) is killed with everything it started after ``timeout``, and so is it when this
    process is interrupted (Ctrl-C, SIGTERM) while waiting for it. It dies with this process
    (SIGKILL: a run killed outright never has a tool finish after it) and carries the run's
    mark (children.py); ``daemons``: the tool leaves daemons running on purpose, which a dead
    run's cleanup lets live until the resource they serve is released.
    """
    __tracebackhide__ = True  # its locals hold stdin and argv, which may carry a secret
    args = [os.fspath(a) for a in argv]
    hidden = [*secrets, *([input] if input else [])]
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd=cwd,
            **children.popen_options(env, daemons=daemons),
        )
    except FileNotFoundError as exc:
        raise HostError(f"{args[0]}: not installed") from exc
    try:
        stdout, stderr = proc.communicate(input if input is not None else b"", timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise HostError(
            redact(
                f"{' '.join(args)}: no answer after {timeout:g} s (killed; waiting for input or hung?)",
                hidden,
            )
        ) from None
    except BaseException:
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        detail = (stderr or stdout).decode(errors="replace").strip()
        raise HostError(redact(f"{' '.join(args)}: exit {proc.returncode}: {detail}", hidden))
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


# Signals that stop a run with a teardown (stopsignals.py maps TERM and HUP to KeyboardInterrupt).
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


def stop_process(process: psutil.Process, timeout: float = 10.0) -> None:
    """SIGTERM a process unless it has exited, SIGKILL it after ``timeout`` (reaped if it is our
    child)."""
    try:
        if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except psutil.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        pass


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


# In a directory only root can write (unlike /run/lock): nobody else can plant or hold it.
LOOP_LOCK = Path("/run/encperf/losetup.lock")
LOCK_TIMEOUT = 60.0


class LockTimeout(HostError):
    """A lock stayed held longer than we wait; the message names the lock and its holder."""

    def __init__(self, message: str, holders: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.holders = list(holders)  # pids holding it when we gave up (from /proc/locks)


def lock_holders(fd: int) -> list[int]:
    """Pids holding a flock on the file open at ``fd`` (from /proc/locks)."""
    inode = os.fstat(fd).st_ino
    holders = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "FLOCK" in fields and len(fields) >= 6 and fields[-3].rsplit(":", 1)[-1] == str(inode):
                with contextlib.suppress(ValueError):
                    holders.append(int(fields[-4]))
    return holders


def wait_for_lock(
    fd: int,
    what: str,
    timeout: float,
    *,
    shared: bool = False,
    waiting: Callable[[list[int], float], None] | None = None,
) -> None:
    """flock(LOCK_EX) (LOCK_SH when ``shared``) on ``fd``, giving up after ``timeout`` s with a
    LockTimeout naming the holder. ``waiting`` is told about once a second while it waits: the
    holders' pids and the seconds waited so far (the progress line)."""
    started = time.monotonic()
    deadline = started + timeout
    told = started
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            now = time.monotonic()
            if waiting is not None and now - told >= 1.0:
                told = now
                waiting([pid for pid in lock_holders(fd) if pid != os.getpid()], now - started)
            if time.monotonic() >= deadline:
                holders = [pid for pid in lock_holders(fd) if pid != os.getpid()]
                by = f" by pid {', '.join(map(str, holders))}" if holders else ""
                raise LockTimeout(
                    f"{what} is held{by} for more than {timeout:g} s: gave up waiting", holders
                ) from None
            time.sleep(0.05)


def open_own_file(path: Path, flags: int, *, dir_fd: int | None = None, mode: int = 0o600) -> int:
    """Open (or create) a file of ours without following a symbolic link; OSError if it is a
    symbolic link, not a regular file, or not ours with ``mode``."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = None
    if flags & os.O_CREAT:  # made here: its mode is set, whatever the umask (0277 made 0400)
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, flags | os.O_EXCL, mode, dir_fd=dir_fd)
            os.fchmod(fd, mode)
    if fd is None:  # there already: checked as it is
        fd = os.open(path, flags & ~os.O_CREAT, dir_fd=dir_fd)
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "not a regular file"
    elif info.st_uid != os.geteuid():
        problem = f"owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    elif stat.S_IMODE(info.st_mode) != mode:
        problem = f"mode {stat.S_IMODE(info.st_mode):04o}, not {mode:04o}"
    if problem:
        os.close(fd)
        raise OSError(errno.EPERM, f"refusing {path}: {problem}")
    return fd


@contextlib.contextmanager
def machine_lock(path: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """An exclusive lock shared by every encperf process on this machine (flock: released
    by the kernel when the holder dies, so a killed run never leaves it held); LockTimeout
    after ``timeout`` s."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = open_own_file(path, os.O_RDWR | os.O_CREAT)
    try:
        wait_for_lock(fd, f"lock {path}", timeout)
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


DELETED = loopdev.DELETED


def loop_backing_file(device: Path) -> str | None:
    """The backing file the kernel names for a loop device (its real path, with " (deleted)"
    when it was removed while attached), None when the device is not attached."""
    return loopdev.backing_file_name(device)


def detach_loop(device: Path, backing_file: Path | None = None, *, timeout: float = 10.0) -> bool:
    """Detach a loop device and wait until it is really free; False when there was nothing to do
    (not attached, or now backing another file than ``backing_file``: never touched).

    Through one open descriptor of the device (loopdev.detach), never twice by name: once free,
    the name may already be another run's device. ``backing_file`` is the kernel's name of the
    file exactly (the real path Cleanup.loop recorded, never compared after resolving links,
    which someone could have planted since), and while it exists its device and inode number.
    """
    try:
        return loopdev.detach(device, backing_file, timeout=timeout)
    except loopdev.StillHeld as exc:
        raise HostError(str(exc)) from None
    except OSError as exc:
        raise HostError(f"detaching {device}: {exc.strerror or exc}") from None


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


def whole_disks(device_name: str) -> list[str]:
    """The whole disks at the bottom of a block device's stack: ``vda`` for ``vda1``; for a loop
    device, the disks under the file system holding its backing file; for device-mapper or MD,
    the disks under every slave. A loop device whose backing file has no block device (a RAM or
    FUSE file system) is its own bottom."""
    found: list[str] = []
    seen: set[str] = set()

    def walk(name: str, depth: int) -> None:
        if depth > 16 or name in seen:  # bounded: stacks are shallow
            return
        seen.add(name)
        sys_dir = Path("/sys/class/block") / name
        if (sys_dir / "partition").exists():
            walk(sys_dir.resolve().parent.name, depth + 1)
            return
        try:
            backing = (sys_dir / "loop" / "backing_file").read_text().strip().removesuffix(" (deleted)")
        except OSError:
            backing = None
        below = (
            [block_device_of(Path(backing))] if backing else sorted(p.name for p in sys_dir.glob("slaves/*"))
        )
        below = [b for b in below if b]
        if not below:
            found.append(name)
        for nxt in below:
            walk(nxt, depth + 1)

    walk(device_name, 0)
    return sorted(set(found))


def device_number(device_name: str) -> str | None:
    """``MAJOR:MINOR`` of a block device by kernel name (``254:0``), or None."""
    try:
        return (Path("/sys/class/block") / device_name / "dev").read_text().strip() or None
    except OSError:
        return None


LOCK_DIR_ENV = "ENCPERF_LOCK_DIR"


def is_private_directory(text: str) -> bool:
    """Whether ``text`` is an absolute path to a directory (not a symbolic link) of this user that
    no one else may enter or write (mode without group and other bits)."""
    with contextlib.suppress(OSError):
        info = os.lstat(text) if os.path.isabs(text) else None
        return bool(
            info and stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077
        )
    return False


def lock_directory() -> Path:
    """Where this user's machine-wide encperf locks live: ``$ENCPERF_LOCK_DIR`` when it is a
    private directory of this user (tests, or runs meant not to wait for each other), else
    /run/encperf for root (only root can write there), else ``$XDG_RUNTIME_DIR/encperf`` when
    that directory is this user's alone, else ``~/.cache/encperf``: never a directory others can
    write (they could hold our locks)."""
    chosen = os.environ.get(LOCK_DIR_ENV, "")
    if chosen and is_private_directory(chosen):
        return Path(chosen)
    if is_root():
        return Path("/run/encperf")
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if is_private_directory(runtime):
        return Path(runtime) / "encperf"
    return Path.home() / ".cache" / "encperf"


MEASURE_LOCK = "measure.lock"


@contextlib.contextmanager
def measurement_lock(
    disks: Sequence[str] | None,
    directory: Path | None = None,
    *,
    shared: bool = False,
    timeout: float = float("inf"),
    waiting: Callable[[list[int], float], None] | None = None,
) -> Iterator[float]:
    """Hold the right to measure on this machine; yields the seconds spent waiting for it
    (``waiting``: told while it waits, see wait_for_lock).

    ``disks`` None: alone on the machine (``measure.lock`` exclusively). Otherwise alone on each
    named disk (``MAJOR:MINOR``: ``measure-254_0.lock`` exclusively, taken in sorted order so two
    holders never wait for each other), sharing ``measure.lock`` with other per-disk holders, so
    a holder of the whole machine still excludes them all. ``shared``: for work that may run
    beside other such work but never beside a measurement (making, filling and removing volumes):
    every lock shared. Every encperf process of this user takes these locks (xdist workers,
    separate sessions); flock: released by the kernel when the holder dies. Waits as long as it
    takes (another process is measuring), or ``timeout`` s, then raises LockTimeout naming the
    holders (a teardown after an interrupt: see Volumes.between_measurements). Never nest two
    holds in one process: a shared hold would keep its own exclusive request waiting for ever.
    """
    base = directory or lock_directory()
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    names = [(MEASURE_LOCK, shared or disks is not None)]
    names += [(f"measure-{disk.replace(':', '_')}.lock", shared) for disk in sorted(set(disks or ()))]
    started = time.monotonic()
    fds: list[int] = []
    try:
        for name, share in names:
            fds.append(open_own_file(base / name, os.O_RDWR | os.O_CREAT))
            left = max(0.0, timeout - (time.monotonic() - started))
            wait_for_lock(fds[-1], f"lock {base / name}", left, shared=share, waiting=waiting)
        yield time.monotonic() - started
    finally:
        for fd in reversed(fds):
            os.close(fd)


def measurement_lock_holders(directory: Path | None = None) -> list[int]:
    """Other processes holding a measurement lock now (shared or not): the plan line names them."""
    found: list[int] = []
    for path in sorted((directory or lock_directory()).glob("measure*.lock")):
        try:  # read-only, only to name the lock's inode in /proc/locks
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            found += [pid for pid in lock_holders(fd) if pid != os.getpid() and pid not in found]
        finally:
            os.close(fd)
    return found


def loops_backed_by(directory: Path) -> list[Path]:
    """Loop devices whose backing file lies under ``directory`` (for leftover checks)."""
    found = []
    prefix = os.path.realpath(directory) + os.sep
    for entry in Path("/sys/block").glob("loop*"):
        backing = loop_backing_file(Path("/dev") / entry.name)
        if backing is not None and backing.removesuffix(DELETED).startswith(prefix):  # the kernel's
            found.append(Path("/dev") / entry.name)  # real path, compared as it is
    return found


# ---------------------------------------------------------------- caches


def drop_file_pages(path: Path | None) -> None:
    """Evict ``path``'s own pages from the page cache (written back first); quietly nothing when
    it cannot be opened."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def drop_page_cache(path: Path | None = None) -> bool:
    """Evict ``path`` from the page cache, and every clean page when root.

    Returns True when the system-wide drop was done (root), False when only the file's own
    pages could be dropped.
    """
    drop_file_pages(path)
    if not is_root():
        return False
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


# tool_version's answers, by the program that answered (its path and the file's identity) and the
# arguments: a session describes every volume it makes, each description asking its tools again,
# and a process started for nothing is dear where processes are (the UML lane: issue 26)
_TOOL_VERSIONS: dict[tuple[object, ...], str] = {}


def tool_version(argv: Sequence[str]) -> str:
    """First version-looking word a tool prints about itself (stdout or stderr), or "unknown".

    Asked once per program file: again only when the name finds another file on PATH, or the file
    was replaced; a tool that did not answer in time is asked again next time."""
    options = children.popen_options()
    found = shutil.which(argv[0], path=options["env"].get("PATH"))
    try:
        file = os.stat(found) if found else None
    except OSError:
        file = None
    key = (
        None
        if file is None
        else (found, file.st_dev, file.st_ino, file.st_size, file.st_mtime_ns, file.st_ctime_ns, *argv[1:])
    )
    if key is not None and key in _TOOL_VERSIONS:
        return _TOOL_VERSIONS[key]
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
            **options,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (proc.stdout + proc.stderr).decode(errors="replace")
    match = re.search(r"\d+\.\d+(?:\.\d+)*", text)
    version = match.group(0) if match else "unknown"
    if key is not None:
        _TOOL_VERSIONS[key] = version
    return version
