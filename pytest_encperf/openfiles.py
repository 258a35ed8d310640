"""Which other processes hold a file or device: through an open descriptor or a memory map.

A virtual machine, ``dd`` or a backup tool uses a disk or an image file without any hold the
block layer shows (no O_EXCL, no holder in sysfs); its descriptors show it, and so do its
memory maps: a program may map a file and close the descriptor, and still reads and writes it.
``stat`` follows /proc/PID/fd/N and /proc/PID/map_files/START-END to the file itself, so every
path to it (a link, a bind mount, another name of a device node) counts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")


class Held(NamedTuple):
    """A file another process holds: its pid, the file's stat, and whether only mapped."""

    pid: int
    info: os.stat_result
    mapped: bool  # by a memory map (/proc/PID/map_files), not by an open descriptor


def held_files(proc: Path = PROC) -> Iterator[Held]:
    """Every file every other process has open or mapped (its stat), as far as we may read.

    A process that is gone meanwhile, or whose /proc entries are not ours to read, is passed
    over. One mapping per distinct file is followed (a library is mapped several times)."""
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        with contextlib.suppress(OSError):
            for descriptor in list((entry / "fd").iterdir()):
                with contextlib.suppress(OSError):
                    yield Held(pid, os.stat(descriptor), False)
        for mapping in _distinct_mappings(entry):
            with contextlib.suppress(OSError):
                yield Held(pid, os.stat(entry / "map_files" / mapping), True)


def _distinct_mappings(entry: Path) -> list[str]:
    try:
        return mapping_names((entry / "maps").read_text())
    except (OSError, UnicodeDecodeError):
        return []


def mapping_names(maps: str) -> list[str]:
    """The map_files names (``start-end``) of one mapping of each distinct file a
    /proc/PID/maps text lists (by device and inode); anonymous memory has inode 0."""
    seen: set[tuple[str, str]] = set()
    found = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or fields[4] == "0" or (fields[3], fields[4]) in seen:
            continue
        seen.add((fields[3], fields[4]))
        start, _, end = fields[0].partition("-")
        with contextlib.suppress(ValueError):
            found.append(f"{int(start, 16):x}-{int(end, 16):x}")  # maps pads, map_files does not
    return found


def label(proc: Path, pid: int, mapped: bool) -> str:
    """``pid 812 (qemu-system-x86)``, with ``as a memory map`` when it only maps the file."""
    try:
        command = (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        command = "?"
    return f"pid {pid} ({command})" + (" as a memory map" if mapped else "")


def holders(match: Callable[[os.stat_result], str | None], proc: Path = PROC) -> dict[str, list[str]]:
    """What ``match`` names among the files other processes hold (a path, a device name) -> those
    processes (``pid 812 (qemu-system-x86)``, see label), in pid order."""
    found: dict[str, dict[int, bool]] = {}
    for held in held_files(proc):
        name = match(held.info)
        if name is not None:
            pids = found.setdefault(name, {})
            pids[held.pid] = pids.get(held.pid, True) and held.mapped  # mapped only: no descriptor
    return {
        name: [label(proc, pid, only) for pid, only in sorted(pids.items())] for name, pids in found.items()
    }
