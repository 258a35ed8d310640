"""The physical ceiling of encryption on this machine, measured once per session.

Two facts bound what any disk encryption can reach here: the disk (the plain baseline) and the
CPU's AES-256-XTS speed. The user-space figure comes from OpenSSL through the ``cryptography``
package (what FUSE backends such as gocryptfs-openssl and VeraCrypt-like tools reach); the
kernel's ``xts(aes)`` driver (what dm-crypt and fscrypt use) is named from /proc/crypto, since
a generic-C driver (``xts(ecb(aes-generic))``) is far slower than an AES-NI one
(``xts-aes-aesni``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from .workloads import MiB

# Imported once with this module (not on first use): the cryptography extension module cannot
# be initialised twice in one interpreter, which re-importing after sys.modules is restored
# (pytester's in-process runs) would attempt.
try:
    import cryptography
    from cryptography.hazmat.backends.openssl import backend as openssl_backend
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
except ImportError:  # optional at run time: the ceiling is then "not measured"
    cryptography = None  # type: ignore[assignment]

CHUNK = 1 * MiB


@dataclass(frozen=True)
class CipherCeiling:
    mb_per_s: float | None  # AES-256-XTS encryption in user space, MB/s (10^6); None if unmeasured
    library: str  # "OpenSSL 3.0.x via cryptography 42.x", or why it was not measured
    kernel_driver: str  # highest-priority xts(aes) driver in /proc/crypto, or "none"

    def describe(self) -> str:
        speed = f"{self.mb_per_s:.0f} MB/s" if self.mb_per_s else "not measured"
        return f"AES-256-XTS in user space: {speed} ({self.library}); kernel xts(aes): {self.kernel_driver}"


def kernel_xts_driver(proc_crypto: Path = Path("/proc/crypto")) -> str:
    """Driver of the highest-priority ``xts(aes)`` entry in /proc/crypto, or ``none``."""
    try:
        text = proc_crypto.read_text()
    except OSError:
        return "none"
    best: tuple[int, str] | None = None
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if fields.get("name") == "xts(aes)" and "driver" in fields:
            priority = int(fields.get("priority", "0") or 0)
            if best is None or priority > best[0]:
                best = (priority, fields["driver"])
    return best[1] if best else "none"


def user_space_xts_mb_per_s(seconds: float = 0.3) -> tuple[float | None, str]:
    """Encrypt 1 MiB buffers with AES-256-XTS for about ``seconds``; (MB/s, library)."""
    if cryptography is None:
        return None, "not measured: the cryptography package is not installed"
    library = f"{openssl_backend.openssl_version_text()} via cryptography {cryptography.__version__}"
    key = os.urandom(64)  # XTS-AES-256: two 256-bit keys
    data = os.urandom(CHUNK)
    done = 0
    start = time.perf_counter()
    elapsed = 0.0
    sector = 0
    while elapsed < seconds:
        # a new tweak per chunk, as a disk sector number would give
        tweak = sector.to_bytes(16, "little")
        encryptor = Cipher(algorithms.AES(key), modes.XTS(tweak)).encryptor()
        encryptor.update(data)
        encryptor.finalize()
        done += CHUNK
        sector += 1
        elapsed = time.perf_counter() - start
    return done / elapsed / 1e6, library


def measure_ceiling(seconds: float = 0.3) -> CipherCeiling:
    try:
        mb_per_s, library = user_space_xts_mb_per_s(seconds)
    except Exception as exc:  # an OpenSSL without XTS, a FIPS policy ...: say so, go on
        mb_per_s, library = None, f"not measured: {exc}"
    return CipherCeiling(mb_per_s, library, kernel_xts_driver())
