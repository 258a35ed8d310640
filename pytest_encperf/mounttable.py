"""The kernel's mount tables (/proc/self/mounts, /proc/self/mountinfo, /proc/swaps), read exactly.

The kernel writes a path in these files with space, tab, newline and backslash as octal escapes
(``\\040 \\011 \\012 \\134``, its ``mangle``/``seq_escape``) and every other byte as it is, so a
field is split on single spaces only (a carriage return or a non-ASCII byte of a name is not a
separator) and then decoded. Every reader of these files in the package goes through here:
a directory named with a newline must be found where it is, or its mounts leak.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")

_OCTAL_ESCAPE = re.compile(rb"\\([0-3][0-7]{2})")


def unescape(field: str | bytes) -> str:
    """A mount-table field as the path (or name) it stands for: every ``\\ooo`` octal escape
    decoded to its byte, the bytes then decoded as the file system encoding does (UTF-8 names
    come back as text, undecodable bytes as surrogates that ``os.fsencode`` restores)."""
    raw = os.fsencode(field) if isinstance(field, str) else field
    return os.fsdecode(_OCTAL_ESCAPE.sub(lambda match: bytes([int(match[1], 8)]), raw))


def escape(path: str) -> str:
    """What the kernel writes for ``path`` in a mount table (the inverse of :func:`unescape`)."""
    raw = os.fsencode(path)
    for char in b"\\ \t\n":  # backslash first, or the others' escapes would be escaped again
        raw = raw.replace(bytes([char]), b"\\%03o" % char)
    return os.fsdecode(raw)


def parse(data: bytes) -> list[list[str]]:
    """Each line of a mount table's content, its fields split on single spaces and decoded
    (split on newlines only: a name's carriage return is not escaped)."""
    return [[unescape(field) for field in row.split(b" ")] for row in data.split(b"\n") if row]


def lines(table: Path) -> list[list[str]]:
    """Each line of the mount table ``table`` (see parse)."""
    return parse(table.read_bytes())


def mountpoints() -> list[str]:
    """Every mount point in /proc/self/mounts (field 2), decoded, in mount order."""
    return [point for point, _ in mounts()]


def mounts() -> list[tuple[str, str]]:
    """(mount point, file system type) of every mount in /proc/self/mounts, decoded, in order."""
    return [(fields[1], fields[2]) for fields in lines(MOUNTS) if len(fields) > 2]
