"""ecryptfs: eCryptfs, the kernel's stacked file system that encrypts file by file.

A lower directory on the target's file system (the volume's directory, or ext4 on the
container's loop device) is mounted with ``mount -t ecryptfs`` at a mount point beside it.

The passphrase is random per volume and kept in memory. Its keys are made as ecryptfs-utils
makes them (``ecryptfs-add-passphrase --fnek``: 65536 rounds of SHA-512 over salt and
passphrase; the signature is the first 8 bytes of one more SHA-512, in hex), so the lower
directory opens with ecryptfs-utils and the same passphrase. Unlike that tool, which adds them
to the user keyring shared by every process of the user, they go to this process's own keyring
(``add_key`` on @p) and the mount is made by this process (``mount(2)``: the kernel looks the
signatures up in the mounting process's keyrings): no passphrase in argv, in a file or on
stdin, and a killed run's keys go with its process. The kernel's mount options are the ones
``mount.ecryptfs`` passes non-interactively (``ecryptfs_sig``, ``ecryptfs_fnek_sig``,
``ecryptfs_cipher``, ``ecryptfs_key_bytes``, ``ecryptfs_unlink_sigs``), with passthrough off
(no unencrypted lower file is ever shown) and ``ecryptfs_mount_auth_tok_only`` (only the
mount's own keys are used, never one the opening process happens to hold).

Each key is registered for cleanup the moment it exists (kind "ecryptfs-key": serial number
and signature); its release invalidates it after the unmount, also for a killed run (a mount
still holds its keys after the process that made them is gone).
"""

from __future__ import annotations

import ctypes
import errno
import gzip
import hashlib
import os
import platform
import re
import secrets
from pathlib import Path
from typing import Any

from .. import host, mounting, resources, trust
from ..host import HostError
from ..parsing import parse_bool, parse_choice, parse_int
from ..redaction import Secret
from ..resources import Resource
from ..targets import Target
from . import BackendBase, BackendSpec, Param, Volume

# ecryptfs-utils (src/include/ecryptfs.h, libecryptfs/key_management.c)
SALT = bytes.fromhex("0011223344556677")  # ECRYPTFS_DEFAULT_SALT_HEX, hex-decoded
FNEK_SALT = b"99887766"  # ECRYPTFS_DEFAULT_SALT_FNEK_HEX: the tool uses its first 8 characters as is
HASH_ITERATIONS = 65536
MAX_KEY_BYTES = 64
AUTH_TOK_VERSION = 0x0004  # major 0, minor 4 (the kernel checks the major)
PGP_DIGEST_ALGO_SHA512 = 10
SESSION_KEY_ENCRYPTION_KEY_SET = 0x02
AUTH_TOK_BYTES = 740  # sizeof(struct ecryptfs_auth_tok), as ecryptfs-add-passphrase adds it

# the kernel's eCryptfs ciphers (fs/ecryptfs/crypto.c) -> key sizes in bytes it accepts
CIPHERS: dict[str, tuple[int, ...]] = {
    "aes": (16, 24, 32),
    "twofish": (16, 24, 32),
    "cast6": (16, 24, 32),
    "blowfish": (16, 24, 32, 40, 48, 56),
    "des3_ede": (24,),
    "cast5": (16,),
}

KEY_KIND = "ecryptfs-key"  # a key of ours: ident = serial number, detail = signature (description)

# keyutils (linux/keyctl.h)
KEY_SPEC_PROCESS_KEYRING = -2
KEYCTL_SETPERM = 5
KEYCTL_DESCRIBE = 6
KEYCTL_INVALIDATE = 21
# possessor: everything; same user: view and search, so that the cleanup of a killed run
# (another process, which does not possess it) can find and invalidate it; never read
KEY_PERM = 0x3F000000 | 0x00010000 | 0x00080000
SYSCALLS = {"x86_64": (248, 250), "aarch64": (217, 219), "riscv64": (217, 219)}  # add_key, keyctl


# ---------------------------------------------------------------- keys


def passphrase_key(passphrase: bytes, salt: bytes) -> tuple[Secret, str]:
    """The key (FEKEK) and signature ecryptfs-utils derives from ``passphrase`` and ``salt``."""
    digest = hashlib.sha512(salt + passphrase).digest()
    for _ in range(HASH_ITERATIONS - 1):
        digest = hashlib.sha512(digest).digest()
    return Secret(digest[:MAX_KEY_BYTES]), hashlib.sha512(digest).digest()[:8].hex()


def auth_token(passphrase: bytes, salt: bytes) -> tuple[Secret, str]:
    """struct ecryptfs_auth_tok for a passphrase (the payload of its "user" key) and its
    signature, byte for byte as ecryptfs-utils' generate_payload() makes it."""
    key, sig = passphrase_key(passphrase, salt)
    token = bytearray(AUTH_TOK_BYTES)
    token[0:2] = AUTH_TOK_VERSION.to_bytes(2, "little")  # token_type 0: ECRYPTFS_PASSWORD
    password = 8 + 588 + 32  # after version, type, flags, session_key and reserved
    token[password + 4 : password + 8] = PGP_DIGEST_ALGO_SHA512.to_bytes(4, "little")
    token[password + 12 : password + 16] = MAX_KEY_BYTES.to_bytes(4, "little")
    token[password + 16 : password + 20] = SESSION_KEY_ENCRYPTION_KEY_SET.to_bytes(4, "little")
    token[password + 20 : password + 84] = key
    token[password + 84 : password + 100] = sig.encode()  # then a NUL
    token[password + 101 : password + 109] = salt
    payload = Secret(token)
    token[:] = bytes(AUTH_TOK_BYTES)  # no second copy of the key around
    return payload, sig


def _syscall_numbers() -> tuple[int, int] | None:
    return SYSCALLS.get(platform.machine())


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _keyctl(operation: int, *args: int) -> int:
    numbers = _syscall_numbers()
    if numbers is None:
        raise OSError(errno.ENOSYS, f"keyctl: no syscall number for {platform.machine()}")
    c_args = [ctypes.c_ulong(a & 0xFFFFFFFFFFFFFFFF) for a in args]
    return _check(_libc().syscall(ctypes.c_long(numbers[1]), ctypes.c_long(operation), *c_args), "keyctl")


def add_process_key(description: str, payload: bytes) -> int:
    """Add a "user" key to this process's keyring; returns its serial number."""
    numbers = _syscall_numbers()
    if numbers is None:
        raise OSError(errno.ENOSYS, f"add_key: no syscall number for {platform.machine()}")
    buffer = ctypes.create_string_buffer(payload, len(payload))
    try:
        serial = _libc().syscall(
            ctypes.c_long(numbers[0]),
            ctypes.c_char_p(b"user"),
            ctypes.c_char_p(description.encode()),
            buffer,
            ctypes.c_size_t(len(payload)),
            ctypes.c_long(KEY_SPEC_PROCESS_KEYRING),
        )
        return _check(serial, "add_key")
    finally:
        ctypes.memset(buffer, 0, len(payload))  # no copy of the key left in this buffer


def describe_key(serial: int) -> str | None:
    """ "type;uid;gid;perm;description" of key ``serial``, None if it is gone."""
    buffer = ctypes.create_string_buffer(512)
    try:
        _keyctl(KEYCTL_DESCRIBE, serial, ctypes.addressof(buffer), len(buffer))
    except OSError as exc:
        if exc.errno in (errno.ENOKEY, errno.EKEYREVOKED, errno.EKEYEXPIRED):
            return None
        raise
    return buffer.value.decode(errors="replace")


def keys_in_proc(signatures: set[str]) -> list[str]:
    """Lines of /proc/keys (the keys this process may view) naming one of ``signatures``."""
    try:
        lines = Path("/proc/keys").read_text().splitlines()
    except OSError:
        return []
    # serial flags usage timeout perm uid gid type description: summary
    return [line for line in lines if len(line.split()) > 8 and line.split()[8].rstrip(":") in signatures]


def release_key(resource: Resource) -> str:
    """Release an "ecryptfs-key": invalidate it, if the serial still names our key of that
    signature (unmounted first: a mount keeps its keys alive until it is gone)."""
    serial, sig = int(resource.ident), resource.detail
    found = describe_key(serial)
    if found is None:
        return f"ecryptfs key {sig} (serial {serial}): gone already"
    kind, uid, *_, description = found.split(";")
    if (kind, uid, description) != ("user", str(os.geteuid()), sig):
        return f"ecryptfs key serial {serial}: now names another key ({kind} {description!r}): left alone"
    try:
        _keyctl(KEYCTL_INVALIDATE, serial)
    except OSError as exc:
        if exc.errno in (errno.ENOKEY, errno.EKEYREVOKED, errno.EKEYEXPIRED):
            return f"ecryptfs key {sig} (serial {serial}): gone already"
        raise
    return f"invalidated ecryptfs key {sig} (serial {serial})"


def _check_key(resource: Resource, scope: trust.RunScope) -> str | None:
    if not resource.ident.isdigit():
        return f"{resource.ident!r} is not a key serial number"
    if not re.fullmatch(r"[0-9a-f]{16}", resource.detail):
        return f"{resource.detail!r} is not an eCryptfs key signature"
    return None  # release_key acts only on a "user" key of ours with that random signature


resources.register_kind(KEY_KIND, release_key, check=_check_key)


# ---------------------------------------------------------------- kernel


def mount_options(
    cipher: str, key_bytes: int, sig: str, fnek_sig: str | None, *, auth_tok_only: bool = True
) -> str:
    """The kernel's mount options, as ``mount.ecryptfs`` passes them, passthrough off."""
    options = [f"ecryptfs_sig={sig}"]
    if fnek_sig:
        options.append(f"ecryptfs_fnek_sig={fnek_sig}")
    options += [f"ecryptfs_cipher={cipher}", f"ecryptfs_key_bytes={key_bytes}", "ecryptfs_unlink_sigs"]
    if auth_tok_only:
        options.append("ecryptfs_mount_auth_tok_only")
    return ",".join(options)


def mount_ecryptfs(lower: Path, mountpoint: Path, options: str) -> None:
    """mount(2) from this process: the kernel finds the keys in this process's keyring."""
    result = _libc().mount(
        os.fsencode(lower), os.fsencode(mountpoint), b"ecryptfs", ctypes.c_ulong(0), options.encode()
    )
    if result != 0:
        code = ctypes.get_errno()
        raise HostError(f"mount -t ecryptfs {lower} {mountpoint} -o {options}: {os.strerror(code)}")


def kernel_config(option: str, config: Path = Path("/proc/config.gz")) -> str | None:
    """``y``, ``m`` or ``is not set`` for a kernel option from /proc/config.gz; None if unknown."""
    try:
        text = gzip.decompress(config.read_bytes()).decode(errors="replace")
    except OSError:
        return None
    match = re.search(rf"^(?:{option}=(\S+)|# {option} (is not set))$", text, re.M)
    return (match.group(1) or match.group(2)) if match else None


def kernel_problems(
    filesystems: Path = Path("/proc/filesystems"), config: Path = Path("/proc/config.gz")
) -> list[str]:
    """Why this kernel cannot mount eCryptfs (empty when it can, or can load the module: a
    mount loads it by itself)."""
    try:
        listed = filesystems.read_text().split()
    except OSError:
        listed = []
    if "ecryptfs" in listed:
        return []
    release = platform.release()
    where = f"kernel {release} has no eCryptfs (ecryptfs not in {filesystems}"
    if kernel_config("CONFIG_ECRYPT_FS", config) == "is not set":
        return [f"ecryptfs: {where}, and {config} says CONFIG_ECRYPT_FS is not set)"]
    try:
        host.run(["modprobe", "-n", "ecryptfs"])  # -n: only check that it could be loaded
        return []
    except HostError as exc:
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else "failed"
        return [f"ecryptfs: {where}, and `modprobe ecryptfs` cannot load it: {detail})"]


def kernel_version() -> str:
    """The kernel's eCryptfs version number (/sys/fs/ecryptfs/version), "unknown" if unread."""
    try:
        return Path("/sys/fs/ecryptfs/version").read_text().strip()
    except OSError:
        return "unknown"


# ---------------------------------------------------------------- the backend


def _refuse_passthrough(text: str) -> bool:
    """0 (1 is refused)"""
    if parse_bool(text):
        raise ValueError(
            "passthrough=1 is refused: it shows unencrypted lower files through the mount, and a "
            "benchmark would measure files that are not encrypted"
        )
    return False


LOWER_DIR, MOUNT_DIR = "lower", "plain"  # in the volume's root: the encrypted files, the mount point


class EcryptfsBackend(BackendBase):
    # eCryptfs reads its lower files through the lower file system's page cache: dropping the
    # test file's (decrypted) pages leaves the ciphertext cached below, as for a FUSE store
    store_below = True
    params = (
        Param("cipher", parse_choice(tuple(CIPHERS)), "aes", "file contents (and names) cipher, CBC mode"),
        Param(
            "key-bytes",
            parse_int(1, MAX_KEY_BYTES),
            None,
            "key size in bytes: aes, twofish, cast6 16/24/32, blowfish 16-56, des3_ede 24, cast5 16 "
            "(default: the cipher's smallest, 16 for aes as mount.ecryptfs)",
        ),
        Param(
            "filename-encryption",
            parse_bool,
            True,
            "1 = encrypt file names too (ecryptfs_fnek_sig), 0 = keep them",
        ),
        Param(
            "passthrough",
            _refuse_passthrough,
            False,
            "0 only: unencrypted lower files are never shown through the mount",
        ),
    )

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.cipher: str = self.options["cipher"]
        sizes = CIPHERS[self.cipher]
        self.key_bytes: int = self.options["key-bytes"] or sizes[0]
        if self.key_bytes not in sizes:
            accepted = "/".join(map(str, sizes))
            raise ValueError(
                f"ecryptfs: key-bytes for {self.cipher} must be one of {accepted}, not {self.key_bytes}"
            )
        self.filename_encryption: bool = self.options["filename-encryption"]

    def partition_refusal(self, target: Target) -> str | None:
        return (
            f"its lower directory would be under --encperf-dir ({target.directory}), not on "
            f"{target.device} where the plain baseline runs: the table would compare two different disks"
        )

    def requirements(self, target: Target) -> list[str]:
        found = []
        if not host.is_root():
            found.append("ecryptfs: needs root (mount)")
        found += kernel_problems()
        if not Path("/proc/keys").exists():
            found.append("ecryptfs: kernel has no key retention service (/proc/keys missing)")
        if _syscall_numbers() is None:
            found.append(f"ecryptfs: no add_key/keyctl syscall numbers known for {platform.machine()}")
        if target.kind == "container":
            found += self.ext4_requirements(target)
        return found

    # -- layout
    def lower(self, volume: Volume) -> Path:
        return Path(volume.state["root"]) / LOWER_DIR

    def mountpoint(self, volume: Volume) -> Path:
        return Path(volume.state["root"]) / MOUNT_DIR

    def build(self, volume: Volume) -> None:
        # Random per volume; kept in memory for remounts, forgotten at destroy.
        volume.state["passphrase"] = Secret(secrets.token_urlsafe(24).encode())
        volume.created.push("forget passphrase", lambda: volume.state.pop("passphrase", None))
        self.stack_root(volume, LOWER_DIR, MOUNT_DIR)

    def add_keys(self, volume: Volume, passphrase: bytes) -> tuple[str, str | None]:
        """Add the passphrase's key (and file name key) to this process's keyring, each
        registered on ``volume.mounted`` the moment it exists; returns their signatures."""
        salts = [SALT, FNEK_SALT] if self.filename_encryption else [SALT]
        signatures: list[str] = []
        for salt in salts:
            token, sig = auth_token(passphrase, salt)
            if sig in signatures:
                continue
            serial = add_process_key(sig, token)
            volume.mounted.add(Resource(KEY_KIND, str(serial), sig), f"invalidate ecryptfs key {sig}")
            _keyctl(KEYCTL_SETPERM, serial, KEY_PERM)
            signatures.append(sig)
        volume.state["signatures"] = signatures
        return signatures[0], (signatures[-1] if self.filename_encryption else None)

    def mount_with(self, volume: Volume, passphrase: bytes) -> Path:
        """Mount the lower directory with the keys of ``passphrase`` (the volume's, or in a
        test a wrong one); returns the mount point."""
        sig, fnek_sig = self.add_keys(volume, passphrase)
        mountpoint = self.mountpoint(volume)
        options = mount_options(self.cipher, self.key_bytes, sig, fnek_sig)
        volume.mounted.mount(mountpoint)  # before the call: a kill right after must not leave it
        mount_ecryptfs(self.lower(volume), mountpoint, options)
        if not mounting.is_mounted(mountpoint):
            raise HostError(f"{mountpoint} is not mounted after mount -t ecryptfs")
        return mountpoint

    def open(self, volume: Volume) -> Path:
        return self.mount_with(volume, volume.state["passphrase"])

    def describe(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {
            "encryption": "ecryptfs",
            "cipher": f"{self.cipher}-cbc",
            "key_bytes": self.key_bytes,
            # file contents go through the kernel's cbc(<cipher>) in 4 KiB extents
            "cipher_ceiling": f"kernel:cbc({self.cipher}):{self.key_bytes * 8}",
            "filename_encryption": self.filename_encryption,
            "passthrough": False,
            "ecryptfs_version": kernel_version(),
            "target": volume.target.kind,
        }
        info.update(self.describe_target(volume, under=" (under the lower directory)"))
        return info
