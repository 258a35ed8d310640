"""Shared by the tests that run every registered backend that can run here."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from pytest_encperf import host
from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB


def disk_dir() -> Path:
    """Where integration tests make their volumes: $ENCPERF_TEST_DIR, else /var/tmp (on disk;
    /tmp is often tmpfs, which the container target refuses)."""
    return Path(os.environ.get("ENCPERF_TEST_DIR", "/var/tmp"))


def problems_here(name: str, base: Path) -> list[str]:
    """Why backend ``name`` (without parameters) cannot run on a small container in ``base``.

    Backends that open an existing volume (tcrypt, bitlk, bitlocker) need parameters such as
    image=: without them they cannot run in a generic test either.
    """
    try:
        backend = make_backend(BackendSpec(name))
    except ValueError as exc:
        return [f"needs parameters: {exc}"]
    return backend.problems(Target("container", base, container_size(2 * MiB)))


def mounts_and_loops_left(path: Path) -> list[str]:
    """Mounts and loop devices of ours still there after a test that worked under ``path``.

    Includes loop devices whose backing file belongs to a mount that is gone (a FUSE export
    unmounted under them): the kernel then names "/" as their backing file, so they are no
    longer "under path", but a leak all the same.
    """
    found = [f"mount {m}" for m in host.mounts_under(path)]
    found += [f"loop device {d}" for d in host.loops_backed_by(path)]
    for entry in Path("/sys/block").glob("loop*"):
        backing = entry / "loop" / "backing_file"
        with contextlib.suppress(OSError):
            if backing.read_text().strip() == "/":
                found.append(f"orphaned loop device /dev/{entry.name} (backing file of a vanished mount)")
    return found
