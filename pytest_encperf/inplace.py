"""In-place encryption throughput (``--encperf-inplace``): how long encrypting existing data takes.

Where the backend can encrypt a volume in place (LUKS2: ``cryptsetup reencrypt --encrypt``
with ``--reduce-device-size`` room for the header), a plain ext4 on the container is filled
with the test file, unmounted and encrypted, and the encryption is timed over the whole data
area; the volume is then opened with the backend's key and the file read back and compared.
For every other backend the figure is the time to fill a fresh volume through its encryption
layer: a sequential write of the test file's size, made durable with fdatasync.

Both are reported in MB/s (10^6 bytes) and projected to a size the user gives
(``--encperf-project-size``, report.projected_time): "about 4 h 10 min".
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import trust
from .backends import BackendBase, BackendSpec, make_backend
from .host import signals_deferred
from .mountedvolume import close_volume, open_volume
from .targets import Target
from .workloads import MiB

FILL_FILE = "encperf-inplace.bin"
FILL_METHOD = "fill (sequential write + fdatasync)"


class InplaceUnavailable(RuntimeError):
    """The backend cannot run here: the message lists the reasons (a skip)."""


@dataclass
class InplaceTiming:
    """One backend's in-place figure."""

    spec: str
    method: str  # "cryptsetup reencrypt --encrypt" or FILL_METHOD
    bytes: int  # encrypted (the data area) or written
    seconds: float
    intact: bool | None = None  # the file read back after an in-place encryption was the one written
    format_after: str = ""  # what the volume is afterwards (LUKS2), for an in-place encryption

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mb_per_s": self.mb_per_s}


def write_file(directory: Path, amount: int) -> tuple[str, float]:
    """``amount`` bytes written sequentially in 1 MiB blocks to a new file in ``directory`` and
    made durable (fdatasync); returns their SHA-256 and the seconds it took."""
    block = os.urandom(MiB)
    digest = hashlib.sha256()
    fd = os.open(directory / FILL_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        started = time.perf_counter()
        left = amount
        while left:
            chunk = memoryview(block)[: min(MiB, left)]
            while chunk:
                written = os.write(fd, chunk)
                digest.update(chunk[:written])
                chunk = chunk[written:]
                left -= written
        os.fdatasync(fd)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
    return digest.hexdigest(), seconds


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(MiB):
            digest.update(block)
    return digest.hexdigest()


def measure(spec: BackendSpec, target: Target, workdir: Path, amount: int) -> InplaceTiming:
    """The in-place figure of the backend of ``spec`` (see the module's docstring), with
    ``amount`` bytes of data. InplaceUnavailable when it cannot run here."""
    spec_text = str(spec)
    backend = make_backend(spec)
    if backend.in_place_method() and target.kind != "container":
        raise InplaceUnavailable(f"{spec_text}: in-place encryption runs on the container target only")
    problems = backend.unavailable_reasons(target)
    if problems:
        raise InplaceUnavailable("; ".join(problems))
    workdir.parent.mkdir(parents=True, exist_ok=True)  # a session's run directory: there already
    trust.make_private_dir(workdir)  # 0700 whatever the umask: dead-run cleanup checks it
    if backend.in_place_method():
        return encrypt_in_place(backend, spec_text, target, workdir, amount)
    mounted = open_volume(backend, target, workdir / "volume")
    try:
        _, seconds = write_file(mounted.data_dir, amount)
    finally:
        with signals_deferred():
            close_volume(mounted)
    return InplaceTiming(spec_text, FILL_METHOD, amount, seconds)


def encrypt_in_place(
    backend: BackendBase, spec_text: str, target: Target, workdir: Path, amount: int
) -> InplaceTiming:
    written: list[str] = []
    volume, encrypted, seconds = backend.encrypt_in_place(
        target, workdir / "volume", lambda data: written.append(write_file(data, amount)[0])
    )
    try:
        data_dir = backend.mount(volume)
        intact = file_digest(data_dir / FILL_FILE) == written[0]
        format_after = str(backend.describe(volume).get("opened_as", ""))
    finally:
        with signals_deferred():
            backend.destroy(volume)
    return InplaceTiming(spec_text, backend.in_place_method(), encrypted, seconds, intact, format_after)
