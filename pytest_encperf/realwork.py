"""Real-work workloads: what users do with a volume, timed with the tools they use (no pytest).

Each task runs the real programs (GNU tar with gzip, coreutils cp, ls, rm, sync) with fixed
argument vectors, so a step's time is what a user waits for. A write step ends with
``sync -f`` on the volume inside its timed part (as block write rounds end with fdatasync):
the data is on the device, not only in memory. The page cache is dropped before each timed
step, so a step reads from the storage (without root only a caveat says it could not be).

- ``archive``: ``tar -czf`` of the reference tree (copied into the volume first, untimed), then
  ``tar -xzf`` of that archive;
- ``untar``: ``tar -xzf`` of a source-tree archive of many small files;
- ``metadata``: on that source tree (extracted untimed): ``ls -lR``, a rename of every file,
  ``rm -rf``;
- ``copy``: ``cp -a`` of the reference tree into the volume, then from the volume out to the
  run's private directory.

The reference data is made once per session by :func:`prepare_reference_tree`, outside every timed
part, in a directory the session owns.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import host, reftree
from .engines.observe import Observe, Observer, with_caveat
from .model import Measurement
from .workloads import Workload

TASKS = ("archive", "untar", "metadata", "copy")
TOOLS = ("tar", "gzip", "cp", "ls", "rm", "sync")
STEP_TIMEOUT = 3600.0  # seconds: a step of a large tree on a slow layer may take long
TREE_DIR = "tree"  # the reference tree's root under the reference directory
SOURCE_DIR = "src"  # the source tree's root inside its archive
SOURCE_ARCHIVE = "src.tar.gz"
WORK_DIR = "encperf-realwork"  # under the volume's data directory, removed after each round


def source_size(tree_size: int) -> int:
    """The source tree (untar, metadata) holds a quarter of the reference tree's bytes, at
    least 256 KiB: many small files, whose count drives those workloads."""
    return max(256 * reftree.KiB, tree_size // 4)


@dataclass(frozen=True)
class ReferenceTree:
    """The session's reference tree and the source archive beside it: where they are, what they hold."""

    directory: Path  # private to the session (0700); copies out of a volume go here too
    size: int
    seed: int
    tree_bytes: int
    tree_files: int
    source_bytes: int
    source_files: int

    @property
    def tree(self) -> Path:
        return self.directory / TREE_DIR

    @property
    def source_archive(self) -> Path:
        return self.directory / SOURCE_ARCHIVE


def volume_room(tree_size: int) -> int:
    """Room a task needs on a volume: archive holds the tree and its archive, then the archive
    and the extracted tree; a quarter more for the blocks small files round up to."""
    return 2 * tree_size + tree_size // 4


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def prepare_reference_tree(directory: Path, size: int, seed: int) -> ReferenceTree:
    """Write the reference tree (``size`` bytes, ``seed``) and the source archive in
    ``directory`` (which the caller made private and registered for cleanup)."""
    missing = missing_tools()
    if missing:
        raise host.HostError(
            f"real-work workloads need {', '.join(missing)} (apt-get install tar gzip coreutils)"
        )
    tree = reftree.write_tree(directory / TREE_DIR, size, seed, "mixed")
    staging = directory / "source-staging"
    staging.mkdir(mode=0o700)
    source = reftree.write_tree(staging / SOURCE_DIR, source_size(size), seed, "source")
    host.run(["tar", "-czf", directory / SOURCE_ARCHIVE, "-C", staging, SOURCE_DIR], timeout=STEP_TIMEOUT)
    shutil.rmtree(staging)
    return ReferenceTree(
        directory=directory,
        size=size,
        seed=seed,
        tree_bytes=sum(f.size for f in tree),
        tree_files=len(tree),
        source_bytes=sum(f.size for f in source),
        source_files=len(source),
    )


@dataclass
class Steps:
    """The timed steps of one round: each step's seconds, and whether every cache drop before
    one was system-wide."""

    drop_cache: bool = True
    seconds: dict[str, float] = field(default_factory=dict)
    all_dropped: bool = True

    def time(self, name: str, *commands: list[str | os.PathLike[str]]) -> None:
        if self.drop_cache:
            self.all_dropped = host.drop_page_cache() and self.all_dropped
        started = time.perf_counter()
        for argv in commands:
            host.run(argv, timeout=STEP_TIMEOUT)
        self.seconds[name] = time.perf_counter() - started

    def call(self, name: str, action: Callable[[], None], sync: Path) -> None:
        """A step done in Python where no tool does it without a process per file."""
        if self.drop_cache:
            self.all_dropped = host.drop_page_cache() and self.all_dropped
        started = time.perf_counter()
        action()
        host.run(["sync", "-f", sync], timeout=STEP_TIMEOUT)
        self.seconds[name] = time.perf_counter() - started


def _rename_every_file(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            os.rename(os.path.join(directory, name), os.path.join(directory, name + ".renamed"))


def run_task(
    workload: Workload,
    data_dir: Path,
    reference_tree: ReferenceTree,
    observe: Observe | None = None,
    drop_cache: bool = True,
) -> Measurement:
    """One round of the task ``workload.task`` on the volume mounted at ``data_dir``."""
    if workload.task not in TASKS:
        raise ValueError(f"{workload.name}: unknown task {workload.task!r} (known: {', '.join(TASKS)})")
    work = data_dir / WORK_DIR
    work.mkdir(mode=0o700)
    out = reference_tree.directory / f"copy-out-{os.getpid()}-{time.monotonic_ns()}"
    steps = Steps(drop_cache=drop_cache)
    task = workload.task
    try:
        # untimed set-up: what the task starts from is on the volume (and on its device)
        if task == "archive":
            host.run(["cp", "-a", reference_tree.tree, work / TREE_DIR], timeout=STEP_TIMEOUT)
        elif task == "untar":
            host.run(["cp", reference_tree.source_archive, work / SOURCE_ARCHIVE], timeout=STEP_TIMEOUT)
        elif task == "metadata":
            host.run(["tar", "-xzf", reference_tree.source_archive, "-C", work], timeout=STEP_TIMEOUT)
        host.run(["sync", "-f", work], timeout=STEP_TIMEOUT)
        observer = Observer(observe or Observe())
        observer.start()
        sync: list[str | os.PathLike[str]] = ["sync", "-f", work]
        if task == "archive":
            archive, extracted = work / "tree.tar.gz", work / "extracted"
            steps.time("create tar.gz", ["tar", "-czf", archive, "-C", work, TREE_DIR], sync)
            shutil.rmtree(work / TREE_DIR)  # untimed: room for the extracted copy
            extracted.mkdir()
            steps.time("extract tar.gz", ["tar", "-xzf", archive, "-C", extracted], sync)
            moved, files = reference_tree.tree_bytes, reference_tree.tree_files
        elif task == "untar":
            steps.time("extract", ["tar", "-xzf", work / SOURCE_ARCHIVE, "-C", work], sync)
            moved, files = reference_tree.source_bytes, reference_tree.source_files
        elif task == "metadata":
            steps.time("ls -lR", ["ls", "-lR", work / SOURCE_DIR])
            steps.call("rename", lambda: _rename_every_file(work / SOURCE_DIR), work)
            steps.time("rm -rf", ["rm", "-rf", work / SOURCE_DIR], sync)
            moved, files = reference_tree.source_bytes, reference_tree.source_files
        else:  # copy
            steps.time("cp -a in", ["cp", "-a", reference_tree.tree, work / TREE_DIR], sync)
            out.mkdir(mode=0o700)
            steps.time("cp -a out", ["cp", "-a", work / TREE_DIR, out / TREE_DIR], ["sync", "-f", out])
            moved, files = reference_tree.tree_bytes, reference_tree.tree_files
        observed = observer.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    if not steps.all_dropped:
        observed = with_caveat(observed, "cache-not-dropped")
    seconds = sum(steps.seconds.values())
    return Measurement(  # bytes: the data the task handles; ios: its files
        engine="tools",
        engine_version=tool_versions(),
        bytes=moved,
        seconds=seconds,
        ios=files,
        lat_p50_us=0.0,
        lat_p99_us=0.0,
        lat_p999_us=0.0,
        io_mode="buffered",
        # no page-cache verdict (model.Measurement.cached): a task reads and writes outside the
        # volume too (the reference tree, the copy out), so its device sees no fixed share of it
        logical_read_bytes=0,
        logical_write_bytes=0,
        steps=tuple(steps.seconds.items()),
        **observed,
    )


_VERSIONS: list[str] = []


def tool_versions() -> str:
    """``tar 1.34, cp 9.1``: what the steps ran (asked once per process)."""
    if not _VERSIONS:
        tar, cp = host.tool_version(["tar", "--version"]), host.tool_version(["cp", "--version"])
        _VERSIONS.append(f"tar {tar}, cp {cp}")
    return _VERSIONS[0]
