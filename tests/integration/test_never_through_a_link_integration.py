"""Cleanup acts on what is its own, never through a symbolic link or a name that was reused
(root: real mounts and loop devices)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_encperf import deadruns, host, journal, loopdev, mounting, mounttable
from pytest_encperf.resources import Cleanup

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts, loop devices)"),
]


@pytest.fixture
def other_mount(tmp_path: Path) -> Iterator[Path]:
    """Someone else's mount (a tmpfs), which nothing of ours may unmount."""
    path = tmp_path / "other"
    path.mkdir()
    mounting.mount(Path("tmpfs"), path, "tmpfs")
    (path / "theirs").write_text("data")
    yield path
    if mounting.is_mounted(path):
        subprocess.run(["umount", str(path)], check=True)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def replaced_by_link(mountpoint: Path, target: Path) -> None:
    """Our mount point, unmounted meanwhile, and put back as a symbolic link to ``target``."""
    subprocess.run(["umount", str(mountpoint)], check=True)
    mountpoint.rmdir()
    mountpoint.symlink_to(target)


def test_a_mount_replaced_by_a_link_to_another_mount_is_not_unmounted(
    tmp_path: Path, other_mount: Path
) -> None:
    """``umount`` (even with --no-canonicalize) resolves a link and unmounts what it points to."""
    mountpoint = tmp_path / f"encperf-{os.getpid()}-x" / "01-plain" / "mnt"
    mountpoint.mkdir(parents=True)
    mounting.mount(Path("tmpfs"), mountpoint, "tmpfs")
    cleanup = Cleanup(journal.Journal(tmp_path / "journal"))  # (no such directory: never written)
    cleanup.mount(mountpoint)
    replaced_by_link(mountpoint, other_mount)
    assert not mounting.is_mounted(mountpoint), "a link is not the mount point it leads to"
    cleanup.release()
    assert mounting.is_mounted(other_mount) and (other_mount / "theirs").read_text() == "data"
    assert not mounting.unmount(mountpoint)
    assert mounting.is_mounted(other_mount)


def test_a_dead_run_s_mount_replaced_by_a_link_is_not_unmounted(tmp_path: Path, other_mount: Path) -> None:
    pid = dead_pid()
    run = tmp_path / f"encperf-{pid}-a"
    run.mkdir(mode=0o700)
    mountpoint = run / "mnt"
    mountpoint.mkdir(mode=0o700)
    mounting.mount(Path("tmpfs"), mountpoint, "tmpfs")
    log = journal.Journal(tmp_path)
    log.pid, log.start = pid, None  # as if written by the (now dead) process ``pid``
    log.path = log.path.with_name(f"run-{pid}-beef.json")
    Cleanup(log).mount(mountpoint)
    replaced_by_link(mountpoint, other_mount)
    (dead,) = deadruns.release_dead_runs(tmp_path)
    assert dead.done == [f"{mountpoint}: not mounted any more"] and dead.failed == []
    assert mounting.is_mounted(other_mount) and (other_mount / "theirs").read_text() == "data"


def test_a_link_is_refused_even_where_the_mount_table_names_it(
    tmp_path: Path, other_mount: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the table list the path (another namespace, a race), lstat still finds a link; and
    the kernel, asked with UMOUNT_NOFOLLOW, refuses to follow one."""
    link = tmp_path / "mnt"
    link.symlink_to(other_mount)
    listed = [*mounttable.mountpoints(), str(link)]
    monkeypatch.setattr(mounttable, "mountpoints", lambda: listed)
    with pytest.raises(host.HostError, match=r"not unmounting .*: it is not a directory or file"):
        mounting.unmount(link, retries=1)
    with pytest.raises(host.HostError, match=re.escape(f"umount {link}: ")):
        mounting._umount2(str(link), 0)
    assert mounting.is_mounted(other_mount)


# ---------------------------------------------------------------- loop devices, by descriptor


@pytest.fixture
def images(tmp_path: Path) -> tuple[Path, Path]:
    ours, theirs = tmp_path / "ours.img", tmp_path / "theirs.img"
    for image in (ours, theirs):
        image.write_bytes(bytes(1 << 20))
    return ours, theirs


def attached_to(device: Path) -> str | None:
    return host.loop_backing_file(device)


def test_a_busy_loop_device_is_detached_through_its_descriptor(images: tuple[Path, Path]) -> None:
    ours, _ = images
    loop = host.attach_loop(ours, direct_io=False)
    holder = os.open(loop.path, os.O_RDONLY)  # what udev's probe does after an unmount
    threading.Timer(0.3, os.close, [holder]).start()
    try:
        assert host.detach_loop(loop.path, ours)
        assert attached_to(loop.path) != str(ours)
    finally:
        host.detach_loop(loop.path, ours)


def test_while_it_waits_the_device_cannot_be_freed_and_taken_by_another_run(
    images: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's race: the detach waits for a holder to let go; meanwhile another run's
    ``losetup --detach`` and ``losetup --find`` run. By name the waiting detach would then have
    detached the other run's device; on its descriptor, the device was never free to take."""
    ours, theirs = images
    loop = host.attach_loop(ours, direct_io=False)
    holder = os.open(loop.path, os.O_RDONLY)
    other: list[Path] = []
    failures: list[str] = []

    def meanwhile(seconds: float) -> None:  # at the poll point
        if not other:
            os.close(holder)
            subprocess.run(["losetup", "--detach", str(loop.path)], capture_output=True)
            taken = subprocess.run(["losetup", str(loop.path), str(theirs)], capture_output=True, text=True)
            if taken.returncode == 0:
                failures.append(f"{theirs} was attached to {loop.path} while the detach held it")
            found = subprocess.run(
                ["losetup", "--find", "--show", str(theirs)], capture_output=True, text=True
            )
            other.append(Path(found.stdout.strip()))
        time.sleep(seconds)

    monkeypatch.setattr(loopdev, "time", SimpleNamespace(monotonic=time.monotonic, sleep=meanwhile))
    try:
        assert host.detach_loop(loop.path, ours)
        assert other and other[0] != loop.path, "the other run got the device we were detaching"
        assert failures == []
        assert attached_to(other[0]) == str(theirs), "the other run's device was detached"
        assert attached_to(loop.path) != str(ours)
    finally:
        monkeypatch.undo()
        for device in other:
            host.detach_loop(device, theirs)
        host.detach_loop(loop.path, ours)


def test_a_device_that_now_backs_another_file_is_not_detached(
    images: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the look by name and the open, the device is detached and another file attached
    to the same /dev/loopN: the check on the descriptor (device and inode) sees the other file."""
    ours, theirs = images
    loop = host.attach_loop(ours, direct_io=False)
    looked = loopdev.backing_file_name

    def then_swapped(device: Path) -> str | None:
        name = looked(device)
        subprocess.run(["losetup", "--detach", str(device)], check=True)
        if subprocess.run(["losetup", str(device), str(theirs)], capture_output=True).returncode != 0:
            pytest.skip(f"{device} was taken by another program before the test could attach to it")
        return name

    monkeypatch.setattr(loopdev, "backing_file_name", then_swapped)
    try:
        assert not host.detach_loop(loop.path, ours)
        monkeypatch.undo()
        assert attached_to(loop.path) == str(theirs), "another file's device was detached"
    finally:
        monkeypatch.undo()
        host.detach_loop(loop.path, theirs)
        host.detach_loop(loop.path, ours)
