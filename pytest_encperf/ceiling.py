"""The physical ceiling of encryption on this machine: the speed of each backend's own cipher.

Two facts bound what a backend can reach here: the disk (its plain baseline) and the speed of
the cipher it encrypts with, in the implementation it uses, on this CPU. A backend names that
cipher in its description (``cipher_ceiling``), and only such a cipher gets a ceiling:

- ``kernel:<crypto API name>:<key bits>`` (dm-crypt, fscrypt; e.g. ``kernel:xts(aes):512`` is
  AES-256-XTS) is measured through the kernel's AF_ALG socket interface, on the driver the
  kernel picks for that name: the one dm-crypt and fscrypt get (a generic-C
  ``xts(ecb(aes-generic))`` is far slower than an AES-NI ``xts-aes-aesni``);
- ``gocryptfs:<implementation>`` (``AES-GCM-256``, ``AES-SIV-512``) comes from ``gocryptfs
  -speed``, gocryptfs's own benchmark, for the implementation it selects.

For the ladder (``--encperf-ladder``) each cipher also has a counterpart in the other place, when
one exists: ``user:<AES-bits-mode>`` (``user:AES-256-XTS``, OpenSSL through ``cryptography``, in
this process) for a kernel cipher, and ``kernel-aead:gcm(aes):<key bits>`` (AF_ALG's AEAD
interface) for gocryptfs's AES-GCM (see ``counterpart``).

A cipher that cannot be measured here (a kernel without AF_ALG, another user-space library)
has no ceiling, and its backend's efficiency is left empty rather than computed against the
speed of some other cipher or implementation.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import children

CHUNK = 64 * 1024  # one AF_ALG request (well under the socket's send buffer)
USER_CHUNK = 1024 * 1024  # one user-space encryption call (its per-call cost is then negligible)
GCM_TAG = 16


@dataclass(frozen=True)
class Ceiling:
    cipher: str  # as backends name it: "kernel:xts(aes):512", "gocryptfs:AES-GCM-256"
    mb_per_s: float | None  # encryption throughput, MB/s (10^6); None when not measured
    how: str  # the implementation measured ("kernel driver xts-aes-aesni via AF_ALG"), or why not

    def describe(self) -> str:
        if self.mb_per_s:
            return f"{self.cipher}: {self.mb_per_s:.0f} MB/s ({self.how})"
        return f"{self.cipher}: {self.how}"  # "not measured: why"


def from_wire(ceilings: dict[str, tuple[float | None, str]]) -> dict[str, Ceiling]:
    """The cipher ceilings a machine measured, as sent over the wire (MB/s, how) made whole again."""
    return {cipher: Ceiling(cipher, mb_per_s, how) for cipher, (mb_per_s, how) in ceilings.items()}


def kernel_driver(name: str, proc_crypto: Path = Path("/proc/crypto")) -> str:
    """Driver of the highest-priority entry for ``name`` in /proc/crypto, or ``none``."""
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
        if fields.get("name") == name and "driver" in fields:
            priority = int(fields.get("priority", "0") or 0)
            if best is None or priority > best[0]:
                best = (priority, fields["driver"])
    return best[1] if best else "none"


def kernel_xts_driver(proc_crypto: Path = Path("/proc/crypto")) -> str:
    """The kernel's ``xts(aes)`` driver (what AES-XTS dm-crypt and fscrypt volumes use)."""
    return kernel_driver("xts(aes)", proc_crypto)


def dm_crypt_cipher(spec: str, key_bits: int | None) -> str | None:
    """The ceiling name of a dm-crypt cipher spec (``aes-xts-plain64`` with 512 key bits ->
    ``kernel:xts(aes):512``); None for what no single kernel cipher measures (cascades,
    authenticated modes)."""
    if not key_bits:
        return None
    if spec.startswith("capi:"):
        name = spec.removeprefix("capi:").rsplit("-", 1)[0]
    elif spec.startswith("xchacha12,aes-adiantum"):
        name = "adiantum(xchacha12,aes)"
    else:
        match = re.fullmatch(r"([a-z0-9]+)-(xts|cbc)-([a-z0-9]+)(?::([a-z0-9]+))?", spec)
        if match is None:
            return None
        cipher, mode, iv, hash_name = match.groups()
        if mode == "xts":
            name = f"xts({cipher})"
        elif iv == "essiv" and hash_name:
            name = f"essiv(cbc({cipher}),{hash_name})"
        else:
            return None
    return f"kernel:{name}:{key_bits}"


def _af_alg_mb_per_s(name: str, key_bits: int, seconds: float) -> tuple[float, str]:
    iv = bytes(32 if name.startswith("adiantum") else 16)
    data = os.urandom(CHUNK)
    with socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET, 0) as alg:
        alg.bind(("skcipher", name))
        alg.setsockopt(socket.SOL_ALG, socket.ALG_SET_KEY, os.urandom(key_bits // 8))
        operation, _ = alg.accept()
        with operation:
            done = 0
            start = time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds:
                operation.sendmsg_afalg([data], op=socket.ALG_OP_ENCRYPT, iv=iv)
                done += len(operation.recv(CHUNK))
    return done / elapsed / 1e6, f"kernel driver {kernel_driver(name)} via AF_ALG"


def _af_alg_aead_mb_per_s(name: str, key_bits: int, seconds: float) -> tuple[float, str]:
    data = os.urandom(CHUNK)
    with socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET, 0) as alg:
        alg.bind(("aead", name))
        alg.setsockopt(socket.SOL_ALG, socket.ALG_SET_KEY, os.urandom(key_bits // 8))
        alg.setsockopt(socket.SOL_ALG, socket.ALG_SET_AEAD_AUTHSIZE, None, GCM_TAG)
        operation, _ = alg.accept()
        with operation:
            done = 0
            start = time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds:
                operation.sendmsg_afalg([data], op=socket.ALG_OP_ENCRYPT, iv=bytes(12), assoclen=0)
                done += len(operation.recv(CHUNK + GCM_TAG)) - GCM_TAG
    return done / elapsed / 1e6, f"kernel driver {kernel_driver(name)} via AF_ALG"


def _user_space_mb_per_s(name: str, seconds: float) -> tuple[float, str]:
    """``AES-256-XTS`` or ``AES-128-CBC`` encrypted by OpenSSL (through ``cryptography``)."""
    from cryptography import __version__ as version
    from cryptography.hazmat.backends.openssl.backend import backend as openssl
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    match = re.fullmatch(r"AES-(128|192|256)-(XTS|CBC)", name)
    if match is None:
        raise ValueError(f"no user-space implementation of {name} here")
    bits, mode = int(match.group(1)), match.group(2)
    key = os.urandom(bits // 8 * (2 if mode == "XTS" else 1))  # XTS: two keys
    data = os.urandom(USER_CHUNK)
    done = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        chosen = modes.XTS(bytes(16)) if mode == "XTS" else modes.CBC(bytes(16))
        encryptor = Cipher(algorithms.AES(key), chosen).encryptor()
        done += len(encryptor.update(data)) + len(encryptor.finalize())
    return done / elapsed / 1e6, f"{openssl.openssl_version_text()} via cryptography {version}, one core"


def counterpart(cipher: str) -> tuple[str | None, str]:
    """The same cipher in the other place (user space for a kernel cipher, the kernel for a
    user-space one), or None and why there is none."""
    kind, _, rest = cipher.partition(":")
    if kind == "kernel":
        name, _, bits = rest.rpartition(":")
        match = re.fullmatch(r"(xts|cbc)\(aes\)", name)
        if match is None or not bits.isdigit():
            return None, f"no user-space counterpart of {name} measured here"
        aes_bits = int(bits) // 2 if match.group(1) == "xts" else int(bits)
        return f"user:AES-{aes_bits}-{match.group(1).upper()}", ""
    if kind == "gocryptfs":
        match = re.fullmatch(r"AES-GCM-(\d+)", rest)
        if match:
            return f"kernel-aead:gcm(aes):{match.group(1)}", ""
        return None, f"the kernel has no {rest} (gocryptfs's own user-space implementation only)"
    return None, f"no counterpart of {cipher} known"


def gocryptfs_speeds(output: str) -> dict[str, tuple[float, bool]]:
    """``gocryptfs -speed`` lines: implementation -> (MB/s, selected in auto mode)."""
    found = {}
    for line in output.splitlines():
        match = re.match(r"^(\S+)\s+([\d.]+) MB/s(.*)$", line.strip())
        if match:
            found[match.group(1)] = (float(match.group(2)), "selected" in match.group(3))
    return found


def _gocryptfs_mb_per_s(algorithm: str) -> tuple[float | None, str]:
    """The implementation gocryptfs selects for ``algorithm`` (``AES-GCM-256``: its OpenSSL or
    Go one; ``AES-SIV-512``: Go), from its own benchmark."""
    try:
        proc = subprocess.run(
            ["gocryptfs", "-speed"],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            **children.popen_options(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"not measured: gocryptfs -speed: {exc}"
    candidates = {
        name: value for name, value in gocryptfs_speeds(proc.stdout).items() if name.startswith(algorithm)
    }
    chosen = [name for name, (_, selected) in candidates.items() if selected] or list(candidates)
    if len(chosen) != 1:
        return None, f"not measured: gocryptfs -speed shows no single {algorithm} implementation"
    return candidates[chosen[0]][0], f"gocryptfs -speed, {chosen[0]}"


def _kernel_ceiling(
    cipher: str,
    rest: str,
    seconds: float,
    speed: Callable[[str, int, float], tuple[float, str]],
    interface: str,
    config: str,
) -> Ceiling:
    """A kernel cipher (``name:bits``) through AF_ALG's ``interface`` (skcipher or aead), or why
    not (the kernel option CONFIG_CRYPTO_USER_API_``config`` when the interface is missing)."""
    name, _, bits = rest.rpartition(":")
    if not hasattr(socket, "AF_ALG"):
        return Ceiling(cipher, None, "not measured: no AF_ALG sockets on this platform")
    try:
        mb_per_s, how = speed(name, int(bits), seconds)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EAFNOSUPPORT:
            reason = f"the kernel has no AF_ALG {interface} interface (CONFIG_CRYPTO_USER_API_{config})"
        return Ceiling(cipher, None, f"not measured: {reason}")
    return Ceiling(cipher, mb_per_s, how)


def measure(cipher: str, seconds: float = 0.3) -> Ceiling:
    """The ceiling of one cipher as a backend names it (see the module docstring)."""
    kind, _, rest = cipher.partition(":")
    try:
        if kind == "kernel":
            return _kernel_ceiling(cipher, rest, seconds, _af_alg_mb_per_s, "skcipher", "SKCIPHER")
        if kind == "kernel-aead":
            return _kernel_ceiling(cipher, rest, seconds, _af_alg_aead_mb_per_s, "aead", "AEAD")
        if kind == "user":
            mb_per_s, how = _user_space_mb_per_s(rest, seconds)
            return Ceiling(cipher, mb_per_s, how)
        if kind == "gocryptfs":
            return Ceiling(cipher, *_gocryptfs_mb_per_s(rest))
    except ValueError as exc:
        return Ceiling(cipher, None, f"not measured: {exc}")
    return Ceiling(cipher, None, "not measured: no way to measure this cipher here")


def measure_ciphers(ciphers: list[str], seconds: float = 0.3) -> dict[str, Ceiling]:
    """Each distinct cipher once."""
    found = {}
    for cipher in dict.fromkeys(ciphers):
        with contextlib.suppress(Exception):  # a ceiling is context; never fail a report for it
            found[cipher] = measure(cipher, seconds)
        found.setdefault(cipher, Ceiling(cipher, None, "not measured: error while measuring"))
    return found
