"""A loop device's record as the kernel gives it (LOOP_GET_STATUS64's struct loop_info64)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_encperf import loopbacking
from pytest_encperf.workloads import MiB


def huge_encode_dev(major: int, minor: int) -> int:
    """The kernel's new_encode_dev, which loop_get_status uses for lo_device and lo_rdevice."""
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)


@given(major=st.integers(0, 0xFFF), minor=st.integers(0, 0xFFFFF))
def test_device_numbers_decode_as_stat_gives_them(major: int, minor: int) -> None:
    assert loopbacking.decode_device_number(huge_encode_dev(major, minor)) == os.makedev(major, minor)


@given(
    numbers=st.lists(st.integers(0, 2**64 - 1), min_size=5, max_size=5),
    words=st.lists(st.integers(0, 2**32 - 1), min_size=4, max_size=4),
    names=st.lists(st.binary(max_size=64), min_size=2, max_size=2),
    key=st.binary(max_size=32),
    init=st.lists(st.integers(0, 2**64 - 1), min_size=2, max_size=2),
    major=st.integers(0, 0xFFF),
    minor=st.integers(0, 0xFFFFF),
)
def test_the_backing_device_number_is_lo_rdevice_whatever_else_the_record_holds(
    numbers: list[int],
    words: list[int],
    names: list[bytes],
    key: bytes,
    init: list[int],
    major: int,
    minor: int,
) -> None:
    numbers[2] = huge_encode_dev(major, minor)
    raw = struct.pack("=5Q4I64s64s32s2Q", *numbers, *words, *names, key, *init)
    assert len(raw) == 232  # sizeof(struct loop_info64)
    assert loopbacking.parse_status(raw) == os.makedev(major, minor)


def test_a_record_without_the_ioctl_falls_back_to_the_backing_path(tmp_path: Path) -> None:
    image = tmp_path / "g.img"
    image.touch()
    assert loopbacking.backing_device_number(loopbacking.LoopRecord(str(image), None)) is None  # a file
    assert loopbacking.backing_device_number(loopbacking.LoopRecord(str(image), 0)) is None  # the kernel's
    assert loopbacking.backing_device_number(loopbacking.LoopRecord("/gone", os.makedev(7, 1))) == os.makedev(
        7, 1
    )  # the kernel's number, whatever became of the path


@pytest.mark.parametrize(
    ("offset", "words"),
    [(0, ""), (MiB, "offset 1 MiB"), (3 * MiB, "offset 3 MiB"), (4096, "offset 4096 bytes")],
)
def test_offset_words(offset: int, words: str) -> None:
    assert loopbacking.offset_words(offset) == words
