"""A loop device held by one open descriptor: what it backs (LOOP_GET_STATUS64) and detaching it
(LOOP_CLR_FD), both on that descriptor.

A name (``/dev/loop3``) can change meaning at any moment: once the device is free, any other
program's ``losetup --find`` may take it. An open descriptor cannot: while it is open the
kernel neither frees the device (a detach only sets autoclear, done at the last close) nor lets
anyone attach another file to it (EBUSY). So a detach opens the device once, checks on the
descriptor that it still backs the expected file, and clears it on the same descriptor.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path

# linux/loop.h
LOOP_CLR_FD = 0x4C01
LOOP_GET_STATUS64 = 0x4C05
LO_NAME_SIZE = 64
LO_KEY_SIZE = 32
LO_FLAGS_AUTOCLEAR = 4
# struct loop_info64: lo_device, lo_inode, lo_rdevice, lo_offset, lo_sizelimit (__u64);
# lo_number, lo_encrypt_type, lo_encrypt_key_size, lo_flags (__u32); lo_file_name,
# lo_crypt_name (64 bytes), lo_encrypt_key (32 bytes); lo_init[2] (__u64). 232 bytes, no padding.
LOOP_INFO64 = struct.Struct(f"=5Q4I{LO_NAME_SIZE}s{LO_NAME_SIZE}s{LO_KEY_SIZE}s2Q")
DELETED = " (deleted)"  # what the kernel appends to a backing file removed while attached
POLL = 0.05  # seconds between looks at a device something else still holds


class StillHeld(TimeoutError):
    """Another program kept the device open longer than we wait (autoclear is set on it)."""


def decode_device(encoded: int) -> tuple[int, int]:
    """(major, minor) of a device number as the kernel's ``huge_encode_dev`` writes it."""
    return (encoded & 0xFFF00) >> 8, (encoded & 0xFF) | ((encoded >> 12) & 0xFFF00)


@dataclass(frozen=True)
class LoopStatus:
    """What LOOP_GET_STATUS64 says of a bound loop device."""

    device: tuple[int, int]  # (major, minor) of the file system holding the backing file
    inode: int  # the backing file's inode number
    offset: int
    size_limit: int
    number: int  # N of /dev/loopN
    flags: int
    file_name: str  # the name it was attached with, cut to 63 bytes by the kernel

    @classmethod
    def unpack(cls, buffer: bytes) -> LoopStatus:
        """Read a ``struct loop_info64``; ValueError unless it is one (232 bytes)."""
        if len(buffer) != LOOP_INFO64.size:
            raise ValueError(f"struct loop_info64 is {LOOP_INFO64.size} bytes, not {len(buffer)}")
        device, inode, _, offset, limit, number, _, _, flags, name, *_ = LOOP_INFO64.unpack(buffer)
        name = os.fsdecode(name.split(b"\0")[0])
        return cls(decode_device(device), inode, offset, limit, number, flags, name)

    @property
    def autoclear(self) -> bool:
        return bool(self.flags & LO_FLAGS_AUTOCLEAR)

    def backs(self, info: os.stat_result) -> bool:
        """Is the file ``info`` (an lstat result) the one this device backs?"""
        return self.device == (os.major(info.st_dev), os.minor(info.st_dev)) and self.inode == info.st_ino


def open_device(device: Path) -> int:
    """A descriptor of the loop device ``device`` (close it); OSError if it is no block device."""
    fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    if not stat.S_ISBLK(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.ENOTBLK, f"{device} is not a block device")
    return fd


def status(fd: int) -> LoopStatus | None:
    """What the loop device open at ``fd`` backs; None when it is not bound (or is being
    detached). OSError (ENOTTY, EINVAL) for a device that is no loop device."""
    buffer = bytearray(LOOP_INFO64.size)
    try:
        fcntl.ioctl(fd, LOOP_GET_STATUS64, buffer)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return None
        if exc.errno == errno.ENOTCONN:  # bound to a file on a FUSE mount whose daemon died
            return UNREACHABLE
        raise
    return LoopStatus.unpack(bytes(buffer))


# A bound device whose backing file the kernel cannot stat (LOOP_GET_STATUS64 fails with ENOTCONN
# when it lies on a FUSE mount whose daemon died, as a killed run's do): no device or inode
# number to compare, so backs() compares the kernel's name of the file only, as for a removed one.
UNREACHABLE = LoopStatus((-1, -1), -1, 0, 0, -1, 0, "")


def clear(fd: int) -> None:
    """LOOP_CLR_FD on the device open at ``fd``: detached at once when this descriptor is its
    only opener (at its close), else autoclear is set and the last close detaches it."""
    try:
        fcntl.ioctl(fd, LOOP_CLR_FD)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: being detached already
            raise


def sysfs_backing_file(fd: int) -> str | None:
    """The kernel's full name of the backing file (sysfs) of the loop device open at ``fd``,
    looked up by the descriptor's device number (the descriptor holds the device: the name
    cannot be another binding's); None when there is none."""
    rdev = os.fstat(fd).st_rdev
    sysfs = Path(f"/sys/dev/block/{os.major(rdev)}:{os.minor(rdev)}/loop/backing_file")
    try:
        return sysfs.read_text().rstrip("\n")
    except OSError:
        return None


def backing_file_name(device: Path) -> str | None:
    """The kernel's name of the backing file of ``device`` by its name (its real path, with
    " (deleted)" when it was removed while attached), None when it is not attached. For looking
    only: the answer may be about another binding by the time it is used."""
    try:
        return (Path("/sys/block") / device.name / "loop" / "backing_file").read_text().rstrip("\n")
    except OSError:
        return None


def backs(bound: LoopStatus, named: str | None, backing_file: Path) -> bool:
    """Does a bound device (its status and the kernel's name of its file) back ``backing_file``:
    that name exactly and, while the file exists, its device and inode number?"""
    if named is not None and named.removesuffix(DELETED) != str(backing_file):
        return False
    if named is not None and named.endswith(DELETED):
        return True  # removed while attached: its name is all there is left to compare
    try:
        return bound.backs(os.lstat(backing_file))
    except FileNotFoundError:
        return False
    except OSError:
        # a file the kernel names exactly that cannot be looked at (ENOTCONN: on a FUSE export
        # whose daemon died): the name is all there is to compare, as for a removed file
        return named is not None


def detach(device: Path, backing_file: Path | None, *, timeout: float) -> bool:
    """Detach ``device`` if it still backs ``backing_file`` (any file when None) and wait until it
    is free; False when there was nothing to do. OSError, or StillHeld after ``timeout`` s.

    The device is opened once; everything after acts on that descriptor. Clearing a device that
    something else holds open too (udev's probe after an unmount) only sets autoclear; the
    descriptor keeps it from being freed and taken by anyone meanwhile, so it is cleared again
    until this descriptor is its only holder, and closing it then detaches it.
    """
    if backing_file_name(device) is None:
        return False
    try:
        fd = open_device(device)
    except FileNotFoundError:
        return False
    try:
        bound = status(fd)
        if bound is None:
            return False
        named = sysfs_backing_file(fd)
        if backing_file is not None and not backs(bound, named, backing_file):
            return False  # someone else's since: never touched
        deadline = time.monotonic() + timeout
        while True:
            clear(fd)
            if status(fd) is None:
                break  # being detached, at the close of this descriptor, its last holder
            if time.monotonic() > deadline:
                raise StillHeld(
                    f"{device} still held open by another program after {timeout:g} s "
                    "(autoclear is set: it is detached when that closes it)"
                )
            time.sleep(POLL)
    finally:
        os.close(fd)
    for _ in range(int(timeout / POLL)):  # the close detaches it: wait for that, only looking
        if backing_file_name(device) != named:
            break
        time.sleep(POLL)
    return True
