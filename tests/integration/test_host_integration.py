"""host.whole_disks on real stacks: a partition of a loop device, a loop device over a RAM file."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from pytest_encperf import host
from pytest_encperf.workloads import MiB
from tests.helpers.support import loop_device, partitioned_loop, scratch_dir

pytestmark = pytest.mark.integration


def test_a_partition_of_a_loop_device_is_on_the_disks_below_its_file() -> None:
    with scratch_dir("encperf-disks-") as base:
        below = host.block_device_of(base)
        assert below is not None
        with partitioned_loop(base / "image") as (device, partition):
            disks = host.whole_disks(below)
            assert host.whole_disks(partition.name) == host.whole_disks(device.name) == disks
            assert device.name not in disks
            assert all(":" in str(host.device_number(disk)) for disk in disks)


def test_a_loop_device_over_a_file_in_ram_is_its_own_disk() -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        with loop_device(shm / "image", 8 * MiB) as device:
            assert host.whole_disks(device.name) == [device.name]
    finally:
        shutil.rmtree(shm)
