"""The host system as backends and targets see it: commands, loop devices, mounts, caches.

Every helper raises :class:`HostError` with the command and its stderr, never a bare
CalledProcessError, so a failing step names itself in the test report.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
    """
    args = [os.fspath(a) for a in argv]
    try:
        proc = subprocess.run(
            args,
            input=input if input is not None else b"",
            capture_output=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except FileNotFoundError as exc:
        raise HostError(f"{args[0]}: not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise HostError(f"{' '.join(args)}: no answer after {timeout:g} s (killed)") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).decode(errors="replace").strip()
        raise HostError(f"{' '.join(args)}: exit {proc.returncode}: {detail}")
    return proc.stdout.decode(errors="replace")


@dataclass(frozen=True)
class Resource:
    """What a release action frees, in a form a later process can act on (journal, cleanup).

    kind: "loop" (ident = device, detail = backing file), "mount" (mount point), "process"
    (pid, detail = executable name), "dm" (device-mapper name), "path" (file or directory),
    or "other" (only this process can release it).
    """

    kind: str
    ident: str
    detail: str = ""


class Cleanup:
    """A last-in-first-out stack of release actions, registered the moment a resource exists.

    ``release()`` runs every action even when some fail, empties the stack (so a second call
    is a no-op) and then raises one HostError naming every failure. Use the typed helpers
    (``loop``, ``mount``, ``process``, ``path``) where they fit: they record a Resource that a
    later run can release if this process dies.
    """

    def __init__(self) -> None:
        self._actions: list[tuple[str, Callable[[], None], Resource]] = []

    def push(self, label: str, action: Callable[[], None], resource: Resource | None = None) -> None:
        self._actions.append((label, action, resource or Resource("other", label)))

    def loop(self, device: Path, backing_file: Path) -> None:
        self.push(
            f"detach {device}",
            lambda: detach_loop(device, backing_file),
            Resource("loop", str(device), str(backing_file)),
        )

    def mount(self, mountpoint: Path) -> None:
        self.push(f"unmount {mountpoint}", lambda: unmount(mountpoint), Resource("mount", str(mountpoint)))

    def path(self, path: Path) -> None:
        def remove() -> None:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

        self.push(f"remove {path}", remove, Resource("path", str(path)))

    def process(self, proc: subprocess.Popen[bytes], *, stop: Callable[[], None] | None = None) -> None:
        """Register a daemon: ``stop`` (e.g. fusermount -u) first, then terminate, kill, wait."""

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
        return [label for label, _, _ in self._actions]

    @property
    def resources(self) -> list[Resource]:
        return [resource for _, _, resource in self._actions]

    def release(self) -> None:
        errors: list[str] = []
        while self._actions:
            label, action, _ = self._actions.pop()
            try:
                action()
            except Exception as exc:  # keep releasing the rest, report all at the end
                errors.append(f"{label}: {exc}")
        if errors:
            raise HostError("cleanup failed: " + "; ".join(errors))


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


def attach_loop(backing_file: Path, *, direct_io: bool = True) -> LoopDevice:
    """Attach a file to a free loop device (``losetup --find`` picks one atomically)."""
    argv = ["losetup", "--find", "--show"]
    if direct_io:
        argv.append("--direct-io=on")
    argv.append(str(backing_file))
    device = Path(run(argv).strip())
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
            backing = (entry / "loop" / "backing_file").read_text().strip()
            if os.path.realpath(backing).startswith(prefix):
                found.append(Path("/dev") / entry.name)
    return found


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
