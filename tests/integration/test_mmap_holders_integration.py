"""A process that maps the device, or a loop device's backing file, into its memory and closes
the descriptor still reads and writes it: the partition rule 'not in use' refuses it the same
way as an open descriptor (root: loop devices)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host
from pytest_encperf.targets import partition_problems
from pytest_encperf.workloads import MiB
from tests.helpers.support import loop_device, scratch_dir

pytestmark = pytest.mark.integration

# libc's mmap: Python's mmap.mmap keeps a duplicate of the descriptor (before 3.13's trackfd)
MAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
c = ctypes
libc.mmap.argtypes = [c.c_void_p, c.c_size_t, c.c_int, c.c_int, c.c_int, c.c_long]
fd = os.open(sys.argv[1], os.O_RDWR)
address = libc.mmap(None, 1 << 20, 3, 1, fd, 0)  # PROT_READ | PROT_WRITE, MAP_SHARED
assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
os.close(fd)
assert not [n for n in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{n}") == sys.argv[1]]
print("mapped", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def mapped(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A child python process that has mapped ``path`` and closed its descriptor."""
    proc = subprocess.Popen(
        [sys.executable, "-c", MAPPER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "mapped\n"
        yield proc
    finally:
        proc.communicate("")


@pytest.fixture
def device() -> Iterator[tuple[Path, Path]]:
    """(a loop device standing in for the named device, its backing file)."""
    with scratch_dir("encperf-mmap-") as scratch, loop_device(scratch / "g.img", 32 * MiB) as path:
        yield path, scratch / "g.img"


def test_a_process_that_maps_the_device_makes_it_in_use(device: tuple[Path, Path]) -> None:
    path, _ = device
    with mapped(path) as holder:
        assert partition_problems(path, force=True) == [
            f"partition rule 'not in use': {path} is open in pid {holder.pid} (python3) as a memory map "
            "(a virtual machine, dd or another program is using it)"
        ]
    assert partition_problems(path, force=True) == []


def test_a_process_that_maps_the_backing_file_makes_it_in_use(device: tuple[Path, Path]) -> None:
    path, image = device
    backing = (host.loop_backing_file(path) or "").removesuffix(host.DELETED)
    with mapped(image) as holder:
        assert partition_problems(path, force=True) == [
            f"partition rule 'not in use': {path} is in use: the backing file {backing} is open in pid "
            f"{holder.pid} (python3) as a memory map (a virtual machine, dd or another program is using it)"
        ]
    assert partition_problems(path, force=True) == []
