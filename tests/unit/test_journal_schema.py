"""A malformed journal, or a bad cleanup lock, is refused and reported, never a traceback; files
and directories encperf makes have their mode whatever the umask.

The journal reader (journalschema.read) gets arbitrary bytes, arbitrary JSON and mutations of
valid journals (hypothesis): it returns a checked journal or refuses, and raises nothing else.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_encperf import deadruns, host, journal, journalschema, processes, secretdirs, trust
from pytest_encperf.journalschema import Document, Malformed
from pytest_encperf.resources import Cleanup
from pytest_encperf.secretdirs import SecretDir
from tests.functional.test_journal import NOBODY, dead_pid, needs_root, run_dir, write_journal  # noqa: F401
from tests.unit.test_journal import private_state  # noqa: F401

DEEP = "[" * 200_000


def literal(text: str) -> str:
    """``text`` as an fnmatch pattern matching itself ("resources[0]" is a character class)."""
    return re.sub(r"([\[*?])", r"[\1]", text)


def _matches(line: str, pattern: str) -> bool:
    """fnmatch with ``*`` as the only wildcard."""
    return fnmatch.fnmatchcase(line, "*".join(literal(part) for part in pattern.split("*")))


def plant(directory: Path, pid: int, text: str) -> Path:
    """A journal file of ours (0600 in a 0700 .encperf-runs) holding ``text``."""
    runs = directory / journal.RUNS_DIR
    runs.mkdir(mode=0o700, exist_ok=True)
    path = runs / f"run-{pid}-bad.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


# ------------------------------------------------------------------ malformed journals, end to end


# ------------------------------------------------------------------ a bad cleanup lock


# ------------------------------------------------------------------ modes, whatever the umask


@pytest.fixture(params=[0o277, 0o000], ids=["umask-0277", "umask-0000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_journal_lock_and_state_file_get_their_modes_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    """Under umask 0277 encperf made its own .lock and journals 0400, then refused them for ever."""
    log = journal.Journal(tmp_path)
    Cleanup(log).path(tmp_path / "x")
    assert log.write_error is None
    runs = tmp_path / journal.RUNS_DIR
    assert mode_of(runs) == 0o700 and mode_of(log.path) == 0o600
    state = journal.state_file()
    assert (
        mode_of(state) == 0o600 and mode_of(state.parent) == 0o700 and mode_of(state.parent.parent) == 0o700
    )
    assert journal.known_directories() == [tmp_path]
    assert deadruns.release_dead_runs(tmp_path) == []  # its own live journal: read, not refused
    assert mode_of(runs / ".lock") == 0o600


def test_run_key_file_and_lock_directories_get_their_modes_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    run = secretdirs.private_directory(Cleanup(None), tmp_path)
    assert mode_of(run) == 0o700
    assert mode_of(trust.make_private_dir(run / "01-plain")) == 0o700
    cleanup = Cleanup(None)
    secrets = SecretDir.create(cleanup)
    try:
        assert mode_of(secrets.path) == 0o700
        assert mode_of(secrets.write("key", b"k")) == 0o600
    finally:
        cleanup.release()
    with host.machine_lock(tmp_path / "locks" / "machine.lock", timeout=5):
        assert mode_of(tmp_path / "locks" / "machine.lock") == 0o600


# ------------------------------------------------------------------ the schema


def v3_document(directory: str = "/var/tmp") -> dict[str, Any]:
    start = {"ticks": 123, "boot": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "pidns": 4026531836}
    return {
        "version": 3,
        "pid": 4242,
        "start": start,
        "directory": directory,
        "resources": [
            {"id": 1, "kind": "path", "ident": f"{directory}/encperf-4242-ab", "label": "remove"},
            {"id": 2, "kind": "process", "ident": "4300", "detail": "/usr/bin/gocryptfs", "label": "stop",
             "start": start, "wait": 5.0},
            {"id": 3, "kind": "fscrypt-key", "ident": "0" * 32, "detail": f"{directory}/encperf-4242-ab/m"},
        ],
    }  # fmt: skip


def read_json(value: object) -> Document:
    return journalschema.read(json.dumps(value).encode())


def test_a_version_3_journal_is_read_into_typed_entries() -> None:
    document = read_json(v3_document())
    assert (document.version, document.pid, document.directory) == (3, 4242, "/var/tmp")
    assert isinstance(document.started, processes.ProcessStart) and document.started.ticks == 123
    process = document.entries[1].resource
    assert (process.kind, process.ident, process.started, process.wait) == (
        "process",
        "4300",
        document.started,
        5.0,
    )
    assert read_json(document.as_json()) == document


def test_journals_of_older_versions_with_wall_clock_starts_are_still_read() -> None:
    """docs/explanation/safety.md: "Journals of older versions, which recorded a wall-clock start time, are
    still read". Version 1 as its writer made them (no wait; a process start could be null)."""
    version_1 = {
        "version": 1, "pid": 77, "started": 1700000000.12, "directory": "/var/tmp",
        "resources": [
            {"kind": "path", "ident": "/var/tmp/encperf-77-x", "detail": "", "label": "remove", "id": 1},
            {"kind": "process", "ident": "80", "detail": "/usr/bin/encfs", "label": "stop", "id": 2,
             "started": None},
        ],
    }  # fmt: skip
    document = read_json(version_1)
    assert document.started == 1700000000.12 and document.entries[1].started is None
    version_2 = {**version_1, "version": 2, "started": None}
    version_2["resources"] = [{**version_1["resources"][1], "started": 1700000001.5, "wait": 5}]
    document = read_json(version_2)
    assert document.started is None and document.entries[0].resource.started == 1700000001.5
    assert read_json(document.as_json()) == document


def test_the_run_token_children_mark_and_daemon_entries_are_read_and_checked() -> None:
    """Fields other changes add to version 3 (a run token, the mark its tools carry, daemons
    registered before they start) are read when present, and checked like every other."""
    daemon = {"id": 4, "kind": "daemon", "ident": "encperf-4242-ab/7", "detail": "/usr/bin/encfs", "wait": 5}
    extended = {**v3_document(), "token": "0123456789abcdef", "children": "encperf-4242-5eed"}
    extended["resources"] = [*extended["resources"], daemon]
    document = read_json(extended)
    assert (document.token, document.children, document.entries[3].wait) == (
        "0123456789abcdef",
        "encperf-4242-5eed",
        5.0,
    )
    assert read_json(document.as_json()) == document
    for change, why in [
        ({"token": "0123"}, "token must look like [0-9a-f]{16}"),
        ({"token": 7}, "token must be a string"),
        ({"children": "encperf-1-5eed"}, "children must look like encperf-4242-[0-9a-f]{1,64}"),
    ]:
        with pytest.raises(Malformed, match=re.escape(why)):
            read_json({**extended, **change})
    extended["resources"][3] = {**daemon, "started": 1.0}
    with pytest.raises(Malformed, match="started is recorded for process entries only, not 'daemon'"):
        read_json(extended)


def test_the_safety_page_states_the_limits_the_schema_checks() -> None:
    safety = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "safety.md"
    readme = " ".join(safety.read_text().split())
    assert journalschema.MAX_BYTES == 1 << 20
    assert "at most 1 MiB (its size is checked before it is read)" in readme
    assert f"pids up to the kernel's {journalschema.PID_MAX}" in readme
    assert f"paths up to {journalschema.MAX_TEXT} characters without NUL" in readme
    assert f"at most {journalschema.MAX_ENTRIES:,} entries" in readme


def mutated(change: dict[str, Any], where: int | None = None) -> dict[str, Any]:
    """v3_document with ``change`` applied to the top (``where`` None) or to entry ``where``;
    a value of ... removes the field."""
    document = v3_document()
    target = document if where is None else document["resources"][where]
    for key, value in change.items():
        if value is ...:
            del target[key]
        else:
            target[key] = value
    return document


@pytest.mark.parametrize(
    ("document", "why"),
    [
        (mutated({"version": 4}), "version must be one of 1, 2, 3 (the formats this encperf reads)"),
        (mutated({"version": True}), "version must be one of 1, 2, 3 (the formats this encperf reads)"),
        (mutated({"pid": 0}), f"pid must be a whole number from 1 to {journalschema.PID_MAX}"),
        (mutated({"pid": (1 << 22) + 1}), f"pid must be a whole number from 1 to {journalschema.PID_MAX}"),
        (mutated({"pid": "4242"}), f"pid must be a whole number from 1 to {journalschema.PID_MAX}"),
        (mutated({"resources": ...}), "the journal has no resources"),
        (mutated({"resources": {}}), "resources must be a list"),
        (mutated({"resources": [{}] * 10_001}), "resources must hold at most 10000 entries, not 10001"),
        (mutated({"owner": "me"}), "the journal has fields no encperf writes: owner"),
        (mutated({"directory": "var/tmp"}), "directory must be an absolute path"),
        (mutated({"directory": "/var/tmp\0/x"}), "directory holds a NUL character"),
        (mutated({"started": 1.0}), "start and started are both given"),
        (mutated({"start": {"ticks": -1, "boot": "x", "pidns": 1}}), "start must have ticks and pidns *"),
        (mutated({"id": 1}, 1), "two resources have the same id"),
        (mutated({"id": 0}, 0), "resources[0].id must be a whole number from 1 to 2147483647"),
        (mutated({"kind": "other"}, 0), "resources[0].kind 'other' is not a resource kind name"),
        (mutated({"kind": "Path/.."}, 0), "resources[0].kind 'Path/..' is not a resource kind name"),
        (mutated({"ident": ""}, 0), "resources[0].ident is empty"),
        (mutated({"ident": "/a" * 2049}, 0), "resources[0].ident must be at most 4096 characters"),
        (
            mutated({"ident": "/var/tmp/\ud800"}, 0),
            "resources[0].ident is not valid Unicode (a lone surrogate)",
        ),
        (mutated({"detail": 5}, 0), "resources[0].detail must be a string"),
        (
            mutated({"wait": 1.0}, 0),
            "resources[0].wait is recorded for process and daemon entries only, not 'path'",
        ),
        (mutated({"ident": "0"}, 1), f"resources[1].ident of a process must be a pid from 1 to {1 << 22}"),
        (mutated({"ident": "٣"}, 1), f"resources[1].ident of a process must be a pid from 1 to {1 << 22}"),
        (mutated({"wait": 61}, 1), "resources[1].wait must be a number from 0 to 60"),
        (mutated({"wait": float("nan")}, 1), "resources[1].wait must be a number from 0 to 60"),
        (mutated({"wait": 1e999}, 1), "resources[1].wait must be a number from 0 to 60"),
        (
            mutated({"start": ...}, 1),
            None,
        ),  # no start at all: read, refused later (cannot tell it is the run's)
    ],
)
def test_each_field_is_checked(document: dict[str, Any], why: str | None) -> None:
    if why is None:
        assert read_json(document).entries[1].started is None
        return
    with pytest.raises(Malformed) as refused:
        read_json(document)
    assert _matches(str(refused.value), why), str(refused.value)


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff\xfe\x00", b"[]", b"null", b"1e999", DEEP.encode(), b'{"a":' * 100_000, b"9" * 5000],
    ids=["empty", "not-utf8", "list", "null", "infinity", "deep-list", "deep-object", "huge-int"],
)
def test_what_is_no_journal_is_refused(data: bytes) -> None:
    with pytest.raises(Malformed):
        journalschema.read(data)


# ------------------------------------------------------------------ properties


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FIELDS = ["version", "pid", "start", "started", "token", "children", "directory", "resources", "extra"]
ENTRY_FIELDS = ["id", "kind", "ident", "detail", "label", "start", "started", "wait", "extra"]


def read_or_refuse(data: bytes) -> None:
    """The property: a Document that reads back as itself, or Malformed; nothing else."""
    try:
        document = journalschema.read(data)
    except Malformed:
        return
    assert isinstance(document, Document)
    assert read_json(document.as_json()) == document


@given(st.binary(max_size=2000))
@example(DEEP.encode())
@example(b'{"version": 3, "pid": 1, "started": NaN, "directory": "/", "resources": []}')
def test_any_bytes_are_read_or_refused(data: bytes) -> None:
    read_or_refuse(data)


@given(JSON)
def test_any_json_is_read_or_refused(value: object) -> None:
    read_or_refuse(json.dumps(value).encode())


@given(st.data())
def test_any_mutation_of_a_valid_journal_is_read_or_refused(data: st.DataObject) -> None:
    document = v3_document()
    for _ in range(data.draw(st.integers(1, 3))):
        entries = document.get("resources")
        where = (
            data.draw(st.sampled_from([None, *range(len(entries))])) if isinstance(entries, list) else None
        )
        target = document if where is None or not isinstance(entries[where], dict) else entries[where]
        key = data.draw(st.sampled_from(FIELDS if target is document else ENTRY_FIELDS))
        if data.draw(st.booleans()):
            target.pop(key, None)  # a field missing
        else:
            target[key] = data.draw(JSON)  # a field of the wrong type, or one too many
    read_or_refuse(json.dumps(document).encode())


# any character, with those that matter to a path (NUL, "/", ".") made common
TEXT = st.text(st.sampled_from("\0/.a") | st.characters(), min_size=1, max_size=40)
RUN = "{run}"  # replaced by the dead run's directory: names inside it get past the scope's text checks
INSIDE = TEXT.map(lambda part: f"{RUN}/{part}") | TEXT.map(lambda part: f"{RUN}/{part}/x")
NAME = TEXT | st.integers(1, 1 << 22).map(str) | st.sampled_from(["/etc", "/dev/loop0", "/", RUN]) | INSIDE
ENTRY = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["path", "mount", "loop", "dm", "process", "fscrypt-key", "ecryptfs-key",
                                 "veracrypt-volume", "daemon", "teleporter"]),
        "ident": NAME,
        "detail": st.just("") | NAME,
    }
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(ENTRY, max_size=6))
def test_cleanup_of_any_valid_journal_never_raises(tmp_path: Path, entries: list[dict[str, Any]]) -> None:
    """Whatever a journal that passes the schema names, a dry run only reports."""
    pid = 4_194_304  # above the default pid_max: never a live process
    run = tmp_path / f"encperf-{pid}-x1"
    run.mkdir(mode=0o700, exist_ok=True)
    numbered = [
        {"id": i + 1, **{key: value.replace(RUN, str(run)) for key, value in entry.items()}}
        for i, entry in enumerate(entries)
    ]
    document = {"version": 2, "pid": pid, "started": 1.0, "directory": str(tmp_path), "resources": numbered}
    text = json.dumps(document)
    try:
        journalschema.read(text.encode())
    except Malformed:
        return
    path = plant(tmp_path, pid, text)
    found = deadruns.release_dead_runs(tmp_path, dry_run=True)
    assert [run.pid for run in found] == [pid] and path.read_text() == text
