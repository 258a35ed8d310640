"""Named workload profiles (data only), and what a round of each one does (IoPlan).

A workload says what to measure; engines decide how to issue it, but not what it means:
``io_plan`` is the one definition of a round that both engines implement (their translations
are unit-tested against it). Names follow CrystalDiskMark ("SEQ1M Q8T1" = sequential, 1 MiB
blocks, queue depth 8, 1 thread). A profile is an ordered set of workloads that the report
shows as one table (one column per workload label).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

BLOCK_MODES = ("read", "write", "randread", "randwrite")
FILES_MODE = "files"  # create, write, fsync, read back and delete many small files
TASK_MODE = "task"  # a real-work task run with the user's tools (realwork.py), timed in seconds
FIO_JOB_MODE = "fio-job"  # a section of the user's fio job file, run with its own options (fiojob.py)
RW_MODES = (*BLOCK_MODES, FILES_MODE, TASK_MODE, FIO_JOB_MODE)

# smallfiles: a repeating mix of sizes (bytes), from a sub-page file to a few pages
SMALL_FILE_SIZES: tuple[int, ...] = (512, 4 * KiB, 1 * KiB, 16 * KiB, 2 * KiB, 64 * KiB, 8 * KiB, 32 * KiB)


@dataclass(frozen=True)
class Workload:
    """One I/O pattern. Time-based unless ``amount`` is set; the file size comes from the run's
    settings (``extent`` limits the part of the file used, for the matrix grid)."""

    label: str  # the report column, e.g. "SEQ1M Q8T1"
    rw: str  # one of RW_MODES
    block_size: int  # bytes per I/O; for FILES_MODE the largest file size
    iodepth: int = 1
    numjobs: int = 1
    amount: int | None = None  # move exactly this many bytes once (dd); None = time based
    extent: int | None = None  # use only the first ``extent`` bytes of the file (iozone file size)
    files: int = 0  # FILES_MODE: files per pass
    task: str = ""  # TASK_MODE: which task (realwork.TASKS)
    tree_size: int = 0  # TASK_MODE: bytes of the reference tree (--encperf-tree-size)
    tree_seed: int = 0  # TASK_MODE: the tree's seed (--encperf-tree-seed)
    job: tuple[tuple[str, str], ...] = ()  # FIO_JOB_MODE: the job's (option, value) pairs, in order

    def __post_init__(self) -> None:
        # a saved run's JSON gives lists: a workload stays hashable (results are keyed by it)
        object.__setattr__(self, "job", tuple((str(k), str(v)) for k, v in self.job))
        if self.rw not in RW_MODES:
            raise ValueError(f"rw must be one of {', '.join(RW_MODES)}, got {self.rw!r}")
        if self.block_size <= 0 or self.iodepth <= 0 or self.numjobs <= 0:
            raise ValueError("block_size, iodepth and numjobs must be positive")
        if self.rw == FILES_MODE and self.files <= 0:
            raise ValueError("a files workload needs files > 0")
        if (self.rw == TASK_MODE) != bool(self.task):
            raise ValueError("a task workload names its task, and only a task workload does")
        if (self.rw == FIO_JOB_MODE) != bool(self.job):
            raise ValueError("a fio job workload has the job's options, and only a fio job workload does")

    @classmethod
    def from_fio_job(cls, path: str | os.PathLike[str], section: str | None = None) -> list[Workload]:
        """The workloads of a fio job file, one per job section (only ``section``'s when given),
        named after their sections; fiojob.FioJobError (a ValueError) names a refused option."""
        from .fiojob import load

        return load(Path(path), section)

    @property
    def job_rw(self) -> str:
        """A fio job's ``rw`` (fio's default: read); "" for other workloads."""
        if self.kind != "job":
            return ""
        values = dict(self.job)
        return (values.get("rw") or values.get("readwrite") or "read").split(":", 1)[0]

    @property
    def kind(self) -> str:
        """``block`` (I/O on one preallocated file), ``files`` (file create/delete cycle),
        ``task`` (a real-work task timed in seconds) or ``job`` (a section of the user's fio job)."""
        if self.rw == TASK_MODE:
            return "task"
        if self.rw == FIO_JOB_MODE:
            return "job"
        return "files" if self.rw == FILES_MODE else "block"

    @property
    def is_timed_function(self) -> bool:
        """Whether this is a user's timed function (``encperf.time``, usertiming.user_workload): a
        task of its own name, not one of the built-in real-work tasks. Its rounds count seconds and
        move no bytes of their own (no MB/s, IOPS or CPU per GiB; a round is never "empty")."""
        return self.kind == "task" and self.task not in TASK_NAMES

    @property
    def lower_is_better(self) -> bool:
        """A task is judged by its seconds (lower is better); every other workload by its
        throughput (MB/s, IOPS or files/s)."""
        return self.kind == "task"

    @property
    def is_read(self) -> bool:
        return (self.job_rw or self.rw) in ("read", "randread")

    @property
    def is_random(self) -> bool:
        return (self.job_rw or self.rw).startswith("rand")

    @property
    def direction(self) -> str:
        """``read``, ``write`` or, for the file cycle, ``mixed``."""
        if self.kind in ("files", "task") or self.job_rw in ("rw", "readwrite", "randrw"):
            return "mixed"
        return "read" if self.is_read else "write"

    @cached_property  # the gate looks it up for every round it sorts; the fields never change
    def name(self) -> str:
        """Stable identity used in test ids, results and baselines, e.g. ``SEQ1M-Q8T1-read``
        (a task: its name, ``archive``)."""
        if self.kind == "task":
            return self.task
        if self.kind == "job":  # the job's section
            return self.label
        return f"{self.label.replace(' ', '-')}-{self.direction}"

    @cached_property  # each cell's metric reads it for every look-up of its setup and samples
    def reports_iops(self) -> bool:
        """Small random I/O is judged by IOPS (CrystalDiskMark's 4K rows); the file cycle by
        files per second (its "ios" are files)."""
        return self.kind == "files" or (self.is_random and self.block_size <= 64 * KiB)

    @property
    def unit(self) -> str:
        if self.kind == "task":
            return "s"
        if self.kind == "files":
            return "files/s"
        return "IOPS" if self.reports_iops else "MB/s"

    def __str__(self) -> str:
        return self.name


# Buffered writes: most dirty data one stream may leave in memory before it flushes (fdatasync).
FLUSH_BYTES = 16 * MiB

# The version of IoPlan's definition that block rounds were measured with, saved with each round
# (Measurement.round_definition) and compared by the gate: rounds of another definition measured
# another pattern under the same name. "" in runs saved before it was recorded, when buffered
# QnT1 rounds of fio were n threads on n stripes and fio's buffers were not on huge pages.
ROUND_DEFINITION = "2"
# Added to it for a round that read its store below with the store's read-ahead limited
# (engines/readahead.py): such a cell is not compared with one read before this limit existed.
LIMITED_DEFINITION_SUFFIX = "+store-readahead-1-page"
# Added to it for a round whose passes end with none of its reads in flight before the pass's
# pages are dropped (IoPlan.reads_out_at_pass_ends): the kernel keeps pages under a read, and
# the next pass read them from memory; rounds measured so are not compared with these.
DRAINED_DEFINITION_SUFFIX = "+pass-ends-drained"


@dataclass(frozen=True)
class IoPlan:
    """What one round of a block workload does, whichever engine issues it.

    CrystalDiskMark's ``QnTm`` is m threads, each keeping n I/Os in flight on its own stream
    over the test file. Here a *stream* is that thread's sequence of offsets: sequential, or
    every block of its stripe once per pass in a shuffled order, never two streams on one
    block (T streams split the file into T stripes, so that in buffered mode one stream never
    reads pages another brought into the cache). ``outstanding`` I/Os of a stream are in flight
    at once, taken in the stream's order, in both I/O modes:

    - direct: Linux AIO keeps them in flight (fio's libaio);
    - buffered: AIO would block in its submit, so both engines use io_uring, on a ring set up
      as fio sets up its own (engines/uring.py: its setup decides how a read that has to wait
      is finished);
    - one at a time (Q1), in either mode: a plain synchronous call (fio's psync).

    The kernel sees ``outstanding`` requests of one stream on one open file: one read-ahead
    state, offsets in the stream's order. (Not ``outstanding`` threads on stripes of their
    own: those are that many sequential streams, each with its own read-ahead, which is not
    Q8T1.)

    Writes are flushed: buffered, each stream calls fdatasync after every ``flush_every``
    bytes it wrote (dirty memory stays bounded and the round measures the storage), and every
    write round ends with fdatasync inside its timed part; it drops nothing between passes (the
    page cache is dropped before the round). A buffered read round drops the stream's cached
    pages at the start of each pass, so a pass does not read what the previous one cached:
    with reads in flight through io_uring, both engines first wait for the pass's reads (a page
    under a read is not dropped; reads_out_at_pass_ends). Within a pass nothing is dropped: a
    page the layer below read ahead for one I/O may serve a later one (the report flags a read
    that beats plain this way, see model.Result.cached_below). Random streams ask
    for no read-ahead on the file they read (POSIX_FADV_RANDOM; a random read round carries it
    to a stacked store on a loop device of ours, engines/readahead.py); sequential streams give
    no advice (the kernel's default read-ahead, as any program gets it).
    """

    block_size: int
    streams: int  # T: independent streams, one stripe of the file each
    outstanding: int  # Q: I/Os in flight in each stream
    stripe: int  # bytes of the file one stream covers (whole blocks)
    random: bool  # each block of the stripe once per pass, in a shuffled order
    is_read: bool
    direct: bool  # O_DIRECT that really bypasses the page cache
    flush_every: int | None  # buffered writes: fdatasync after this many bytes of one stream
    end_flush: bool  # writes: fdatasync at the end of the round, timed
    advice: str  # posix_fadvise on the file: "random" or "normal"
    amount: int | None  # bytes each stream moves once before it stops (dd); None: time based

    @property
    def blocks(self) -> int:
        """Blocks in one stream's stripe (one pass)."""
        return self.stripe // self.block_size

    @property
    def completion_batch(self) -> int:
        """The most completions a stream takes in one call (it waits for at least one), whose
        successors it then submits together in one call. A queued direct random stream takes all
        that are ready, up to its queue (fio: iodepth_batch_complete_max and iodepth_batch_submit;
        fio's default takes one a call); 1 elsewhere. At 4 KiB on a fast device two system calls
        per I/O, not the device, set fio's pace, while the native engine (Python, slower to come
        back) took about 30 a call, so the engines measured fast devices 10-35% apart
        (docs/explanation/method.md, "Queued random rounds"). The queue stays full either way."""
        if self.direct and self.random and self.outstanding > 1:
            return self.outstanding
        return 1

    @property
    def in_flight(self) -> int:
        """I/Os in flight in the whole round."""
        return self.streams * self.outstanding

    @property
    def reads_out_at_pass_ends(self) -> bool:
        """Whether a stream's pass can end with reads of it still out: buffered time-based reads
        with more than one I/O of a stream in flight (at depth 1 nothing is out at a pass end;
        direct reads leave no pages; dd and one-pass rounds have no pass end after which to
        read). An engine that keeps that many in flight waits for them before it drops the
        stripe's pages for the next pass (round_definition's ``pass_ends_drained``)."""
        return self.is_read and not self.direct and self.outstanding > 1 and self.amount is None


# Added to it for a fio round that took every ready completion in one call (IoPlan.completion_batch):
# before, fio took one a call, a pattern of another speed on a fast device. The native engine's
# rounds always took them so and carry no suffix.
TAKEN_TOGETHER_DEFINITION_SUFFIX = "+completions-taken-together"


def round_definition(
    store_readahead_limited: bool, pass_ends_drained: bool, completions_taken_together: bool = False
) -> str:
    """What a block round measured (Measurement.round_definition): ROUND_DEFINITION, with what
    this version's rounds do that earlier ones did not. ``store_readahead_limited``: it read its
    store below with one page of read-ahead; ``pass_ends_drained``: passes followed each other
    with reads of the stream in flight, and each ended with them done before its pages were
    dropped; ``completions_taken_together``: fio took every ready completion in one call
    (IoPlan.completion_batch)."""
    return (
        ROUND_DEFINITION
        + (LIMITED_DEFINITION_SUFFIX if store_readahead_limited else "")
        + (DRAINED_DEFINITION_SUFFIX if pass_ends_drained else "")
        + (TAKEN_TOGETHER_DEFINITION_SUFFIX if completions_taken_together else "")
    )


def io_plan(workload: Workload, size: int, direct: bool) -> IoPlan:
    """The round of block ``workload`` on a test file of ``size`` bytes; ``direct``: I/O that
    really bypasses the page cache. ValueError when the file cannot hold one block per stream."""
    if workload.kind != "block":
        raise ValueError(f"{workload.name} is not a block workload")
    if workload.extent is not None:
        size = min(size, workload.extent)
    block = workload.block_size
    if size < block:
        raise ValueError(f"the test file ({size} bytes) is smaller than one {block}-byte block")
    streams = max(1, min(workload.numjobs, size // block))  # every stripe at least one block
    stripe = size // streams // block * block
    amount = None if workload.amount is None else max(block, min(stripe, workload.amount) // block * block)
    writes = not workload.is_read
    return IoPlan(
        block_size=block,
        streams=streams,
        outstanding=workload.iodepth,
        stripe=stripe,
        random=workload.is_random,
        is_read=workload.is_read,
        direct=direct,
        flush_every=max(block, FLUSH_BYTES // block * block) if writes and not direct else None,
        end_flush=writes,
        advice="random" if workload.is_random else "normal",
        amount=amount,
    )


@dataclass(frozen=True)
class Profile:
    """A named set of workloads, shown as one table."""

    name: str
    title: str
    workloads: tuple[Workload, ...]
    value: str = "median"  # what the table's value cell shows: "best" (CrystalDiskMark) or "median"
    mean_column: bool = False  # add the mean change over all cells (iozone-style grid)

    def workloads_for(self, size: int) -> list[Workload]:
        """The workloads as they run on a test file of ``size`` bytes, without repeats."""
        return list({w.name: w for w in (fit_to_size(w, size) for w in self.workloads)}.values())


def _pair(label: str, random: bool, block_size: int, iodepth: int, numjobs: int = 1) -> list[Workload]:
    read, write = ("randread", "randwrite") if random else ("read", "write")
    return [
        Workload(label, read, block_size, iodepth, numjobs),
        Workload(label, write, block_size, iodepth, numjobs),
    ]


def _size_label(size: int) -> str:
    for unit, factor in (("M", MiB), ("K", KiB)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


# CrystalDiskMark 8 default set (its "Default" profile), read then write per row.
CDM: tuple[Workload, ...] = (
    *_pair("SEQ1M Q8T1", False, MiB, 8),
    *_pair("SEQ1M Q1T1", False, MiB, 1),
    *_pair("RND4K Q32T1", True, 4 * KiB, 32),
    *_pair("RND4K Q1T1", True, 4 * KiB, 1),
)

# CrystalDiskMark 8 "NVMe SSD" profile.
CDM_NVME: tuple[Workload, ...] = (
    *_pair("SEQ1M Q8T1", False, MiB, 8),
    *_pair("SEQ128K Q32T1", False, 128 * KiB, 32),
    *_pair("RND4K Q32T16", True, 4 * KiB, 32, 16),
    *_pair("RND4K Q1T1", True, 4 * KiB, 1),
)

# CrystalDiskMark 5.x/6.x columns, as in most published encryption comparisons:
# "Seq Q32T1" is 128 KiB blocks at queue depth 32, "Seq" 1 MiB blocks at depth 1.
CDM_LEGACY: tuple[Workload, ...] = (
    *_pair("Seq Q32T1", False, 128 * KiB, 32),
    *_pair("4K Q32T1", True, 4 * KiB, 32),
    *_pair("Seq", False, MiB, 1),
    *_pair("4K", True, 4 * KiB, 1),
)

# `dd if=/dev/zero of=f bs=4k count=... conv=fdatasync`: one pass of 4 KiB sequential writes
# over a fixed amount (64 MiB, or the whole file when it is smaller).
DD: tuple[Workload, ...] = (Workload("DD 4K", "write", 4 * KiB, amount=64 * MiB),)

# ATTO Disk Benchmark: sequential transfer sizes from 512 B to 8 MiB, queue depth 4.
ATTO_SIZES: tuple[int, ...] = tuple(512 * 2**i for i in range(15))  # 512 B .. 8 MiB
ATTO: tuple[Workload, ...] = tuple(
    w for size in ATTO_SIZES for w in _pair(f"ATTO {_size_label(size)}", False, size, 4)
)

SMALLFILES: tuple[Workload, ...] = (
    Workload("SMALLFILES 0.5K-64K", FILES_MODE, max(SMALL_FILE_SIZES), files=256),
)

# Real work, timed in seconds (realwork.py runs them; the tree's size and seed come from the run).
REALWORK: tuple[Workload, ...] = tuple(
    Workload(label, TASK_MODE, 1, task=task)
    for task, label in (
        ("archive", "archive tar.gz"),
        ("untar", "untar source"),
        ("metadata", "ls-lR rename rm-rf"),
        ("copy", "cp -a in+out"),
    )
)

TASK_NAMES: tuple[str, ...] = tuple(w.task for w in REALWORK)

# iozone-style grid (bounded): file size x record size, sequential write and read.
MATRIX_FILE_SIZES: tuple[int, ...] = (4 * MiB, 64 * MiB)
MATRIX_RECORD_SIZES: tuple[int, ...] = (4 * KiB, 64 * KiB, 1 * MiB)
MATRIX: tuple[Workload, ...] = tuple(
    Workload(f"F{_size_label(file_size)} R{_size_label(record)}", rw, record, extent=file_size)
    for file_size in MATRIX_FILE_SIZES
    for record in MATRIX_RECORD_SIZES
    for rw in ("read", "write")
)

PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile("cdm", "CrystalDiskMark 8 (default)", CDM, value="best"),
        Profile("cdm-nvme", "CrystalDiskMark 8 (NVMe SSD)", CDM_NVME, value="best"),
        Profile("cdm-legacy", "CrystalDiskMark 5/6 columns", CDM_LEGACY, value="best"),
        Profile("dd", "dd bs=4k (sequential 4 KiB writes, fixed amount)", DD),
        Profile("atto", "ATTO-style transfer-size sweep (queue depth 4)", ATTO),
        Profile("smallfiles", "small files: create, write, fsync, read back, delete", SMALLFILES),
        Profile("matrix", "iozone-style grid: file size F x record size R", MATRIX, mean_column=True),
        Profile("realwork", "real work with tar, ls, rm and cp (seconds, lower is better)", REALWORK),
    )
}


# A profile that runs no workload: open/mount with each key derivation setting (pytest_encperf.kdf).
KDF_PROFILE = "kdf"
PROFILE_NAMES: tuple[str, ...] = (*PROFILES, KDF_PROFILE)


def fit_to_size(workload: Workload, size: int) -> Workload:
    """``workload`` as it really runs on a test file of ``size`` bytes: a grid cell whose file
    size is larger than the file uses the whole file, and its label says so (F64M on a 16 MiB
    file is F16M), so a report never names a file size that was not measured."""
    if workload.extent is None or workload.extent <= size:
        return workload
    label = workload.label.replace(f"F{_size_label(workload.extent)}", f"F{_size_label(size)}", 1)
    return replace(workload, label=label, extent=size)


def with_tree(workload: Workload, tree_size: int, tree_seed: int) -> Workload:
    """A task as it runs on the reference tree of ``tree_size`` bytes from ``tree_seed`` (its
    identity in results: runs of another tree are not comparable); other workloads unchanged."""
    if workload.kind != "task":
        return workload
    return replace(workload, tree_size=tree_size, tree_seed=tree_seed)


def same_definition(profile_workload: Workload, ran: Workload) -> bool:
    """Whether ``ran`` is ``profile_workload`` as a run made it (fit to its file size, on its tree)."""
    if ran.kind == "task":
        return replace(ran, tree_size=0, tree_seed=0) == profile_workload
    return (fit_to_size(profile_workload, ran.extent) if ran.extent else profile_workload) == ran


def profile_workloads(names: list[str], size: int, tree_size: int = 0, tree_seed: int = 0) -> list[Workload]:
    """Workloads of the named profiles as they run on a test file of ``size`` bytes (tasks: on
    a reference tree of ``tree_size`` bytes from ``tree_seed``), in order, without repeats."""
    seen: dict[str, Workload] = {}
    for profile in names:
        if profile not in PROFILES:  # the kdf profile: no workload
            continue
        for workload in PROFILES[profile].workloads_for(size):
            seen.setdefault(workload.name, with_tree(workload, tree_size, tree_seed))
    return list(seen.values())


def baseline_workloads(items: Iterable[object], workloads: list[Workload]) -> list[Workload]:
    """The workloads the partition target's baseline measures: those of ``workloads`` (the
    profiles') the collected tests (``items``, pytest's items, read by attribute) are parametrized
    with (``encperf_workload``; after ``-k`` and ``-m``, only the selected tests'), all of them when
    a collected test may measure with ``encperf`` without such a parameter (it may run any).
    runner.measure_all leaves out a real-work task (it needs plain beside the volume)."""
    names: set[str] = set()
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        workload = params.get("encperf_workload")
        if isinstance(workload, Workload):
            names.add(workload.name)
        elif "encperf_workload" not in params and "encperf" in getattr(item, "fixturenames", ()):
            names.update(w.name for w in workloads)
    return [w for w in workloads if w.name in names]
