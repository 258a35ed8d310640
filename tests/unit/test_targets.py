"""The partition rules' reading of the block stack, on sysfs layouts this machine does not have.

Each layout is a small fake of /sys/class/block (device numbers, partitions, slaves and
holders, device-mapper names), a mountinfo and a swaps file. The real stacks (loop devices,
device-mapper) are in tests/integration/test_partition.py and tests/integration/test_partition_integration.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_encperf import loopsharing
from pytest_encperf.blockstack import BlockStack
from pytest_encperf.mounttable import escape
from pytest_encperf.targets import partition_problems, stack_problems
from pytest_encperf.workloads import MiB


@dataclass
class Dev:
    numbers: str
    partition_of: str | None = None
    slaves: list[str] = field(default_factory=list)
    dm_name: str | None = None
    backing_file: str | None = None  # a loop device: its backing file as the kernel names it
    offset: int = 0  # and where it starts in it
    sizelimit: int = 0  # and how many bytes of it it presents (0: to its end)
    start: int | None = None  # a partition: where it starts in its disk and its size, in bytes
    size: int = 0  # (without a start: the next 64 MiB of its disk, as a partition table lays them out)
    start_known: bool = True  # False: no start in sysfs (the kernel always has one; the rules err)


@dataclass(frozen=True)
class FakeStack(BlockStack):
    """A device path's kernel name is its file name: /dev/loop1 is loop1 of the fake sysfs."""

    def name_of(self, device: Path) -> str | None:
        return device.name if (self.sys_block / device.name).exists() else None


def layout(
    tmp_path: Path,
    devices: dict[str, Dev],
    mounts: list[tuple[str, str, str, str]],
    *,
    swaps: list[str] = (),  # type: ignore[assignment]
    btrfs: dict[str, list[str]] | None = None,
) -> FakeStack:
    """A BlockStack over a fake sysfs. ``mounts``: (major:minor, mount point, type, source).

    Its /dev and /proc are empty directories: no loop device's record is read through the
    host's nodes (LOOP_GET_STATUS64), no process has a device open."""
    root = tmp_path / "sys"
    block = root / "class" / "block"
    block.mkdir(parents=True)
    folders: dict[str, Path] = {}
    laid_out: dict[str, int] = {}  # partitions of each disk so far
    for name, dev in devices.items():  # parents first: dict order
        parent = folders[dev.partition_of] if dev.partition_of else root / "devices" / "virtual" / "block"
        folder = parent / name
        folder.mkdir(parents=True)
        (folder / "dev").write_text(dev.numbers + "\n")
        (folder / "holders").mkdir()
        (folder / "slaves").mkdir()
        if dev.partition_of:
            (folder / "partition").write_text("1\n")
            laid_out[dev.partition_of] = laid_out.get(dev.partition_of, 0) + 1
            start, size = (
                (dev.start, dev.size)
                if dev.start is not None
                else (laid_out[dev.partition_of] * 64 * MiB, 64 * MiB)
            )
            if dev.start_known:
                (folder / "start").write_text(f"{start // 512}\n")
                (folder / "size").write_text(f"{size // 512}\n")
        if dev.dm_name:
            (folder / "dm").mkdir()
            (folder / "dm" / "name").write_text(dev.dm_name + "\n")
        if dev.backing_file:
            (folder / "loop").mkdir()
            (folder / "loop" / "backing_file").write_text(dev.backing_file + "\n")
            (folder / "loop" / "offset").write_text(f"{dev.offset}\n")
            (folder / "loop" / "sizelimit").write_text(f"{dev.sizelimit}\n")
        (block / name).symlink_to(folder)
        folders[name] = folder
    for name, dev in devices.items():
        for slave in dev.slaves:
            (folders[name] / "slaves" / slave).symlink_to(folders[slave])
            (folders[slave] / "holders" / name).symlink_to(folders[name])
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "".join(
            f"{20 + i} 1 {numbers} / {escape(point)} rw,relatime shared:1 - {fstype} {escape(source)} rw\n"
            for i, (numbers, point, fstype, source) in enumerate(mounts)
        )
    )
    swaps_file = tmp_path / "swaps"
    swaps_file.write_text(
        # as the kernel writes it: the escaped name padded to 40 columns with at least one space
        "Filename\t\t\t\tType\t\tSize\tUsed\tPriority\n"
        + "".join(f"{escape(s):<39} partition\t1024\t0\t-2\n" for s in swaps)
    )
    btrfs_dir = tmp_path / "btrfs"
    for fsid, members in (btrfs or {}).items():
        (btrfs_dir / fsid / "devices").mkdir(parents=True)
        for member in members:
            (btrfs_dir / fsid / "devices" / member).symlink_to(folders[member])
    (tmp_path / "dev").mkdir()
    (tmp_path / "proc").mkdir()
    return FakeStack(
        sys_block=block,
        mountinfo=(mountinfo,),
        root_mountinfo=(mountinfo,),
        swaps=swaps_file,
        btrfs=btrfs_dir,
        proc=tmp_path / "proc",
        dev=tmp_path / "dev",
    )


def check(stack: BlockStack, name: str) -> list[str]:
    return stack_problems(Path(f"/dev/{name}"), name, stack)


def rules(problems: list[str]) -> list[str]:
    return [p.split("'")[1] for p in problems]


# One disk vda: vda1 is /boot, vda2 a physical volume with the root LV and a scratch LV.
LVM = {
    "vda": Dev("254:0"),
    "vda1": Dev("254:1", partition_of="vda"),
    "vda2": Dev("254:2", partition_of="vda"),
    "vdb": Dev("254:16"),
    "dm-0": Dev("253:0", slaves=["vda2"], dm_name="vg-root"),
    "dm-1": Dev("253:1", slaves=["vda2"], dm_name="vg-scratch"),
}


def test_root_on_lvm_refuses_the_disk_the_physical_volume_and_a_sibling_volume(tmp_path: Path) -> None:
    stack = layout(tmp_path, LVM, [("253:0", "/", "ext4", "/dev/mapper/vg-root")])
    assert stack.root_stack() == ["dm-0", "vda2", "vda"]
    chain = "/ on dm-0 (vg-root) on vda2 on vda"
    assert check(stack, "vda") == [
        "partition rule 'not mounted': /dev/vda is under dm-0 (vg-root), which is mounted on /",
        "partition rule 'not in use': /dev/vda is held by dm-0 (vg-root), dm-1 (vg-scratch) "
        "(an active device-mapper, LVM, dm-crypt or MD device is built on it)",
        f"partition rule 'not the root disk': /dev/vda is in the stack holding / ({chain})",
    ]
    assert check(stack, "dm-1") == [
        f"partition rule 'not the root disk': /dev/dm-1 is on vda2, in the stack holding / ({chain})"
    ]
    # an unmounted partition of the root disk: the old rule (device numbers) accepted it
    assert rules(check(stack, "vda1")) == ["not the root disk"]
    assert rules(check(stack, "vda2")) == ["not mounted", "not in use", "not the root disk"]
    assert check(stack, "vdb") == []  # another disk: free


def test_root_on_luks_refuses_the_partition_under_the_mapping(tmp_path: Path) -> None:
    devices = {
        "nvme0n1": Dev("259:0"),
        "nvme0n1p1": Dev("259:1", partition_of="nvme0n1"),
        "nvme0n1p2": Dev("259:2", partition_of="nvme0n1"),
        "dm-0": Dev("253:0", slaves=["nvme0n1p2"], dm_name="luks-3f2a"),
    }
    stack = layout(tmp_path, devices, [("253:0", "/", "ext4", "/dev/mapper/luks-3f2a")])
    assert check(stack, "nvme0n1p2") == [
        "partition rule 'not mounted': /dev/nvme0n1p2 is under dm-0 (luks-3f2a), which is mounted on /",
        "partition rule 'not in use': /dev/nvme0n1p2 is held by dm-0 (luks-3f2a) "
        "(an active device-mapper, LVM, dm-crypt or MD device is built on it)",
        "partition rule 'not the root disk': /dev/nvme0n1p2 is in the stack holding / "
        "(/ on dm-0 (luks-3f2a) on nvme0n1p2 on nvme0n1)",
    ]
    assert rules(check(stack, "nvme0n1p1")) == ["not the root disk"]
    # naming the whole disk: its partition is held, and it is in the root stack
    assert rules(check(stack, "nvme0n1")) == ["not mounted", "not in use", "not the root disk"]


def test_root_on_btrfs_is_found_by_its_source_not_its_anonymous_device_number(tmp_path: Path) -> None:
    devices = {
        "sda": Dev("8:0"),
        "sda1": Dev("8:1", partition_of="sda"),
        "sda2": Dev("8:2", partition_of="sda"),
    }
    # btrfs shows an anonymous device number (0:33) in mountinfo; the source names the disk
    stack = layout(
        tmp_path, devices, [("0:33", "/", "btrfs", "/dev/sda2"), ("0:33", "/home", "btrfs", "/dev/sda2")]
    )
    assert check(stack, "sda2") == [
        "partition rule 'not mounted': /dev/sda2 is mounted on /, /home",
        "partition rule 'not the root disk': /dev/sda2 is in the stack holding / (/ on sda2 on sda)",
    ]
    assert check(stack, "sda") == [
        "partition rule 'not mounted': /dev/sda has a partition, /dev/sda2, that is mounted on /, /home",
        "partition rule 'not the root disk': /dev/sda is in the stack holding / (/ on sda2 on sda)",
    ]


def test_every_member_of_a_mounted_multi_device_btrfs_counts_as_mounted(tmp_path: Path) -> None:
    devices = {"vda": Dev("254:0"), "vdc": Dev("254:32"), "vdd": Dev("254:48")}
    stack = layout(
        tmp_path,
        devices,
        [("254:0", "/", "ext4", "/dev/vda"), ("0:40", "/srv", "btrfs", "/dev/vdc")],
        btrfs={"6e1c0f5a-0000-4000-8000-000000000001": ["vdc", "vdd"]},
    )
    # mountinfo names vdc only; vdd is the second device of the same file system
    assert check(stack, "vdd") == ["partition rule 'not mounted': /dev/vdd is mounted on /srv"]


def test_md_member_and_a_file_system_on_the_array(tmp_path: Path) -> None:
    devices = {
        "vda": Dev("254:0"),
        "sdb": Dev("8:16"),
        "sdb1": Dev("8:17", partition_of="sdb"),
        "sdc": Dev("8:32"),
        "md0": Dev("9:0", slaves=["sdb1", "sdc"]),
    }
    stack = layout(
        tmp_path,
        devices,
        [("254:0", "/", "ext4", "/dev/vda"), ("9:0", "/srv/raid data", "ext4", "/dev/md0")],
    )
    # the whole disk: holders of its partitions count, and what is built on them is mounted
    assert check(stack, "sdb") == [
        "partition rule 'not mounted': /dev/sdb is under md0, which is mounted on /srv/raid data",
        "partition rule 'not in use': /dev/sdb is held by md0 "
        "(an active device-mapper, LVM, dm-crypt or MD device is built on it)",
    ]
    assert rules(check(stack, "sdc")) == ["not mounted", "not in use"]
    assert rules(check(stack, "md0")) == ["not mounted"]


def test_swap_on_a_volume_built_on_the_device(tmp_path: Path) -> None:
    devices = {
        "vda": Dev("254:0"),
        "sdb": Dev("8:16"),
        "sdb1": Dev("8:17", partition_of="sdb"),
        "dm-2": Dev("253:2", slaves=["sdb1"], dm_name="vg2-swap"),
    }
    stack = layout(tmp_path, devices, [("254:0", "/", "ext4", "/dev/vda")], swaps=["/dev/mapper/vg2-swap"])
    assert check(stack, "sdb")[0] == (
        "partition rule 'no swap': /dev/sdb is under dm-2 (vg2-swap), which is active swap "
        "(/dev/mapper/vg2-swap)"
    )
    assert rules(check(stack, "sdb1")) == ["no swap", "not in use"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("loop7", ["loop7", "loop7p1", "dm-3"]), ("loop7p1", ["loop7p1", "dm-3"]), ("dm-3", ["dm-3"])],
)
def test_above_follows_partitions_then_holders(tmp_path: Path, name: str, expected: list[str]) -> None:
    devices = {
        "loop7": Dev("7:7"),
        "loop7p1": Dev("259:9", partition_of="loop7"),
        "dm-3": Dev("253:3", slaves=["loop7p1"], dm_name="lv"),
    }
    stack = layout(tmp_path, devices, [])
    assert stack.above(name) == expected
    assert stack.below("dm-3") == ["dm-3", "loop7p1", "loop7"]


@pytest.mark.parametrize(
    ("root", "why"),
    [
        (None, "the mount of / cannot be read"),
        (
            ("0:33", "/", "btrfs", "/dev/root"),
            "/ is btrfs on /dev/root, which matches no block device in sysfs",
        ),
        (
            ("8:99", "/", "ext4", "/dev/sdz9"),
            "/ is ext4 on /dev/sdz9, which matches no block device in sysfs",
        ),
    ],
)
def test_a_root_on_a_disk_sysfs_does_not_name_refuses_rather_than_guessing(
    tmp_path: Path, root: tuple[str, str, str, str] | None, why: str
) -> None:
    stack = layout(tmp_path, {"sdb": Dev("8:16")}, [root] if root else [])
    assert check(stack, "sdb") == [
        f"partition rule 'not the root disk': {why}, so /dev/sdb cannot be shown to be apart "
        "from the disk holding /"
    ]


@pytest.mark.parametrize(
    "root",
    [
        ("0:52", "/", "overlay", "overlay"),
        ("0:41", "/", "nfs4", "server:/export"),
        ("0:15", "/", "hostfs", "/dev/root"),
    ],
)
def test_a_root_on_no_disk_is_no_reason_to_refuse(tmp_path: Path, root: tuple[str, str, str, str]) -> None:
    """A container's overlay (its layers are mounts of their own, refused as such), a network or
    hostfs root (the UML lane's): no block device holds /."""
    stack = layout(tmp_path, {"sdb": Dev("8:16")}, [root])
    assert stack.root_stack() == []
    assert check(stack, "sdb") == []


# ---------------------------------------------------------------- loop devices
#
# The loop driver holds its backing device without O_EXCL, a holder in sysfs or a process's
# descriptor: only the loop device's record (sysfs loop/backing_file here) says what it is built on.

ROOT = {"vda": Dev("254:0"), "vda1": Dev("254:1", partition_of="vda")}
ROOT_MOUNT = ("254:1", "/", "ext4", "/dev/vda1")


def loops(*chain: tuple[str, str, int]) -> dict[str, Dev]:
    """The root disk, the target loop1 (over a file) and loop devices (name, backing name, offset)."""
    devices = {**ROOT, "loop1": Dev("7:1", backing_file="/var/tmp/g.img")}
    for name, backing, offset in chain:
        devices[name] = Dev(f"7:{name.removeprefix('loop')}", backing_file=f"/dev/{backing}", offset=offset)
    return devices


@pytest.mark.parametrize("backing_file", ["/dev/loop1", "/dev/loop1 (deleted)"])
def test_an_unmounted_loop_device_on_the_device_is_in_use(tmp_path: Path, backing_file: str) -> None:
    devices = {**loops(), "loop2": Dev("7:2", backing_file=backing_file)}
    stack = layout(tmp_path, devices, [ROOT_MOUNT])
    assert stack.above("loop1") == ["loop1", "loop2"]
    assert check(stack, "loop1") == [
        "partition rule 'not in use': /dev/loop1 is in use: /dev/loop2 is backed by it"
    ]
    assert check(stack, "loop2") == []  # the loop device itself: only its backing device is under it


def test_a_mounted_loop_device_at_an_offset_names_the_chain(tmp_path: Path) -> None:
    """The reproduction of issue 23: every rule passed, the run formatted /dev/loop1."""
    stack = layout(
        tmp_path, loops(("loop2", "loop1", MiB)), [ROOT_MOUNT, ("7:2", "/mnt/h", "ext4", "/dev/loop2")]
    )
    assert check(stack, "loop1") == [
        "partition rule 'not mounted': /dev/loop1 is under loop2 (loop device, offset 1 MiB), which is "
        "mounted on /mnt/h",
        "partition rule 'not in use': /dev/loop1 is in use: /dev/loop2 (offset 1 MiB) is backed by it "
        "and mounted on /mnt/h",
    ]


def test_a_loop_device_two_levels_up(tmp_path: Path) -> None:
    devices = loops(("loop2", "loop1", 0), ("loop3", "loop2", MiB))
    stack = layout(tmp_path, devices, [ROOT_MOUNT])
    unmounted = (
        "partition rule 'not in use': /dev/loop1 is in use: /dev/loop2 is backed by it; "
        "/dev/loop3 (offset 1 MiB) is backed by /dev/loop2"
    )
    assert check(stack, "loop1") == [unmounted]
    stack = layout(tmp_path / "mounted", devices, [ROOT_MOUNT, ("7:3", "/mnt/h", "ext4", "/dev/loop3")])
    assert check(stack, "loop1") == [
        "partition rule 'not mounted': /dev/loop1 is under loop3 (loop device, offset 1 MiB) on "
        "loop2 (loop device), which is mounted on /mnt/h",
        f"{unmounted} and mounted on /mnt/h",
    ]


def test_a_loop_device_on_a_partition_refuses_the_partition_and_the_whole_disk(tmp_path: Path) -> None:
    devices = {
        **ROOT,
        "sdb": Dev("8:16"),
        "sdb1": Dev("8:17", partition_of="sdb"),
        "loop2": Dev("7:2", backing_file="/dev/sdb1", offset=4096),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT], swaps=["/dev/loop2"])
    assert check(stack, "sdb") == [
        "partition rule 'no swap': /dev/sdb is under loop2 (loop device, offset 4096 bytes) on sdb1, "
        "which is active swap (/dev/loop2)",
        "partition rule 'not in use': /dev/sdb is in use: /dev/loop2 (offset 4096 bytes) is backed by "
        "its partition /dev/sdb1 and active swap",
    ]
    assert rules(check(stack, "sdb1")) == ["no swap", "not in use"]


def test_a_device_mapping_on_a_loop_device_on_the_device(tmp_path: Path) -> None:
    devices = {**loops(("loop2", "loop1", 0)), "dm-0": Dev("253:0", slaves=["loop2"], dm_name="lin")}
    stack = layout(tmp_path, devices, [ROOT_MOUNT])
    assert check(stack, "loop1") == [
        "partition rule 'not in use': /dev/loop1 is in use: /dev/loop2 is backed by it and held by dm-0 (lin)"
    ]
    stack = layout(tmp_path / "mounted", devices, [ROOT_MOUNT, ("253:0", "/srv", "ext4", "/dev/mapper/lin")])
    assert check(stack, "loop1") == [
        "partition rule 'not mounted': /dev/loop1 is under dm-0 (lin) on loop2 (loop device), which is "
        "mounted on /srv",
        "partition rule 'not in use': /dev/loop1 is in use: /dev/loop2 is backed by it and held by "
        "dm-0 (lin)",
    ]


def test_a_loop_device_over_a_file_or_another_device_is_not_on_the_device(tmp_path: Path) -> None:
    devices = {
        **loops(),
        "sdb": Dev("8:16"),
        "loop2": Dev("7:2", backing_file="/var/tmp/other.img"),
        "loop3": Dev("7:3", backing_file="/dev/sdb"),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT])
    assert check(stack, "loop1") == []
    assert stack.above("sdb") == ["sdb", "loop3"]


def test_a_loop_device_is_on_its_backing_device(tmp_path: Path) -> None:
    """Writing a loop device over a block device writes that device: naming it is naming what
    is under it (before, a loop device over the root file system's partition passed)."""
    devices = {
        **ROOT,
        "sdb": Dev("8:16"),
        "loop2": Dev("7:2", backing_file="/dev/vda1", offset=MiB),
        "loop3": Dev("7:3", backing_file="/dev/sdb"),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT, ("8:16", "/srv", "ext4", "/dev/sdb")])
    assert stack.below("loop2") == ["loop2", "vda1", "vda"]
    assert check(stack, "loop2") == [
        "partition rule 'not mounted': /dev/loop2 is on vda1, which is mounted on /",
        "partition rule 'not the root disk': /dev/loop2 is on vda1, in the stack holding / "
        "(/ on vda1 on vda)",
    ]
    assert check(stack, "loop3") == [
        "partition rule 'not mounted': /dev/loop3 is on sdb, which is mounted on /srv"
    ]


# ---------------------------------------------------------------- loop devices over one file
#
# Two loop devices over the same backing file present the same bytes, and neither is built on
# the other: only their records (backing file, offset, size limit) show that they share them.

G = "/var/tmp/g.img"


def siblings(*more: tuple[str, int, int]) -> dict[str, Dev]:
    """The root disk, the target loop1 over G and more loop devices over G (name, offset, sizelimit)."""
    devices = {**ROOT, "loop1": Dev("7:1", backing_file=G)}
    for name, offset, sizelimit in more:
        devices[name] = Dev(
            f"7:{name.removeprefix('loop')}", backing_file=G, offset=offset, sizelimit=sizelimit
        )
    return devices


@pytest.mark.parametrize(("offset", "note"), [(0, ""), (MiB, " (offset 1 MiB)")], ids=["whole", "offset"])
def test_a_loop_device_over_the_same_file_is_in_use_mounted_or_not(
    tmp_path: Path, offset: int, note: str
) -> None:
    """The reproduction: formatting loop1 wrote g.img, which loop2 presents and which was mounted."""
    devices = siblings(("loop2", offset, 0))
    shares = (
        f"partition rule 'not in use': /dev/loop1 is in use: /dev/loop2 shares its backing file {G}{note}"
    )
    unmounted = layout(tmp_path, devices, [ROOT_MOUNT])
    assert check(unmounted, "loop1") == [shares]
    # and the other way round: loop1 shares the bytes of loop2
    assert check(unmounted, "loop2") == [
        f"partition rule 'not in use': /dev/loop2 is in use: /dev/loop1 shares its backing file {G}"
    ]
    stack = layout(tmp_path / "mounted", devices, [ROOT_MOUNT, ("7:2", "/mnt/h", "ext4", "/dev/loop2")])
    assert check(stack, "loop1") == [f"{shares} and is mounted on /mnt/h"]


@pytest.mark.parametrize("backing_file", [f"{G} (deleted)", G])
def test_a_removed_backing_file_is_still_shared(tmp_path: Path, backing_file: str) -> None:
    """Without the kernel's record (inode), the kernel's name of the file decides, " (deleted)"
    or not: a match by name refuses rather than lets through."""
    devices = {
        **ROOT,
        "loop1": Dev("7:1", backing_file=f"{G} (deleted)"),
        "loop2": Dev("7:2", backing_file=backing_file),
    }
    assert rules(check(layout(tmp_path, devices, [ROOT_MOUNT]), "loop1")) == ["not in use"]


@pytest.mark.parametrize(
    ("target", "other", "shared"),
    [
        pytest.param((0, 100 * MiB), (100 * MiB, 0), False, id="after-its-size-limit"),
        pytest.param((100 * MiB, 0), (0, 100 * MiB), False, id="before-its-offset"),
        pytest.param((0, 100 * MiB), (100 * MiB - 512, 0), True, id="one-sector-over"),
        pytest.param((100 * MiB, 0), (0, 100 * MiB + 512), True, id="one-sector-into"),
        pytest.param((MiB, MiB), (0, 0), True, id="inside-the-other"),
    ],
)
def test_loop_devices_over_disjoint_ranges_of_one_file_share_nothing(
    tmp_path: Path, target: tuple[int, int], other: tuple[int, int], shared: bool
) -> None:
    """``losetup --offset``/``--sizelimit`` cut a file in pieces: a piece next to the target's is
    another device; one byte in common is not."""
    devices = {
        **siblings(("loop2", *other)),
        "loop1": Dev("7:1", backing_file=G, offset=target[0], sizelimit=target[1]),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT, ("7:2", "/mnt/h", "ext4", "/dev/loop2")])
    assert rules(check(stack, "loop1")) == (["not in use"] if shared else [])


ENDS = st.one_of(st.none(), st.integers(0, 40))


@given(st.integers(0, 40), ENDS, st.integers(0, 40), ENDS)
def test_overlap_is_a_shared_byte(
    start: int, end: int | None, other_start: int, other_end: int | None
) -> None:
    def span(first: int, last: int | None) -> set[int]:
        return set(range(first, 50 if last is None else last))  # None: to the end (beyond 40)

    shared = bool(span(start, end) & span(other_start, other_end))
    assert loopsharing.overlaps(start, end, other_start, other_end) is shared


@given(st.integers(0, 40), ENDS, st.integers(0, 40), ENDS)
def test_a_loop_devices_bytes_are_those_of_its_file_from_its_offset_to_its_limit(
    offset: int, limit: int | None, start: int, end: int | None
) -> None:
    """Bytes [start, end) of a loop device at ``offset`` presenting ``limit`` bytes (None: all)."""
    span = loopsharing.LoopSpan("loop1", (), "", offset, None if limit is None else offset + limit)
    first, last = span.presented(start, end)
    device = range(0, 100 if limit is None else limit)  # the loop device's own bytes
    wanted = [offset + byte for byte in device if byte >= start and (end is None or byte < end)]
    got = [byte for byte in range(first, offset + 100 if last is None else last)]
    assert got == wanted


def test_a_partition_of_a_loop_device_shares_only_its_own_bytes(tmp_path: Path) -> None:
    """loop1p1 is bytes 1 to 33 MiB of g.img: a loop device over g.img from 64 MiB shares none
    of them, one from 16 MiB does (and both share the bytes of the whole of loop1)."""
    devices = {
        **siblings(("loop2", 64 * MiB, 0), ("loop3", 16 * MiB, 8 * MiB)),
        "loop1p1": Dev("259:0", partition_of="loop1", start=MiB, size=32 * MiB),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT, ("7:3", "/mnt/h", "ext4", "/dev/loop3")])
    assert check(stack, "loop1p1") == [
        "partition rule 'not in use': /dev/loop1p1 is in use: /dev/loop3 shares /dev/loop1's backing file "
        f"{G} (offset 16 MiB) and is mounted on /mnt/h"
    ]
    assert check(stack, "loop1") == [
        f"partition rule 'not in use': /dev/loop1 is in use: /dev/loop2 shares its backing file {G} "
        f"(offset 64 MiB); /dev/loop3 shares its backing file {G} (offset 16 MiB) and is mounted on /mnt/h"
    ]


def test_a_partition_whose_start_is_not_known_shares_the_whole_disk(tmp_path: Path) -> None:
    devices = {
        **siblings(("loop2", 64 * MiB, 0)),
        "loop1p1": Dev("259:0", partition_of="loop1", start_known=False),
    }
    assert rules(check(layout(tmp_path, devices, [ROOT_MOUNT]), "loop1p1")) == ["not in use"]


def test_what_is_built_on_a_sibling_is_named_with_it(tmp_path: Path) -> None:
    """The sibling's own stack, by the other rules: a loop device on it, mounted; a mapping on
    it, mounted; a partition of it, swap."""
    devices = {
        **siblings(("loop2", MiB, 0), ("loop4", 0, 0)),
        "loop3": Dev("7:3", backing_file="/dev/loop2", offset=MiB),
        "dm-0": Dev("253:0", slaves=["loop2"], dm_name="lin"),
        "loop4p1": Dev("259:0", partition_of="loop4", start=MiB, size=MiB),
    }
    mounts = [
        ROOT_MOUNT,
        ("7:3", "/mnt/h", "ext4", "/dev/loop3"),
        ("253:0", "/srv", "ext4", "/dev/mapper/lin"),
    ]
    stack = layout(tmp_path, devices, mounts, swaps=["/dev/loop4p1"])
    assert check(stack, "loop1") == [
        "partition rule 'not in use': /dev/loop1 is in use: "
        f"/dev/loop2 shares its backing file {G} (offset 1 MiB) and is held by dm-0 (lin); "
        "dm-0 (lin) on /dev/loop2 is mounted on /srv; "
        "/dev/loop3 (offset 1 MiB) is backed by /dev/loop2 and mounted on /mnt/h; "
        f"/dev/loop4 shares its backing file {G}; loop4p1 on /dev/loop4 is active swap"
    ]


def test_a_device_mapping_on_a_loop_device_shares_its_file(tmp_path: Path) -> None:
    """Naming a mapping writes the loop device under it, anywhere (its table is not read)."""
    devices = {
        **siblings(("loop2", 200 * MiB, 0)),
        "loop1": Dev("7:1", backing_file=G, sizelimit=MiB),
        "dm-0": Dev("253:0", slaves=["loop1"], dm_name="lin"),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT])
    assert loopsharing.sharers(stack, "loop1") == []  # the first MiB of g.img: not loop2's
    assert check(stack, "dm-0") == []  # nor through the mapping
    stack = layout(tmp_path / "wide", {**devices, "loop1": Dev("7:1", backing_file=G)}, [ROOT_MOUNT])
    assert check(stack, "dm-0") == [
        "partition rule 'not in use': /dev/dm-0 is in use: /dev/loop2 shares /dev/loop1's backing file "
        f"{G} (offset 200 MiB)"
    ]


def test_loop_devices_over_one_block_device_share_its_bytes(tmp_path: Path) -> None:
    """The same over a device: loop3 and loop4 over loop1 (or over the disk sdb, of which the
    target is a partition)."""
    devices = {
        **loops(("loop3", "loop1", 0), ("loop4", "loop1", MiB), ("loop5", "loop1", 64 * MiB)),
        "loop3": Dev("7:3", backing_file="/dev/loop1", sizelimit=2 * MiB),
        "sdb": Dev("8:16"),
        "sdb1": Dev("8:17", partition_of="sdb", start=MiB, size=16 * MiB),
        "loop6": Dev("7:6", backing_file="/dev/sdb", offset=8 * MiB),
        "loop7": Dev("7:7", backing_file="/dev/sdb", offset=32 * MiB),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT, ("7:4", "/mnt/h", "ext4", "/dev/loop4")])
    assert check(stack, "loop3") == [
        "partition rule 'not in use': /dev/loop3 is in use: /dev/loop4 (offset 1 MiB) is backed by "
        "/dev/loop1, which it is on, and is mounted on /mnt/h"
    ]
    assert check(stack, "sdb1") == [
        "partition rule 'not in use': /dev/sdb1 is in use: /dev/loop6 (offset 8 MiB) is backed by "
        "/dev/sdb, which it is on"
    ]


# An isohybrid-like disk: sdb2 lies inside sdb1; sdb3 follows sdb1; sdb4 has no start in sysfs.
OVERLAPPING = {
    **ROOT,
    "sdb": Dev("8:16"),
    "sdb1": Dev("8:17", partition_of="sdb", start=MiB, size=16 * MiB),
    "sdb2": Dev("8:18", partition_of="sdb", start=5 * MiB, size=4 * MiB),
    "sdb3": Dev("8:19", partition_of="sdb", start=17 * MiB, size=16 * MiB),
}


def test_partitions_that_share_bytes_refuse_each_other_in_use_or_not(tmp_path: Path) -> None:
    stack = layout(tmp_path, OVERLAPPING, [ROOT_MOUNT, ("8:17", "/media/stick", "iso9660", "/dev/sdb1")])
    assert check(stack, "sdb2") == [
        "partition rule 'no overlap': writing /dev/sdb2 writes bytes 5 MiB..9 MiB of /dev/sdb, which its "
        "partition /dev/sdb1 (bytes 1 MiB..17 MiB) shares, and it is mounted on /media/stick"
    ]
    idle = layout(tmp_path / "idle", OVERLAPPING, [ROOT_MOUNT])
    assert check(idle, "sdb2") == [
        "partition rule 'no overlap': writing /dev/sdb2 writes bytes 5 MiB..9 MiB of /dev/sdb, which its "
        "partition /dev/sdb1 (bytes 1 MiB..17 MiB) shares"
    ]
    assert rules(check(idle, "sdb1")) == ["no overlap"]  # sdb2 is inside it
    assert check(idle, "sdb3") == []  # it starts where sdb1 ends: no byte in common
    assert check(idle, "sdb") == []  # its own partitions are read by the other rules (none in use)


def test_a_partition_whose_start_is_not_known_overlaps_its_siblings(tmp_path: Path) -> None:
    devices = {**OVERLAPPING, "sdb4": Dev("8:20", partition_of="sdb", start_known=False)}
    stack = layout(tmp_path, devices, [ROOT_MOUNT])
    assert "/dev/sdb4 (where it starts is not known)" in " ".join(check(stack, "sdb3"))
    assert rules(check(stack, "sdb4")) == ["no overlap"] * 3  # sdb1, sdb2, sdb3: any byte of the disk


def test_a_disk_reached_twice_is_checked_over_both_ranges(tmp_path: Path) -> None:
    """md0 over two loop devices on sdb: its first MiB (no partition there) and 20 to 24 MiB,
    inside the mounted sdb3."""
    devices = {
        **OVERLAPPING,
        "loop1": Dev("7:1", backing_file="/dev/sdb", sizelimit=MiB),
        "loop2": Dev("7:2", backing_file="/dev/sdb", offset=20 * MiB, sizelimit=4 * MiB),
        "md0": Dev("9:0", slaves=["loop1", "loop2"]),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT, ("8:19", "/srv", "ext4", "/dev/sdb3")])
    assert check(stack, "md0") == [
        "partition rule 'no overlap': writing /dev/md0 writes bytes 20 MiB..24 MiB of /dev/sdb, which its "
        "partition /dev/sdb3 (bytes 17 MiB..33 MiB) shares, and it is mounted on /srv"
    ]


def test_the_partitions_of_a_disk_held_whole_by_the_path_are_not_overlaps(tmp_path: Path) -> None:
    """Multipath: dm-0 over the two paths sdb and sdc, whose partition tables the kernel reads
    too (sdb1, sdc1: none can be claimed while dm-0 holds its disk); mpatha-part1 on dm-0."""
    devices = {
        **ROOT,
        "sdb": Dev("8:16"),
        "sdb1": Dev("8:17", partition_of="sdb", start=MiB, size=16 * MiB),
        "sdc": Dev("8:32"),
        "sdc1": Dev("8:33", partition_of="sdc", start=MiB, size=16 * MiB),
        "dm-0": Dev("253:0", slaves=["sdb", "sdc"], dm_name="mpatha"),
        "dm-1": Dev("253:1", slaves=["dm-0"], dm_name="mpatha-part1"),
    }
    assert check(layout(tmp_path, devices, [ROOT_MOUNT]), "dm-1") == []


def test_a_partition_start_sysfs_garbles_is_not_known(tmp_path: Path) -> None:
    stack = layout(tmp_path, OVERLAPPING, [ROOT_MOUNT])
    (stack.sys_block / "sdb2" / "start").write_text("garbled\n")
    assert "/dev/sdb2 (where it starts is not known)" in " ".join(check(stack, "sdb3"))


def test_the_node_of_a_device_is_the_one_its_uevent_names(tmp_path: Path) -> None:
    stack = layout(tmp_path, OVERLAPPING, [ROOT_MOUNT])
    assert stack.devname("sdb1") is None  # no uevent
    for text, wanted in [
        ("MAJOR=104\nMINOR=1\nDEVNAME=cciss/c0d0p1\nDEVTYPE=partition\n", "cciss/c0d0p1"),
        ("DEVNAME=sdb1\n", "sdb1"),
        ("DEVNAME=../etc/passwd\n", None),  # never a node outside /dev
        ("DEVNAME=/etc/passwd\n", None),
        ("MAJOR=8\n", None),
    ]:
        (stack.sys_block / "sdb1" / "uevent").write_text(text)
        assert stack.devname("sdb1") == wanted


def test_a_loop_device_over_a_disk_shares_the_partitions_its_range_covers(tmp_path: Path) -> None:
    """loop6 presents sdb from 8 MiB (inside sdb1) to 40 MiB; loop7 from 40 MiB, past them all."""
    devices = {
        **OVERLAPPING,
        "loop6": Dev("7:6", backing_file="/dev/sdb", offset=8 * MiB, sizelimit=32 * MiB),
        "loop7": Dev("7:7", backing_file="/dev/sdb", offset=40 * MiB),
    }
    stack = layout(tmp_path, devices, [ROOT_MOUNT, ("8:19", "/srv", "ext4", "/dev/sdb3")])
    assert check(stack, "loop6") == [
        "partition rule 'no overlap': writing /dev/loop6 writes bytes 8 MiB..40 MiB of /dev/sdb, which its "
        f"partition /dev/{name} ({span}) shares{use}"
        for name, span, use in (
            ("sdb1", "bytes 1 MiB..17 MiB", ""),
            ("sdb2", "bytes 5 MiB..9 MiB", ""),
            ("sdb3", "bytes 17 MiB..33 MiB", ", and it is mounted on /srv"),
        )
    ]
    assert check(stack, "loop7") == []


FORCED = [
    pytest.param(loops(("loop2", "loop1", MiB)), [("7:2", "/mnt/h", "ext4", "/dev/loop2")], [], "loop1",
                 ["not mounted", "not in use"], id="mounted-loop-on-it"),
    pytest.param(loops(("loop2", "loop1", 0)), [], [], "loop1", ["not in use"], id="loop-on-it"),
    pytest.param({**loops(), "dm-0": Dev("253:0", slaves=["loop1"], dm_name="lv")}, [], [], "loop1",
                 ["not in use"], id="mapping-on-it"),
    pytest.param(loops(), [("7:1", "/srv", "ext4", "/dev/loop1")], [], "loop1", ["not mounted"],
                 id="mounted"),
    pytest.param(loops(), [], ["/dev/loop1"], "loop1", ["no swap"], id="swap"),
    pytest.param(loops(), [], [], "vda", ["not mounted", "not the root disk"], id="root-disk"),
    pytest.param(loops(("loop2", "vda1", 0)), [], [], "loop2", ["not mounted", "not the root disk"],
                 id="loop-on-the-root-partition"),
    pytest.param(siblings(("loop2", MiB, 0)), [("7:2", "/mnt/h", "ext4", "/dev/loop2")], [], "loop1",
                 ["not in use"], id="mounted-loop-over-its-file"),
    pytest.param(siblings(("loop2", 0, 0)), [], [], "loop1", ["not in use"], id="loop-over-its-file"),
]  # fmt: skip


@pytest.mark.parametrize(("devices", "mounts", "swaps", "name", "refused"), FORCED)
def test_force_overrides_no_rule_but_the_signature(
    tmp_path: Path,
    devices: dict[str, Dev],
    mounts: list[tuple[str, str, str, str]],
    swaps: list[str],
    name: str,
    refused: list[str],
) -> None:
    """--encperf-force is consent to erase a signature, never to take a device that is in use."""
    stack = layout(tmp_path, devices, [ROOT_MOUNT, *mounts], swaps=swaps)
    assert rules(partition_problems(Path(f"/dev/{name}"), force=True, stack=stack)) == refused


@pytest.mark.parametrize("odd", [" ", "\t", "\n", "\\", "\u2028", "\r", "\xa0", "é"])
def test_mount_points_and_swap_files_with_any_character_are_found(tmp_path: Path, odd: str) -> None:
    # the kernel escapes space, tab, newline and backslash only; any other byte stands as it is
    # and must not split a field (str.split() would cut at U+2028, a carriage return or NBSP)
    devices = {"vda": Dev("254:0"), "loop1": Dev("7:1"), "loop2": Dev("7:2")}
    point = f"/var/tmp/a{odd}b/mnt"
    swap_source = f"/dev/by{odd}name/loop2"  # found by its last name only when read whole
    stack = layout(
        tmp_path,
        devices,
        [("254:0", "/", "ext4", "/dev/vda"), ("7:1", point, "ext4", "/dev/loop1")],
        swaps=[swap_source],
    )
    assert stack.mounts()["loop1"] == [point]
    assert check(stack, "loop1") == [f"partition rule 'not mounted': /dev/loop1 is mounted on {point}"]
    assert stack.swaps_on() == {"loop2": swap_source}


def test_a_path_that_names_no_block_device_now_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    """The device number the path named at the start (Target.device_number) is checked first: a
    path that names nothing, or another device, is refused with no other rule read."""
    gone = tmp_path / "by-uuid-X"
    assert partition_problems(gone, pinned=os.makedev(8, 17)) == [
        f"partition rule 'same device': {gone} names no block device now, not device 8:17 as when the "
        "run started (a link under /dev moved, or the device was replaced): nothing is written through it"
    ]
