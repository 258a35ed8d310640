"""Saved runs: ``<storage>/<machine-id>/NNNN_<name>.json`` (no pytest).

The document keeps pytest-benchmark's outer shape (``machine_info``, ``commit_info``,
``datetime``, ``version``, ``benchmarks[]`` with ``group``, ``name``, ``fullname``, ``params``,
``stats``, ``extra_info``) so ``pytest-benchmark --storage file://.encperf compare`` reads it.
``stats`` are in seconds per GiB moved (lower is better, like a benchmark's time); encperf's own
fields, including every round of both sides, live in ``extra_info["encperf"]``. Plain's side of each
pair also has an entry of its own, for pytest-benchmark's table; encperf reads past it (see
benchmarkentries).

Files are written to a temporary name and hard-linked to the final name, which fails if that
name exists: a run never overwrites another, even when two sessions save at once.

A run that did not finish (interrupted, stopped early, tests left unrun) is saved with
``encperf["incomplete"]`` saying why; a name or ``latest`` never picks it, ``NAME!`` does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_benchmark.utils import get_commit_info

from . import __version__, benchmarkentries, machine
from .lifecycledata import lifecycle_samples
from .model import LATENCY_MEANING, Result, RunData

FORMAT = 1  # extra_info["encperf"]["format"]
_FILE = re.compile(r"^(\d{4})_(.+)\.json$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
EXPLICIT = "!"  # after a reference (base!, latest!): an incomplete run may be picked too


class StorageError(Exception):
    """A saved run is missing, unreadable or malformed; the message names the file."""


class NoSavedRun(StorageError):
    """Nothing matches the reference (not an error in a first run: there is no reference run yet)."""


@dataclass(frozen=True)
class SavedRun:
    path: Path
    machine_id: str
    number: int
    name: str

    @property
    def label(self) -> str:
        return f"{self.machine_id}/{self.path.name}"

    @property
    def datetime_key(self) -> float:
        """When the run was saved (its document's ``datetime``): orders runs of several machines
        (numbers are per machine). A file's modification time is no guide: a checkout or a
        restored CI cache gives every file the same one."""
        return self._facts()[0]

    @property
    def incomplete(self) -> str:
        """Why the run did not finish ("" when it did, or when the file cannot be read: loading
        it then says what is wrong)."""
        return self._facts()[1]

    def _facts(self) -> tuple[float, str]:
        try:
            stat = self.path.stat()
        except OSError:
            return 0.0, ""
        return _saved_facts(str(self.path), stat.st_mtime_ns)


@functools.lru_cache(maxsize=1024)
def _saved_facts(path: str, mtime_ns: int) -> tuple[float, str]:
    """The document's ``datetime`` as a timestamp (the file's mtime when it has none) and its
    ``encperf["incomplete"]`` reason ("" for a complete run)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return mtime_ns / 1e9, ""
    return _datetime_of(doc, mtime_ns / 1e9), incomplete_reason(doc)


def _datetime_of(doc: Any, default: float) -> float:
    try:
        return dt.datetime.fromisoformat(doc["datetime"]).timestamp()
    except (ValueError, KeyError, TypeError):
        return default


def incomplete_reason(doc: Any) -> str:
    """Why a saved document's run did not finish ("" when it did)."""
    own = doc.get("encperf") if isinstance(doc, dict) else None
    reason = own.get("incomplete") if isinstance(own, dict) else None
    return str(reason) if reason else ""


def parse_name(text: str) -> str:
    """A run name for ``--encperf-save``: letters, digits and ``._+-``, starting with a letter or digit."""
    name = str(text).strip()
    if not _NAME.match(name) or len(name) > 100:
        raise ValueError(f"bad run name {text!r}: expected letters, digits and ._+- (e.g. main, v1.2, pr-17)")
    return name


def commit_info() -> dict[str, Any]:
    return get_commit_info()  # of the project being measured (git/hg in the working directory)


def autosave_name(commit: dict[str, Any], now: dt.datetime) -> str:
    """``<commit id>_<UTC time>`` (``_dirty`` with uncommitted changes), like pytest-benchmark's autosave."""
    commit_id = str(commit.get("id") or "unversioned")[:12]
    name = f"{commit_id}_{now.astimezone(dt.UTC):%Y%m%d_%H%M%S}"
    return f"{name}_dirty" if commit.get("dirty") else name


# ----------------------------------------------------------------------------- documents


def benchmark_entry(result: Result) -> dict[str, Any]:
    per_call = result.workload.is_timed_function  # seconds per call, not per GiB (benchmarkentries)
    return {
        "group": result.workload.name,
        **benchmarkentries.entry_names(
            result.workload.name, result.backend, benchmarkentries.unit_of(result.workload, result.rounds)
        ),
        "params": {"backend": result.backend, "workload": result.workload.name},
        "options": dict(benchmarkentries.OPTIONS),
        "stats": benchmarkentries.seconds_per_gib_stats(result.rounds, per_call),
        "extra_info": {
            "mb_per_s": result.median("mb_per_s") if result.rounds else None,
            "iops": result.median("iops") if result.rounds else None,
            "lat_p99_us": result.median("lat_p99_us") if result.rounds else None,
            "cpu_s_per_gib": result.median("cpu_s_per_gib") if result.rounds else None,
            "vs_plain_percent": result.change_percent,  # positive: faster than plain
            # the 95% interval of the overhead over the paired rounds (model.OverheadInterval)
            "overhead_interval": interval.to_dict() if (interval := result.overhead_interval) else None,
            "latency": LATENCY_MEANING,  # what lat_p99_us (and each round's lat_*) measures
            # rounds of (this backend, its plain baseline) each caveat applies to (model.CAVEATS)
            "caveats": {key: list(counts) for key, counts in result.caveats.items()},
            # a read beating plain through memory below the volume (model.Result.cached_below)
            "cached_below": result.cached_below,
            # rounds of both sides during which others kept the machine busy (Measurement.busy)
            "busy_rounds": result.busy_rounds,
            # rounds left out of "stats" (a round that moved nothing has no time per GiB)
            "stats_left_out": benchmarkentries.stats_left_out(result.rounds, per_call),
            "device_per_logical": {
                "volume": result.device_per_logical().to_dict(),
                "plain": result.device_per_logical(baseline=True).to_dict(),
            },
            "encperf": {"format": FORMAT, **result.to_dict()},
        },
    }


def document(
    results: Sequence[Result],
    machine_info: dict[str, Any],
    machine_id: str,
    commit: dict[str, Any],
    settings: dict[str, Any],
    now: dt.datetime,
    incomplete: str = "",
) -> dict[str, Any]:
    """A saved run's document; ``incomplete``: why the run did not finish (kept in
    ``encperf["incomplete"]``, absent for a run that did)."""
    own: dict[str, Any] = {"format": FORMAT, "settings": settings}
    if incomplete:
        own["incomplete"] = incomplete
    measured = [result for result in results if result.rounds]
    return {
        "machine_info": {**machine_info, "machine_id": machine_id},
        "commit_info": commit,
        "datetime": now.astimezone(dt.UTC).isoformat(),
        "version": __version__,
        "encperf": own,
        "benchmarks": [
            *(benchmark_entry(result) for result in measured),
            *(entry for entry in map(benchmarkentries.plain_entry, measured) if entry),
        ],
    }


def results_of(doc: Any, source: str = "document") -> list[Result]:
    """The Results of a saved document; StorageError naming ``source`` when it is not ours."""
    try:
        entries = doc["benchmarks"]
        results = []
        for entry in benchmarkentries.measured(entries):
            data = entry["extra_info"]["encperf"]
            if data.get("format") != FORMAT:
                raise ValueError(f"unsupported encperf format {data.get('format')!r} (expected {FORMAT})")
            results.append(Result.from_dict(data))
        return results
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise StorageError(f"{source}: not an encperf result file ({detail})") from None


def load(path: Path) -> tuple[dict[str, Any], list[Result]]:
    """Read a saved run; StorageError naming the file if it is unreadable or malformed."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise StorageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StorageError(f"{path}: corrupted (not valid JSON: {exc})") from None
    return doc, results_of(doc, str(path))


# ----------------------------------------------------------------------------- files


def list_runs(storage: Path, machine_id: str | None = None) -> list[SavedRun]:
    """Saved runs, by machine id then number; only one machine's when ``machine_id`` is given."""
    runs: list[SavedRun] = []
    if not Path(storage).is_dir():
        return runs
    folders = [Path(storage) / machine_id] if machine_id else sorted(p for p in Path(storage).iterdir())
    for folder in folders:
        if not folder.is_dir():
            continue
        for file in folder.iterdir():
            match = _FILE.match(file.name)
            if match and file.is_file():
                runs.append(SavedRun(file, folder.name, int(match.group(1)), match.group(2)))
    return sorted(runs, key=lambda run: (run.machine_id, run.number, run.name))


def save(storage: Path, machine_id: str, name: str, doc: dict[str, Any]) -> Path:
    """Write ``doc`` as the next ``NNNN_<name>.json`` of this machine, atomically, never overwriting."""
    folder = Path(storage) / machine_id
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        for _ in range(1000):
            number = max((run.number for run in list_runs(storage, machine_id)), default=0) + 1
            final = folder / f"{number:04d}_{name}.json"
            try:
                os.link(tmp, final)  # atomic, and refuses an existing name (rename would replace it)
            except FileExistsError:
                continue  # another session took this number: take the next one
            return final
        raise StorageError(f"{folder}: could not find a free run number")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write a report file atomically (temp file + rename); reports may be replaced."""
    write_report(path, json.dumps(doc, indent=2, default=str) + "\n")


def write_report(path: Path, text: str) -> None:
    """Write a report (JSON, HTML) atomically: a temporary file in the same directory, renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a report is for reading
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _named(ref: str) -> bool:
    ref = ref.removesuffix(EXPLICIT)
    return ref not in ("", "latest") and not ref.isdigit()


def folder_machine_info(folder: Path) -> dict[str, Any]:
    """The machine info of a machine's newest readable run ({} when none can be read)."""
    for run in reversed(list_runs(folder.parent, folder.name)):
        try:
            doc = json.loads(run.path.read_text(encoding="utf-8"))
            return dict(doc.get("machine_info") or {})
        except (OSError, ValueError, AttributeError):
            continue
    return {}


def machine_ids(storage: Path, machine_id: str, info: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """The ids in ``storage`` of this machine, ``machine_id`` first, then every id with the same
    hardware (CPU, cores, flags, disk model) and host name as ``info``: a kernel or driver update
    gives a new id, not a new machine; and the ids of other hosts with the same hardware
    (identical servers). ``machine_id`` itself is another host's when its runs were saved there
    (a fleet member before fleets told identical servers apart)."""
    mine: list[str] = [machine_id]
    others: list[str] = []
    if info and Path(storage).is_dir():
        for folder in sorted(Path(storage).iterdir()):
            other = folder_machine_info(folder) if folder.is_dir() else None
            if not other:
                continue
            if folder.name == machine_id:
                if other.get("node") != info.get("node"):
                    mine.remove(machine_id)
                    others.insert(0, machine_id)
            elif machine.same_machine(other, info):
                mine.append(folder.name)
            elif machine.same_hardware(other, info):
                others.append(folder.name)
    return mine, others


def resolve(
    storage: Path, ref: str, machine_id: str | None, machine_info: dict[str, Any] | None = None
) -> tuple[SavedRun, str | None]:
    """Find the run ``ref`` names: ``latest``, a number (``3``, ``0003``), a name (``main``: its
    newest run), ``<machine-id>/<number or name>``, or a file path.

    ``latest`` and names look among this machine's runs and those of machines with the same
    hardware (``machine_info``; newest first), numbers among this machine id's only. A name found
    only on other hardware comes with a warning; ``latest`` never leaves this hardware.
    ``latest`` and names pick complete runs only (a newer incomplete one skipped is said in the
    warning); ``NAME!`` / ``latest!`` may pick an incomplete run too, and a number or a path picks
    the run it names: both with a warning that it is incomplete.
    Raises NoSavedRun saying what was searched when nothing matches (and which incomplete runs
    matched but were left out).
    """
    ref = str(ref).strip()
    explicit = ref.endswith(EXPLICIT)
    asked = ref
    ref = ref.removesuffix(EXPLICIT)
    path = Path(ref)
    if ref.endswith(".json") and path.is_file():
        match = _FILE.match(path.name)
        number, name = (int(match.group(1)), match.group(2)) if match else (0, path.stem)
        run = SavedRun(path, path.parent.name, number, name)
        return run, _warnings(_other_machine(run, machine_id, machine_info), _asked_for(run, asked))
    everyone = list_runs(storage)
    here = machine_id
    if "/" in ref:
        machine_id, ref = ref.split("/", 1)
        tiers = [list_runs(storage, machine_id)]
    elif machine_id is None:  # the CLI: every machine
        tiers = [everyone]
    elif ref.isdigit():
        tiers = [list_runs(storage, machine_id)]
    else:  # this machine's id; then this machine under other ids (kernel updates); then same hardware
        mine, others = machine_ids(storage, machine_id, machine_info)
        tiers = [
            [run for run in everyone if run.machine_id == machine_id and machine_id in mine],
            [run for run in everyone if run.machine_id in mine and run.machine_id != machine_id],
            [run for run in everyone if run.machine_id in others],
        ]
    tiered = [run for runs in tiers for run in runs]
    left_out: list[SavedRun] = []  # incomplete runs a name or latest matched

    def newest(runs: list[SavedRun]) -> SavedRun:
        if len({run.machine_id for run in runs}) == 1:
            return max(runs, key=lambda run: run.number)
        return max(runs, key=lambda run: (run.datetime_key, run.number))

    def pick(runs: list[SavedRun]) -> SavedRun | None:
        if ref in ("", "latest"):
            chosen = runs
        elif ref.isdigit():
            chosen = [run for run in runs if run.number == int(ref)]
        else:
            chosen = [run for run in runs if run.name == ref or run.path.name == ref]
        if ref.isdigit() and len({run.machine_id for run in chosen}) > 1:
            labels = ", ".join(run.label for run in chosen)
            raise StorageError(f"run {ref} is ambiguous ({labels}): name it as <machine-id>/{ref}")
        if not explicit and not ref.isdigit():  # a name or latest: complete runs only
            left_out.extend(run for run in chosen if run.incomplete)
            chosen = [run for run in chosen if not run.incomplete]
        return newest(chosen) if chosen else None

    def found(run: SavedRun) -> tuple[SavedRun, str | None]:
        newer = [other for other in left_out if other.datetime_key >= run.datetime_key]
        skipped = (
            f"left out the newer incomplete run {_incomplete_label(newest(newer))}: "
            f"add {EXPLICIT} to use it ({ref or 'latest'}{EXPLICIT})"
            if newer
            else None
        )
        return run, _warnings(_other_machine(run, here, machine_info), _asked_for(run, asked), skipped)

    for runs in tiers:
        picked = pick(runs)
        if picked is not None:
            return found(picked)
    if _named(ref):  # a name may come from another machine
        picked = pick([r for r in everyone if r not in tiered])
        if picked is not None:
            return found(picked)
    where = f"{Path(storage) / machine_id}" if machine_id else str(storage)
    if left_out:
        only = newest(left_out)
        raise NoSavedRun(
            f"no complete saved run matches {ref or 'latest'!r} in {where}: {len(left_out)} matching "
            f"run(s) incomplete, not used (the newest: {_incomplete_label(only)}); to compare with "
            f"it anyway, ask for {ref or 'latest'}{EXPLICIT}"
        )
    known = ", ".join(run.label for run in everyone[-5:]) or "none"
    raise NoSavedRun(f"no saved run matches {ref or 'latest'!r} in {where} (saved runs: {known})")


def _incomplete_label(run: SavedRun) -> str:
    return f"{run.label} ({run.incomplete})"


def _asked_for(run: SavedRun, asked: str) -> str | None:
    """The warning for an incomplete run picked because the user named it (a number, a path,
    ``NAME!``)."""
    if not run.incomplete:
        return None
    return f"{_incomplete_label(run)} is incomplete: used because {asked!r} asks for it"


def _warnings(*found: str | None) -> str | None:
    return "; ".join(text for text in found if text) or None


def history(storage: Path, reference: SavedRun, ref: str, count: int) -> list[SavedRun]:
    """Up to ``count`` saved runs for the run-to-run spread: the reference run and the runs
    saved before it on its machine (its hardware and host name), newest first, never an
    incomplete one; only runs of the same name when ``ref`` named one (``main``), so a history
    of a branch is not mixed with other branches' runs."""
    if count <= 0:
        return []
    info = folder_machine_info(reference.path.parent)
    ids, _ = machine_ids(storage, reference.machine_id, info)
    named = _named(ref.split("/", 1)[-1])

    candidates = [
        run
        for run in list_runs(storage)
        if run.machine_id in ids
        and run.path != reference.path
        and run.datetime_key <= reference.datetime_key
        and (not named or run.name == reference.name)
        and not run.incomplete  # an interrupted run is a reference run only when asked for, never history
    ]
    candidates.sort(key=lambda run: (run.datetime_key, run.number), reverse=True)  # ties: by number
    return [reference, *candidates][:count]


def load_run(run: SavedRun) -> RunData:
    """A saved run as the gate compares it (its results, settings and machine)."""
    doc, results = load(run.path)
    own = doc.get("encperf", {}) if isinstance(doc, dict) else {}
    settings, lifecycle = own.get("settings", {}), lifecycle_samples(own.get("lifecycle"))
    machine_info = dict(doc.get("machine_info") or {})
    return RunData(run.label, tuple(results), dict(settings or {}), machine_info, lifecycle)


def _other_machine(run: SavedRun, machine_id: str | None, machine_info: dict[str, Any] | None) -> str | None:
    if not machine_id or run.machine_id == machine_id:
        return None
    if machine_info:
        other = folder_machine_info(run.path.parent)
        if other and machine.same_machine(other, machine_info):
            return None  # this machine under another id: the report lists what differs (kernel, driver)
    return (
        f"reference run {run.label} comes from another machine (this one is {machine_id}): "
        "differences may be the machine's, not the code's"
    )
