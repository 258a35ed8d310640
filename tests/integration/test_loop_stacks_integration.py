"""The partition rules on real loop devices built on the device (root).

The loop driver holds its backing device without O_EXCL, a holder in sysfs or a process's
descriptor: before, a loop device on the target (at an offset, so that no signature showed)
passed every rule and a run formatted the file system mounted on it (issue 23). The same
layouts on a fake sysfs are in tests/unit/test_targets.py; a device-mapper mapping on such a loop
device in tests/integration/test_partition_integration.py (the UML lane).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host, mounting
from pytest_encperf.blockstack import BlockStack
from pytest_encperf.targets import DeviceClaim, partition_problems
from pytest_encperf.workloads import MiB
from tests.helpers.support import loop_device, loop_on, partitioned_loop, scratch_dir, tiny_session

pytestmark = pytest.mark.integration


@pytest.fixture
def scratch() -> Iterator[Path]:
    with scratch_dir("encperf-loops-") as path:
        yield path


@pytest.fixture
def device(scratch: Path) -> Iterator[Path]:
    """The device the user names: a loop device over a sparse file, as in the reproduction."""
    with loop_device(scratch / "g.img", 96 * MiB) as path:
        yield path


@contextlib.contextmanager
def mounted(device: Path, mountpoint: Path) -> Iterator[Path]:
    subprocess.run(["mkfs.ext4", "-q", "-F", str(device)], check=True, capture_output=True)
    mountpoint.mkdir()
    mounting.mount(device, mountpoint, "ext4")
    try:
        yield mountpoint
    finally:
        mounting.unmount(mountpoint)


def offset_note(offset: int) -> str:
    return f" (offset {offset // MiB} MiB)" if offset else ""


@pytest.mark.parametrize("offset", [0, MiB], ids=["whole", "offset"])
@pytest.mark.parametrize("mount", [False, True], ids=["unmounted", "mounted"])
def test_a_loop_device_on_the_device_is_refused_even_when_forced(
    device: Path, scratch: Path, offset: int, mount: bool
) -> None:
    with loop_on(device, offset) as loop, contextlib.ExitStack() as stack:
        in_use = (
            f"partition rule 'not in use': {device} is in use: {loop}{offset_note(offset)} is backed by it"
        )
        if not mount:
            assert partition_problems(device, force=True) == [in_use]
            return
        point = stack.enter_context(mounted(loop, scratch / "h"))
        note = f", offset {offset // MiB} MiB" if offset else ""
        assert partition_problems(device, force=True) == [
            f"partition rule 'not mounted': {device} is under {loop.name} (loop device{note}), which is "
            f"mounted on {point}",
            f"{in_use} and mounted on {point}",
        ]
        os.close(os.open(device, os.O_RDONLY | os.O_EXCL))  # what the exclusive probe alone accepted
    assert partition_problems(device, force=True) == []


@pytest.mark.parametrize("mount", [False, True], ids=["unmounted", "mounted"])
def test_a_loop_device_two_levels_up_is_refused(device: Path, scratch: Path, mount: bool) -> None:
    with loop_on(device) as middle, loop_on(middle, MiB) as top, contextlib.ExitStack() as stack:
        in_use = (
            f"partition rule 'not in use': {device} is in use: {middle} is backed by it; "
            f"{top} (offset 1 MiB) is backed by {middle}"
        )
        if not mount:
            assert partition_problems(device, force=True) == [in_use]
            return
        point = stack.enter_context(mounted(top, scratch / "h"))
        assert partition_problems(device, force=True) == [
            f"partition rule 'not mounted': {device} is under {top.name} (loop device, offset 1 MiB) on "
            f"{middle.name} (loop device), which is mounted on {point}",
            f"{in_use} and mounted on {point}",
        ]
        # the middle one is the device of the loop device on it, and on the device named
        assert partition_problems(middle, force=True) == [
            f"partition rule 'not mounted': {middle} is under {top.name} (loop device, offset 1 MiB), "
            f"which is mounted on {point}",
            f"partition rule 'not in use': {middle} is in use: {top} (offset 1 MiB) is backed by it "
            f"and mounted on {point}",
        ]


def test_a_loop_device_is_found_whatever_path_named_its_backing_device(device: Path, scratch: Path) -> None:
    """A symbolic link (what /dev/disk/by-id is), a node made elsewhere and then removed: the
    kernel's record names the device by number (LOOP_GET_STATUS64); without it (no nodes in
    /dev to read it through), by its backing path while that still names the device."""
    link = scratch / "by-id-link"
    link.symlink_to(device)
    rdev = device.stat().st_rdev
    node = scratch / "node"
    os.mknod(node, 0o600 | 0o060000, rdev)  # S_IFBLK
    no_ioctl = BlockStack(dev=scratch / "no-dev")
    with loop_on(link) as through_link, loop_on(node) as through_node:
        # listed in the order of the devices' names (loop12 before loop9: whichever numbers were free)
        holders = sorted([str(through_link), str(through_node)])
        expected = f"{holders[0]} is backed by it; {holders[1]} is backed by it"
        for stack in (BlockStack(), no_ioctl):
            assert partition_problems(device, force=True, stack=stack) == [
                f"partition rule 'not in use': {device} is in use: {expected}"
            ]
        node.unlink()  # the kernel's path is now "<node> (deleted)": only the record's number names it
        assert partition_problems(device, force=True) == [
            f"partition rule 'not in use': {device} is in use: {expected}"
        ]
        assert partition_problems(device, force=True, stack=no_ioctl) == [
            f"partition rule 'not in use': {device} is in use: {through_link} is backed by it"
        ]


def test_a_loop_device_over_the_device_is_on_it(device: Path, scratch: Path) -> None:
    """Naming the loop device of a mounted device: writing it writes the mounted file system."""
    with mounted(device, scratch / "g") as point, loop_on(device, MiB) as loop:
        assert partition_problems(loop, force=True) == [
            f"partition rule 'not mounted': {loop} is on {device.name}, which is mounted on {point}"
        ]


def test_the_claim_is_not_taken_back_over_a_loop_device_set_up_meanwhile(device: Path) -> None:
    """While a volume has the device, a loop device can still be set up on it (the kernel lets
    it share the device with the volume's exclusive hold); taking the device back then fails."""
    claim = DeviceClaim(device)
    with loop_on(device, MiB) as loop:
        with pytest.raises(
            host.HostError, match=rf"'not in use': {device} is in use: {loop} \(offset 1 MiB\)"
        ):
            claim.acquire()
        assert not claim.held and not DeviceClaim.holds(device)
    claim.acquire()
    claim.release()


def test_the_reproduction_is_refused_and_the_mounted_file_is_kept(
    pytester: pytest.Pytester, device: Path, scratch: Path
) -> None:
    """Issue 23's reproduction end to end: a run on the device while an ext4 on a loop device at
    1 MiB into it is mounted, with --encperf-force too."""
    with loop_on(device, MiB) as loop, mounted(loop, scratch / "h") as point:
        (point / "keep.txt").write_text("keep\n")
        run_dir = scratch / "run"
        run_dir.mkdir()
        consent = [f"--encperf-device={device}", f"--encperf-allow-destroy={device}"]
        for force in ([], ["--encperf-force=1"]):
            result = tiny_session(
                pytester,
                run_dir,
                "--encperf-backends=plain",
                "--encperf-target=partition",
                *consent,
                *force,
                "-rs",
            )
            result.assert_outcomes(skipped=2)  # read and write: nothing measured, nothing written
            reason = f"'not in use': {device} is in use: {loop} (offset 1 MiB) is backed by it"
            result.stdout.fnmatch_lines([f"SKIPPED*partition rule {reason}*"])
        subprocess.run(["sync"], check=True)
        assert (point / "keep.txt").read_text() == "keep\n"
    with loop_on(device, MiB) as loop:  # and the file system itself, unmounted, read again
        check = subprocess.run(["e2fsck", "-f", "-n", str(loop)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


# ---------------------------------------------------------------- loop devices over the same file
#
# Two loop devices over one file present the same bytes and neither is built on the other: before,
# naming one passed every rule while the other was mounted, and the run formatted its file system.


def backing_name(device: Path) -> str:
    """The kernel's name of the file under loop device ``device``."""
    return (host.loop_backing_file(device) or "").removesuffix(host.DELETED)


@pytest.mark.parametrize("offset", [0, MiB], ids=["whole", "offset"])
@pytest.mark.parametrize("mount", [False, True], ids=["unmounted", "mounted"])
def test_a_loop_device_over_the_same_file_is_refused_even_when_forced(
    device: Path, scratch: Path, offset: int, mount: bool
) -> None:
    image = backing_name(device)
    with loop_on(scratch / "g.img", offset) as sibling, contextlib.ExitStack() as stack:
        shares = (
            f"partition rule 'not in use': {device} is in use: {sibling} shares its backing file "
            f"{image}{offset_note(offset)}"
        )
        if mount:
            point = stack.enter_context(mounted(sibling, scratch / "h"))
            shares += f" and is mounted on {point}"
        assert partition_problems(device, force=True) == [shares]
        os.close(os.open(device, os.O_RDONLY | os.O_EXCL))  # what the exclusive probe alone accepted
    assert partition_problems(device, force=True) == []


def test_loop_devices_over_disjoint_ranges_of_one_file_are_allowed(scratch: Path) -> None:
    """The first 48 MiB of g.img and the rest: formatting one cannot reach the other's file
    system; a third over the whole file shares both."""
    image = scratch / "g.img"
    image.write_bytes(b"")
    os.truncate(image, 96 * MiB)
    with (
        loop_on(image, 0, 48 * MiB) as first,
        loop_on(image, 48 * MiB) as rest,
        mounted(rest, scratch / "h") as point,
    ):
        assert partition_problems(first, force=True) == []
        with loop_on(image) as whole:
            assert partition_problems(first, force=True) == [
                f"partition rule 'not in use': {first} is in use: {whole} shares its backing file "
                f"{backing_name(first)}"
            ]
            assert partition_problems(rest, force=True) == [
                f"partition rule 'not mounted': {rest} is mounted on {point}",
                f"partition rule 'not in use': {rest} is in use: {whole} shares its backing file "
                f"{backing_name(rest)}",
            ]


def test_a_partition_of_a_loop_device_and_a_loop_device_over_the_same_file(scratch: Path) -> None:
    """loop1p1 is bytes 1 to 33 MiB of the image: one at 64 MiB shares none of them, one at
    16 MiB does."""
    image = scratch / "p.img"
    with partitioned_loop(image) as (disk, part), loop_on(image, 64 * MiB) as apart:
        assert partition_problems(part, force=True) == []
        with loop_on(image, 16 * MiB) as inside, mounted(inside, scratch / "h") as point:
            assert partition_problems(part, force=True) == [
                f"partition rule 'not in use': {part} is in use: {inside} shares {disk}'s backing file "
                f"{backing_name(disk)} (offset 16 MiB) and is mounted on {point}"
            ]
        assert partition_problems(disk, force=True) == [  # the whole disk is all of the image
            f"partition rule 'not in use': {disk} is in use: {apart} shares its backing file "
            f"{backing_name(disk)} (offset 64 MiB)"
        ]


def test_a_mounted_loop_device_on_a_sibling_is_named(device: Path, scratch: Path) -> None:
    """The other rules on the sibling's own stack: a loop device on it, mounted."""
    with (
        loop_on(scratch / "g.img", MiB) as sibling,
        loop_on(sibling, MiB) as top,
        mounted(top, scratch / "h") as point,
    ):
        assert partition_problems(device, force=True) == [
            f"partition rule 'not in use': {device} is in use: {sibling} shares its backing file "
            f"{backing_name(device)} (offset 1 MiB); {top} (offset 1 MiB) is backed by {sibling} "
            f"and mounted on {point}"
        ]


def test_a_process_holding_the_backing_file_open_makes_it_in_use(device: Path, scratch: Path) -> None:
    """A virtual machine's image, dd: the file is live though no loop device shares it."""
    with (scratch / "g.img").open("rb") as image:
        holder = subprocess.Popen(["sleep", "60"], stdin=image)
    try:
        assert partition_problems(device, force=True) == [
            f"partition rule 'not in use': {device} is in use: the backing file {backing_name(device)} is "
            f"open in pid {holder.pid} (sleep) (a virtual machine, dd or another program is using it)"
        ]
    finally:
        holder.kill()
        holder.wait()
    assert partition_problems(device, force=True) == []


def test_the_claim_is_not_taken_back_over_a_loop_device_over_its_file_set_up_meanwhile(
    device: Path, scratch: Path
) -> None:
    """While a volume has the device, another loop device can be set up over its file (the
    kernel's exclusive hold on the device says nothing of the file); taking the device back then
    fails."""
    claim = DeviceClaim(device)
    with loop_on(scratch / "g.img", MiB) as sibling:
        with pytest.raises(
            host.HostError,
            match=rf"'not in use': {device} is in use: {sibling} shares its backing file .* \(offset 1 MiB\)",
        ):
            claim.acquire()
        assert not claim.held and not DeviceClaim.holds(device)
    claim.acquire()
    claim.release()


@pytest.mark.parametrize("offset", [0, MiB], ids=["whole", "offset"])
def test_a_run_beside_a_mounted_loop_device_over_the_same_file_keeps_its_file(
    pytester: pytest.Pytester, device: Path, scratch: Path, offset: int
) -> None:
    """The reproduction end to end: a run on loop1 while an ext4 on another loop device over
    g.img is mounted, with --encperf-force too; before, the run formatted it."""
    with loop_on(scratch / "g.img", offset) as sibling, mounted(sibling, scratch / "h") as point:
        (point / "keep.txt").write_text("keep\n")
        run_dir = scratch / "run"
        run_dir.mkdir()
        consent = [f"--encperf-device={device}", f"--encperf-allow-destroy={device}"]
        for force in ([], ["--encperf-force=1"]):
            result = tiny_session(
                pytester,
                run_dir,
                "--encperf-backends=plain",
                "--encperf-target=partition",
                *consent,
                *force,
                "-rs",
            )
            result.assert_outcomes(skipped=2)  # read and write: nothing measured, nothing written
            reason = f"'not in use': {device} is in use: {sibling} shares its backing file"
            result.stdout.fnmatch_lines([f"SKIPPED*partition rule {reason}*"])
        subprocess.run(["sync"], check=True)
        assert (point / "keep.txt").read_text() == "keep\n"
    with loop_on(scratch / "g.img", offset) as sibling:  # and the file system itself, unmounted, read again
        check = subprocess.run(["e2fsck", "-f", "-n", str(sibling)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
