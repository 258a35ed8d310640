"""Shared by the tests that run every registered backend that can run here."""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
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


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A new directory under disk_dir(), checked for mounts and loop devices of ours and removed
    when the test is done with it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=disk_dir()))
    yield path
    assert mounts_and_loops_left(path) == [], "mount or loop device left behind"
    shutil.rmtree(path)


def write_mbr(target: Path, start: int = 2048, sectors: int = 32 * MiB // 512) -> None:
    """An MBR with one Linux partition (what fdisk writes), without needing fdisk."""
    entry = struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", start, sectors)
    fd = os.open(target, os.O_WRONLY)
    try:
        os.pwrite(fd, entry, 446)
        os.pwrite(fd, b"\x55\xaa", 510)
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def loop_device(image: Path, size: int) -> Iterator[Path]:
    """A loop device (direct I/O) over a new sparse ``image`` of ``size`` bytes, detached after."""
    with image.open("wb") as handle:
        handle.truncate(size)
    loop = host.attach_loop(image, direct_io=True)
    try:
        yield loop.path
    finally:
        host.detach_loop(loop.path, image)


@contextlib.contextmanager
def partitioned_loop(image: Path, size: int = 96 * MiB) -> Iterator[tuple[Path, Path]]:
    """A loop device over a new ``image`` with one 32 MiB partition: (whole device, partition)."""
    with image.open("wb") as handle:
        handle.truncate(size)
    write_mbr(image)
    out = subprocess.run(
        ["losetup", "--find", "--show", "--partscan", str(image)], capture_output=True, text=True, check=True
    )
    device = Path(out.stdout.strip())
    try:
        part = Path(f"{device}p1")
        if not part.exists():  # a kernel without the MBR parser: add it the way partx does (BLKPG)
            subprocess.run(["partx", "--add", str(device)], check=True, capture_output=True)
        for _ in range(50):  # devtmpfs makes the node right after
            if part.exists():
                break
            time.sleep(0.05)
        assert part.exists(), f"{part} did not appear"
        yield device, part
    finally:
        subprocess.run(["partx", "--delete", str(device)], capture_output=True)
        host.detach_loop(device, image)
