"""The partition rules on real device-mapper stacks: a dm mapping and an LVM-like stack
(dm-linear over a loop device, as LVM builds a logical volume) under a mounted file system.

They need device-mapper; where the host kernel has none (this project's CI), ``test_uml_lane.py``
runs this file inside user-mode Linux. The layouts without device-mapper (loop devices, btrfs)
are in tests/integration/test_partition.py and tests/integration/test_loop_stacks_integration.py,
and root stacks this machine does not have in tests/unit/test_targets.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host, mounting
from pytest_encperf.backends import BackendError, BackendSpec, make_backend
from pytest_encperf.backends.dmcrypt import device_mapper_problems
from pytest_encperf.blockstack import BlockStack
from pytest_encperf.mountedvolume import open_volume
from pytest_encperf.targets import Target, partition_problems, probe_signature
from pytest_encperf.workloads import MiB
from tests.helpers.support import loop_device, loop_on, partitioned_loop, scratch_dir

pytestmark = [pytest.mark.integration, pytest.mark.dmcrypt]


@pytest.fixture(autouse=True)
def needs_device_mapper() -> None:
    reasons = device_mapper_problems()
    if reasons:
        pytest.skip("; ".join(reasons))
    if shutil.which("dmsetup") is None:
        pytest.skip("needs dmsetup (Debian package dmsetup)")


@pytest.fixture
def scratch() -> Iterator[Path]:
    with scratch_dir("encperf-pdm-") as path:
        yield path
        assert list(Path("/dev/mapper").glob(f"encperf-test-{os.getpid()}-*")) == [], "dm mapping left behind"


@pytest.fixture
def loop(scratch: Path) -> Iterator[Path]:
    with loop_device(scratch / "pv.img", 96 * MiB) as device:
        yield device


@contextlib.contextmanager
def linear(device: Path, name: str) -> Iterator[Path]:
    """A dm-linear mapping over all of ``device``: what LVM makes for a logical volume."""
    full = f"encperf-test-{os.getpid()}-{name}"
    sectors = int(
        subprocess.run(["blockdev", "--getsz", str(device)], capture_output=True, check=True).stdout
    )
    subprocess.run(["dmsetup", "create", full, "--table", f"0 {sectors} linear {device} 0"], check=True)
    subprocess.run(["dmsetup", "mknodes", full], check=True)  # without udev (the UML guest), make the node
    try:
        yield Path("/dev/mapper") / full
    finally:
        subprocess.run(["dmsetup", "remove", "--retry", full], check=True)
        subprocess.run(["dmsetup", "mknodes", full], check=True)  # and without udev, remove the node


@contextlib.contextmanager
def mounted(device: Path, mountpoint: Path) -> Iterator[Path]:
    host.run(["mkfs.ext4", "-q", "-F", str(device)])
    mountpoint.mkdir()
    mounting.mount(device, mountpoint, "ext4")
    try:
        yield mountpoint
    finally:
        mounting.unmount(mountpoint)


def dm_label(mapped: Path) -> str:
    """``dm-N (name)``: without udev (the UML guest) /dev/mapper/NAME is a node, not a link."""
    return f"{BlockStack().name_of(mapped)} ({mapped.name})"


def test_lvm_like_stack_under_a_mounted_file_system(loop: Path, scratch: Path) -> None:
    with linear(loop, "lv") as lv, mounted(lv, scratch / "mnt") as point:
        held = dm_label(lv)
        assert partition_problems(loop, force=True) == [
            f"partition rule 'not mounted': {loop} is under {held}, which is mounted on {point}",
            f"partition rule 'not in use': {loop} is held by {held} "
            "(an active device-mapper, LVM, dm-crypt or MD device is built on it)",
        ]
        assert partition_problems(lv, force=True) == [
            f"partition rule 'not mounted': {lv} is mounted on {point}"
        ]
    with linear(loop, "lv") as lv:  # the mapping alone, nothing mounted: still in use
        assert [p.split("'")[1] for p in partition_problems(loop, force=True)] == ["not in use"]


def test_a_mapping_on_a_partition_refuses_the_whole_disk(scratch: Path) -> None:
    with partitioned_loop(scratch / "disk.img") as (whole, part), linear(part, "part") as mapped:
        assert partition_problems(whole, force=True) == [
            f"partition rule 'not in use': {whole} is held by {dm_label(mapped)} "
            "(an active device-mapper, LVM, dm-crypt or MD device is built on it)"
        ]


def test_a_mapping_on_a_loop_device_on_the_device_refuses_it(loop: Path, scratch: Path) -> None:
    """The loop device holds the device without O_EXCL or a holder in sysfs; the mapping on the
    loop device is a holder of the loop device only: the chain is followed through both."""
    with loop_on(loop) as stacked, linear(stacked, "onloop") as mapped:
        held = dm_label(mapped)
        in_use = (
            f"partition rule 'not in use': {loop} is in use: {stacked} is backed by it and held by {held}"
        )
        assert partition_problems(loop, force=True) == [in_use]
        with mounted(mapped, scratch / "mnt") as point:
            assert partition_problems(loop, force=True) == [
                f"partition rule 'not mounted': {loop} is under {held} on {stacked.name} (loop device), "
                f"which is mounted on {point}",
                in_use,
            ]
    assert partition_problems(loop, force=True) == []


def test_a_mapping_on_a_loop_device_over_the_same_file(loop: Path, scratch: Path) -> None:
    """Another loop device over the device's file, with a mounted mapping on it: named with its
    stack; and a mapping named on the device writes that file too."""
    image = (host.loop_backing_file(loop) or "").removesuffix(host.DELETED)
    with (
        loop_on(scratch / "pv.img", MiB) as sibling,
        linear(sibling, "sibling") as mapped,
        mounted(mapped, scratch / "mnt") as point,
    ):
        held = dm_label(mapped)
        shares = f"{sibling} shares its backing file {image} (offset 1 MiB) and is held by {held}"
        assert partition_problems(loop, force=True) == [
            f"partition rule 'not in use': {loop} is in use: {shares}; {held} on /dev/{sibling.name} is "
            f"mounted on {point}"
        ]
        with linear(loop, "named") as named:
            assert partition_problems(named, force=True) == [
                f"partition rule 'not in use': {named} is in use: {sibling} shares /dev/{loop.name}'s "
                f"backing file {image} (offset 1 MiB) and is held by {held}; {held} on /dev/{sibling.name} "
                f"is mounted on {point}"
            ]


def test_root_on_a_mapping_refuses_the_device_under_it(loop: Path, scratch: Path) -> None:
    """The real sysfs stack; "/" named on the mapping by a mountinfo line (the guest's own / is
    hostfs, on no block device)."""
    with linear(loop, "root") as root:
        fake = scratch / "mountinfo"
        fake.write_text(f"1 0 0:33 / / rw,relatime - btrfs {root} rw\n")  # btrfs: anonymous 0:33
        stack = BlockStack(root_mountinfo=(fake,))
        problems = partition_problems(loop, force=True, stack=stack)
        assert (
            f"partition rule 'not the root disk': {loop} is in the stack holding / "
            f"(/ on {dm_label(root)} on {loop.name})"
        ) in problems


def test_a_failed_luks_format_wipes_nothing(loop: Path, scratch: Path) -> None:
    """Before: luks2 registered `wipefs --all` ahead of luksFormat, so a format that failed before
    writing anything (here an unknown hash) erased what the device held."""
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "users-data", str(loop)], check=True)
    before = probe_signature(loop)
    target = Target("partition", scratch, 16 * MiB, device=loop, force=True)
    backend = make_backend(BackendSpec.parse("luks2:hash=nosuchhash"))
    with pytest.raises(BackendError, match="luksFormat"):
        open_volume(backend, target, scratch / "volume")
    assert probe_signature(loop) == before and before["LABEL"] == "users-data"


def test_luks2_on_a_partition_leaves_it_as_it_was(loop: Path, scratch: Path) -> None:
    target = Target("partition", scratch, 16 * MiB, device=loop)
    backend = make_backend(BackendSpec("luks2"))
    mounted_volume = open_volume(backend, target, scratch / "volume")
    try:
        assert probe_signature(loop)["TYPE"] == "crypto_LUKS"
        assert [p.split("'")[1] for p in target.problems()] == ["not mounted", "not in use", "no signature"]
    finally:
        backend.destroy(mounted_volume.volume)
    assert probe_signature(loop) == {} and partition_problems(loop) == []
