"""FUSE daemons: starting one, feeding it its secret, waiting for its mount, taking it down.

Used by every backend whose volume is served by a user-space process: fuse.py (gocryptfs,
EncFS, CryFS, securefs), qemu.py (qemu-storage-daemon's FUSE export), bitlocker.py
(dislocker-fuse, ntfs-3g) and veracrypt.py (``mode=fuse``, whose daemon VeraCrypt forks:
``foreign_daemon_pids`` finds it).

A daemon we start runs in the foreground as our child (never daemonized: we must know when it has exited), in
its own session (a Ctrl-C in the terminal reaches us, not it), with stdin closed or a pipe carrying its
password, never a terminal, and dies with the run (children.py). It is registered on ``volume.mounted`` before
it starts, by the mark it carries in its environment (which whatever it forks inherits), and its mount right
after: releasing them (newest first) runs ``fusermount -u`` (``mounting.unmount``: retried while busy, then
lazy with a warning), gives the daemon time to exit by itself, then SIGTERM (resources.py). Its messages go to
a log file that errors quote with every secret shown as <secret>.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from .. import children, host, mounting, processes, redaction
from ..host import HostError
from . import Volume

MOUNT_TIMEOUT = 120.0  # CryFS derives its key with a costly scrypt: ~20 s on a slow CPU
LOG_TAIL = 2000  # characters of a daemon's log quoted in an error


def fuse_problems(name: str) -> list[str]:
    """What FUSE itself needs: /dev/fuse and fusermount."""
    found = []
    if not Path("/dev/fuse").exists():
        found.append(
            f"{name}: needs FUSE (/dev/fuse missing: load the fuse module or pass --device /dev/fuse)"
        )
    if mounting.fusermount_binary() is None:
        found.append(f"{name}: needs fusermount3 or fusermount (Debian package fuse3)")
    return found


def tool_problems(name: str, binary: str, package: str) -> list[str]:
    if shutil.which(binary) is None:
        return [f"{name}: needs {binary} (Debian package {package})"]
    return []


def package_version(package: str) -> str:
    """The installed Debian package's version (for tools that don't report their own)."""
    if shutil.which("dpkg-query") is None:
        return "unknown"
    try:
        return host.run(["dpkg-query", "-W", "-f=${Version}", package], timeout=10).strip() or "unknown"
    except HostError:
        return "unknown"


def read_log_tail(log: Path, start: int = 0) -> str:
    """What the daemon wrote to ``log`` since offset ``start`` (its last lines)."""
    try:
        with log.open("rb") as handle:
            handle.seek(start)
            text = handle.read().decode(errors="replace").strip()
    except OSError:
        return ""
    return text[-LOG_TAIL:]


def start_fuse_daemon(
    volume: Volume,
    argv: Sequence[str | os.PathLike[str]],
    mountpoint: Path,
    log: Path,
    *,
    what: str,
    stdin_data: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = MOUNT_TIMEOUT,
    exits_on_unmount: bool = True,
    secrets: Sequence[bytes | str] = (),
) -> subprocess.Popen[bytes]:
    """Start a foreground FUSE daemon and wait until ``mountpoint`` is in /proc/self/mounts.

    The process is registered on ``volume.mounted`` before it starts (by its mark, see children.py), and
    its mount right after, before it appears (released newest first: unmount, then the daemon gets
    10 s to exit by itself, then SIGTERM; a daemon that outlives its unmount, such as
    qemu-storage-daemon, gets SIGTERM at once). On failure everything is released and a HostError
    quotes the daemon's messages, with ``secrets`` (and ``stdin_data``) shown as <secret>.
    """
    __tracebackhide__ = True  # its arguments and locals may carry a secret
    args = [os.fspath(a) for a in argv]
    log_start = log.stat().st_size if log.exists() else 0  # quote only this start's messages
    # Journaled before it starts (a kill right after Popen must leave nothing unknown): the
    # daemon by the mark it will carry, then its mount; released newest first, as before.
    call = children.new_call()
    started = volume.mounted.daemon(
        call, shutil.which(args[0]) or args[0], wait=10.0 if exits_on_unmount else 0.0
    )
    volume.mounted.mount(mountpoint)
    log_handle = open(log, "ab")  # noqa: SIM115 - handed to the child, closed right after
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the daemon
            **children.popen_options(env, daemons=True, call=call),
        )
    except FileNotFoundError as exc:
        volume.mounted.release()
        raise HostError(f"{args[0]}: not installed") from exc
    finally:
        log_handle.close()
    started.append(proc)
    hidden = [*secrets, *([stdin_data] if stdin_data else [])]
    if stdin_data is not None and proc.stdin is not None:
        try:
            proc.stdin.write(stdin_data)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died already; reported below with its log
    deadline = time.monotonic() + timeout
    while not mounting.is_mounted(mountpoint):
        code = proc.poll()
        if code is not None:
            volume.mounted.release()
            detail = redaction.redact(read_log_tail(log, log_start) or "no message", hidden)
            raise HostError(f"{what} exited with status {code} before mounting: {detail}")
        if time.monotonic() > deadline:
            host.stop_process(psutil.Process(proc.pid))  # never mounted: don't wait for it to exit
            volume.mounted.release()
            detail = redaction.redact(read_log_tail(log, log_start) or "no message", hidden)
            raise HostError(f"{what} did not mount {mountpoint} within {timeout:g} s: {detail}")
        time.sleep(0.05)
    return proc


def boot_ticks() -> int:
    """Now, in the clock ticks after boot that /proc/PID/stat counts a process's start in (so
    that a stepped wall clock cannot move it, see processes.ProcessStart)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def foreign_daemon_pids(
    argument: str, since: int, *, exclude: Sequence[int] = (), executable: str | None = None
) -> list[int]:
    """Processes another program left running for one of our volumes: started at or after
    ``since`` (``boot_ticks()`` taken before running that program) and still alive, with
    ``argument`` (a path private to this run, such as the volume's container) among their
    command-line arguments, compared by real path.

    VeraCrypt's FUSE daemon is a fork of the ``veracrypt`` command we ran, so it carries that
    command's arguments; the container file lives in this run's own directory, so no other
    run's daemon names it. Its CPU time then counts in the daemon column. Only processes of this
    user count (another local user could start one naming our path), and with ``executable``
    only those running that program (by the file name of /proc/PID/exe)."""
    wanted = os.path.realpath(argument)
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "uids", "exe"]):
        pid, cmdline, uids = process.info["pid"], process.info["cmdline"], process.info["uids"]
        if pid in (os.getpid(), *exclude) or not cmdline or uids is None or uids.real != os.getuid():
            continue
        if executable is not None and os.path.basename(process.info["exe"] or "") != executable:
            continue
        if not any(os.path.realpath(arg) == wanted for arg in cmdline[1:] if "/" in arg):
            continue
        started = processes.process_start(pid)
        if started is not None and started.ticks >= since:
            found.append(pid)
    return sorted(found)
