"""Which process a pid names, exactly: its start (clock ticks after boot, in which boot and
pid namespace), its executable, whether it still runs or its pid was reused.

A journal records these for every process a run started, so that a later cleanup stops that
process and never another one that got the same pid.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
BOOT_ID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # a UUID


@dataclass(frozen=True)
class ProcessStart:
    """When a process started, exactly: clock ticks after boot (field 22 of /proc/PID/stat), in
    which boot (the kernel's boot id) and in which pid namespace its pid is counted.

    Unlike psutil's ``create_time`` (boot time + ticks, in wall-clock seconds), nothing moves
    it: when the clock is stepped (chrony's makestep, a VM resumed, ``date -s``) the boot time
    the kernel reports moves with it, and a live run looked dead to its neighbours. A pid alone
    names different processes in different pid namespaces (containers) and after a reboot.
    """

    ticks: int
    boot: str
    pidns: int

    def as_json(self) -> dict[str, Any]:
        return {"ticks": self.ticks, "boot": self.boot, "pidns": self.pidns}

    @classmethod
    def from_json(cls, value: object) -> ProcessStart:
        """Read what as_json wrote; ValueError if it is anything else."""
        if not isinstance(value, dict):
            raise ValueError("start must be an object")
        ticks, boot, pidns = value.get("ticks"), value.get("boot"), value.get("pidns")
        if not (isinstance(ticks, int) and isinstance(boot, str) and isinstance(pidns, int)):
            raise ValueError("start must have whole ticks and pidns and a boot id")
        if isinstance(ticks, bool) or isinstance(pidns, bool):
            raise ValueError("start must have whole ticks and pidns and a boot id")
        if set(value) != {"ticks", "boot", "pidns"}:
            raise ValueError("start must have ticks, boot and pidns only")
        if not (0 <= ticks < 1 << 64 and 0 < pidns < 1 << 64 and BOOT_ID_TEXT.fullmatch(boot)):
            raise ValueError("start must have ticks and pidns of 64 bits and a boot id like the kernel's")
        return cls(ticks, boot, pidns)


@functools.cache
def boot_id() -> str:
    """This boot's id (changes at every boot, never during one)."""
    return BOOT_ID.read_text().strip()


@functools.cache
def pid_namespace() -> int:
    """The inode of the pid namespace this process (and its /proc) counts pids in."""
    return os.stat("/proc/self/ns/pid").st_ino


def process_start(pid: int) -> ProcessStart | None:
    """The start of process ``pid`` (see ProcessStart), None if it is gone.

    A zombie counts as gone: it has exited and holds nothing; only its parent (or an init that
    reaps) can remove its entry.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": the name may hold anything
    if fields[0] in ("Z", "X"):
        return None
    return ProcessStart(int(fields[19]), boot_id(), pid_namespace())


def _wall_clock_start(pid: int) -> float | None:
    """psutil's start time, as journals before ProcessStart recorded it (read for those only)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return round(process.create_time(), 2)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def another_namespace(started: ProcessStart | float | None) -> str | None:
    """Why a recorded start cannot be checked here (its pid is counted in another pid namespace
    of this boot), or None."""
    if isinstance(started, ProcessStart) and started.boot == boot_id() and started.pidns != pid_namespace():
        return (
            f"its pid is counted in another pid namespace (pid:[{started.pidns}]; this process is in "
            f"pid:[{pid_namespace()}]), so whether it still runs cannot be told from here"
        )
    return None


def is_alive(pid: int, started: ProcessStart | float | None) -> bool:
    """Is the process that started at ``started`` still running (and not a reuse of its pid)?

    Exact for a ProcessStart: another boot's process is gone; one of another pid namespace
    cannot be checked and counts as alive (never touched). An older journal's wall-clock start
    time is compared as those journals were (to 0.05 s), which a clock step can defeat.
    """
    if isinstance(started, ProcessStart):
        if started.boot != boot_id():
            return False
        if started.pidns != pid_namespace():
            return True
        now = process_start(pid)
        return now is not None and now.ticks == started.ticks
    now_wall = _wall_clock_start(pid)
    if now_wall is None:
        return False
    if started is None:
        return True  # cannot tell a reused pid apart: err on the side of not touching it
    return abs(now_wall - started) < 0.05


def executable(pid: int) -> str:
    """The program ``pid`` runs (its executable's path), "" when it cannot be read."""
    with contextlib.suppress(psutil.Error, OSError):
        return psutil.Process(pid).exe()
    return ""


def foreign_process(pid: int, recorded: ProcessStart | float | None, program: str) -> str | None:
    """Why ``pid`` may now belong to another process than the one that started at ``recorded``
    running ``program`` ("": not recorded) (pid reused: another start or executable; counted in
    another pid namespace), None when it is the same process or gone (another boot's process is
    gone)."""
    elsewhere = another_namespace(recorded)
    if elsewhere:
        return f"pid {pid}: {elsewhere}"
    if isinstance(recorded, ProcessStart) and recorded.boot != boot_id():
        return None
    now = process_start(pid)
    if now is None:
        return None
    try:
        exe = psutil.Process(pid).exe()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return f"pid {pid}: cannot read its executable"
    if isinstance(recorded, ProcessStart) and now.ticks != recorded.ticks:
        return (
            f"pid {pid} is another process now ({exe or '?'}, started {now.ticks} clock ticks after "
            f"boot, not {recorded.ticks})"
        )
    wall = _wall_clock_start(pid) if isinstance(recorded, float) else None
    if isinstance(recorded, float) and wall is not None and abs(wall - recorded) >= 0.05:
        return f"pid {pid} is another process now ({exe or '?'}, started at {wall:.2f}, not {recorded:.2f})"
    if program and exe and exe != program:  # "" while it exits: /proc/PID/exe is gone
        return f"pid {pid} now runs {exe}, not {program}"
    return None
