"""The resource journal's file format: one schema, checked whole before anything in it is used.

A journal is read from a directory other users may share (/var/tmp), by a process that will
unmount, detach and delete what it names, and ``encperf cleanup`` and every session's start
read all journals there. So a journal is read into typed objects (:class:`Document`,
:class:`Entry`) only when every field has its type, range and length; anything else (bytes
that are no JSON, a file larger than :data:`MAX_BYTES`, nesting deep enough to exhaust the
parser's recursion, a number out of range, a field too many or missing) is :class:`Malformed`,
with the reason, and the journal is refused as a whole, never half used.

Formats read (``version``): 3 records exact process starts (``start``: clock ticks after boot,
boot id, pid namespace: processes.ProcessStart); 1 and 2 recorded psutil's wall-clock start
time (``started``), 2 added each process entry's ``wait``. Fields of version 3 that other
changes add are read when present and checked like the rest: the run ``token`` (16 hex digits,
in its device-mapper names), the ``children`` mark its tools carry (``encperf-<pid>-<hex>``),
and entries of kind ``daemon`` with a ``wait``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from .processes import ProcessStart
from .resources import TOKEN_PATTERN, Resource

VERSIONS = (1, 2, 3)
MAX_BYTES = 1 << 20  # a run journals tens of resources: a few KB
MAX_ENTRIES = 10_000
MAX_TEXT = 4096  # PATH_MAX: paths, key ids, executables
MAX_LABEL = 2 * MAX_TEXT  # "detach <device>" and the like: a verb and up to two paths
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT
ID_MAX = (1 << 31) - 1
WALL_CLOCK_MAX = 1e11  # seconds since 1970: year 5138
WAIT_MAX = 60.0
KIND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")  # "path", "fscrypt-key", a plugin's
PID_TEXT = re.compile(r"[1-9][0-9]{0,6}")
TOKEN = re.compile(TOKEN_PATTERN)  # the run token in its device-mapper names
START_FIELDS = ("start", "started")  # processes only
WAITING_KINDS = ("process", "daemon")  # entries that may record a ``wait``


class Malformed(ValueError):
    """Not a journal this version of encperf wrote or reads; the message says which field and why."""


Started = ProcessStart | float | None


@dataclass(frozen=True)
class Entry:
    """One registered resource of a journal, checked (see :func:`entry`)."""

    id: int
    kind: str
    ident: str
    detail: str = ""
    label: str = ""
    started: Started = None
    wait: float = 0.0

    @property
    def resource(self) -> Resource:
        return Resource(self.kind, self.ident, self.detail, self.started, self.wait)

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "kind": self.kind, "ident": self.ident}
        data.update(detail=self.detail, label=self.label)
        if self.kind == "process":
            data.update(start_json(self.started))
        if self.kind in WAITING_KINDS:
            data.update(wait=self.wait)
        return data


@dataclass(frozen=True)
class Document:
    """A whole journal, checked (see :func:`document`)."""

    version: int
    pid: int
    started: Started
    directory: str
    entries: tuple[Entry, ...]
    token: str | None = None
    children: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The document as it is written again (with fewer entries, after a partial release)."""
        data: dict[str, Any] = {"version": self.version, "pid": self.pid, **start_json(self.started)}
        data.update({name: value for name in ("token", "children") if (value := getattr(self, name))})
        data.update(directory=self.directory, resources=[entry.as_json() for entry in self.entries])
        return data


def start_json(started: Started) -> dict[str, Any]:
    """A process start as journal fields: ``start`` (exact), or an older journal's ``started``."""
    if isinstance(started, ProcessStart):
        return {"start": started.as_json()}
    return {"started": started}


def start_of(fields: dict[str, Any], where: str = "") -> Started:
    """The process start a journal (or one of its entries) records; Malformed if it is not one.
    Journals before format 3 recorded psutil's wall-clock start time (``started``)."""
    if "start" in fields and "started" in fields:
        raise Malformed(f"{where}start and {where}started are both given")
    if "start" in fields:
        try:
            return ProcessStart.from_json(fields["start"])
        except ValueError as exc:
            raise Malformed(f"{where}{exc}") from None
    started = fields.get("started")
    return None if started is None else _number(started, f"{where}started", 0.0, WALL_CLOCK_MAX)


def read(data: bytes) -> Document:
    """A journal file's bytes as a checked Document; Malformed otherwise, never anything else."""
    if len(data) > MAX_BYTES:
        raise Malformed(f"larger than {MAX_BYTES} bytes")
    try:
        value = json.loads(data)
    except RecursionError:  # json's parser recurses once per "[" or "{"
        raise Malformed("not a journal (nested too deeply)") from None
    except ValueError as exc:  # also bad UTF-8 and integers of more than 4300 digits
        raise Malformed(f"not a journal (unreadable JSON: {str(exc).splitlines()[0][:200]})") from None
    return document(value)


def document(value: object) -> Document:
    """``value`` (parsed JSON) as a checked Document; Malformed otherwise."""
    optional = (*START_FIELDS, "token", "children")
    fields = _fields(value, "the journal", ("version", "pid", "directory", "resources"), optional)
    version = fields["version"]
    if not isinstance(version, int) or isinstance(version, bool) or version not in VERSIONS:
        readable = ", ".join(map(str, VERSIONS))
        raise Malformed(f"version must be one of {readable} (the formats this encperf reads)")
    pid = _whole(fields["pid"], "pid", 1, PID_MAX)
    started = start_of(fields)
    token = _optional_text(fields, "token", TOKEN)
    children = _optional_text(fields, "children", re.compile(rf"encperf-{pid}-[0-9a-f]{{1,64}}"))
    directory = _text(fields["directory"], "directory", MAX_TEXT)
    if not os.path.isabs(directory):
        raise Malformed("directory must be an absolute path")
    listed = fields["resources"]
    if not isinstance(listed, list):
        raise Malformed("resources must be a list")
    if len(listed) > MAX_ENTRIES:
        raise Malformed(f"resources must hold at most {MAX_ENTRIES} entries, not {len(listed)}")
    entries = tuple(entry(item, f"resources[{index}].") for index, item in enumerate(listed))
    ids = [e.id for e in entries]
    if len(set(ids)) != len(ids):
        raise Malformed("two resources have the same id")
    return Document(version, pid, started, directory, entries, token, children)


def entry(value: object, where: str = "") -> Entry:
    """One journal entry as a checked Entry; Malformed otherwise."""
    optional = ("detail", "label", *START_FIELDS, "wait")
    fields = _fields(value, where.rstrip(".") or "entry", ("id", "kind", "ident"), optional)
    number = _whole(fields["id"], f"{where}id", 1, ID_MAX)
    kind = _text(fields["kind"], f"{where}kind", 64)
    if not KIND_NAME.fullmatch(kind) or kind == "other":  # "other": in-memory actions, never journaled
        raise Malformed(f"{where}kind {kind!r} is not a resource kind name")
    ident = _text(fields["ident"], f"{where}ident", MAX_TEXT)
    if not ident:
        raise Malformed(f"{where}ident is empty")
    detail = _text(fields.get("detail", ""), f"{where}detail", MAX_TEXT)
    label = _text(fields.get("label", ""), f"{where}label", MAX_LABEL)
    for name, kinds in [*((name, ("process",)) for name in START_FIELDS), ("wait", WAITING_KINDS)]:
        if name in fields and kind not in kinds:
            raise Malformed(f"{where}{name} is recorded for {' and '.join(kinds)} entries only, not {kind!r}")
    if kind == "process" and (not PID_TEXT.fullmatch(ident) or int(ident) > PID_MAX):
        raise Malformed(f"{where}ident of a process must be a pid from 1 to {PID_MAX}")
    started = start_of(fields, where)
    wait = _number(fields.get("wait", 0.0), f"{where}wait", 0.0, WAIT_MAX)
    return Entry(number, kind, ident, detail, label, started, wait)


# ---------------------------------------------------------------- field types


def _fields(value: object, what: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(f"{what} must be an object, not {_json_type(value)}")
    missing = [name for name in required if name not in value]
    if missing:
        raise Malformed(f"{what} has no {', '.join(missing)}")
    unknown = sorted(name for name in value if name not in required and name not in optional)
    if unknown:
        raise Malformed(f"{what} has fields no encperf writes: {', '.join(unknown)[:200]}")
    return value


def _json_type(value: object) -> str:
    names = {type(None): "null", bool: "true/false", int: "a number", float: "a number", str: "a string"}
    return names.get(type(value), "an array")


def _optional_text(fields: dict[str, Any], name: str, pattern: re.Pattern[str]) -> str | None:
    if name not in fields:
        return None
    value = _text(fields[name], name, 100)
    if not pattern.fullmatch(value):
        raise Malformed(f"{name} must look like {pattern.pattern}")
    return value


def _whole(value: object, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise Malformed(f"{what} must be a whole number from {low} to {high}")
    return value


def _number(value: object, what: str, low: float, high: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise Malformed(f"{what} must be a number from {low:g} to {high:g}")
    return float(value)  # NaN fails the comparison; 1e999, read as infinity, the range


def _text(value: object, what: str, limit: int) -> str:
    """A string the operating system can take as a name: no NUL (os functions raise ValueError
    on it), no lone surrogate (not encodable), at most ``limit`` characters."""
    if not isinstance(value, str):
        raise Malformed(f"{what} must be a string")
    if len(value) > limit:
        raise Malformed(f"{what} must be at most {limit} characters")
    if "\0" in value:
        raise Malformed(f"{what} holds a NUL character")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise Malformed(f"{what} is not valid Unicode (a lone surrogate)") from None
    return value
