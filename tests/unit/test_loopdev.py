"""struct loop_info64 as LOOP_GET_STATUS64 fills it (linux/loop.h), and the backing-file check."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pytest_encperf import loopdev
from pytest_encperf.loopdev import LOOP_INFO64, LoopStatus


def huge_encode_dev(major: int, minor: int) -> int:
    """The kernel's encoding of a device number in lo_device (new_encode_dev)."""
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)


def loop_info64(
    device: int, inode: int, *, flags: int = 0, name: bytes = b"/var/tmp/x/container.img", number: int = 3
) -> bytes:
    return LOOP_INFO64.pack(
        device, inode, 0, 4096, 0, number, 0, 0, flags, name[:63], b"", b"\xaa" * 32, 0, 0
    )


def test_the_struct_is_linux_s_232_bytes() -> None:
    assert LOOP_INFO64.size == 232
    assert (loopdev.LOOP_GET_STATUS64, loopdev.LOOP_CLR_FD, loopdev.LO_FLAGS_AUTOCLEAR) == (0x4C05, 0x4C01, 4)


def test_status_fields_are_read_from_their_offsets() -> None:
    status = LoopStatus.unpack(loop_info64(huge_encode_dev(259, 0x12345), 987654321, flags=4 | 8, number=7))
    assert status.device == (259, 0x12345)
    assert (status.inode, status.offset, status.size_limit, status.number) == (987654321, 4096, 0, 7)
    assert status.autoclear and status.file_name == "/var/tmp/x/container.img"


def test_the_kernel_s_name_is_cut_to_63_bytes() -> None:
    long = "/var/tmp/" + "é" * 40 + "/container.img"
    status = LoopStatus.unpack(loop_info64(1, 2, name=long.encode()))
    assert os.fsencode(status.file_name) == long.encode()[:63]
    assert not status.autoclear


def test_a_buffer_of_another_size_is_no_loop_info64() -> None:
    with pytest.raises(ValueError, match="232 bytes, not 231"):
        LoopStatus.unpack(bytes(231))


@pytest.mark.parametrize(("major", "minor"), [(8, 1), (259, 3), (0, 45), (4095, 0xFFFFF), (253, 256)])
def test_device_numbers_decode_as_stat_reports_them(major: int, minor: int) -> None:
    assert loopdev.decode_device(huge_encode_dev(major, minor)) == (major, minor)


def test_a_device_backs_the_file_of_its_device_and_inode_and_name(tmp_path: Path) -> None:
    image = tmp_path / "container.img"
    image.write_bytes(b"x")
    info = os.lstat(image)
    same = LoopStatus.unpack(
        loop_info64(huge_encode_dev(os.major(info.st_dev), os.minor(info.st_dev)), info.st_ino)
    )
    other = LoopStatus.unpack(loop_info64(huge_encode_dev(os.major(info.st_dev), os.minor(info.st_dev)), 1))
    assert loopdev.backs(same, str(image), image)
    assert not loopdev.backs(other, str(image), image), "another file of the same name (made again)"
    assert not loopdev.backs(same, str(tmp_path / "other.img"), image), "the kernel names another file"
    assert loopdev.backs(other, f"{image} (deleted)", image), (
        "removed while attached: the name is all there is"
    )
    image.unlink()
    assert not loopdev.backs(same, str(image), image), "no file to compare: never assumed"


def test_a_file_that_cannot_be_looked_at_is_compared_by_the_kernel_s_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FUSE export whose daemon died answers ENOTCONN: its device is still the run's if the
    kernel names that file exactly."""

    def not_connected(path: object) -> os.stat_result:
        raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN))

    monkeypatch.setattr(loopdev.os, "lstat", not_connected)
    status = LoopStatus.unpack(loop_info64(1, 2))
    export = tmp_path / "export.raw"
    assert loopdev.backs(status, str(export), export)
    assert not loopdev.backs(status, str(tmp_path / "other.raw"), export)
    assert not loopdev.backs(status, None, export), "neither the name nor the file to compare"
