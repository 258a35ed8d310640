"""Honesty checks on real volumes (root): device counters, the cache flag, what O_DIRECT
really gives (fscrypt, a FUSE file system), the CPU time of a backend's daemon."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host, mounting
from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.engines.fio import FioEngine, fio_available
from pytest_encperf.engines.native import NativeEngine, probe_io_mode
from pytest_encperf.engines.observe import Observe, Observer
from pytest_encperf.model import Result
from pytest_encperf.mountedvolume import MountedVolume, close_volume, open_volume
from pytest_encperf.report import detail_table
from pytest_encperf.resources import Cleanup
from pytest_encperf.roundplan import RoundPlan
from pytest_encperf.runner import Runner
from pytest_encperf.secretdirs import SecretDir
from pytest_encperf.storage import benchmark_entry
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import DRAINED_DEFINITION_SUFFIX, MiB, Workload
from tests.helpers.support import disk_dir, mounts_and_loops_left

pytestmark = pytest.mark.integration

SEQ_READ = Workload("SEQ1M Q1T1", "read", MiB)
RND_READ = Workload("RND4K Q1T1", "randread", 4096)
SEQ_READ_Q8 = Workload("SEQ1M Q8T1", "read", MiB, iodepth=8)


@pytest.fixture
def base_dir(tmp_path: Path) -> Iterator[Path]:
    base = disk_dir()
    path = Path(host.run(["mktemp", "-d", f"{base}/encperf-test-XXXXXX"]).strip())
    yield path
    assert mounts_and_loops_left(path) == [], "mount or loop device left behind"
    shutil.rmtree(path)


def open_container(name: str, base_dir: Path, size: int = 8 * MiB) -> MountedVolume:
    target = Target("container", base_dir, container_size(size))
    return open_volume(make_backend(BackendSpec(name)), target, base_dir / name)


@pytest.fixture
def plain(base_dir: Path) -> Iterator[MountedVolume]:
    mounted = open_container("plain", base_dir)
    yield mounted
    close_volume(mounted)


def test_devices_are_the_loop_device_and_the_disk_below(plain: MountedVolume) -> None:
    loop = Path(plain.volume.device).name
    assert plain.devices[0] == loop and loop.startswith("loop")
    assert plain.devices[1:] == (host.block_device_of(plain.volume.workdir),)
    assert plain.daemon_pids == ()


def test_cache_detector_flags_a_cached_read_round_and_not_a_dropped_one(plain: MountedVolume) -> None:
    engine = NativeEngine()
    path = engine.prepare(plain.data_dir, 8 * MiB)
    observe = plain.observe()
    dropped = engine.run(SEQ_READ, path, runtime=0.2, direct=False, observe=observe)
    assert dropped.physical_read_bytes is not None and dropped.logical_read_bytes == dropped.bytes
    assert dropped.physical_read_bytes >= 0.9 * dropped.bytes
    assert dropped.cached is False
    path.read_bytes()  # now the whole file is in the page cache
    cached = NativeEngine(drop_cache=False).run(SEQ_READ, path, runtime=0.2, direct=False, observe=observe)
    assert cached.physical_read_bytes is not None and cached.physical_read_bytes < 0.1 * cached.bytes
    assert cached.cached is True
    # the devices below the loop device are observed too
    assert [name for name, _, _ in cached.physical] == list(plain.devices)


def test_a_loop_device_without_direct_io_flags_every_round(plain: MountedVolume) -> None:
    loop = Path(plain.volume.device)
    assert (Path("/sys/block") / loop.name / "loop" / "dio").read_text().strip() == "1"
    assert plain.caveats == ()
    engine = NativeEngine()
    path = engine.prepare(plain.data_dir, 8 * MiB)
    host.run(["losetup", "--direct-io=off", str(loop)])
    try:
        assert (Path("/sys/block") / loop.name / "loop" / "dio").read_text().strip() == "0"
        assert plain.caveats == ("loop-dio-off",)
        m = engine.run(SEQ_READ, path, runtime=0.05, direct=True, observe=plain.observe())
        assert m.caveats == ("loop-dio-off",)
    finally:
        host.run(["losetup", "--direct-io=on", str(loop)])
    assert engine.run(SEQ_READ, path, runtime=0.05, direct=True, observe=plain.observe()).caveats == ()


@pytest.mark.parametrize("engine_name", ["native", "fio"])
def test_buffered_reads_without_root_say_the_cache_was_not_dropped(
    plain: MountedVolume, monkeypatch: pytest.MonkeyPatch, engine_name: str
) -> None:
    if engine_name == "fio" and not fio_available():
        pytest.skip("fio is not installed")
    engine = FioEngine() if engine_name == "fio" else NativeEngine()
    path = engine.prepare(plain.data_dir, 8 * MiB)
    write = Workload("SEQ1M Q1T1", "write", MiB)
    monkeypatch.setattr(host, "is_root", lambda: False)  # drop_caches is refused to others
    observe = plain.observe()
    assert engine.run(SEQ_READ, path, runtime=0.05, direct=False, observe=observe).caveats == (
        "cache-not-dropped",
    )
    assert engine.run(write, path, runtime=0.05, direct=False, observe=observe).caveats == ()  # fdatasync'd
    assert engine.run(SEQ_READ, path, runtime=0.05, direct=True, observe=observe).caveats == ()
    monkeypatch.undo()
    assert engine.run(SEQ_READ, path, runtime=0.05, direct=False, observe=observe).caveats == ()


def test_direct_rounds_reach_the_device(plain: MountedVolume) -> None:
    engine = NativeEngine()
    path = engine.prepare(plain.data_dir, 8 * MiB)
    assert probe_io_mode(path) == "direct"
    m = engine.run(SEQ_READ, path, runtime=0.1, direct=True, observe=plain.observe())
    assert m.io_mode == "direct" and m.cached is False


def loop_requests(device: str) -> tuple[int, int]:
    """Reads completed and 512-byte sectors read, from /sys/block/<device>/stat."""
    fields = (Path("/sys/block") / device / "stat").read_text().split()
    return int(fields[0]), int(fields[2])


def huge_pages_advisable() -> bool:
    switch = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return switch.exists() and "[never]" not in switch.read_text()


def engines() -> list[NativeEngine | FioEngine]:
    return [NativeEngine(), *([FioEngine()] if fio_available() else [])]


@pytest.mark.parametrize("engine", engines(), ids=lambda engine: engine.name)
def test_buffered_reads_with_several_out_read_every_pass_from_the_device(
    plain: MountedVolume, engine: NativeEngine | FioEngine
) -> None:
    """Pages dropped at a pass end while reads are still out stay cached (the kernel keeps pages
    under a read) and the next pass reads them from memory: with fio's time-based loop about a
    fifth of the bytes on a 16 MiB file. Both engines end a pass with its reads done first."""
    path = engine.prepare(plain.data_dir, 8 * MiB)
    m = engine.run(SEQ_READ_Q8, path, runtime=0.5, direct=False, observe=plain.observe())
    assert m.io_mode == "buffered" and m.bytes >= 4 * 8 * MiB, "several passes"
    assert m.round_definition.endswith(DRAINED_DEFINITION_SUFFIX)
    assert m.physical_read_bytes is not None and m.physical_read_bytes >= 0.97 * m.bytes


@pytest.mark.skipif(not huge_pages_advisable(), reason="transparent huge pages are switched off here")
@pytest.mark.parametrize("engine", engines(), ids=lambda engine: engine.name)
def test_a_1mib_direct_read_reaches_the_loop_device_as_one_request(
    plain: MountedVolume, engine: NativeEngine | FioEngine
) -> None:
    # A loop device takes 128 segments of at most 64 KiB: a 1 MiB buffer of scattered 4 KiB
    # pages would be split into two 512 KiB requests; both engines' buffers are huge pages.
    loop = plain.devices[0]
    if int((Path("/sys/block") / loop / "queue" / "max_sectors_kb").read_text()) < 1024:
        pytest.skip(f"{loop} takes requests of less than 1 MiB")
    path = engine.prepare(plain.data_dir, 8 * MiB)
    seq_q8 = Workload("SEQ1M Q8T1", "read", MiB, iodepth=8)
    before = loop_requests(loop)
    m = engine.run(seq_q8, path, runtime=0.3, direct=True, observe=plain.observe())
    after = loop_requests(loop)
    requests, sectors = after[0] - before[0], after[1] - before[1]
    assert m.io_mode == "direct" and sectors * 512 >= m.bytes
    assert sectors * 512 / requests >= 0.95 * MiB, f"{requests} requests for {m.ios} reads of 1 MiB"
    # the measurement records what the device saw (psutil's counters of the same device)
    assert m.physical_read_requests is not None and m.physical_read_bytes is not None
    assert m.physical_read_bytes / m.physical_read_requests >= 0.95 * MiB


def test_o_direct_on_fscrypt_here_is_direct_requested_but_buffered(base_dir: Path) -> None:
    mounted = open_container("fscrypt", base_dir)
    try:
        path = NativeEngine().prepare(mounted.data_dir, MiB)
        assert probe_io_mode(path) == "direct-requested-but-buffered"
        # asked for O_DIRECT, both engines measure it as the buffered round it is: the file's
        # pages are dropped at every pass, so no pass reads what the one before left cached
        for engine in engines():
            m = engine.run(SEQ_READ, path, runtime=0.3, direct=True, observe=mounted.observe())
            assert m.io_mode == "direct-requested-but-buffered" and m.bytes >= 2 * MiB
            assert m.physical_read_bytes is not None and m.physical_read_bytes >= 0.9 * m.bytes
    finally:
        close_volume(mounted)


@pytest.fixture
def securefs_mount(base_dir: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A securefs FUSE mount (it refuses O_DIRECT), its daemon in the foreground."""
    if shutil.which("securefs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs securefs (apt-get install securefs) and /dev/fuse for a FUSE file system")
    cleanup = Cleanup()
    try:
        keyfile = SecretDir.create(cleanup).write("key", os.urandom(32))
        cipher, mountpoint = base_dir / "cipher", base_dir / "mnt"
        cipher.mkdir()
        mountpoint.mkdir()
        host.run(["securefs", "create", "--keyfile", keyfile, "--pbkdf", "pkcs5-pbkdf2-hmac-sha256",
                  "-r", "1", cipher])  # fmt: skip
        proc = subprocess.Popen(
            ["securefs", "mount", "--keyfile", str(keyfile), str(cipher), str(mountpoint)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        cleanup.process(proc, wait=10)
        cleanup.mount(mountpoint)
        deadline = time.monotonic() + 20
        while not mounting.is_mounted(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"securefs did not mount (exit {proc.poll()})")
            time.sleep(0.05)
        yield mountpoint, proc
    finally:
        cleanup.release()


def test_fuse_file_system_refusing_o_direct_is_buffered(
    securefs_mount: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    mountpoint, _ = securefs_mount
    path = NativeEngine().prepare(mountpoint, MiB)
    assert probe_io_mode(path) == "buffered"


def test_cpu_time_of_the_daemon_is_counted_by_pid(
    securefs_mount: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    mountpoint, proc = securefs_mount
    observer = Observer(Observe(daemon_pids=(proc.pid,)))
    observer.start()
    NativeEngine().prepare(mountpoint, 16 * MiB)  # every byte is encrypted by the daemon
    observed = observer.stop()
    assert observed["daemon_cpu_seconds"] is not None and observed["daemon_cpu_seconds"] > 0
    assert Observer(Observe()).stop()["daemon_cpu_seconds"] is None


@pytest.mark.parametrize("engine", engines(), ids=lambda engine: engine.name)
def test_reads_on_a_fuse_volume_come_from_the_device_not_the_store_cache(
    base_dir: Path, engine: NativeEngine | FioEngine
) -> None:
    # gocryptfs keeps the file in a store on the container's file system: once read, the store
    # would stay cached below the FUSE file, whatever the engine drops of the file itself
    if shutil.which("gocryptfs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs gocryptfs (apt-get install gocryptfs) and /dev/fuse")
    mounted = open_container("gocryptfs", base_dir)
    try:
        path = engine.prepare(mounted.data_dir, 4 * MiB)
        observe = mounted.observe()
        assert observe.store_below and observe.devices[0].startswith("loop")
        for workload in (SEQ_READ, Workload("RND4K Q1T1", "randread", 4096)):
            m = engine.run(workload, path, runtime=5, direct=False, observe=observe)
            assert m.bytes == 4 * MiB  # one pass, not several from memory
            assert m.physical_read_bytes is not None and m.physical_read_bytes >= 0.9 * m.bytes
            assert m.cached is False
    finally:
        close_volume(mounted)


def test_a_random_read_on_gocryptfs_beating_plain_through_the_lower_cache_is_flagged(
    base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gocryptfs reads each 4 KiB block's ciphertext from a store on ext4, whose read-ahead
    # brings in neighbouring pages that later reads of the same pass find in memory: its device
    # sees fewer requests per byte read than plain's, and the cell may beat plain for that reason.
    # On a container the rounds limit that read-ahead (engines/readahead.py); where they cannot
    # (a store on the user's disk), the flag tells: the limit is left out here to show it.
    if shutil.which("gocryptfs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs gocryptfs (apt-get install gocryptfs) and /dev/fuse")
    size = 32 * MiB
    plain = open_container("plain", base_dir, size)
    try:
        fuse = open_container("gocryptfs", base_dir, size)
        monkeypatch.setattr(fuse.backend, "store_devices", lambda volume: ())
        try:
            changes = []
            for _ in range(3):  # until it beats plain (each attempt checks the flag both ways)
                results: list[Result] = []
                Runner(NativeEngine(), fuse, plain, RoundPlan(size, 1.0, 3, 1), results.append).run(RND_READ)
                (result,) = results
                mine, theirs = result.device_per_logical(), result.device_per_logical(baseline=True)
                assert mine.requests is not None and theirs.requests is not None
                if not mine.requests < 0.9 * theirs.requests:
                    # the lower ext4 read nothing ahead this time (its heuristics, the page cache
                    # under other runs' drops): not the case this test is about
                    changes.append(f"no read-ahead below gocryptfs ({mine.requests / theirs.requests:.2f}x)")
                    continue
                beats = result.median("iops") > result.median("iops", baseline=True)
                assert result.cached_below == beats
                assert ("cached below" in detail_table([result])) == beats
                assert benchmark_entry(result)["extra_info"]["cached_below"] == beats
                changes.append(f"{result.change_percent:+.1f}%")
                if beats:
                    break
            else:
                pytest.skip(f"gocryptfs never beat plain through read-ahead here ({', '.join(changes)})")
        finally:
            close_volume(fuse)
    finally:
        close_volume(plain)
