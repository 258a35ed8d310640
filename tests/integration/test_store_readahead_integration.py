"""A random read round on a real gocryptfs volume (root): nothing of its store is cached below when
the round starts, and during the round the store's loop device reads ahead one page, so the lower
page cache holds no more than the round's own reads needed (engines/readahead.py). Residency of the
ciphertext from mincore(2); no speed is asserted."""

from __future__ import annotations

import ctypes
import mmap
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host
from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.backends.fuse import FuseBackend
from pytest_encperf.engines.fio import FioEngine, fio_available
from pytest_encperf.engines.native import NativeEngine
from pytest_encperf.engines.readahead import ROUND_READAHEAD_KB
from pytest_encperf.mountedvolume import MountedVolume, close_volume, open_volume
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import LIMITED_DEFINITION_SUFFIX, MiB, Workload
from tests.helpers.support import disk_dir, mounts_and_loops_left

pytestmark = pytest.mark.integration

RND_READ = Workload("RND4K Q1T1", "randread", 4096)
SIZE = 16 * MiB
PAGE = mmap.PAGESIZE


def resident_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache (mincore on a private mapping, which reads nothing)."""
    size = path.stat().st_size
    pages = -(-size // PAGE)
    libc = ctypes.CDLL(None, use_errno=True)
    vector = (ctypes.c_ubyte * pages)()
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY) as mapping:
        start = ctypes.c_char.from_buffer(mapping)
        try:
            if libc.mincore(ctypes.c_void_p(ctypes.addressof(start)), ctypes.c_size_t(size), vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del start
    return sum(byte & 1 for byte in vector) * PAGE


def engines() -> list[NativeEngine | FioEngine]:
    return [NativeEngine(), *([FioEngine()] if fio_available() else [])]


@pytest.fixture
def gocryptfs(tmp_path: Path) -> Iterator[MountedVolume]:
    if shutil.which("gocryptfs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs gocryptfs (apt-get install gocryptfs) and /dev/fuse")
    base = Path(host.run(["mktemp", "-d", f"{disk_dir()}/encperf-test-XXXXXX"]).strip())
    target = Target("container", base, container_size(SIZE))
    mounted = open_volume(make_backend(BackendSpec("gocryptfs")), target, base / "gocryptfs")
    try:
        yield mounted
    finally:
        close_volume(mounted)
        assert mounts_and_loops_left(base) == [], "mount or loop device left behind"
        shutil.rmtree(base)


def ciphertext_of(mounted: MountedVolume) -> Path:
    """The store's file of the test file: the largest file in gocryptfs's store."""
    assert isinstance(mounted.backend, FuseBackend)
    store = mounted.backend.store(mounted.volume)
    return max((p for p in store.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("engine", engines(), ids=lambda engine: engine.name)
def test_a_random_read_round_reads_the_gocryptfs_store_from_the_device_one_page_ahead(
    gocryptfs: MountedVolume, engine: NativeEngine | FioEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = engine.prepare(gocryptfs.data_dir, SIZE)
    cipher = ciphertext_of(gocryptfs)
    assert cipher.stat().st_size > SIZE  # the test file's ciphertext (block headers and tags)
    assert gocryptfs.volume.device is not None
    loop = gocryptfs.volume.device.name
    observe = gocryptfs.observe()
    assert observe.store_devices == (loop,)
    setting = Path("/sys/block") / loop / "queue" / "read_ahead_kb"
    before = setting.read_text().strip()
    assert int(before) > ROUND_READAHEAD_KB  # the kernel's default: more than one page
    NativeEngine().run(RND_READ, path, runtime=0.2, direct=False)  # leaves some of the store cached
    at_drop: list[tuple[int, str]] = []
    real_drop = host.drop_page_cache

    def drop(dropped: Path | None = None) -> bool:
        done = real_drop(dropped)
        at_drop.append((resident_bytes(cipher), setting.read_text().strip()))
        return done

    monkeypatch.setattr(host, "drop_page_cache", drop)
    m = engine.run(RND_READ, path, runtime=0.5, direct=False, observe=observe)
    after = resident_bytes(cipher)
    # the round starts with nothing of the store cached (the drop reaches below, as root) and
    # with its loop device reading one page ahead; its own setting is back after the round
    assert at_drop == [(0, str(ROUND_READAHEAD_KB))]
    assert setting.read_text().strip() == before
    assert m.round_definition.endswith(LIMITED_DEFINITION_SUFFIX)
    # each 4 KiB read needs its ciphertext block (4,128 bytes: two pages); what the store's file
    # system read beyond that is bounded by one page per read, not its default read-ahead (other
    # runs on the machine may drop caches too: only the bound is asserted)
    assert after <= m.ios * 3 * PAGE
    assert m.physical_read_bytes is not None and m.physical_read_bytes >= 0.9 * m.bytes


def test_a_setting_left_on_a_loop_device_of_a_killed_run_goes_with_the_device() -> None:
    # a run killed inside a round leaves one page of read-ahead on its own loop device only: the
    # kernel sets a loop device's read-ahead afresh when a file is attached to it again
    backing = Path(host.run(["mktemp", f"{disk_dir()}/encperf-test-XXXXXX"]).strip())
    try:
        os.truncate(backing, 8 * MiB)
        loop = host.attach_loop(backing)
        setting = Path("/sys/block") / loop.name / "queue" / "read_ahead_kb"
        default = setting.read_text().strip()
        setting.write_text(f"{ROUND_READAHEAD_KB}\n")  # what the killed round left
        assert host.detach_loop(loop.path, backing)
        try:
            host.run(["losetup", "--direct-io=on", str(loop.path), str(backing)])
        except host.HostError:
            pytest.skip(f"{loop.path} was taken by someone else before it could be attached again")
        try:
            assert setting.read_text().strip() == default != str(ROUND_READAHEAD_KB)
        finally:
            host.detach_loop(loop.path, backing)
    finally:
        backing.unlink()
