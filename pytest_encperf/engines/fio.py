"""The fio engine: one fio job per workload round, read back from ``--output-format=json``.

fio is the reference tool for storage benchmarks; its JSON gives throughput (``bw_bytes``),
IOPS, total-latency percentiles (``lat_ns``: submission to completion, the span the native
engine times; unless asked, fio gives completion latency, ``clat_ns``, only) and the job's
user/system CPU. Direct rounds use libaio, so ``iodepth`` I/Os really are in flight. Buffered
rounds use psync with one thread per outstanding I/O (``iodepth x numjobs`` threads, each in
its own stripe of the file), the way the native engine reaches a queue depth without async
I/O: a buffered libaio submit blocks, so iodepth would mean nothing there.

The test file, the O_DIRECT probe and the small-files cycle are shared with the native engine,
so the two engines measure the same file the same way.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .. import host
from ..model import LATENCY_TOTAL, Measurement
from ..workloads import Workload
from .native import FLUSH_BYTES, NativeEngine, probe_io_mode
from .observe import Observe, Observer, with_caveat

# total-latency percentiles (--lat_percentiles=1); keys are formatted "%f"
PERCENTILES = {"lat_p50_us": "50.000000", "lat_p99_us": "99.000000", "lat_p999_us": "99.900000"}


class FioError(RuntimeError):
    """fio failed or printed something that is not its JSON report."""


def fio_available() -> bool:
    return shutil.which("fio") is not None


def fio_version() -> str:
    return host.tool_version(["fio", "--version"])


def fio_args(
    workload: Workload, path: Path, *, size: int, runtime: float, direct: bool, one_pass: bool = False
) -> list[str]:
    """The fio command line for one round of ``workload`` on ``path`` (``size`` bytes used).
    ``one_pass``: stop after one pass over the file even when ``runtime`` is not over."""
    if workload.extent is not None:
        size = min(size, workload.extent)
    jobs = workload.numjobs if direct else workload.numjobs * workload.iodepth
    if jobs > 1 and not direct:
        jobs = max(1, min(jobs, size // workload.block_size))  # every stripe at least one block
    args = [
        "fio",
        "--output-format=json",
        f"--name={workload.name}",
        f"--filename={path}",
        f"--rw={workload.rw}",
        f"--bs={workload.block_size}",
        f"--direct={int(direct)}",
        f"--ioengine={'libaio' if direct else 'psync'}",
        f"--iodepth={workload.iodepth if direct else 1}",
        f"--numjobs={jobs}",
        "--group_reporting=1",
        "--thread=1",
        "--invalidate=1",  # drop the file's cached pages before the job
        "--allow_file_create=0",  # the prepared file, never a new one
        "--randrepeat=0",
        "--lat_percentiles=1",  # percentiles of total latency (lat_ns), as the native engine times
        "--clat_percentiles=0",
    ]
    if not workload.is_read:
        args.append("--end_fsync=1")  # written means on the device
        if not direct:  # bound the dirty data, as the native engine does
            args.append(f"--fdatasync={max(1, FLUSH_BYTES // workload.block_size)}")
    if jobs > 1 and not direct:
        # each thread works on its own stripe, so that the threads together touch every block
        # once per pass (as one queue would), instead of re-reading each other's cached pages
        stripe = size // jobs // workload.block_size * workload.block_size
        args += [f"--size={stripe}", f"--offset_increment={stripe}"]
    else:
        args.append(f"--size={size}")
    if workload.amount is not None:
        args.append(f"--io_size={min(size, workload.amount)}")  # one pass, like dd count=
    elif one_pass:  # without time_based, fio ends at the end of the file or of the runtime
        args.append(f"--runtime={max(1, round(runtime * 1000))}ms")
    else:
        args += ["--time_based=1", f"--runtime={max(1, round(runtime * 1000))}ms"]
    return args


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
        if workload.kind == "files":  # not block I/O: fio has no create/delete cycle
            return self._native.run(workload, path, runtime=runtime, direct=direct, observe=observe)
        mode = probe_io_mode(path) if direct else "buffered"
        one_pass = observe.one_pass(workload.is_read, mode)
        args = fio_args(
            workload, path, size=path.stat().st_size, runtime=runtime, direct=direct, one_pass=one_pass
        )
        all_dropped = False
        if mode != "direct":
            # fio's invalidate=1 drops only the test file's own pages; a stacked file system's
            # store (FUSE, dislocker, qemu) stays cached in the file system below and would
            # serve every read from memory. Same drop as the native engine's buffered rounds.
            all_dropped = host.drop_page_cache(path)
        observer = Observer(observe)
        observer.start()
        try:
            proc = subprocess.run(
                args, capture_output=True, stdin=subprocess.DEVNULL, timeout=runtime * 10 + 120, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise FioError(f"{' '.join(args)}: no answer (killed)") from exc
        observed = observer.stop()
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).decode(errors="replace").strip()
            raise FioError(f"{' '.join(args)}: exit {proc.returncode}: {detail[:500]}")
        fields = parse_fio_json(proc.stdout.decode(errors="replace"), workload.direction)
        observed["engine_cpu_seconds"] = fields.pop("engine_cpu_seconds")
        if workload.is_read and mode != "direct" and not all_dropped:  # without root
            observed = with_caveat(observed, "cache-not-dropped")
        return Measurement(
            engine=self.name,
            engine_version=self.version(),
            latency=LATENCY_TOTAL,
            io_mode=mode,
            **fields,
            **observed,
        )
