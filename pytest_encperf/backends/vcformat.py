"""VeraCrypt's volume format, written and read without VeraCrypt (normal, non-system volumes).

From VeraCrypt's documentation ("VeraCrypt Volume Format Specification"):

    offset      size  field (big-endian integers)                        encrypted
    0           64    salt                                                no
    64          4     "VERA"                                              yes, from here
    68          2     header format version (5)
    70          2     minimum program version to open (0x010B)
    72          4     CRC-32 of the decrypted bytes 256..511 (master keys)
    76          16    reserved (0)
    92          8     hidden volume size (0: not a hidden volume)
    100         8     volume (data area) size
    108         8     byte offset of the master key scope (= data area start)
    116         8     size of the encrypted area
    124         4     flags (0 for non-system volumes)
    128         4     sector size (512)
    132         120   reserved (0)
    252         4     CRC-32 of the decrypted bytes 64..251
    256         256   master keys (primary keys, then XTS secondary keys), random padding

The 448 bytes from offset 64 are encrypted with the header key in XTS mode (data unit 0);
the header key is PBKDF2-HMAC(password, salt) with VeraCrypt's iteration count: for non-system
volumes with SHA-512 or SHA-256, 500000 without a PIM, else 15000 + PIM x 1000. Layout: header
at 0, hidden-volume header area at 64 KiB (random here), data from 128 KiB, and the backup
headers (same fields, own salt) in the last 128 KiB. Data sectors are XTS-encrypted with the
master key, data unit = byte offset / 512 from the start of the volume.

Only AES is written here (what the ``cryptography`` package offers in XTS mode); cascades and
other ciphers need the veracrypt binary. A low PIM makes benchmark volumes quick to open and is
NOT fit for real secrets.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from dataclasses import dataclass

SALT_BYTES = 64
HEADER_BYTES = 512
HEADER_AREA = 64 * 1024  # one header plus padding; the hidden volume's header area follows
DATA_OFFSET = 2 * HEADER_AREA
BACKUP_AREA = 2 * HEADER_AREA  # at the end: backup header, backup hidden-volume header area
SECTOR = 512
MAGIC = b"VERA"
VERSION = 5
MIN_PROGRAM_VERSION = 0x010B
HASHES = {"SHA-512": "sha512", "SHA-256": "sha256"}
KEY_BYTES = 64  # AES-256-XTS: primary and secondary key
_FIELDS = struct.Struct(">4sHHI16sQQQQII120s")  # bytes 64..251


class FormatError(ValueError):
    """Not a VeraCrypt header (wrong password, PIM, hash or format)."""


def iterations(hash_name: str, pim: int | None) -> int:
    """VeraCrypt's PBKDF2 iteration count for a non-system volume."""
    if hash_name not in HASHES:
        raise ValueError(f"VeraCrypt hash must be one of {', '.join(HASHES)}, not {hash_name!r}")
    if pim is None or pim == 0:
        return 500_000
    if pim < 0:
        raise ValueError("PIM must be positive")
    return 15_000 + pim * 1000


def header_key(password: bytes, salt: bytes, hash_name: str, pim: int | None) -> bytes:
    return hashlib.pbkdf2_hmac(HASHES[hash_name], password, salt, iterations(hash_name, pim), KEY_BYTES)


def _xts(key: bytes, data: bytes, *, encrypt: bool, data_unit: int = 0) -> bytes:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    cipher = Cipher(algorithms.AES(key), modes.XTS(data_unit.to_bytes(16, "little")))
    worker = cipher.encryptor() if encrypt else cipher.decryptor()
    return worker.update(data) + worker.finalize()


@dataclass(frozen=True)
class Header:
    volume_size: int  # bytes of the data area
    master_keys: bytes  # 64 bytes: AES-256-XTS primary then secondary key
    data_offset: int = DATA_OFFSET
    hidden_volume_size: int = 0
    sector_size: int = SECTOR
    version: int = VERSION
    flags: int = 0

    def plaintext(self) -> bytes:
        """Bytes 64..511 before encryption."""
        keys_area = self.master_keys + os.urandom(256 - len(self.master_keys))
        fields = _FIELDS.pack(
            MAGIC, self.version, MIN_PROGRAM_VERSION, zlib.crc32(keys_area), bytes(16),
            self.hidden_volume_size, self.volume_size, self.data_offset, self.volume_size,
            self.flags, self.sector_size, bytes(120),
        )  # fmt: skip
        return fields + struct.pack(">I", zlib.crc32(fields)) + keys_area

    def encrypt(self, password: bytes, hash_name: str, pim: int | None, salt: bytes | None = None) -> bytes:
        """The 512-byte header as stored on disk."""
        salt = salt or os.urandom(SALT_BYTES)
        key = header_key(password, salt, hash_name, pim)
        return salt + _xts(key, self.plaintext(), encrypt=True)


def decrypt_header(raw: bytes, password: bytes, hash_name: str, pim: int | None) -> Header:
    """Parse an on-disk header; FormatError when the password, PIM or hash does not fit."""
    if len(raw) < HEADER_BYTES:
        raise FormatError(f"a header has {HEADER_BYTES} bytes, got {len(raw)}")
    key = header_key(password, raw[:SALT_BYTES], hash_name, pim)
    plain = _xts(key, raw[SALT_BYTES:HEADER_BYTES], encrypt=False)
    fields, (fields_crc,), keys_area = plain[:188], struct.unpack(">I", plain[188:192]), plain[192:]
    (magic, version, _, keys_crc, _, hidden, size, offset, _, flags, sector, _) = _FIELDS.unpack(fields)
    if magic != MAGIC:
        raise FormatError("no VERA magic after decryption (wrong password, PIM, hash or not VeraCrypt)")
    if zlib.crc32(fields) != fields_crc:
        raise FormatError("header fields CRC-32 mismatch")
    if zlib.crc32(keys_area) != keys_crc:
        raise FormatError("master key area CRC-32 mismatch")
    return Header(size, keys_area[:KEY_BYTES], offset, hidden, sector, version, flags)


def volume_bytes(total_size: int) -> int:
    """Data area size of a volume file of ``total_size`` bytes."""
    data = total_size - DATA_OFFSET - BACKUP_AREA
    if data < SECTOR * 16:
        raise ValueError(f"a VeraCrypt volume needs more than {DATA_OFFSET + BACKUP_AREA} bytes")
    return data // SECTOR * SECTOR


def write_volume(fd: int, total_size: int, password: bytes, hash_name: str, pim: int | None) -> Header:
    """Write headers (and random header areas) to an open file or device of ``total_size`` bytes.

    The data area is left as it is: the file system written through dm-crypt fills it.
    """
    header = Header(volume_bytes(total_size), os.urandom(KEY_BYTES))
    primary = header.encrypt(password, hash_name, pim)
    backup = header.encrypt(password, hash_name, pim)  # own salt, same keys
    os.pwrite(fd, primary + os.urandom(2 * HEADER_AREA - HEADER_BYTES), 0)
    os.pwrite(fd, backup + os.urandom(BACKUP_AREA - HEADER_BYTES), total_size - BACKUP_AREA)
    os.fsync(fd)
    return header
