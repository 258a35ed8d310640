"""The partition target's safety rules, on loop devices acting as partitions (root)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host, mounting
from pytest_encperf.backends import (
    BackendBase,
    BackendError,
    BackendSpec,
    Param,
    make_backend,
    placement_problems,
)
from pytest_encperf.blockstack import BlockStack
from pytest_encperf.mountedvolume import open_volume
from pytest_encperf.settings import resolve
from pytest_encperf.targets import DeviceClaim, Target, partition_problems, probe_signature
from pytest_encperf.workloads import MiB
from tests.helpers.support import loop_device, loop_on, partitioned_loop, scratch_dir, write_mbr

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sessions_of_this_test_alone")]


@pytest.fixture
def scratch() -> Iterator[Path]:
    with scratch_dir("encperf-part-") as path:
        yield path


@pytest.fixture
def partition(scratch: Path) -> Iterator[Path]:
    """A fresh, empty 128 MiB loop device standing in for a partition (btrfs needs 109 MiB)."""
    with loop_device(scratch / "disk.img", 128 * MiB) as device:
        yield device


@pytest.fixture
def disk(scratch: Path) -> Iterator[tuple[Path, Path]]:
    """A 96 MiB loop device with one 32 MiB partition: (disk, partition)."""
    with partitioned_loop(scratch / "whole.img") as devices:
        yield devices


@contextlib.contextmanager
def mounted(device: Path, mountpoint: Path, fstype: str = "ext4") -> Iterator[Path]:
    mkfs = ["mkfs.btrfs", "-q", "-f"] if fstype == "btrfs" else ["mkfs.ext4", "-q", "-F"]
    subprocess.run([*mkfs, str(device)], check=True, capture_output=True)
    mountpoint.mkdir()
    mounting.mount(device, mountpoint, fstype)
    try:
        yield mountpoint
    finally:
        mounting.unmount(mountpoint)


def command_of(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


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
    write_mbr(partition)
    assert any("carries a dos partition table" in p for p in partition_problems(partition))


def test_mounted_partition_is_refused_even_when_forced(partition: Path, scratch: Path) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", str(partition)], check=True)
    mountpoint = scratch / "mnt"
    mountpoint.mkdir()
    mounting.mount(partition, mountpoint, "ext4")
    try:
        problems = partition_problems(partition, force=True)
        assert problems == [f"partition rule 'not mounted': {partition} is mounted on {mountpoint}"]
    finally:
        mounting.unmount(mountpoint)


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


def test_whole_disk_with_a_mounted_partition_is_refused(disk: tuple[Path, Path], scratch: Path) -> None:
    whole, part = disk
    with mounted(part, scratch / "mnt") as point:
        problems = partition_problems(whole, force=True)
        assert problems == [
            f"partition rule 'not mounted': {whole} has a partition, {part}, that is mounted on {point}"
        ]
        assert rules(partition_problems(part, force=True)) == ["not mounted"]
    assert partition_problems(whole, force=True) == []


def test_mounted_btrfs_is_found_although_its_device_number_is_anonymous(
    partition: Path, scratch: Path
) -> None:
    if shutil.which("mkfs.btrfs") is None:
        pytest.skip("needs mkfs.btrfs (apt-get install btrfs-progs)")
    with mounted(partition, scratch / "mnt", "btrfs") as point:
        numbers = next(
            line.split()[2]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4] == str(point)
        )
        rdev = partition.stat().st_rdev
        assert numbers != f"{os.major(rdev)}:{os.minor(rdev)}"  # what the old rule compared
        assert partition_problems(partition, force=True) == [
            f"partition rule 'not mounted': {partition} is mounted on {point}"
        ]


def test_a_device_another_program_holds_exclusively_is_refused(partition: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import os, sys; os.open({str(partition)!r}, os.O_RDONLY | os.O_EXCL); "
         "print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert partition_problems(partition) == [  # named by its open descriptor
            f"partition rule 'not in use': {partition} is open in pid {holder.pid} "
            f"({command_of(holder.pid)}) (a virtual machine, dd or another program is using it)"
        ]
    finally:
        holder.communicate("")
    assert partition_problems(partition) == []


def test_a_device_a_program_has_open_without_holding_it_exclusively_is_refused(
    disk: tuple[Path, Path],
) -> None:
    """How a virtual machine (qemu without locking) or dd uses a disk: opened, not held O_EXCL,
    so the exclusive probe succeeds; the open descriptor names the process."""
    whole, part = disk
    with part.open("rb") as device:  # a program of another pid: the run's own descriptors do not count
        user = subprocess.Popen(["sleep", "600"], stdin=device)
    try:
        assert partition_problems(part, force=True) == [
            f"partition rule 'not in use': {part} is open in pid {user.pid} (sleep) (a virtual machine, "
            "dd or another program is using it)"
        ]
        assert rules(partition_problems(whole, force=True)) == ["not in use"]
        assert (
            f"{whole} has a partition, {part}, that is open in pid {user.pid}"
            in partition_problems(whole, force=True)[0]
        )
        os.close(os.open(part, os.O_RDONLY | os.O_EXCL))  # what the probe alone would have accepted
    finally:
        user.kill()
        user.wait()
    assert partition_problems(part, force=True) == []


def test_a_program_that_has_the_whole_disk_open_refuses_its_partition(disk: tuple[Path, Path]) -> None:
    """A virtual machine given the whole disk, or dd imaging it, reads and writes the partition's
    bytes too, and the kernel lets a partition be held exclusively while its disk is only open:
    the open descriptor of the disk names the process."""
    whole, part = disk
    with whole.open("rb") as device:
        user = subprocess.Popen(["sleep", "600"], stdin=device)
    try:
        assert partition_problems(part, force=True) == [
            f"partition rule 'not in use': {part} is on {whole.name}, which is open in pid {user.pid} "
            "(sleep) (a virtual machine, dd or another program is using it)"
        ]
        os.close(os.open(part, os.O_RDONLY | os.O_EXCL))  # what the probe alone would have accepted
    finally:
        user.kill()
        user.wait()
    assert partition_problems(part, force=True) == []


# kernels without the MBR parser add partitions through BLKPG (partx), which refuses overlapping
# ones: the UML lane's kernel has the parser and runs this test (tests/integration/test_uml_lane.py)
NO_OVERLAP_HERE = "this kernel cannot show overlapping partitions (no MBR parser; partx's BLKPG refuses them)"


def test_partitions_that_share_bytes_refuse_each_other(scratch: Path) -> None:
    """An MBR whose second partition lies inside the first (an isohybrid image's EFI partition
    inside its ISO 9660 one): the kernel reads both, and writing either writes the other, with
    the first mounted or not and whatever signature the second shows (here a backup superblock
    of the first's ext4: --encperf-force would pass that rule). A third, after the first, shares
    nothing."""
    inside, after = (2048 + 8 * MiB // 512, 4 * MiB // 512), (2048 + 32 * MiB // 512, 16 * MiB // 512)
    with contextlib.ExitStack() as stack:
        try:
            whole, first = stack.enter_context(
                partitioned_loop(scratch / "isohybrid.img", 96 * MiB, inside, after)
            )
        except subprocess.CalledProcessError:
            pytest.skip(NO_OVERLAP_HERE)
        second, third = Path(f"{whole}p2"), Path(f"{whole}p3")
        for _ in range(50):  # devtmpfs makes the nodes right after
            if second.exists() and third.exists():
                break
            time.sleep(0.05)
        assert partition_problems(third) == []
        with mounted(first, scratch / "mnt"):
            assert partition_problems(second, force=True) == [
                f"partition rule 'no overlap': writing {second} writes bytes 9 MiB..13 MiB of "
                f"/dev/{whole.name}, which its partition /dev/{first.name} (bytes 1 MiB..33 MiB) shares, "
                f"and it is mounted on {scratch / 'mnt'}"
            ]
        assert rules(partition_problems(second, force=True)) == ["no overlap"]
        assert rules(partition_problems(first, force=True)) == ["no overlap"]  # second is inside it
        with pytest.raises(host.HostError, match="partition rule 'no overlap'"):
            DeviceClaim(second).acquire()


def test_a_loop_device_over_the_disk_refuses_the_mounted_partition_its_bytes_cover(
    disk: tuple[Path, Path], scratch: Path
) -> None:
    """losetup --offset over a whole disk: its bytes 8 to 16 MiB are bytes of the mounted
    partition (1 to 33 MiB), which nothing in the block stack links to it; one from 40 MiB is
    past it."""
    whole, part = disk
    with (
        mounted(part, scratch / "mnt"),
        loop_on(whole, 8 * MiB, 8 * MiB) as inside,
        loop_on(whole, 40 * MiB) as past,
    ):
        assert partition_problems(inside, force=True) == [
            f"partition rule 'no overlap': writing {inside} writes bytes 8 MiB..16 MiB of /dev/{whole.name}, "
            f"which its partition /dev/{part.name} (bytes 1 MiB..33 MiB) shares, and it is mounted on "
            f"{scratch / 'mnt'}"
        ]
        assert partition_problems(past, force=True) == []
        with pytest.raises(host.HostError, match="partition rule 'no overlap'"):
            DeviceClaim(inside).acquire()  # read again when the run takes the device back


def test_a_path_that_names_another_device_later_is_refused(
    disk: tuple[Path, Path], partition: Path, scratch: Path
) -> None:
    """A link such as /dev/disk/by-uuid/X moves when udev sees another device with that name (a
    clone of the disk, a second partition called "Linux filesystem"): the device number the path
    named at the start is kept, and the rules and the claim refuse the path once it names
    another device, whatever that device looks like."""
    _, part = disk
    link = scratch / "by-uuid-X"
    link.symlink_to(part)
    pinned = os.stat(part).st_rdev
    assert partition_problems(link, pinned=pinned) == []
    claim = DeviceClaim(link, pinned=pinned)
    claim.acquire()
    claim.release()
    link.unlink()
    link.symlink_to(partition)  # empty, unused: every other rule accepts it
    assert partition_problems(partition) == []
    numbers = f"{os.major(pinned)}:{os.minor(pinned)}"
    moved = partition_problems(link, pinned=pinned)
    assert rules(moved) == ["same device"]
    assert f"not device {numbers} as when the run started" in moved[0]
    with pytest.raises(host.HostError, match="partition rule 'same device'"):
        claim.acquire()
    assert not claim.held
    assert not DeviceClaim.holds(partition)
    target = Target("partition", scratch, 32 * MiB, device=link, device_number=pinned)
    assert rules(target.problems()) == ["same device"]
    # tools are handed the kept device's own node, never the link (which may move after the check)
    assert target.node() == Path(f"/dev/{part.name}")
    gone = Target("partition", scratch, 32 * MiB, device=link, device_number=os.makedev(4095, 4095))
    with pytest.raises(host.HostError, match="partition rule 'same device'"):
        gone.node()


def test_where_the_kernels_node_is_not_there_the_path_given_serves_while_it_names_the_device(
    disk: tuple[Path, Path], partition: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container's own /dev names its devices as it likes: the kernel's node is missing, and
    the path given is handed to the tools while it names the kept device, refused after."""
    _, part = disk
    link = scratch / "xvdb1"
    link.symlink_to(part)
    target = Target("partition", scratch, 32 * MiB, device=link, device_number=os.stat(part).st_rdev)
    monkeypatch.setattr(BlockStack, "devname", lambda self, name: f"encperf-no-such-node/{name}")
    assert target.node() == link
    link.unlink()
    link.symlink_to(partition)
    with pytest.raises(host.HostError, match="partition rule 'same device'"):
        target.node()


def test_the_claim_keeps_everything_else_off_the_device_until_released(
    partition: Path, scratch: Path
) -> None:
    claim = DeviceClaim(partition)
    claim.acquire()
    try:
        assert partition_problems(partition) == []  # our own claim is not "in use"
        mkfs = subprocess.run(["mkfs.ext4", "-q", "-F", str(partition)], capture_output=True, text=True)
        assert mkfs.returncode != 0 and "in use" in mkfs.stderr
        other = DeviceClaim(partition)
        with pytest.raises(host.HostError, match=r"partition rule 'not in use'.*Device or resource busy"):
            other.acquire()
    finally:
        claim.release()
    assert not claim.held and not DeviceClaim.holds(partition)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(partition)], check=True)


def test_a_failed_format_wipes_nothing(
    partition: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the wipe registered ahead of mkfs erased the user's file system when mkfs failed."""
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "users-data", str(partition)], check=True)
    before = probe_signature(partition)

    def failing_mkfs(device: Path, **_: object) -> None:
        raise host.HostError(f"mkfs.ext4 {device}: exit 1: simulated failure")

    monkeypatch.setattr("pytest_encperf.backends.ext4.make_ext4", failing_mkfs)  # the base makes it
    target = Target("partition", scratch, 16 * MiB, device=partition, force=True)
    with pytest.raises(BackendError, match="simulated failure"):
        open_volume(make_backend(BackendSpec("plain")), target, scratch / "volume")
    assert probe_signature(partition) == before and before["LABEL"] == "users-data"


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("gocryptfs", "its encrypted store would be a directory under --encperf-dir"),
        ("encfs", "its encrypted store would be a directory under --encperf-dir"),
        ("qemu-luks", "its LUKS image would be a file under --encperf-dir"),
        ("fscrypt", "not implemented yet"),
        ("tcrypt:image=/srv/vc.img,password-file=/srv/pw", "image= is copied to a file under --encperf-dir"),
        ("bitlocker:image=/srv/bl.img,password-file=/srv/pw", "it reads the BitLocker volume its spec names"),
    ],
)
def test_backends_whose_data_lives_elsewhere_refuse_the_partition(
    name: str, where: str, scratch: Path
) -> None:
    target = Target("partition", scratch, 16 * MiB, device=Path("/dev/sdz1"))
    backend = make_backend(BackendSpec.parse(name))
    (problem,) = placement_problems(backend, target)
    assert problem.startswith(f"{backend.name}: refused on the partition target: {where}")
    for on_partition in (
        "plain",
        "luks2",
        "dm-plain",
        "veracrypt:tool=native",
        "bitlk:device=/dev/sdz1,password-file=/srv/pw",
    ):
        assert placement_problems(make_backend(BackendSpec.parse(on_partition)), target) == []
    assert placement_problems(backend, Target("container", scratch, 16 * MiB)) == []


def test_a_plugin_backend_must_say_that_it_formats_the_partition(scratch: Path) -> None:
    class Unsaid(BackendBase):
        pass

    target = Target("partition", scratch, 16 * MiB, device=Path("/dev/sdz1"))
    assert placement_problems(Unsaid(BackendSpec("unsaid")), target) == [
        "unsaid: refused on the partition target: it does not say that its volume lives on the "
        "partition (a backend must format the device)"
    ]


def test_any_spec_parameter_naming_a_block_device_must_be_the_partition(
    partition: Path, scratch: Path
) -> None:
    """bitlocker's device=, tcrypt's and bitlk's, and whatever a plugin backend calls it: a
    block device in a spec is used only as the partition target's own device."""

    class Raw(BackendBase):
        params = (Param("disk", help="a block device it writes to"),)

        def partition_refusal(self, target: Target) -> str | None:
            return None

    backend = Raw(BackendSpec.parse(f"raw:disk={partition}"))
    refusal = (
        f"raw: disk={partition} is a block device: name it with --encperf-target=partition "
        f"--encperf-device={partition} --encperf-allow-destroy={partition}"
    )
    for kind in ("container", "directory"):
        assert placement_problems(backend, Target(kind, scratch, 16 * MiB)) == [refusal]
    other = Target("partition", scratch, 16 * MiB, device=Path("/dev/sdz1"))
    assert placement_problems(backend, other) == [refusal]
    assert placement_problems(backend, Target("partition", scratch, 16 * MiB, device=partition)) == []
    container = Target("container", scratch, 16 * MiB)
    for name in ("bitlocker", "tcrypt"):
        spec = f"{name}:image={partition},password-file=/p"
        problems = placement_problems(make_backend(BackendSpec.parse(spec)), container)
        assert problems == [refusal.replace("raw: disk", f"{name}: image")]


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
import errno
import os
from pathlib import Path
from pytest_encperf import host
from pytest_encperf.backends import BackendBase, Volume

LOG = Path(__file__).parent / "lifecycle.log"
DEVICE = os.environ["ENCPERF_TEST_PARTITION"]
GRABBED = []

def log(line):
    with LOG.open("a") as f:
        f.write(line + "\\n")

def device_mounted():
    return any(line.split()[0] == DEVICE for line in Path("/proc/self/mounts").read_text().splitlines())

def exclusive():
    \"\"\"What another program gets when it opens the device O_EXCL now.\"\"\"
    try:
        os.close(os.open(DEVICE, os.O_RDONLY | os.O_EXCL))
        return "free"
    except OSError as exc:
        return "busy" if exc.errno == errno.EBUSY else str(exc)

class Recording(BackendBase):
    def partition_refusal(self, target):
        return None  # a stand-in for a backend that formats the partition

    def problems(self, target):
        log(f"{self.name} problems: device {exclusive()}")
        return []

    def create(self, target, workdir):
        log(f"{self.name} create device_mounted={device_mounted()} device {exclusive()}")
        volume = Volume(self, target, workdir)
        volume.created.push("destroy", lambda: log(f"{self.name} destroy"))
        return volume

    def mount(self, volume):
        volume.data_dir = volume.workdir
        return volume.data_dir

    def describe(self, volume):
        return {"encryption": "none"}

class Grabbing(Recording):
    \"\"\"Its destroy lets another program take the device (and keep it) between volumes.\"\"\"
    def destroy(self, volume):
        super().destroy(volume)
        GRABBED.append(os.open(DEVICE, os.O_RDONLY | os.O_EXCL))

class Looping(Recording):
    \"\"\"Its destroy sets up a loop device on the device: the kernel lets it share the device
    with the exclusive hold of the volume's mount.\"\"\"
    def destroy(self, volume):
        super().destroy(volume)
        host.run(["losetup", "--find", "--offset", "1048576", DEVICE])

def pytest_encperf_register_backends(config):
    return {"recording": Recording, "recording2": Recording, "grabbing": Grabbing, "looping": Looping}

class Measured:
    \"\"\"The session's engine, writing down the workload of each round it runs (plain's too).\"\"\"
    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def run(self, workload, path, **kwargs):
        with (Path(__file__).parent / "measured.log").open("a") as f:
            f.write(workload.name + "\\n")
        return self.engine.run(workload, path, **kwargs)

def encperf_session(config):
    return config.stash[__import__("pytest_encperf.plugin", fromlist=["x"]).session_key]

def pytest_sessionstart(session):
    encperf = encperf_session(session.config)
    encperf.engine = encperf.volumes.engine = Measured(encperf.engine)

def pytest_sessionfinish(session):
    import json
    encperf = encperf_session(session.config)
    rounds = {f"{r.backend} {r.workload.name}":
              [len(r.rounds), len(r.baseline_rounds), r.description.get("baseline")]
              for r in encperf.record.results}
    (Path(__file__).parent / "rounds.json").write_text(json.dumps(rounds))

def pytest_unconfigure(config):
    for fd in GRABBED:
        os.close(fd)
"""


# one small read workload, two rounds: what every session here measures; with the native engine,
# in this process (no claim here is about the engine: a fio process per round cost a partition
# session about twice the CPU; fio's rounds are tested in test_honesty_integration and the fio
# engine's own tests)
SMALL_READ_RUN = (
    "--encperf-size=4MiB",
    "--encperf-runtime=0.02",
    "--encperf-rounds=2",
    "--encperf-engine=native",
    "--encperf-warmup=0",
    "-k",
    "SEQ1M-Q1T1-read",
    "-rs",
    "-p",
    "no:cacheprovider",
)


def run_sequential(
    pytester: pytest.Pytester, partition: Path, backends: str, *extra: str
) -> pytest.RunResult:
    pytester.makeconftest(SEQUENTIAL_CONFTEST)
    pytester.makepyfile(
        test_bench="def test_w(encperf, encperf_workload):\n    encperf.run(encperf_workload)"
    )
    return pytester.runpytest(
        "--encperf-target=partition",
        f"--encperf-device={partition}",
        f"--encperf-allow-destroy={partition}",
        f"--encperf-dir={pytester.path}",
        f"--encperf-backends={backends}",
        *SMALL_READ_RUN,
        *extra,
    )


def test_partition_session_times_each_backends_life_cycles_once(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain's volume comes back before and after each backend: its cycles are timed once."""
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    out = pytester.path / "run.json"
    result = run_sequential(
        pytester, partition, "recording", "--encperf-lifecycle-cycles=2", f"--encperf-json={out}"
    )
    result.assert_outcomes(passed=1)
    creates = [
        line for line in (pytester.path / "lifecycle.log").read_text().splitlines() if "create" in line
    ]
    assert len(creates) == 2  # the benchmark volume and one more cycle
    lifecycle = json.loads(out.read_text())["encperf"]["lifecycle"]
    assert {spec: {len(cycles) for cycles in steps.values()} for spec, steps in lifecycle.items()} == {
        "plain": {2},
        "recording": {2},
    }


def test_partition_session_measures_baseline_before_and_after_and_holds_the_device(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    result = run_sequential(pytester, partition, "recording,recording2")
    result.assert_outcomes(passed=2)
    assert (pytester.path / "lifecycle.log").read_text().splitlines() == [
        "recording problems: device free",  # checked before the run takes the device ...
        "recording problems: device free",  # ... and as the volume is opened: lent to it
        "recording create device_mounted=False device free",
        "recording destroy",
        "recording2 problems: device busy",  # between volumes the run holds it (O_EXCL)
        "recording2 problems: device free",
        # the baseline's ext4 was gone from the partition before the other volume was created
        "recording2 create device_mounted=False device free",
        "recording2 destroy",
    ]
    rounds = json.loads((pytester.path / "rounds.json").read_text())
    assert rounds == {
        "recording SEQ1M-Q1T1-read": [2, 4, "before/after"],
        "recording2 SEQ1M-Q1T1-read": [2, 4, "before/after"],
    }
    # the baseline measures the workload -k selected, not the profile's others: 2 volumes x 2
    # rounds, and plain's 2 rounds before and after each volume
    measured = (pytester.path / "measured.log").read_text().splitlines()
    assert measured == ["SEQ1M-Q1T1-read"] * 12
    assert partition_problems(partition) == [], "partition not left as we got it"


def test_a_device_taken_between_volumes_stops_the_run(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    result = run_sequential(pytester, partition, "grabbing,recording")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [f"*{partition} was taken by something else between two volumes of this run; stopping:*O_EXCL*"]
    )
    log = (pytester.path / "lifecycle.log").read_text()
    assert "recording create" not in log  # nothing was written after the device was lost
    assert partition_problems(partition) == []


def test_a_loop_device_set_up_on_the_device_during_a_volume_stops_the_run(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    try:
        result = run_sequential(pytester, partition, "looping,recording")
        (loop,) = loops_on(partition)
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(
            [
                f"*{partition} was taken by something else between two volumes of this run; stopping: "
                f"partition rule 'not in use': {partition} is in use: {loop} (offset 1 MiB) is backed by it*"
            ]
        )
        assert "recording create" not in (pytester.path / "lifecycle.log").read_text()
    finally:
        for loop in loops_on(partition):
            host.detach_loop(loop, partition)
    assert partition_problems(partition) == []


def loops_on(device: Path) -> list[Path]:
    """The loop devices whose backing file the kernel names as ``device``."""
    return [
        Path("/dev") / entry.name
        for entry in sorted(Path("/sys/block").glob("loop*"))
        if host.loop_backing_file(Path("/dev") / entry.name) == str(device)
    ]


def test_a_device_held_elsewhere_skips_every_backend(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    holder = os.open(partition, os.O_RDONLY | os.O_EXCL)
    try:
        result = run_sequential(pytester, partition, "recording")
    finally:
        os.close(holder)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*partition rule 'not in use'*cannot be opened exclusively*"])
    assert not (pytester.path / "lifecycle.log").read_text().count("create")


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("env", "not from the environment (ENCPERF_FORCE)"),
        ("ini", "not from the ini file (encperf_force)"),
        ("addopts", "not from addopts or PYTEST_ADDOPTS"),
    ],
)
def test_consent_is_taken_from_the_command_line_only(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str, message: str
) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    args = ["--encperf-target=partition", "--encperf-device=/dev/sdz1", "--encperf-allow-destroy=/dev/sdz1"]
    if where == "env":
        monkeypatch.setenv("ENCPERF_FORCE", "1")
    elif where == "ini":
        pytester.makeini("[pytest]\nencperf_force = 1\n")
    else:
        monkeypatch.setenv("PYTEST_ADDOPTS", "--encperf-force=1")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        f"--encperf-force: consent to erase a device is taken from this run's command line only, {message}"
        in result.stderr.str()
    )
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.setenv("ENCPERF_ALLOW_DESTROY", "/dev/sdz1")
    result = pytester.runpytest("--encperf-target=partition", "--encperf-device=/dev/sdz1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--encperf-allow-destroy: consent to erase a device" in result.stderr.str()


def test_kdf_and_in_place_volumes_are_refused_on_the_partition(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They would make volumes of their own on the device the benchmark volumes hold: skipped,
    saying so, while the benchmark itself runs."""
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    pytester.makepyfile(test_extra="def test_k(encperf_kdf): pass\n\ndef test_i(encperf_inplace): pass\n")
    result = run_sequential(
        pytester, partition, "recording", "--encperf-profile=cdm,kdf", "--encperf-inplace",
        "-k", "SEQ1M-Q1T1-read or test_k or test_i",
    )  # fmt: skip
    result.assert_outcomes(passed=1, skipped=4)  # plain and recording, each in both
    result.stdout.fnmatch_lines_random(
        [
            "*recording: the kdf profile runs on the container target only, not on a partition*",
            "*recording: in-place encryption runs on the container target only, not on a partition*",
        ]
    )
    creates = [
        line for line in (pytester.path / "lifecycle.log").read_text().splitlines() if "create" in line
    ]
    assert len(creates) == 1  # the benchmark volume alone


def test_real_work_tasks_are_skipped_on_the_partition_saying_why(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    result = run_sequential(pytester, partition, "recording", "--encperf-profile=realwork", "-k", "archive")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*archive: real-work tasks need the plain volume beside the volume*"])
    assert not (pytester.path / "lifecycle.log").exists()  # no volume was made for them


SHIPPED_BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "test_crystaldiskmark.py"
PLAIN_ONLY_REASON = (
    "plain: measured (its numbers are in the summary), compared with nothing: on the partition target "
    "plain's volume is the baseline itself; name an encrypted backend in --encperf-backends for a comparison"
)


def run_shipped_benchmark(pytester: pytest.Pytester, backends: str, *target: str) -> pytest.RunResult:
    pytester.makepyfile(test_crystaldiskmark=SHIPPED_BENCHMARK.read_text())
    return pytester.runpytest(
        *target,
        f"--encperf-dir={pytester.path}",
        f"--encperf-backends={backends}",
        *SMALL_READ_RUN,
    )


def test_the_shipped_benchmark_reports_plain_alone_on_the_partition(
    pytester: pytest.Pytester, partition: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain alone failed the shipped benchmark there (no baseline rounds to compare with)."""
    monkeypatch.setenv("ENCPERF_TEST_PARTITION", str(partition))
    pytester.makeconftest(SEQUENTIAL_CONFTEST)
    consent = (
        "--encperf-target=partition",
        f"--encperf-device={partition}",
        f"--encperf-allow-destroy={partition}",
    )
    result = run_shipped_benchmark(pytester, "plain", *consent)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["plain * SEQ1M-Q1T1-read *", f"SKIPPED*{PLAIN_ONLY_REASON}"])
    # beside a backend, plain is still the baseline the backend is compared with, and skipped itself
    result = run_shipped_benchmark(pytester, "plain,recording", *consent)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=1)
    rounds = json.loads((pytester.path / "rounds.json").read_text())
    assert rounds["recording SEQ1M-Q1T1-read"][:2] == [2, 4]  # before and after the volume
    assert rounds["plain SEQ1M-Q1T1-read"][:2] == [2, 0]


def test_the_shipped_benchmark_runs_plain_alone_on_the_default_target(pytester: pytest.Pytester) -> None:
    result = run_shipped_benchmark(pytester, "plain")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)  # a second plain volume is its baseline: an A/A comparison
    result.stdout.fnmatch_lines(["plain * SEQ1M-Q1T1-read *"])
