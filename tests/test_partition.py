"""The partition target's safety rules, on loop devices acting as partitions (root)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host
from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.runner import open_volume
from pytest_encperf.settings import resolve
from pytest_encperf.targets import Target, partition_problems
from pytest_encperf.workloads import MiB
from tests.support import disk_dir, mounts_and_loops_left

pytestmark = pytest.mark.integration


@pytest.fixture
def scratch() -> Iterator[Path]:
    base = disk_dir()
    path = Path(tempfile.mkdtemp(prefix="encperf-part-", dir=base))
    yield path
    assert mounts_and_loops_left(path) == [], "mount or loop device left behind"
    shutil.rmtree(path)


@pytest.fixture
def partition(scratch: Path) -> Iterator[Path]:
    """A fresh, empty 96 MiB loop device standing in for a partition."""
    image = scratch / "disk.img"
    with image.open("wb") as handle:
        handle.truncate(96 * MiB)
    loop = host.attach_loop(image, direct_io=True)
    try:
        yield loop.path
    finally:
        host.detach_loop(loop.path, image)


def rules(problems: list[str]) -> list[str]:
    return [p.split("'")[1] for p in problems if p.startswith("partition rule")]


def test_empty_partition_is_accepted(partition: Path) -> None:
    assert partition_problems(partition) == []


def test_not_a_block_device_is_refused(scratch: Path) -> None:
    (scratch / "file").write_bytes(b"x")
    assert rules(partition_problems(scratch / "file")) == ["block device"]
    assert rules(partition_problems(Path("/dev/encperf-does-not-exist"))) == ["block device"]


def test_file_system_signature_is_refused_unless_forced(partition: Path) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", str(partition)], check=True)
    (problem,) = partition_problems(partition)
    assert problem == (
        f"partition rule 'no signature': {partition} carries a ext4 signature (blkid -p); "
        "pass --encperf-force to overwrite it"
    )
    assert partition_problems(partition, force=True) == []


def test_partition_table_is_refused(partition: Path) -> None:
    # an MBR with one Linux partition (what fdisk writes), without needing fdisk
    entry = struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", 2048, 32 * MiB // 512)
    fd = os.open(partition, os.O_WRONLY)
    try:
        os.pwrite(fd, entry, 446)
        os.pwrite(fd, b"\x55\xaa", 510)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert any("carries a dos partition table" in p for p in partition_problems(partition))


def test_mounted_partition_is_refused_even_when_forced(partition: Path, scratch: Path) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", str(partition)], check=True)
    mountpoint = scratch / "mnt"
    mountpoint.mkdir()
    host.mount(partition, mountpoint, "ext4")
    try:
        problems = partition_problems(partition, force=True)
        assert problems == [f"partition rule 'not mounted': {partition} is mounted on {mountpoint}"]
    finally:
        host.unmount(mountpoint)


def test_swap_is_refused(partition: Path) -> None:
    subprocess.run(["mkswap", "-q", str(partition)], check=True, capture_output=True)
    swapon = subprocess.run(["swapon", str(partition)], capture_output=True)
    if swapon.returncode != 0:
        pytest.skip(f"swapon not possible here: {swapon.stderr.decode().strip()}")
    try:
        assert "no swap" in rules(partition_problems(partition, force=True))
    finally:
        subprocess.run(["swapoff", str(partition)], check=True)


def test_root_disk_is_refused() -> None:
    root = next(
        line.split()[2]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4] == "/"
    )
    sysfs = Path(f"/sys/dev/block/{root}")
    device = Path("/dev") / sysfs.resolve().name
    if not sysfs.exists() or not device.exists():
        pytest.skip(f"/ is not on a block device here ({root})")
    found = rules(partition_problems(device, force=True))
    assert "not the root disk" in found and "not mounted" in found


def test_allow_destroy_must_repeat_the_device_exactly() -> None:
    base = {"target": "partition", "device": "/dev/sdz1"}
    with pytest.raises(ValueError, match=r"pass --encperf-allow-destroy=/dev/sdz1 \(the exact same path\)"):
        resolve(base, {}, environ={})
    with pytest.raises(ValueError, match="not '/dev/sdz'"):
        resolve({**base, "allow-destroy": "/dev/sdz"}, {}, environ={})
    with pytest.raises(ValueError, match="needs --encperf-device"):
        resolve({"target": "partition"}, {}, environ={})
    with pytest.raises(ValueError, match="need --encperf-target=partition"):
        resolve({"device": "/dev/sdz1", "allow-destroy": "/dev/sdz1"}, {}, environ={})
    settings = resolve({**base, "allow-destroy": "/dev/sdz1", "force": "1"}, {}, environ={})
    assert settings.device == Path("/dev/sdz1") and settings.force is True


def test_plain_baseline_on_a_partition(partition: Path, scratch: Path) -> None:
    target = Target("partition", scratch, 16 * MiB, device=partition)
    backend = make_backend(BackendSpec("plain"))
    mounted = open_volume(backend, target, scratch / "volume")
    try:
        assert mounted.description["device"] == str(partition)
        (mounted.data_dir / "f").write_bytes(b"x" * 4096)
        # while in use, the same partition is refused to anyone else
        assert "not mounted" in rules(Target("partition", scratch, 16 * MiB, device=partition).problems())
    finally:
        backend.destroy(mounted.volume)
    # the ext4 signature we wrote is wiped with the volume: the partition is as we got it
    assert partition_problems(partition) == []


def test_session_refuses_unconsented_partition(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bench="def test_w(encperf, encperf_workload):\n    encperf.run(encperf_workload)"
    )
    result = pytester.runpytest("--encperf-target=partition", "--encperf-device=/dev/sdz1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--encperf-allow-destroy=/dev/sdz1" in result.stderr.str()


SEQUENTIAL_CONFTEST = """
import os
from pathlib import Path
from pytest_encperf import host
from pytest_encperf.backends import BackendBase, Volume

LOG = Path(__file__).parent / "lifecycle.log"
DEVICE = os.environ["ENCPERF_TEST_PARTITION"]

def log(line):
    with LOG.open("a") as f:
        f.write(line + "\\n")

def device_mounted():
    return any(line.split()[0] == DEVICE for line in Path("/proc/self/mounts").read_text().splitlines())

class Recording(BackendBase):
    def problems(self, target):
        return []

    def create(self, target, workdir):
        log(f"create device_mounted={device_mounted()}")
        volume = Volume(self, target, workdir)
        volume.created.push("destroy", lambda: log("destroy"))
        return volume

    def mount(self, volume):
        volume.data_dir = volume.workdir
        return volume.data_dir

    def describe(self, volume):
        return {"encryption": "none"}

def pytest_encperf_register_backends(config):
    return {"recording": Recording}

def pytest_sessionfinish(session):
    import json
    encperf = session.config.stash[__import__("pytest_encperf.plugin", fromlist=["x"]).session_key]
    rounds = {r.workload.name: [len(r.rounds), len(r.baseline_rounds), r.description.get("baseline")]
              for r in encperf.results}
    (Path(__file__).parent / "rounds.json").write_text(json.dumps(rounds))
"""


def test_partition_session_measures_baseline_before_and_after(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    pytester.makeconftest(SEQUENTIAL_CONFTEST)
    pytester.makepyfile(
        test_bench="def test_w(encperf, encperf_workload):\n    encperf.run(encperf_workload)"
    )
    result = pytester.runpytest(
        "--encperf-target=partition",
        f"--encperf-device={partition}",
        f"--encperf-allow-destroy={partition}",
        f"--encperf-dir={pytester.path}",
        "--encperf-backends=recording",
        "--encperf-size=4MiB",
        "--encperf-runtime=0.02",
        "--encperf-rounds=2",
        "-k",
        "SEQ1M-Q1T1",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2)
    # the baseline's ext4 was gone from the partition before the other volume was created
    assert (pytester.path / "lifecycle.log").read_text().splitlines() == [
        "create device_mounted=False",
        "destroy",
    ]
    import json

    rounds = json.loads((pytester.path / "rounds.json").read_text())
    assert rounds and all(v == [2, 4, "before/after"] for v in rounds.values()), rounds
    assert partition_problems(partition) == [], "partition not left as we got it"
