"""The fio engine: one fio job per workload round, read back from ``--output-format=json``.

fio is the reference tool for storage benchmarks; its JSON gives throughput (``bw_bytes``),
IOPS, total-latency percentiles (``lat_ns``: submission to completion, the span the native
engine times; unless asked, fio gives completion latency, ``clat_ns``, only) and the job's
user/system CPU. A round is workloads.io_plan translated into one fio job per stream:
direct rounds use libaio, so ``iodepth`` I/Os really are in flight; buffered rounds use
io_uring, the one Linux interface that keeps buffered I/Os in flight (a buffered libaio
submit blocks, so iodepth would mean nothing there); depth 1 is psync in either mode.
Where io_uring is refused, buffered rounds of a deeper queue run psync at depth 1 and say so
(caveat ``buffered-depth-1``), instead of measuring another pattern under the workload's name.

The test file, the O_DIRECT probe and the small-files cycle are shared with the native engine,
so the two engines measure the same file the same way. ``run_fio`` runs fio and reads its report
for these rounds and for the user's own jobs (fiojob.py) alike.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import children, host
from ..model import LATENCY_TOTAL, Measurement
from ..workloads import IoPlan, Workload, io_plan, round_definition
from .native import NativeEngine, probe_io_mode
from .observe import Observe, Observer, with_caveat
from .readahead import round_readahead_limited
from .uring import creatable

# total-latency percentiles (--lat_percentiles=1); keys are formatted "%f"
PERCENTILES = {"lat_p50_us": "50.000000", "lat_p99_us": "99.000000", "lat_p999_us": "99.900000"}


class FioError(RuntimeError):
    """fio failed or printed something that is not its JSON report."""


def fio_available() -> bool:
    return shutil.which("fio") is not None


def fio_version() -> str:
    return host.tool_version(["fio", "--version"])


def fio_args(
    workload: Workload,
    path: Path,
    *,
    size: int,
    runtime: float,
    direct: bool,
    one_pass: bool = False,
    uring: bool = True,
) -> list[str]:
    """The fio command line for one round of ``workload`` on ``path`` (``size`` bytes used),
    as workloads.io_plan defines the round. ``direct``: O_DIRECT that really bypasses the page
    cache (where it does not, the round is buffered, as the native engine's); ``one_pass``: stop
    after one pass over the file even when ``runtime`` is not over; ``uring``: io_uring may
    be used (buffered rounds need it to keep more than one I/O of a stream in flight; without
    it they run at depth 1, see buffered_depth_caveat)."""
    plan = io_plan(workload, size, direct)
    if plan.outstanding == 1:  # one I/O at a time is a plain synchronous call, in either mode
        ioengine, depth = "psync", 1
    elif plan.direct:
        ioengine, depth = "libaio", plan.outstanding
    elif uring:
        ioengine, depth = "io_uring", plan.outstanding
    else:
        ioengine, depth = "psync", 1
    args = [
        "fio",
        "--output-format=json",
        f"--name={workload.name}",
        f"--filename={path}",
        f"--rw={workload.rw}",
        f"--bs={plan.block_size}",
        f"--direct={int(plan.direct)}",
        f"--ioengine={ioengine}",
        f"--iodepth={depth}",
        f"--numjobs={plan.streams}",
        f"--size={plan.stripe}",
        "--group_reporting=1",
        "--thread=1",
        # reads: drop the stripe's cached pages before the job and at every new pass; a write
        # round drops nothing between passes (the engine dropped the cache before it)
        f"--invalidate={int(plan.is_read)}",
        "--allow_file_create=0",  # the prepared file, never a new one
        "--randrepeat=0",
        f"--fadvise_hint={'random' if plan.advice == 'random' else 0}",
        "--lat_percentiles=1",  # percentiles of total latency (lat_ns), as the native engine times
        "--clat_percentiles=0",
        # fio adds this to its page-aligned buffer start: 2 MiB skips the head of its allocation,
        # which can lie on small pages (then about one 1 MiB read in five was split in two here)
        f"--iomem_align={HUGE_PAGE_OFFSET}",
    ]
    if plan.random:
        # every block once per pass, scattered: fio's default random map, once blocks start to
        # repeat, takes the next free block after a used one, so late in a pass its reads hit
        # the neighbours of earlier ones (which a store below may have read ahead); an LFSR
        # never repeats within a pass, like the native engine's shuffled order
        args.append("--random_generator=lfsr")
    if plan.completion_batch > 1:  # every ready completion in one call, as the native engine
        batch = plan.completion_batch
        args += [f"--iodepth_batch_submit={batch}", f"--iodepth_batch_complete_max={batch}"]
    if plan.streams > 1:
        args.append(f"--offset_increment={plan.stripe}")  # each stream its own stripe
    if plan.end_flush:
        args.append("--end_fsync=1")  # written means on the device
    if plan.flush_every is not None:
        args.append(f"--fdatasync={plan.flush_every // plan.block_size}")
    if plan.amount is not None:
        args.append(f"--io_size={plan.amount}")  # one pass, like dd count=
    elif one_pass:  # without time_based, fio ends at the end of the file or of the runtime
        args.append(f"--runtime={max(1, round(runtime * 1000))}ms")
    elif runs_by_passes(plan, one_pass, uring):
        # Pass after pass until the runtime, each ending with every read done before the next
        # drops the stripe's pages. fio's time-based loop drops them with its last reads still
        # out, and the kernel keeps pages under a read: on a 16 MiB file a fifth of the bytes
        # came from memory (docs/explanation/method.md). The native engine drains the same way.
        args += [f"--loops={UNTIL_RUNTIME_LOOPS}", f"--runtime={max(1, round(runtime * 1000))}ms"]
    else:
        args += ["--time_based=1", f"--runtime={max(1, round(runtime * 1000))}ms"]
    return args


# fio's --loops with --runtime: passes until the runtime is over (a million passes of even a
# one-block stripe outlast any round)
UNTIL_RUNTIME_LOOPS = 1_000_000


def runs_by_passes(plan: IoPlan, one_pass: bool, uring: bool) -> bool:
    """Whether fio_args runs a round of ``plan`` pass by pass (``--loops``), each pass ending
    with its reads done: passes that would otherwise end with reads out, kept in flight by
    io_uring (without it the round runs at depth 1), when more than one pass is read."""
    return plan.reads_out_at_pass_ends and uring and not one_pass


# glibc's malloc asks for transparent huge pages (madvise) on what it maps, in whole huge pages:
# fio's I/O buffers (iomem=malloc) then lie on at most two physically contiguous pieces each,
# so a 1 MiB I/O reaches a loop device as one request, as the native engine's (native.BufferPool).
HUGE_PAGE_MALLOC = "glibc.malloc.hugetlb=1"
HUGE_PAGE_OFFSET = 2 * 1024 * 1024  # --iomem_align: the size of a transparent huge page


def fio_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with HUGE_PAGE_MALLOC added to GLIBC_TUNABLES (kept: the user's tunables)."""
    tunables = [t for t in environ.get("GLIBC_TUNABLES", "").split(":") if t]
    if not any(t.startswith("glibc.malloc.hugetlb=") for t in tunables):
        tunables.append(HUGE_PAGE_MALLOC)
    return {**environ, "GLIBC_TUNABLES": ":".join(tunables)}


def buffered_depth_caveat(workload: Workload, direct: bool, uring: bool) -> bool:
    """Whether fio cannot give this round its queue depth: buffered, more than one I/O in
    flight asked, and no io_uring here (psync, one I/O per stream at a time)."""
    return not direct and not uring and workload.kind == "block" and workload.iodepth > 1


def _load(text: str) -> dict[str, Any]:
    """fio's JSON, skipping any notice fio prints before it."""
    start = text.find("{")
    if start < 0:
        raise FioError(f"fio printed no JSON report: {text.strip()[:300]!r}")
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise FioError(f"fio's JSON report does not parse: {exc}") from exc


def parse_fio_json(report: dict[str, Any] | str, direction: str) -> dict[str, Any]:
    """Measurement fields from a fio JSON report.

    ``direction`` is ``read``, ``write`` or ``mixed`` (both sections summed, for randrw).
    Jobs are summed (one entry with group_reporting, several without). Throughput is fio's
    ``bw_bytes`` (``seconds`` is chosen so that bytes / seconds equals it), percentiles come
    from ``lat_ns`` (total latency; the worst of the sections when mixed), CPU from
    ``usr_cpu``/``sys_cpu``. A report without total-latency percentiles (fio run without
    ``--lat_percentiles=1``) is an error, never silently read as something else.
    """
    data = _load(report) if isinstance(report, str) else report
    jobs = data.get("jobs") or []
    if not jobs:
        raise FioError("fio's JSON report has no jobs")
    sections = ("read", "write") if direction == "mixed" else (direction,)
    total_bytes = ios = 0
    bandwidth = 0.0
    latencies = dict.fromkeys(PERCENTILES, 0.0)
    engine_cpu = 0.0
    for job in jobs:
        if job.get("error"):
            raise FioError(f"fio job {job.get('jobname')!r} failed with error {job['error']}")
        for section in sections:
            stats = job[section]
            total_bytes += int(stats["io_bytes"])
            ios += int(stats["total_ios"])
            bandwidth += float(stats["bw_bytes"])
            if not stats.get("total_ios"):
                continue  # nothing done in this section: no latency to read
            percentiles = (stats.get("lat_ns") or {}).get("percentile")
            if not percentiles:
                raise FioError("fio reported no total-latency percentiles (lat_ns, --lat_percentiles=1)")
            for field, key in PERCENTILES.items():
                latencies[field] = max(latencies[field], float(percentiles.get(key, 0.0)) / 1e3)
        runtime_s = float(job.get("job_runtime", 0)) / 1e3  # summed over threads
        engine_cpu += (float(job.get("usr_cpu", 0.0)) + float(job.get("sys_cpu", 0.0))) / 100 * runtime_s
    if total_bytes and bandwidth > 0:
        seconds = total_bytes / bandwidth
    else:
        seconds = max(float(job[s]["runtime"]) for job in jobs for s in sections) / 1e3
    return {
        "bytes": total_bytes,
        "ios": ios,
        "seconds": seconds,
        "engine_cpu_seconds": engine_cpu,
        "logical_read_bytes": sum(int(job["read"]["io_bytes"]) for job in jobs) if "read" in sections else 0,
        "logical_write_bytes": (
            sum(int(job["write"]["io_bytes"]) for job in jobs) if "write" in sections else 0
        ),
        **latencies,
    }


TIMEOUT_SLACK = 120.0  # seconds beyond ten rounds' time fio may take to start and report


def run_fio(
    args: list[str],
    *,
    what: str,
    direction: str,
    runtime: float,
    observe: Observe,
    version: str,
    round_definition: str,
    io_mode: str,
    caveats: tuple[str, ...] = (),
    job_text: str | None = None,
) -> Measurement:
    """One fio round, as both of encperf's ways to run fio do (FioEngine's workloads, the user's
    jobs of fiojob.py): fio ``args`` run observed, with ``job_text`` as its job file on standard
    input (None: nothing there), as a child that dies with the run; its JSON read by
    parse_fio_json for ``direction``. FioError naming ``what`` when fio hangs (killed after ten
    times ``runtime`` and TIMEOUT_SLACK), exits non-zero or prints no report. ``caveats``: what
    the caller knows of the round (the cache not dropped, a shallower queue)."""
    stdin: dict[str, Any] = (
        {"stdin": subprocess.DEVNULL} if job_text is None else {"input": job_text.encode()}
    )
    observer = Observer(observe)
    observer.start()
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            timeout=runtime * 10 + TIMEOUT_SLACK,
            check=False,
            **stdin,
            # dies with the run; its job processes (forks) carry the run's mark (children.py)
            **children.popen_options(fio_environment(os.environ)),
        )
    except subprocess.TimeoutExpired as exc:
        raise FioError(f"{what}: no answer (killed)") from exc
    observed = observer.stop()
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).decode(errors="replace").strip()
        raise FioError(f"{what}: exit {proc.returncode}: {detail[:500]}")
    fields = parse_fio_json(proc.stdout.decode(errors="replace"), direction)
    observed["engine_cpu_seconds"] = fields.pop("engine_cpu_seconds")
    for caveat in caveats:
        observed = with_caveat(observed, caveat)
    return Measurement(
        engine="fio",
        engine_version=version,
        latency=LATENCY_TOTAL,
        round_definition=round_definition,
        io_mode=io_mode,
        **fields,
        **observed,
    )


class FioEngine:
    name = "fio"

    def __init__(self) -> None:
        self._native = NativeEngine()
        self._version: str | None = None

    def version(self) -> str:
        if self._version is None:
            self._version = fio_version()
        return self._version

    def prepare(self, directory: Path, size: int) -> Path:
        return self._native.prepare(directory, size)

    def io_mode(self, path: Path) -> str:
        return probe_io_mode(path)

    def run(
        self,
        workload: Workload,
        path: Path,
        *,
        runtime: float,
        direct: bool,
        observe: Observe | None = None,
    ) -> Measurement:
        observe = observe or Observe()
        if workload.kind == "job":  # the user's own fio job, with its own options
            from ..fiojob import run_job

            return run_job(workload, path, runtime=runtime, observe=observe)
        if workload.kind == "files":  # not block I/O: fio has no create/delete cycle
            return self._native.run(workload, path, runtime=runtime, direct=direct, observe=observe)
        mode = probe_io_mode(path) if direct else "buffered"
        one_pass = observe.one_pass(workload.is_read, mode)
        uring = creatable()
        size = path.stat().st_size
        plan = io_plan(workload, size, mode == "direct")
        args = fio_args(
            workload,
            path,
            size=size,
            runtime=runtime,
            direct=mode == "direct",
            one_pass=one_pass,
            uring=uring,
        )
        caveats = []
        if buffered_depth_caveat(workload, mode == "direct", uring):
            caveats.append("buffered-depth-1")
        with round_readahead_limited(workload, observe) as limited:  # before fio opens the file
            if mode != "direct":
                # fio's invalidate=1 drops only the test file's own pages; a stacked file system's
                # store (FUSE, dislocker, qemu) stays cached in the file system below and would
                # serve every read from memory. Same drop as the native engine's buffered rounds.
                all_dropped = host.drop_page_cache(path)
                if workload.is_read and not all_dropped:  # without root
                    caveats.insert(0, "cache-not-dropped")
            return run_fio(
                args,
                what=" ".join(args),
                direction=workload.direction,
                runtime=runtime,
                observe=observe,
                version=self.version(),
                round_definition=round_definition(
                    limited,
                    runs_by_passes(plan, one_pass, uring),
                    completions_taken_together=plan.completion_batch > 1,
                ),
                io_mode=mode,
                caveats=tuple(caveats),
            )
