"""The user's own fio jobs: a job file's sections as workloads, checked, then run with fio (no pytest).

``--encperf-fio-job=FILE[,FILE...]`` and ``Workload.from_fio_job(path)`` read a fio job file
(fio's ini format: ``[section]`` lines, ``option=value`` or a bare ``option``, ``;`` and ``#``
comments; a ``[global]`` section's options apply to the jobs after it). Each job section becomes
a workload named after the section (``[db-mixed]`` -> ``db-mixed``) that keeps the job's own
options; encperf sets only where the I/O goes (its test file in the volume), the runtime and the
output format. A job is refused, naming the option, when it would act outside the volume's test
file (another file or device, logs, cgroups, an I/O scheduler), run a command (``exec_prerun``,
an ``external`` or ``exec`` engine) or ask for more room than the test file has.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import host
from .backends import known_names
from .engines.fio import FioError, fio_available, fio_version, run_fio
from .engines.native import probe_io_mode
from .engines.observe import Observe
from .gate.rules import selector_clash
from .model import Measurement
from .workloads import FIO_JOB_MODE, KiB, Workload

OPTION = "--encperf-fio-job"
GLOBAL = "global"
# a section's name is the workload's name: what a gate rule or a report column can carry
SECTION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
OPTION_NAME = re.compile(r"[a-z][a-z0-9_]*")

# options that name another file, directory or device, or write beside the job (logs, state)
OTHER_FILES = (
    "filename", "directory", "opendir", "filename_format", "ioscheduler", "read_iolog", "write_iolog",
    "merge_blktrace_file", "replay_redirect", "write_bw_log", "write_lat_log", "write_iops_log",
    "write_hist_log", "verify_state_save", "verify_state_load", "cgroup", "unlink", "unlink_each_loop",
    "nrfiles", "file_append", "fill_device", "create_only", "zonemode",
)  # fmt: skip
COMMANDS = ("exec_prerun", "exec_postrun", "trigger", "trigger_file", "trigger_remote", "trigger_timeout")
# what encperf sets itself, so a job's own value would be overridden anyway: refused instead of
# quietly ignored
SET_BY_ENCPERF = ("name", "runtime", "time_based", "allow_file_create")
# the I/O engines that do file I/O in fio's own process (never a command, a library or the network)
IO_ENGINES = ("sync", "psync", "vsync", "pvsync", "pvsync2", "libaio", "io_uring", "posixaio", "mmap")
READS, WRITES = ("read", "randread"), ("write", "randwrite")
MIXED = ("rw", "readwrite", "randrw")
RW_VALUES = (*READS, *WRITES, *MIXED)


class FioJobError(ValueError):
    """A job file that cannot be read, or a job encperf refuses; the message names the option."""


@dataclass(frozen=True)
class FioJob:
    """One job section: its name and its options in order (the global ones before it first)."""

    section: str
    options: tuple[tuple[str, str], ...]


def _clean(line: str) -> str:
    for mark in (";", "#"):
        if line.lstrip().startswith(mark):
            return ""
    return line.strip()


def parse_job_text(text: str, source: str = "the job file") -> list[FioJob]:
    """The job sections of a fio job file's ``text``, in order. FioJobError for what fio would not
    read the same way (an option before any section, an ``include``, a repeated section, a name
    encperf cannot use as a workload's)."""
    jobs: list[FioJob] = []
    global_options: list[tuple[str, str]] = []
    section: str | None = None
    options: list[tuple[str, str]] = []

    def close() -> None:
        if section is None:
            return
        if section == GLOBAL:
            global_options.extend(options)
        else:
            jobs.append(FioJob(section, (*global_options, *options)))

    for number, raw in enumerate(text.splitlines(), start=1):
        line = _clean(raw)
        if not line:
            continue
        where = f"{source}, line {number}"
        if line.startswith("["):
            if not line.endswith("]"):
                raise FioJobError(f"{where}: a section line ends with ']': {line[:80]!r}")
            close()
            section, options = line[1:-1].strip(), []
            if section != GLOBAL and not SECTION_NAME.fullmatch(section):
                raise FioJobError(
                    f"{where}: job [{section[:60]}]: a job's name becomes the workload's: letters, digits "
                    "and _ . + - only"
                )
            if section != GLOBAL and any(job.section.lower() == section.lower() for job in jobs):
                raise FioJobError(f"{where}: job [{section}] appears twice (gate rules ignore case)")
            clash = selector_clash(section, known_names()) if section != GLOBAL else None
            if clash:
                raise FioJobError(
                    f"{where}: job [{section}]: a gate rule (--encperf-fail) would read its name as {clash}: "
                    "name the job otherwise"
                )
            continue
        if line.startswith("include ") or line == "include":
            raise FioJobError(f"{where}: include: encperf reads one job file, not the files it includes")
        if section is None:
            raise FioJobError(f"{where}: an option before any [section]: {line[:80]!r}")
        key, _, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not OPTION_NAME.fullmatch(key):
            raise FioJobError(f"{where}: not a fio option: {key[:60]!r}")
        options.append((key, value))
    close()
    if not jobs:
        raise FioJobError(f"{source}: no job section (only [global], or nothing)")
    return jobs


def fio_size(text: str) -> float | None:
    """Bytes of a fio size (``64m``, ``1GiB``, ``4096``; a unit's prefix counted as a power of 2,
    the larger reading of fio's two), a fraction of the file for a percentage (``50%`` -> -0.5,
    negative), None when it is not a plain size (a range, a list)."""
    value = text.strip().lower()
    if value.endswith("%"):
        try:
            return -float(value[:-1]) / 100
        except ValueError:
            return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?", value)
    if not match:
        return None
    power = " kmgtp".index(match[2] or " ")
    return float(match[1]) * 1024**power


def refusal(job: FioJob, room: int | None = None) -> str | None:
    """Why encperf will not run ``job`` (naming the option), or None. ``room``: bytes of the test
    file the job gets (None: not known yet, the size is checked when it runs)."""
    values = dict(job.options)
    for key, value in job.options:
        if key in OTHER_FILES:
            return f"{key}: encperf gives the job its own test file in the volume, nothing else to touch"
        if key in COMMANDS:
            return f"{key}: encperf does not run commands from a job file"
        if key in SET_BY_ENCPERF:
            return f"{key}: encperf sets it (the job's name is its section's, the runtime is the round's)"
        if key == "ioengine" and value.split(":", 1)[0] not in IO_ENGINES:
            return (
                f"ioengine={value}: encperf runs file I/O engines only ({', '.join(IO_ENGINES)}), "
                "never one that loads a library or runs a command"
            )
        if key in ("mem", "iomem") and ":" in value:
            return f"{key}={value}: encperf does not map a file of the job's for its buffers"
    rw = (values.get("rw") or values.get("readwrite") or "read").split(":", 1)[0]
    if rw not in RW_VALUES:
        return f"rw={rw}: encperf runs reads, writes and their mixes ({', '.join(RW_VALUES)})"
    if room is not None:
        offset = fio_size(values.get("offset", "0"))
        for key in (key for key in ("size", "filesize") if key in values):
            wanted = fio_size(values[key])
            if wanted is None or offset is None:
                return f"{key}={values[key]}: encperf checks a job's room from a plain size only"
            if _in_bytes(wanted, room) + _in_bytes(offset, room) > room:
                return (
                    f"{key}={values[key]}: asks for more room than the {room // (1024 * 1024)} MiB test file "
                    f"encperf gives the job in the volume (--encperf-size)"
                )
    return None


def _in_bytes(size: float, room: int) -> float:
    """A fio_size as bytes of a file of ``room`` bytes (a percentage is negative)."""
    return size if size >= 0 else -size * room


def workload_of(job: FioJob) -> Workload:
    """The workload of ``job``: its section's name, its options, and what the report needs to
    know of it (block size, queue depth and jobs, for its unit)."""
    values = dict(job.options)
    block = fio_size(re.split(r"[-,:]", values.get("bs") or values.get("blocksize") or "4k")[0])
    return Workload(
        label=job.section,
        rw=FIO_JOB_MODE,
        block_size=int(block) if block is not None and 1 <= block < 2**40 else 4 * KiB,
        iodepth=_whole(values.get("iodepth", "1")),
        numjobs=_whole(values.get("numjobs", "1")),
        job=job.options,
    )


def _whole(text: str) -> int:
    """A positive whole number of a job's option, 1 when it is not one (fio refuses it then)."""
    return int(text) if text.isascii() and text.isdigit() and 0 < int(text) < 2**31 else 1


def load(path: Path, section: str | None = None, room: int | None = None) -> list[Workload]:
    """The workloads of the job file at ``path`` (only ``section``'s, when given), each checked
    (see refusal); FioJobError naming the file, the section and the option otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FioJobError(f"{path}: cannot read the job file: {exc}") from None
    jobs = parse_job_text(text, str(path))
    if section is not None:
        jobs = [job for job in jobs if job.section == section]
        if not jobs:
            raise FioJobError(f"{path}: no job section [{section}]")
    for job in jobs:
        why = refusal(job, room)
        if why:
            raise FioJobError(f"{path} [{job.section}]: {why}")
    return [workload_of(job) for job in jobs]


def parse_fio_job_files(text: str) -> list[Workload]:
    """``--encperf-fio-job``: a comma list of job files, every job section of each a workload
    (their room is checked against --encperf-size by check_room)."""
    files = [item.strip() for item in str(text).split(",")] if str(text).strip() else []
    if "" in files:
        raise ValueError(f"bad job file list {text!r}: an empty item (two commas in a row, or one at an end)")
    found: dict[str, Workload] = {}
    for name in files:
        for workload in load(Path(name).expanduser()):
            if workload.name in found:
                raise FioJobError(f"{name}: job [{workload.name}] is in another job file too")
            found[workload.name] = workload
    return list(found.values())


def check_room(workloads: Iterable[Workload], room: int) -> None:
    """FioJobError naming the option of the first job that asks for more than ``room`` bytes."""
    for workload in workloads:
        if workload.kind == "job":
            why = refusal(FioJob(workload.name, workload.job), room)
            if why:
                raise FioJobError(f"{OPTION}: [{workload.name}]: {why}")


def definition(workload: Workload) -> str:
    """What a job round measured, for Measurement.round_definition: rounds of an edited job are
    another pattern under the same name."""
    digest = hashlib.sha256(repr(workload.job).encode()).hexdigest()[:12]
    return f"fio-job {digest}"


def job_text(workload: Workload, path: Path, runtime: float) -> str:
    """The job file fio reads (from its standard input) for one round of the job ``workload`` on
    the test file ``path``: the job's own options, then what encperf sets, which win (fio takes
    an option's last value). A job file, not command-line options: fio's own command-line
    switches (``--output``, ``--daemonize``) cannot be given through it."""
    filename = str(path).replace(":", "\\:")  # fio splits a file name at an unescaped ':'
    lines = [f"[{workload.name}]", *(f"{key}={value}" if value else key for key, value in workload.job)]
    lines += [
        f"filename={filename}",
        "allow_file_create=0",  # the prepared file, never a new one
        "time_based=1",
        f"runtime={max(1, round(runtime * 1000))}ms",
        "lat_percentiles=1",  # total latency, as encperf's own rounds (fio.parse_fio_json)
        "group_reporting=1",
    ]
    return "\n".join(lines) + "\n"


FIO_ARGS = ["fio", "--output-format=json", "-"]  # "-": the job file on standard input
_fio_version = functools.cache(fio_version)  # asked once per process, not once per round


def direct(workload: Workload) -> bool:
    """Whether the job asks for O_DIRECT (``direct``, bare or 1; or ``buffered=0``)."""
    values = dict(workload.job)
    return values.get("direct", "0") in ("", "1") or values.get("buffered", "1") == "0"


def run_job(workload: Workload, path: Path, *, runtime: float, observe: Observe | None = None) -> Measurement:
    """One round of the job ``workload`` on ``path``: the page cache dropped first, then run and
    read as every fio round (engines.fio.run_fio), the job file on fio's standard input."""
    if not fio_available():
        raise FioError(f"{workload.name}: a fio job needs fio (apt-get install fio)")
    why = refusal(FioJob(workload.name, workload.job), path.stat().st_size)
    if why:
        raise FioJobError(f"[{workload.name}]: {why}")
    mode = "direct" if direct(workload) else "buffered"
    if mode == "direct" and probe_io_mode(path) != "direct":
        raise FioError(
            f"{workload.name}: the job asks for O_DIRECT, which {path.parent} does not give "
            f"({probe_io_mode(path)}): drop direct=1 from the job to measure it buffered"
        )
    all_dropped = host.drop_page_cache(path)
    return run_fio(
        FIO_ARGS,
        what=f"fio job [{workload.name}]",
        direction=workload.direction,
        runtime=runtime,
        observe=observe or Observe(),
        version=_fio_version(),
        round_definition=definition(workload),
        io_mode=mode,
        caveats=() if all_dropped else ("cache-not-dropped",),
        job_text=job_text(workload, path, runtime),
    )
