"""Child processes die with the run, and a dead run's children can be found and ended.

Every program encperf starts (``host.run``, FUSE daemons, fio, tool versions) gets two things:

* ``PR_SET_PDEATHSIG`` = SIGKILL, set in the child between fork and exec: when the run dies
  (SIGKILL, the OOM killer), the kernel kills the tool too, so a ``mkfs`` or a ``veracrypt``
  mapping half-way through cannot finish after the run's cleanup has looked. The signal fires
  when the *thread* that started the child ends: a tool is waited for by the thread that
  started it, and daemons, which outlive the call, get the signal only when started from the
  main thread (where the session starts them; the native engine's threads start nothing).
  A child that exits early because its parent died before the prctl is the same as one killed.
* ``ENCPERF_RUN=<mark>`` in its environment, ``<mark>`` = ``encperf-<pid>-<random>`` (the run's,
  recorded in its journal), inherited by whatever it forks. The death signal is not inherited
  by a fork (VeraCrypt's FUSE daemons, fio's job processes): the mark is how a later cleanup
  finds those, and the child of a run killed before the prctl. Only processes of this user
  count (reading another user's environment needs their rights, and none can make a process
  of ours), so a mark names nothing but the run's own descendants. A call whose tool leaves
  daemons on purpose (``veracrypt`` mapping a volume: its own dismount stops them) marks them
  ``<mark>:daemons``: a dead run's cleanup lets those live until the volume's release. A FUSE
  daemon's mark also names its start (``<mark>/<call>:daemons``), journaled before it starts
  (resources.Cleanup.daemon): its release finds it, and what it forked, by that.

The ``:daemons`` mark is inherited by everything such a tool forks, its short-lived helpers too
(VeraCrypt's ``losetup`` and ``mount``, its core service): no death signal reaches those, and one
still running after the cleanup has looked for loop devices and mounts makes one nobody releases
(issue 23's chaos leak). A daemon is
told apart by its session: it detached itself (``setsid``: VeraCrypt's FUSE daemon, as every
daemon does) or was started in a session of its own (ours), and what it forks stays in its
session. A helper stays in the session of the tool that forked it, and ``host.run`` starts every
tool in a session of its own, led by the tool, which died with the run. So a dead run's marked
process lives on only while the leader of its session is a live, not dying, ``:daemons``
process of the run (itself, for a daemon); every other one is ended before anything is released.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import psutil

MARK_VARIABLE = "ENCPERF_RUN"
DAEMONS = ":daemons"  # appended to the mark of a call whose tool leaves daemons on purpose
PR_SET_PDEATHSIG = 1
EXIT_WAIT = 10.0  # seconds a killed process gets to be gone (one stuck in the kernel may never go)

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl  # resolved here, not in the child: nothing to look up between fork and exec
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_mark: tuple[int, str] | None = None


def run_mark() -> str:
    """This process's mark, ``encperf-<pid>-<random>`` (a new one in a forked copy)."""
    global _mark
    if _mark is None or _mark[0] != os.getpid():
        _mark = (os.getpid(), f"encperf-{os.getpid()}-{secrets.token_hex(8)}")
    return _mark[1]


def die_with_parent_hook() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive SIGKILL when its parent dies, and exit at
    once if the parent is already gone (it died between fork and the prctl)."""
    parent = os.getpid()

    def hook() -> None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(137)

    return hook


def new_call() -> str:
    """A mark for one start of a daemon: ``<run mark>/<random>``."""
    return f"{run_mark()}/{secrets.token_hex(6)}"


def environment(
    env: Mapping[str, str] | None = None, *, daemons: bool = False, call: str | None = None
) -> dict[str, str]:
    """``env`` (default: ours) with the run's mark (``call``'s, when given)."""
    marked = dict(os.environ if env is None else env)
    marked[MARK_VARIABLE] = (call or run_mark()) + (DAEMONS if daemons else "")
    return marked


class PopenOptions(TypedDict, total=False):
    """What popen_options gives subprocess.Popen/run."""

    env: dict[str, str]
    preexec_fn: Callable[[], None]


def popen_options(
    env: Mapping[str, str] | None = None, *, daemons: bool = False, call: str | None = None
) -> PopenOptions:
    """Keyword arguments for subprocess.Popen/run: dies with us, carries the run's mark.

    A daemon started from another thread than the main one would die with that thread: it
    carries the mark only (a dead run's cleanup still finds it)."""
    options: PopenOptions = {"env": environment(env, daemons=daemons, call=call)}
    if not daemons or threading.current_thread() is threading.main_thread():
        options["preexec_fn"] = die_with_parent_hook()
    return options


@dataclass(frozen=True)
class Marked:
    """A live process carrying a run's mark: ``call`` the start it belongs to (a daemon's), or
    None; ``daemons``: left running on purpose by its tool."""

    process: psutil.Process
    call: str | None
    daemons: bool


def _mark_of(pid: int) -> str | None:
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{MARK_VARIABLE}=".encode()
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def parse_mark(value: str) -> tuple[str, str | None, bool]:
    """(run mark, call mark or None, daemons) of an ``ENCPERF_RUN`` value."""
    daemons = value.endswith(DAEMONS)
    value = value.removesuffix(DAEMONS)
    return value.split("/", 1)[0], (value if "/" in value else None), daemons


def marked_processes(mark: str) -> list[Marked]:
    """Live processes of this user carrying run mark ``mark``, or call mark ``mark`` (zombies
    excluded: they hold nothing)."""
    found = []
    for process in psutil.process_iter(["uids", "status"]):
        uids = process.info["uids"]
        if process.pid == os.getpid() or uids is None or uids.real != os.geteuid():
            continue
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        value = _mark_of(process.pid)
        if value is None:
            continue
        run, call, daemons = parse_mark(value)
        if mark in (run, call):
            found.append(Marked(process, call, daemons))
    return found


def dying(process: psutil.Process) -> bool:
    """A SIGKILL is pending for it (its death signal fired): it will be gone once its current
    system call returns."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & (
                1 << (signal.SIGKILL - 1)
            ):
                return True
    return False


def end(processes: list[psutil.Process], timeout: float = EXIT_WAIT) -> list[str]:
    """SIGKILL ``processes`` and wait until they are gone; what was ended, one line each
    (``still running`` for one that outlives ``timeout``, stuck in the kernel)."""
    killed: list[tuple[psutil.Process, str]] = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            name = process.name()
            process.kill()
            killed.append((process, f"{name} (pid {process.pid})"))
    deadline = time.monotonic() + timeout
    lines = []
    for process, line in killed:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except psutil.TimeoutExpired:
            line += ": still running after SIGKILL (stuck in the kernel?)"
        except psutil.Error:
            pass
        lines.append(line)
    return lines


def session_of(pid: int) -> int | None:
    """The session id of process ``pid``, None when it is gone."""
    try:
        return os.getsid(pid)
    except OSError:
        return None


def lasting_daemons(found: list[Marked]) -> set[int]:
    """The pids among a dead run's marked processes ``found`` that live on until their volume's
    release: ``:daemons`` processes whose session is led by a live, not dying ``:daemons``
    process of the run (a daemon that detached, or one we started in a session of its own, and
    what it forked). A helper of a tool, in the session of the tool that died with the run, is
    not one (see the module's docstring)."""
    staying = {m.process.pid for m in found if m.daemons and not dying(m.process)}
    return {pid for pid in staying if session_of(pid) in staying}


def end_dead_runs_tools(mark: str) -> list[str]:
    """Before anything of a dead run is released: end its tools that were still running and
    whatever they forked (the helpers of a tool that leaves daemons too), and wait for those its
    death already killed, so that no tool or helper makes a mount or a loop device after the
    cleanup has looked. Daemons a tool left on purpose live on (lasting_daemons).

    Looked for again after each round of ending, until none is left: a helper may have forked
    another between the look and its end."""
    ended: set[psutil.Process] = set()  # by pid and start: a pid reused meanwhile is another
    lines: list[str] = []
    while True:
        found = marked_processes(mark)
        lasting = lasting_daemons(found)
        targets = [m.process for m in found if m.process.pid not in lasting and m.process not in ended]
        if not targets:
            return lines
        ended.update(targets)
        lines += [f"ended its tool {line}" for line in end(targets)]


def end_dead_runs_leftovers(mark: str) -> list[str]:
    """After a dead run's resources are released: end every process still carrying its mark
    (a daemon whose volume its tool no longer listed)."""
    return [f"ended leftover process {line}" for line in end([m.process for m in marked_processes(mark)])]
