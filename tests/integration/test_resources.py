"""resources.py: one release function per resource kind, for live teardown and dead-run cleanup
alike; the safe-path checks a dead run's journal is held to; secret directories in RAM."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_encperf import deadruns, host, journal, mounting
from pytest_encperf.resources import Cleanup, Resource
from tests.helpers.support import still_backs


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount)")
def test_the_run_s_own_teardown_does_not_unmount_through_a_planted_symbolic_link(tmp_path: Path) -> None:
    run_dir = tmp_path / f"encperf-{os.getpid()}-x"
    mountpoint = run_dir / "01-plain" / "mnt"
    mountpoint.mkdir(parents=True)
    mounting.mount(Path("tmpfs"), mountpoint, "tmpfs")
    moved = tmp_path / "moved"
    try:
        cleanup = Cleanup(journal.Journal(tmp_path))
        cleanup.mount(mountpoint)
        run_dir.rename(moved)  # what the owner of a directory on the way could do
        run_dir.symlink_to(moved)
        with pytest.raises(
            host.HostError, match=f"not unmounting {mountpoint}: {run_dir} is a symbolic link"
        ):
            cleanup.release()
        assert mounting.is_mounted(moved / "01-plain" / "mnt")
    finally:
        mounting.unmount(moved / "01-plain" / "mnt")


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop devices)")


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def dead_run_journal(base: Path, pid: int, entries: list[Resource]) -> None:
    log = journal.Journal(base)
    log.pid, log.start = pid, None  # as if written by the (now dead) process ``pid``
    log.path = log.path.with_name(f"run-{pid}-beef.json")
    cleanup = Cleanup(log)
    for resource in entries:
        cleanup.add(resource)


@needs_root
def test_a_dead_run_s_loop_entry_never_reaches_another_run_s_loop_device(tmp_path: Path) -> None:
    """The reviewer's case: run A's directory is gone (aged out) and its name made again as a
    symbolic link into run B's directory, where B's loop device backs the file of the same
    relative name. A's journal names that loop device: resolving links, the paths matched."""
    live = tmp_path / f"encperf-{os.getpid()}-b"
    (live / "01-plain").mkdir(parents=True, mode=0o700)
    image = live / "01-plain" / "container.img"
    image.write_bytes(bytes(1 << 20))
    loop = host.attach_loop(image, direct_io=False)
    try:
        pid = dead_pid()
        dead = tmp_path / f"encperf-{pid}-a"
        dead_run_journal(
            tmp_path, pid, [Resource("loop", str(loop.path), str(dead / "01-plain" / "container.img"))]
        )
        dead.symlink_to(live)  # made again, by whoever can write the directory
        (run,) = deadruns.release_dead_runs(tmp_path)
        assert run.refused == [f"loop {loop.path}: {dead} is not a directory"]
        assert host.loop_backing_file(loop.path) == str(image), "another run's loop device was detached"
        dead.unlink()
        dead.mkdir(mode=0o700)  # made again as a directory of ours, holding nothing
        assert not host.detach_loop(loop.path, dead / "01-plain" / "container.img")  # exact: no match
        (tmp_path / "link").symlink_to(live / "01-plain")  # the same file, through a link
        assert not host.detach_loop(loop.path, tmp_path / "link" / "container.img")
        assert host.loop_backing_file(loop.path) == str(image)
    finally:
        host.detach_loop(loop.path, image)


@needs_root
def test_a_dead_run_s_loop_over_a_file_removed_with_its_directory_is_detached(tmp_path: Path) -> None:
    pid = dead_pid()
    run = tmp_path / f"encperf-{pid}-a"
    run.mkdir(mode=0o700)
    image = run / "container.img"
    image.write_bytes(bytes(1 << 20))
    loop = host.attach_loop(image, direct_io=False)
    try:
        assert still_backs(loop.path, image)
        (tmp_path / "alias").symlink_to(run)
        recorded = Cleanup(journal.Journal(tmp_path / "j"))  # (no journal written: no such directory)
        recorded.loop(loop.path, tmp_path / "alias" / "container.img")
        assert recorded.resources[0].detail == str(image), "the kernel's name of the file is recorded"
        dead_run_journal(tmp_path, pid, [Resource("loop", str(loop.path), str(image))])
        image.unlink()
        run.rmdir()  # gone while attached: the kernel names "<path> (deleted)"
        (dead,) = deadruns.release_dead_runs(tmp_path)
        assert dead.done == [f"detached {loop.path}"]
        assert not still_backs(loop.path, image)
    finally:
        host.detach_loop(loop.path, image)


@needs_root
@pytest.mark.parametrize("gone_after", [0.1, None], ids=["released meanwhile", "left"])
def test_an_orphaned_loop_device_counts_as_left_only_when_it_stays(
    tmp_path: Path, gone_after: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop device over a file on a mount since gone (the kernel names its file "/") is a leak
    the check reports; one another worker is releasing right now (it goes within the grace) is not."""
    import threading

    from tests.helpers import support

    # shorter than other workers' grace: they never count this test's orphan as their leak
    monkeypatch.setattr(support, "ORPHAN_GRACE", 0.4)
    source, export = tmp_path / "source.img", tmp_path / "export.raw"
    source.write_bytes(bytes(1 << 20))
    export.touch()
    subprocess.run(["mount", "--bind", str(source), str(export)], check=True)
    loop = host.attach_loop(export, direct_io=False)
    try:
        subprocess.run(["umount", "-l", str(export)], check=True)
        assert host.loop_backing_file(loop.path) == "/" and still_backs(loop.path, source)
        if gone_after is not None:  # ours, by its inode, just checked
            threading.Timer(gone_after, host.detach_loop, (loop.path,)).start()
        found = support.mounts_and_loops_left(tmp_path / "nothing-here")
        orphan = f"orphaned loop device {loop.path} (backing file of a vanished mount)"
        assert (orphan in found) is (gone_after is None)
    finally:
        if still_backs(loop.path, source):
            host.detach_loop(loop.path)
