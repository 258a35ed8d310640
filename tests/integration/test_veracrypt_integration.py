"""The real ``veracrypt`` program in FUSE mode (skipped where it is not installed): its forked
FUSE daemon is found and counted as the volume's daemon, and nothing stays behind."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.mountedvolume import close_volume, open_volume
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB
from tests.helpers.support import disk_dir, mounts_and_loops_left, problems_here

pytestmark = pytest.mark.integration

SPEC = "veracrypt:tool=cli,mode=fuse"


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="encperf-test-", dir=disk_dir()))
    yield path
    assert mounts_and_loops_left(path) == [], "mount or loop device left behind"
    shutil.rmtree(path)


def test_fuse_daemon_of_the_real_program_is_the_volumes_daemon(scratch: Path) -> None:
    if shutil.which("veracrypt") is None:
        pytest.skip("veracrypt program not installed (its FUSE mode is tested with a stand-in only)")
    reasons = problems_here(SPEC, scratch)
    if reasons:
        pytest.skip("; ".join(reasons))
    backend = make_backend(BackendSpec.parse(SPEC))
    mounted = open_volume(backend, Target("container", scratch, container_size(32 * MiB)), scratch / "volume")
    try:
        (mounted.data_dir / "f").write_bytes(b"x" * MiB)
        daemons = [psutil.Process(pid) for pid in mounted.volume.foreign_daemons]
        assert daemons, "VeraCrypt's FUSE process was not found"
        assert all(Path(d.exe()).name == "veracrypt" for d in daemons)
        assert set(mounted.volume.foreign_daemons) <= set(mounted.daemon_pids)
    finally:
        close_volume(mounted)
    assert not [d for d in daemons if d.is_running() and d.status() != psutil.STATUS_ZOMBIE]
