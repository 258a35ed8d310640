"""In-place encryption: the fill's bytes and digest, and the option's plugin behaviour."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pytest_encperf.backends import BackendSpec
from pytest_encperf.inplace import (
    FILL_FILE,
    InplaceTiming,
    InplaceUnavailable,
    file_digest,
    measure,
    write_file,
)
from pytest_encperf.targets import Target
from pytest_encperf.workloads import MiB


def test_fill_writes_exactly_the_amount_and_its_digest(tmp_path: Path) -> None:
    digest, seconds = write_file(tmp_path, 2 * MiB + 4096)
    written = (tmp_path / FILL_FILE).read_bytes()
    assert len(written) == 2 * MiB + 4096 and seconds > 0
    assert digest == hashlib.sha256(written).hexdigest() == file_digest(tmp_path / FILL_FILE)
    with pytest.raises(FileExistsError):  # never writes through a file it did not create
        write_file(tmp_path, 1)


def test_rate_is_decimal_megabytes_per_second() -> None:
    timing = InplaceTiming("luks2", "cryptsetup reencrypt --encrypt", 50 * 10**6, 2.0, True, "LUKS2")
    assert timing.mb_per_s == 25.0 and timing.to_dict()["mb_per_s"] == 25.0
    assert InplaceTiming("x", "fill", 1, 0.0).mb_per_s == 0.0


def test_in_place_luks2_on_a_partition_is_a_skip_not_a_failure(tmp_path: Path) -> None:
    target = Target("partition", tmp_path, 1 << 20, device=Path("/dev/encperf-no-such-device"))
    with pytest.raises(InplaceUnavailable, match="container target only"):
        measure(BackendSpec("luks2"), target, tmp_path / "inplace", 1 << 20)
    assert not (tmp_path / "inplace").exists()
