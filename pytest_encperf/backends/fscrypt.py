"""fscrypt: ext4's native per-file encryption, driven through the kernel's ioctls.

No external tool: the key is added with FS_IOC_ADD_ENCRYPTION_KEY and a v2 policy
(AES-256-XTS contents, AES-256-CTS file names) is set with FS_IOC_SET_ENCRYPTION_POLICY.
The raw 64-byte key is random per volume and lives in this process's memory and the file
system's key ring only; it is removed before unmount (FS_IOC_REMOVE_ENCRYPTION_KEY), forgotten
at destroy, and never written anywhere.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import os
import re
import struct
from pathlib import Path
from typing import Any

from .. import footprints, host, mounting, redaction, resources, trust
from ..parsing import parse_choice
from ..resources import Resource
from ..targets import Target
from . import BackendBase, BackendSpec, Param, Volume

# ioctl numbers from <linux/fscrypt.h> (_IOWR/_IOR('f', nr, size))
FS_IOC_SET_ENCRYPTION_POLICY = 0x800C6613
FS_IOC_GET_ENCRYPTION_POLICY_EX = 0xC0096616
FS_IOC_ADD_ENCRYPTION_KEY = 0xC0506617
FS_IOC_REMOVE_ENCRYPTION_KEY = 0xC0406618
FS_IOC_GET_ENCRYPTION_KEY_STATUS = 0xC080661A
KEY_STATUS = {1: "absent", 2: "present", 3: "incompletely-removed"}

KEY_SPEC_TYPE_IDENTIFIER = 2
POLICY_V2 = 2
# Modes by the names users pass as params: contents / filenames
CONTENTS_MODES = {"aes-256-xts": 1, "adiantum": 9, "aes-128-cbc": 5, "sm4-xts": 7}
# the kernel cipher each contents mode runs on (fs/crypto/keysetup.c), for the efficiency ceiling
CONTENTS_CIPHERS = {
    "aes-256-xts": "kernel:xts(aes):512",
    "adiantum": "kernel:adiantum(xchacha12,aes):256",
    "aes-128-cbc": "kernel:essiv(cbc(aes),sha256):128",
    "sm4-xts": "kernel:xts(sm4):256",
}
FILENAMES_MODES = {"aes-256-cts": 4, "adiantum": 9, "aes-128-cts": 6, "sm4-cts": 8, "aes-256-hctr2": 10}
PAD_32 = 0x03  # FSCRYPT_POLICY_FLAGS_PAD_32, the default of the fscrypt tool
RAW_KEY_BYTES = 64


KEY_KIND = "fscrypt-key"  # a key in a file system's key ring: ident = identifier, detail = directory


def key_identifier(raw_key: bytes) -> bytes:
    """The identifier the kernel gives a v2 key: HKDF-SHA512 (zero salt) of the key with info
    "fscrypt\\0" + context 1 (HKDF_CONTEXT_KEY_IDENTIFIER), 16 bytes (fs/crypto/hkdf.c)."""
    prk = hmac.new(bytes(64), raw_key, hashlib.sha512).digest()
    return hmac.new(prk, b"fscrypt\x00\x01\x01", hashlib.sha512).digest()[:16]


def _key_spec(identifier: bytes = b"") -> bytes:
    return struct.pack("<II32s", KEY_SPEC_TYPE_IDENTIFIER, 0, identifier)


def add_key(directory: Path, raw_key: bytes) -> bytes:
    """Add a raw key to the file system holding ``directory``; returns its 16-byte identifier."""
    arg = bytearray(_key_spec() + struct.pack("<II32s", len(raw_key), 0, b"") + raw_key)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, FS_IOC_ADD_ENCRYPTION_KEY, arg, True)
        finally:
            os.close(fd)
    finally:
        arg[80:] = bytes(len(raw_key))  # no copy of the key around, nor in a traceback's locals
    return bytes(arg[8:24])


def remove_key(directory: Path, identifier: bytes) -> None:
    arg = bytearray(_key_spec(identifier) + bytes(24))
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, FS_IOC_REMOVE_ENCRYPTION_KEY, arg, True)
    except OSError as exc:
        if exc.errno != errno.ENOKEY:  # already gone
            raise
    finally:
        os.close(fd)


def key_status(directory: Path, identifier: bytes) -> str:
    """ "absent", "present" or "incompletely-removed" for a key on the file system of ``directory``."""
    arg = bytearray(_key_spec(identifier) + bytes(128 - 40))
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, FS_IOC_GET_ENCRYPTION_KEY_STATUS, arg, True)
    finally:
        os.close(fd)
    (status,) = struct.unpack_from("<I", arg, 64)
    return KEY_STATUS.get(status, f"unknown ({status})")


def set_policy(directory: Path, identifier: bytes, contents: int, filenames: int) -> None:
    policy = struct.pack("<BBBB4s16s", POLICY_V2, contents, filenames, PAD_32, b"", identifier)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, FS_IOC_SET_ENCRYPTION_POLICY, policy)
    finally:
        os.close(fd)


def policy_status(directory: Path) -> str:
    """ "encrypted", "unencrypted" (file system supports it) or "unsupported: <why>"."""
    arg = bytearray(struct.pack("<Q", 24) + bytes(24))
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        return f"unsupported: {exc.strerror}"
    try:
        fcntl.ioctl(fd, FS_IOC_GET_ENCRYPTION_POLICY_EX, arg, True)
        return "encrypted"
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return "unencrypted"
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTTY):
            return "unsupported: the file system has no encryption feature"
        return f"unsupported: {exc.strerror}"
    finally:
        os.close(fd)


def release_key(resource: Resource) -> str:
    """Release a "fscrypt-key": remove it from the file system holding ``detail`` (a directory
    target's host file system keeps it until unmounted; a container's goes with its unmount)."""
    directory = Path(resource.detail)
    if not directory.is_dir():
        return f"fscrypt key {resource.ident}: its file system is gone"
    if key_status(directory, bytes.fromhex(resource.ident)) == "absent":
        return f"fscrypt key {resource.ident}: not in {directory}'s key ring any more"
    remove_key(directory, bytes.fromhex(resource.ident))
    return f"removed fscrypt key {resource.ident} from {directory}"


def _check_key(resource: Resource, scope: trust.RunScope) -> str | None:
    if not re.fullmatch(r"[0-9a-f]{32}", resource.ident):
        return f"{resource.ident!r} is not a key identifier"
    return scope.unsafe(resource.detail)  # the ioctl goes through that directory


def _key_footprint(resource: Resource) -> footprints.Footprint:
    return (resource.detail,)  # the key is the directory's: it rests on that directory's file system


resources.register_kind(KEY_KIND, release_key, check=_check_key, footprint=_key_footprint)


class FscryptBackend(BackendBase):
    params = (
        Param("contents", parse_choice(tuple(CONTENTS_MODES)), "aes-256-xts", "contents cipher"),
        Param("filenames", parse_choice(tuple(FILENAMES_MODES)), "aes-256-cts", "file-name cipher"),
    )

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.contents: str = self.options["contents"]
        self.filenames: str = self.options["filenames"]

    def partition_refusal(self, target: Target) -> str | None:
        return "not implemented yet (it needs ext4 with the encrypt feature made on the partition)"

    def requirements(self, target: Target) -> list[str]:
        found = []
        if target.kind == "container":
            if not Path("/sys/fs/ext4/features/encryption").exists():
                feature = "/sys/fs/ext4/features/encryption"
                found.append(f"fscrypt: kernel's ext4 has no encryption support ({feature} missing)")
            found += self.ext4_requirements(target)
        elif target.directory.is_dir():
            status = policy_status(target.directory)
            if status.startswith("unsupported"):
                fstype = mounting.filesystem_type(target.directory)
                found.append(f"fscrypt: {target.directory} ({fstype}) {status.split(': ', 1)[1]}")
        return found

    def build(self, volume: Volume) -> None:
        # The volume's key: random, in memory only, reused by every mount of this volume.
        volume.state["raw_key"] = redaction.Secret(os.urandom(RAW_KEY_BYTES))
        volume.created.push("forget fscrypt key", lambda: volume.state.pop("raw_key", None))
        self.ext4_on_target(volume, features=["encrypt"])

    def open(self, volume: Volume) -> Path:
        root = self.mount_target(volume)
        # registered before the key goes in: a kill right after the ioctl must not leave it
        volume.mounted.add(Resource(KEY_KIND, key_identifier(volume.state["raw_key"]).hex(), str(root)))
        identifier = add_key(root, volume.state["raw_key"])
        volume.state["key_identifier"] = identifier.hex()
        if identifier != key_identifier(volume.state["raw_key"]):
            raise host.HostError(f"the kernel named the key {identifier.hex()}, not as registered")
        data_dir = root / self.data_dir_name
        if not data_dir.exists():  # a new directory gets the policy: its files are encrypted
            data_dir.mkdir()
            set_policy(data_dir, identifier, CONTENTS_MODES[self.contents], FILENAMES_MODES[self.filenames])
        return root

    def describe(self, volume: Volume) -> dict[str, Any]:
        return {
            "encryption": "fscrypt",
            "policy": "v2",
            "contents": self.contents,
            "cipher_ceiling": CONTENTS_CIPHERS[self.contents],
            "filenames": self.filenames,
            "target": volume.target.kind,
            **self.describe_target(volume),
        }
