"""The ladder's layer rung (``--encperf-ladder``): each backend on a RAM-backed container.

A loop device over a container file on a private tmpfs this run mounts itself (a 0700 directory
in the run directory, each resource registered for cleanup the moment it exists), with plain on
the same tmpfs as the rung's plain side. What it measures is memory, not a disk: the session
keeps it apart from the results (ladder.py), so it is never a baseline nor gated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import psutil

from . import host, resources
from .backends import BASELINE, BASELINE_SPEC, BackendError, BackendSpec, make_backend
from .engines import Engine
from .ladder import LayerRungs, Rung
from .mountedvolume import MountedVolume, Unavailable, close_volume, open_volume, slug
from .roundplan import RoundPlan
from .runner import RunError, Runner
from .targets import Target, container_size
from .workloads import MiB, Workload

RAM_MOUNT = "ladder-ram"  # the tmpfs's mount point, in the run directory
RAM_SOURCE = "encperf-ladder"  # the tmpfs's name in the mount table
RAM_HEADROOM = 2  # the tmpfs may take at most 1/RAM_HEADROOM of the memory available


def ram_bytes(size: int) -> int:
    """The tmpfs for the plain and one backend container of workload files of ``size``."""
    return 2 * container_size(size) + 16 * MiB


def ram_problem(size: int, available: int | None = None) -> str:
    """Why the RAM-backed container cannot be made here (empty when it can)."""
    if not host.is_root():
        return "the RAM-backed container needs root (mount, losetup)"
    missing = host.missing_tools("mount", "umount", "losetup")
    if missing:
        return f"the RAM-backed container needs {', '.join(missing)}"
    need = ram_bytes(size)
    available = psutil.virtual_memory().available if available is None else available
    if need > available // RAM_HEADROOM:
        return (
            f"the RAM-backed container needs {need // MiB} MiB of memory, more than half of the "
            f"{available // MiB} MiB available: pass a smaller --encperf-size"
        )
    return ""


def mount_ram(base: Path, size: int, cleanup: resources.Cleanup) -> Path:
    """A private tmpfs at ``base/RAM_MOUNT``: a 0700 directory made here and its mount, each
    registered on ``cleanup`` the moment it exists."""
    point = base / RAM_MOUNT
    point.mkdir(mode=0o700)
    cleanup.path(point)
    options = f"size={ram_bytes(size)},mode=0700,nosuid,nodev,noexec"
    cleanup.mount(point)  # before it exists: a kill right after the mount must not leave it
    host.run(["mount", "-t", "tmpfs", "-o", options, RAM_SOURCE, str(point)])
    return point


@dataclass
class LayerSettings:
    engine: Engine
    plan: RoundPlan
    # held around each workload's rounds (a RAM measurement uses the CPU and memory: the machine)
    lock: Callable[[], AbstractContextManager[float]] = lambda: contextlib.nullcontext(0.0)
    between_measurements: Callable[[], AbstractContextManager[float]] = lambda: contextlib.nullcontext(0.0)


def measure_layers(
    cases: Iterable[tuple[BackendSpec, list[Workload]]], base: Path, settings: LayerSettings
) -> tuple[LayerRungs, list[str]]:
    """Each backend spec's workloads on a RAM-backed container against plain on the same tmpfs (the
    rungs keyed by the spec's text, the identity of its results).

    Returns the rungs (a rung that could not be measured says why) and what could not be torn
    down. Everything is released before it returns: volumes, loop devices, the tmpfs, its mount
    point.
    """
    cases = [(spec, workloads) for spec, workloads in cases if workloads]
    found: LayerRungs = {}

    def fail(spec: BackendSpec, workloads: list[Workload], why: str) -> None:
        for workload in workloads:
            found.setdefault((str(spec), workload.name), (Rung(None, f"not measured: {why}"), Rung(None)))

    problem = ram_problem(settings.plan.size)
    if problem:
        for spec, workloads in cases:
            fail(spec, workloads, problem)
        return found, []
    cleanup = resources.Cleanup()
    errors: list[str] = []
    try:
        point = mount_ram(base, settings.plan.size, cleanup)
        target = Target("container", point, container_size(settings.plan.size), ram=True)
        plain = open_volume(make_backend(BASELINE_SPEC), target, point / f"00-{BASELINE}")
        try:
            for index, (spec, workloads) in enumerate(cases, start=1):
                try:
                    if spec == BASELINE_SPEC:
                        measured = _measure(plain, plain, workloads, settings)
                    else:
                        backend = make_backend(spec)
                        volume = open_volume(backend, target, point / f"{index:02d}-{slug(str(spec))}")
                        try:
                            measured = _measure(volume, plain, workloads, settings)
                        finally:
                            with host.signals_deferred():
                                close_volume(volume)
                    found.update({(str(spec), name): rungs for name, rungs in measured.items()})
                except (Unavailable, BackendError, RunError, host.HostError, OSError) as exc:
                    fail(spec, workloads, str(exc))
        finally:
            with host.signals_deferred():
                close_volume(plain)
    except (Unavailable, BackendError, RunError, host.HostError, OSError) as exc:
        for spec, workloads in cases:
            fail(spec, workloads, f"the RAM-backed container: {exc}")
    finally:
        with host.signals_deferred():
            try:
                cleanup.release()
            except Exception as exc:
                errors.append(f"ladder: {exc}")
    return found, errors


def _measure(
    volume: MountedVolume, plain: MountedVolume, workloads: list[Workload], settings: LayerSettings
) -> dict[str, tuple[Rung, Rung]]:
    runner = Runner(
        engine=settings.engine,
        volume=volume,
        baseline=plain,
        plan=settings.plan,
        record=lambda result: None,  # never among the run's results: see the module docstring
        lock=settings.lock,
        between_measurements=settings.between_measurements,
    )
    measured = {}
    note = "RAM-backed: loop device over a container file on tmpfs"
    if "loop-dio-off" in volume.caveats:
        note += " (loop direct I/O off)"
    for workload in workloads:
        result = runner.run(workload)
        measured[workload.name] = (
            Rung(result.median("mb_per_s"), note),
            Rung(result.median("mb_per_s", baseline=True), note),
        )
    return measured
