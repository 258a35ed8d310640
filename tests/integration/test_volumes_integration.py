"""Real volumes on real loop devices and mounts (root): plain and fscrypt."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host, mounting
from pytest_encperf.backends import BackendBase, BackendSpec, make_backend
from pytest_encperf.backends.fscrypt import key_status, policy_status
from pytest_encperf.lifecycledata import LIFECYCLE_STEPS
from pytest_encperf.mountedvolume import close_volume, open_volume
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB
from tests.helpers.support import disk_dir, mounts_and_loops_left, tiny_session

pytestmark = pytest.mark.integration

MARKER = b"ENCPERF-PLAINTEXT-MARKER-7f3a9c"
NAME_MARKER = "encperf-secret-filename-7f3a9c"


@pytest.fixture
def target(tmp_path: Path) -> Target:
    base = disk_dir()
    return Target("container", base if base.is_dir() else tmp_path, container_size(8 * MiB))


@pytest.fixture
def workdir(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="encperf-test-", dir=target.directory))
    yield path / "volume"
    assert mounts_and_loops_left(path) == [], "mount or loop device left behind"
    shutil.rmtree(path)


def write_marker_files(directory: Path) -> str:
    payload = MARKER * 4096
    (directory / NAME_MARKER).write_bytes(payload)
    with (directory / NAME_MARKER).open("rb+") as handle:
        os.fsync(handle.fileno())
    return hashlib.sha256(payload).hexdigest()


@pytest.mark.parametrize("name", ["plain", "fscrypt"])
def test_create_mount_write_remount_read_destroy(name: str, target: Target, workdir: Path) -> None:
    backend: BackendBase = make_backend(BackendSpec(name))
    mounted = open_volume(backend, target, workdir)
    volume = mounted.volume
    try:
        assert host.loop_direct_io(volume.device), "loop device without direct I/O"
        assert mounting.is_mounted(workdir / "mnt")
        digest = write_marker_files(mounted.data_dir)
        backend.unmount(volume)
        assert not mounting.is_mounted(workdir / "mnt")
        raw = (workdir / "container.img").read_bytes()
        leaked = MARKER in raw or NAME_MARKER.encode() in raw
        # the check itself must be able to see plaintext: it does on the plain volume
        assert leaked is (name == "plain")
        data_dir = backend.mount(volume)
        assert hashlib.sha256((data_dir / NAME_MARKER).read_bytes()).hexdigest() == digest
        if name == "fscrypt":
            assert policy_status(data_dir) == "encrypted"
            info = mounted.description
            assert info["contents"] == "aes-256-xts" and info["filenames"] == "aes-256-cts"
    finally:
        backend.destroy(volume)
    assert not (workdir / "container.img").exists()
    backend.destroy(volume)  # idempotent


def test_destroy_after_failed_mount_releases_everything(
    target: Target, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = make_backend(BackendSpec("fscrypt"))
    from pytest_encperf.backends import fscrypt

    def broken_policy(*args: object) -> None:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(fscrypt, "set_policy", broken_policy)
    with pytest.raises(Exception, match=r"fscrypt: .*Operation not supported"):
        open_volume(backend, target, workdir)
    # the workdir fixture asserts no mount or loop device remains


def test_fscrypt_key_is_removed_at_unmount(target: Target, workdir: Path) -> None:
    backend = make_backend(BackendSpec("fscrypt"))
    mounted = open_volume(backend, target, workdir)
    try:
        (mounted.data_dir / "f").write_bytes(b"x")
        identifier = bytes.fromhex(mounted.volume.state["key_identifier"])
        mountpoint = workdir / "mnt"
        assert key_status(mountpoint, identifier) == "present"
        backend.unmount(mounted.volume)
        mounting.mount(mounted.volume.device, mountpoint, "ext4")
        try:
            assert key_status(mountpoint, identifier) == "absent"
            names = os.listdir(mountpoint / "data")
            assert len(names) == 1 and names != ["f"], "encrypted names readable without the key"
        finally:
            mounting.unmount(mountpoint)
    finally:
        backend.destroy(mounted.volume)


def test_full_session_on_containers_leaves_nothing(pytester: pytest.Pytester, target: Target) -> None:
    result = tiny_session(pytester, target.directory, "--encperf-backends=fscrypt")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*fscrypt*", "*plain *", "*%*"])
    prefix = str(target.directory / f"encperf-{os.getpid()}-")
    assert list(target.directory.glob(f"encperf-{os.getpid()}-*")) == [], "run directory left behind"
    assert [m for m in mounting.mounts_under(target.directory) if str(m).startswith(prefix)] == []
    leftover_loops = [
        loop
        for loop in host.loops_backed_by(target.directory)
        if (Path("/sys/block") / loop.name / "loop" / "backing_file").read_text().startswith(prefix)
    ]
    assert leftover_loops == []


@pytest.mark.parametrize("name", ["plain", "fscrypt", "gocryptfs", "qemu-luks"])
def test_every_life_cycle_step_is_timed(name: str, target: Target, workdir: Path) -> None:
    backend = make_backend(BackendSpec(name))
    reasons = backend.problems(target)
    if reasons:
        pytest.skip("; ".join(reasons))
    mounted = open_volume(backend, target, workdir)
    try:
        assert list(mounted.lifecycle) == ["create", "mount", "first write"]
        assert not list(mounted.data_dir.iterdir()), "the first-write probe stayed on the volume"
    finally:
        close_volume(mounted)
    assert list(mounted.lifecycle) == list(LIFECYCLE_STEPS)
    assert all(seconds > 0 for seconds in mounted.lifecycle.values())


def test_lifecycle_cycles_are_timed_saved_and_gated_against_the_saved_run(
    pytester: pytest.Pytester, target: Target
) -> None:
    """Plain and fscrypt with --encperf-lifecycle-cycles=3: every step has 3 positive samples,
    saved; a second run compared with the first reports the life-cycle checks, not gated (one
    saved run is no run-to-run spread)."""
    storage_dir, out = pytester.path / ".encperf", pytester.path / "first.json"
    common = (
        "--encperf-backends=fscrypt",
        "--encperf-lifecycle-cycles=3",
        f"--encperf-storage={storage_dir}",
    )
    first = tiny_session(pytester, target.directory, *common, "--encperf-save=main", f"--encperf-json={out}")
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(
        ["volume life cycle, seconds (median of the cycles*", "plain * 3", "fscrypt * 3"]
    )
    lifecycle = json.loads(out.read_text())["encperf"]["lifecycle"]
    assert set(lifecycle) == {"plain", "fscrypt"}
    for steps in lifecycle.values():
        assert list(steps) == list(LIFECYCLE_STEPS)
        assert all(len(cycles) == 3 and min(cycles) > 0 for cycles in steps.values())
    assert len(list(storage_dir.rglob("0001_main.json"))) == 1
    second = tiny_session(
        pytester, target.directory, *common, "--encperf-compare=main", "--encperf-fail=lifecycle:10%"
    )
    assert second.ret == pytest.ExitCode.OK
    rows = [line for line in second.stdout.lines if "cycles of both runs" in line]
    assert len(rows) == 2 * len(LIFECYCLE_STEPS)
    assert all(row.endswith("not gated") and "3/3" in row for row in rows), "\n".join(rows)
    assert {row.split()[1] for row in rows} == {f"lifecycle-{s.replace(' ', '-')}" for s in LIFECYCLE_STEPS}
    assert list(target.directory.glob(f"encperf-{os.getpid()}-*")) == [], "run directory left behind"
