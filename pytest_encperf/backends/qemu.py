"""qemu-luks: a LUKS1 container file decrypted in userspace by qemu-storage-daemon.

No device-mapper: the LUKS1 header is written by ``cryptsetup luksFormat`` on a plain file
(header only, no mapping), or by ``qemu-img create -f luks`` when cryptsetup is missing or
fails. ``qemu-storage-daemon`` opens it with the passphrase from a 0600 file in a SecretDir on
a RAM file system (``--object secret,file=``, removed once read; the passphrase itself stays in
memory for remounts) and exports the decrypted payload as a regular file through FUSE;
ext4 goes on a loop device (``--direct-io=on``) over that file. The host file is opened with
``cache.direct=on`` so qemu bypasses the host's page cache, like the plain container's loop.

The export stays open while mounted only: unmount releases ext4's mount, the loop device, the
export and the daemon, in that order; a later mount opens the file again with the passphrase.
"""

from __future__ import annotations

import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from .. import host, redaction
from ..host import HostError
from ..parsing import parse_int_choice
from ..secretdirs import SecretDir
from ..targets import Target
from ..workloads import MiB
from . import KDF_PARAM, KDF_SETTINGS, BackendBase, BackendSpec, Param, Volume
from .ext4 import e2fsprogs_version, make_ext4, mount_ext4
from .fusedaemon import fuse_problems, start_fuse_daemon, tool_problems

LUKS1_HEADER = 2 * MiB  # payload offset of a LUKS1 header with a 512-bit key (4096 sectors)
PBKDF_ITERATIONS = 1000  # LUKS1's minimum: fast unlock, benchmark-only
QEMU_IMG_ATTEMPTS = 3  # qemu-img create, on any error
# qemu-img times its PBKDF by the thread's user CPU time, which tick-based accounting leaves at 0 ms
# for a short run: it then refuses ("Unable to get accurate CPU usage"), 5 of 20 runs on the test
# machine, 3 in a row in a CI run; a new process draws afresh, so that error is tried more often
QEMU_IMG_CALIBRATION_FAILED = "Unable to get accurate CPU usage"
QEMU_IMG_CALIBRATION_ATTEMPTS = 12
CIPHER = re.compile(
    r"^(?P<alg>[a-z0-9]+)-(?P<mode>[a-z0-9]+)-(?P<ivgen>[a-z0-9]+)(?::(?P<ivhash>[a-z0-9]+))?$"
)


def parse_cipher(text: str) -> str:
    """A LUKS1 cipher spec: algorithm-mode-ivgen[:ivhash]."""
    if not CIPHER.match(text):
        raise ValueError(
            f"bad value {text!r}: expected a cipher spec like aes-xts-plain64 or aes-cbc-essiv:sha256"
        )
    return text


class QemuLuksBackend(BackendBase):
    store_below = True  # qemu-storage-daemon reads the image file through the page cache
    params = (
        Param("cipher", parse_cipher, "aes-xts-plain64", "LUKS1 cipher spec (e.g. aes-cbc-essiv:sha256)"),
        Param(
            "key-size",
            parse_int_choice((128, 256, 384, 512)),
            512,
            "master key bits (512 = AES-256 in XTS mode)",
        ),
        Param("hash", default="sha256", help="LUKS1 header hash"),
        KDF_PARAM,
    )
    kdf_settings = KDF_SETTINGS

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.cipher: str = self.options["cipher"]
        self.hash: str = self.options["hash"]
        self.key_size: int = self.options["key-size"]

    def partition_refusal(self, target: Target) -> str | None:
        return (
            f"its LUKS image would be a file under --encperf-dir ({target.directory}), not on "
            f"{target.device} where the plain baseline runs: the table would compare two different disks"
        )

    def requirements(self, target: Target) -> list[str]:
        name = self.name
        found = []
        found += tool_problems(name, "qemu-storage-daemon", "qemu-system-common")
        if not shutil.which("cryptsetup") and not shutil.which("qemu-img"):
            found.append(f"{name}: needs cryptsetup (Debian package cryptsetup-bin) or qemu-img (qemu-utils)")
        found += fuse_problems(name)
        if not host.is_root() and target.kind != "container":  # the container's check says it already
            found.append(f"{name}: needs root (losetup and mount of ext4 over the FUSE export)")
        found += [f"{name}: needs {tool} (e2fsprogs)" for tool in host.missing_tools("mkfs.ext4")]
        found += [f"{name}: needs {tool} (util-linux)" for tool in host.missing_tools("losetup")]
        return found

    # -- files of a volume
    @staticmethod
    def image(volume: Volume) -> Path:
        return volume.workdir / "luks.img"

    @staticmethod
    def export(volume: Volume) -> Path:
        return volume.workdir / "export.raw"

    @staticmethod
    def keyfile(volume: Volume) -> Path:
        return volume.state["secrets"].path / "passphrase"

    def write_keyfile(self, volume: Volume) -> Path:
        return volume.state["secrets"].write("passphrase", volume.state["password"])

    def luks_format_command(self, image: Path, keyfile: Path) -> list[str]:
        return [
            "cryptsetup", "luksFormat", "--type", "luks1", "--batch-mode",
            *(["--pbkdf-force-iterations", str(PBKDF_ITERATIONS)] if self.kdf == "fast" else []),
            "--cipher", self.cipher, "--key-size", str(self.key_size), "--hash", self.hash,
            "--key-file", str(keyfile), str(image),
        ]  # fmt: skip

    def qemu_img_command(self, image: Path, keyfile: Path, payload: int) -> list[str]:
        match = CIPHER.match(self.cipher)
        assert match is not None  # checked in __init__
        bits = self.key_size // 2 if match["mode"] == "xts" else self.key_size
        options = [
            "key-secret=sec0",
            f"cipher-alg={match['alg']}-{bits}",
            f"cipher-mode={match['mode']}",
            f"ivgen-alg={match['ivgen']}",
            f"hash-alg={self.hash}",
            *(["iter-time=10"] if self.kdf == "fast" else []),  # else qemu's own (2000 ms)
        ]
        if match["ivhash"]:
            options.append(f"ivgen-hash-alg={match['ivhash']}")
        return [
            "qemu-img", "create", "-q", "-f", "luks",
            "--object", f"secret,id=sec0,file={keyfile},format=raw",
            "-o", ",".join(options), str(image), str(payload),
        ]  # fmt: skip

    def daemon_command(self, volume: Volume) -> list[str]:
        return [
            "qemu-storage-daemon",
            "--object", f"secret,id=sec0,file={self.keyfile(volume)},format=raw",
            "--blockdev", f"driver=file,node-name=file0,filename={self.image(volume)},cache.direct=on",
            "--blockdev", "driver=luks,node-name=luks0,file=file0,key-secret=sec0",
            "--export", f"type=fuse,id=exp0,node-name=luks0,mountpoint={self.export(volume)},writable=on",
        ]  # fmt: skip

    def format_image(self, volume: Volume, keyfile: Path) -> None:
        image = self.image(volume)
        errors: list[str] = []
        if shutil.which("cryptsetup"):
            with open(image, "wb") as handle:
                handle.truncate(volume.target.size + LUKS1_HEADER)
            try:
                host.run(self.luks_format_command(image, keyfile), timeout=300)
                volume.state["formatted_by"] = "cryptsetup"
                return
            except HostError as exc:
                errors.append(str(exc))
        other_errors = 0
        for attempt in range(QEMU_IMG_CALIBRATION_ATTEMPTS):
            image.unlink(missing_ok=True)
            try:
                host.run(self.qemu_img_command(image, keyfile, volume.target.size), timeout=300)
                volume.state["formatted_by"] = "qemu-img"
                return
            except HostError as exc:
                errors.append(str(exc))
                other_errors += QEMU_IMG_CALIBRATION_FAILED not in str(exc)
                if other_errors >= QEMU_IMG_ATTEMPTS:
                    break
                time.sleep(0.05 * (attempt + 1))
        raise HostError("could not write a LUKS1 header: " + " | ".join(dict.fromkeys(errors)))

    def open_export(self, volume: Volume) -> None:
        """Daemon + FUSE export + loop device, registered on ``volume.mounted``."""
        export = self.export(volume)
        export.touch(mode=0o600)  # a FUSE export's mount point is a regular file
        self.write_keyfile(volume)
        start_fuse_daemon(
            volume,
            self.daemon_command(volume),
            export,
            volume.workdir / "qemu-storage-daemon.log",
            what="qemu-storage-daemon",
            exits_on_unmount=False,  # it keeps running without exports: SIGTERM it
        )
        volume.state["secrets"].discard("passphrase")  # read when the daemon started
        loop = host.attach_loop(export, direct_io=True)
        volume.mounted.loop(loop.path, export)
        volume.device, volume.loop_direct_io = loop.path, loop.direct_io

    def build(self, volume: Volume) -> None:
        volume.state["password"] = redaction.Secret(secrets.token_urlsafe(24).encode())
        volume.created.push("forget passphrase", lambda: volume.state.pop("password", None))
        volume.state["secrets"] = SecretDir.create(volume.created)
        volume.created.path(volume.workdir / "qemu-storage-daemon.log")
        volume.created.path(self.export(volume))
        volume.created.path(self.image(volume))
        self.format_image(volume, self.write_keyfile(volume))
        self.open_export(volume)
        assert volume.device is not None  # open_export attached it
        make_ext4(volume.device)

    def open(self, volume: Volume) -> Path:
        if not volume.mounted:  # after an unmount: open the LUKS file again
            self.open_export(volume)
        assert volume.device is not None
        return mount_ext4(volume, volume.device)

    def kdf_label(self, volume: Volume | None = None) -> str:
        formatted_by = volume.state.get("formatted_by") if volume is not None else None
        if self.kdf == "default":
            by = f"{formatted_by}'s" if formatted_by else "the tool's"
            return f"pbkdf2, {by} default iteration time (2 s)"
        if formatted_by == "qemu-img":
            return "pbkdf2, iter-time 10 ms (benchmark only)"
        return f"pbkdf2, {PBKDF_ITERATIONS} iterations (benchmark only)"

    def describe(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {
            "encryption": "LUKS1 (qemu userspace)",
            "cipher": self.cipher,
            "key_bits": self.key_size,
            "sector_size": 512,  # LUKS1 encrypts 512-byte sectors
            "hash": self.hash,
            "pbkdf": self.kdf_label(volume),
            "formatted_by": volume.state.get("formatted_by"),
            "qemu": host.tool_version(["qemu-storage-daemon", "--version"]),
            "filesystem": "ext4",
            "e2fsprogs": e2fsprogs_version(),
            "target": volume.target.kind,
            "loop_direct_io": volume.loop_direct_io,
        }
        if not volume.loop_direct_io:
            info["note"] = "the FUSE export refused O_DIRECT: the loop device goes through the page cache"
        return info
