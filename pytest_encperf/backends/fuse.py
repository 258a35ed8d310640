"""FUSE file systems that encrypt file by file: gocryptfs, EncFS, CryFS, securefs.

They need no device-mapper and no kernel crypto, so they run wherever FUSE does. Each volume
keeps its encrypted store and its mount point inside the target: in the volume's directory on
the directory target, or on a fresh ext4 on the container's loop device (so the container
target measures the same disk path as plain). The daemon runs in the foreground as our child
(never daemonized: we must know when it has exited), with stdin closed or carrying the password;
its messages go to a log file in the volume directory that errors quote.

Unmount is ``fusermount -u`` (retried while busy, then lazy with a warning: ``mounting.unmount``);
FUSE unmount is asynchronous, so the daemon is waited for before anything below it is removed.

Passwords are random per volume and kept in memory; a tool that reads a file (gocryptfs
``-passfile``, securefs ``--keyfile``) gets one in a ``SecretDir`` on a RAM file system,
removed as soon as the tool has read it; the others read stdin.

Starting the daemon, feeding it the password, waiting for the mount and taking it down are
in fusedaemon.py, shared with qemu.py, bitlocker.py and veracrypt.py.
"""

from __future__ import annotations

import json
import os
import secrets
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from .. import host
from ..parsing import parse_bool, parse_choice, parse_int
from ..redaction import Secret
from ..secretdirs import SecretDir
from ..targets import Target
from . import KDF_PARAM, KDF_SETTINGS, BackendBase, BackendSpec, Param, Volume
from .fusedaemon import fuse_problems, package_version, start_fuse_daemon, tool_problems

SECUREFS_PBKDF_ROUNDS = 1000
FAST_SCRYPTN = 10  # gocryptfs -scryptn for benchmark volumes: log2 of scrypt's N
GOCRYPTFS_SCRYPTN = 16  # gocryptfs's own


STORE_DIR, MOUNT_DIR = "store", "plain"  # in the volume's root: the daemon's store, its mount point


# ---------------------------------------------------------------- the four backends


class FuseBackend(BackendBase):
    """Shared life cycle: store + mount point in the target, daemon as a child process.

    Subclasses give the tool (``binary``, ``package``), ``init_store`` (run at create, may be
    a no-op when the first mount creates the store) and ``mount_command``.
    """

    binary = ""
    package = ""
    encryption = ""
    secret_via = "stdin"  # "stdin" or "file": how the daemon gets the password
    store_below = True

    def partition_refusal(self, target: Target) -> str | None:
        return (
            f"its encrypted store would be a directory under --encperf-dir ({target.directory}), not on "
            f"{target.device} where the plain baseline runs: the table would compare two different disks"
        )

    def requirements(self, target: Target) -> list[str]:
        found = tool_problems(self.name, self.binary, self.package)
        found += fuse_problems(self.name)
        if target.kind == "container":
            found += self.ext4_requirements(target)
        return found

    # -- layout
    def root(self, volume: Volume) -> Path:
        return Path(volume.state["root"])

    def store(self, volume: Volume) -> Path:
        return self.root(volume) / STORE_DIR

    def mountpoint(self, volume: Volume) -> Path:
        return self.root(volume) / MOUNT_DIR

    def log(self, volume: Volume) -> Path:
        return volume.workdir / f"{self.name}.log"

    def secret_file(self, volume: Volume) -> Path:
        """The password in a 0600 file of the volume's SecretDir (RAM), written from memory at
        each use; discard it once the tool has read it."""
        return volume.state["secrets"].write("password", volume.state["password"])

    def build(self, volume: Volume) -> None:
        # Random per volume; kept in memory for remounts, forgotten at destroy.
        volume.state["password"] = Secret(secrets.token_urlsafe(24).encode())
        volume.created.push("forget password", lambda: volume.state.pop("password", None))
        if self.secret_via == "file":
            volume.state["secrets"] = SecretDir.create(volume.created)
        volume.created.path(self.log(volume))
        self.stack_root(volume, STORE_DIR, MOUNT_DIR)
        self.init_store(volume)

    def init_store(self, volume: Volume) -> None:
        """Write the store's configuration (default: the first mount does it)."""

    def mount_command(self, volume: Volume) -> list[str]:
        raise NotImplementedError

    def daemon_env(self, volume: Volume) -> dict[str, str] | None:
        return None

    def open(self, volume: Volume) -> Path:
        mountpoint = self.mountpoint(volume)
        stdin_data = Secret(volume.state["password"] + b"\n") if self.secret_via == "stdin" else None
        start_fuse_daemon(
            volume,
            self.mount_command(volume),
            mountpoint,
            self.log(volume),
            what=self.binary,
            stdin_data=stdin_data,
            env=self.daemon_env(volume),
        )
        if self.secret_via == "file":  # read at start-up: don't keep it while mounted
            volume.state["secrets"].discard("password")
        return mountpoint

    def version(self) -> str:
        return host.tool_version([self.binary, "--version"])

    def describe_store(self, volume: Volume) -> dict[str, Any]:
        return {}

    def describe(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {
            "encryption": self.encryption,
            "tool": self.binary,
            "version": self.version(),
            "target": volume.target.kind,
        }
        info.update(self.describe_store(volume))
        info.update(self.describe_target(volume, under=" (under the store)"))
        return info


class GocryptfsBackend(FuseBackend):
    """gocryptfs: AES-256-GCM (or AES-SIV) per 4 KiB block; password from ``-passfile``."""

    params = (
        Param("aessiv", parse_bool, False, "1 = AES-256-SIV instead of AES-256-GCM"),
        Param("plaintextnames", parse_bool, False, "1 = leave file names unencrypted"),
        Param(
            "scryptn",
            parse_int(10, 28),
            None,
            f"log2 of scrypt's cost N (default {FAST_SCRYPTN}: fast, benchmark only; gocryptfs's own is 16)",
        ),
        Param(
            "openssl",
            parse_choice(("auto", "1", "0")),
            "auto",
            "AES-GCM through OpenSSL (1) or Go's crypto (0); auto: gocryptfs picks the faster",
        ),
        KDF_PARAM,
    )
    kdf_settings = KDF_SETTINGS
    binary = "gocryptfs"
    OPENSSL = {"auto": "auto", "1": "true", "0": "false"}
    package = "gocryptfs"
    encryption = "gocryptfs"
    secret_via = "file"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.aessiv: bool = self.options["aessiv"]
        self.plaintextnames: bool = self.options["plaintextnames"]
        self.kdf_conflict("scryptn")
        # None: gocryptfs's own cost (kdf=default)
        self.scryptn: int | None = self.options["scryptn"] or (FAST_SCRYPTN if self.kdf == "fast" else None)
        self.openssl: str = self.options["openssl"]

    def init_command(self, volume: Volume, passfile: Path) -> list[str]:
        argv = ["gocryptfs", "-init", "-q", "-passfile", str(passfile)]
        if self.scryptn is not None:
            argv += ["-scryptn", str(self.scryptn)]
        if self.aessiv:
            argv.append("-aessiv")
        if self.plaintextnames:
            argv.append("-plaintextnames")
        return [*argv, str(self.store(volume))]

    def init_store(self, volume: Volume) -> None:
        host.run(self.init_command(volume, self.secret_file(volume)), timeout=300)
        volume.state["secrets"].discard("password")

    def mount_command(self, volume: Volume) -> list[str]:
        passfile = self.secret_file(volume)
        return [
            "gocryptfs",
            "-fg",
            "-q",
            "-passfile",
            str(passfile),
            *([] if self.openssl == "auto" else [f"-openssl={self.OPENSSL[self.openssl]}"]),
            str(self.store(volume)),
            str(self.mountpoint(volume)),
        ]

    def setup_commands(self) -> list[str]:
        init = ["gocryptfs", "-init", *(["-aessiv"] if self.aessiv else [])]
        init += ["-plaintextnames"] if self.plaintextnames else []
        mount = ["gocryptfs", *([] if self.openssl == "auto" else [f"-openssl={self.OPENSSL[self.openssl]}"])]
        return [
            " ".join([*init, "CIPHERDIR"]) + "   (gocryptfs's own scrypt cost, not the benchmark's)",
            " ".join([*mount, "CIPHERDIR", "MOUNTPOINT"]),
        ]

    def kdf_label(self, volume: Volume | None = None) -> str:
        if self.scryptn is None:
            return f"scrypt N=2^{GOCRYPTFS_SCRYPTN} (gocryptfs's default)"
        fast = " (benchmark only)" if self.scryptn < GOCRYPTFS_SCRYPTN else ""
        return f"scrypt N=2^{self.scryptn}{fast}"

    @property
    def gcm_suffix(self) -> str:
        """gocryptfs -speed's name suffix of the AES-GCM implementation the mount uses."""
        return {"auto": "", "1": "-OpenSSL", "0": "-Go"}[self.openssl]

    def version(self) -> str:
        return host.tool_version(["gocryptfs", "-version"])

    def describe_store(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {
            "cipher": "AES-256-SIV" if self.aessiv else "AES-256-GCM",
            # the cipher ceiling: gocryptfs's own speed for the implementation it selects
            "cipher_ceiling": (
                "gocryptfs:AES-SIV-512" if self.aessiv else f"gocryptfs:AES-GCM-256{self.gcm_suffix}"
            ),
            "block_size": 4096,
            "file_names": "plaintext" if self.plaintextnames else "encrypted (EME)",
            "scrypt_n": 2 ** (self.scryptn or GOCRYPTFS_SCRYPTN),
            "kdf": self.kdf_label(),
        }
        try:
            config = json.loads((self.store(volume) / "gocryptfs.conf").read_text())
            info["feature_flags"] = ",".join(config.get("FeatureFlags", []))
            info["scrypt_n"] = config.get("ScryptObject", {}).get("N", info["scrypt_n"])
        except (OSError, ValueError):
            pass
        return info


class EncfsBackend(FuseBackend):
    """EncFS: the first mount creates the store with ``--standard`` or ``--paranoia``; password on stdin."""

    MODES = ("standard", "paranoia")
    params = (
        Param(
            "mode",
            parse_choice(MODES),
            "standard",
            "standard (AES-192, 1 KiB blocks) or paranoia (AES-256, MAC headers, chained IVs)",
        ),
    )
    binary = "encfs"
    package = "encfs"
    encryption = "encfs"
    kdf_settings = ("default",)  # EncFS times its own PBKDF2 when it makes the store: no fast setting

    def kdf_label(self, volume: Volume | None = None) -> str:
        return "PBKDF2 timed by EncFS itself (its default; no fast setting)"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.mode: str = self.options["mode"]

    def mount_command(self, volume: Volume) -> list[str]:
        argv = ["encfs", "-f", "--stdinpass"]
        if not (self.store(volume) / ".encfs6.xml").exists():
            argv.append(f"--{self.mode}")  # creates the store non-interactively
        return [*argv, str(self.store(volume).resolve()), str(self.mountpoint(volume).resolve())]

    def describe_store(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {"mode": self.mode}
        try:
            config = ElementTree.parse(self.store(volume) / ".encfs6.xml").find("cfg")
        except (OSError, ElementTree.ParseError):
            return info
        if config is None:
            return info
        name = config.findtext("cipherAlg/name") or "?"
        key_size = config.findtext("keySize") or "?"
        info.update(
            cipher=f"{name} {key_size}-bit",
            block_size=int(config.findtext("blockSize") or 0),
            block_mac_bytes=int(config.findtext("blockMACBytes") or 0),
            external_iv_chaining=config.findtext("externalIVChaining") == "1",
        )
        return info


class CryfsBackend(FuseBackend):
    """CryFS: fixed-size encrypted blocks; its state directory lives in the volume, not in $HOME."""

    params = (
        Param("cipher", default="xchacha20-poly1305", help="one of `cryfs --show-ciphers`"),
        Param("blocksize", parse_int(4096, 2**24), 16384, "ciphertext block size in bytes"),
    )
    binary = "cryfs"
    package = "cryfs"
    encryption = "cryfs"
    kdf_settings = ("default",)  # cryfs has no option for its scrypt cost: benchmark volumes pay its own

    def kdf_label(self, volume: Volume | None = None) -> str:
        return "scrypt at CryFS's own settings (no fast setting)"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.cipher: str = self.options["cipher"]
        self.blocksize: int = self.options["blocksize"]

    def daemon_env(self, volume: Volume) -> dict[str, str]:
        state = volume.workdir / "cryfs-state"
        state.mkdir(mode=0o700, exist_ok=True)
        return {
            **os.environ,
            "HOME": str(state),  # cryfs writes ~/.local/share/cryfs: keep it in the volume
            "XDG_DATA_HOME": str(state),
            "CRYFS_FRONTEND": "noninteractive",  # password from stdin, no questions
            "CRYFS_NO_UPDATE_CHECK": "true",
        }

    def init_store(self, volume: Volume) -> None:
        volume.created.path(volume.workdir / "cryfs-state")

    def mount_command(self, volume: Volume) -> list[str]:
        argv = ["cryfs", "-f"]
        if not (self.store(volume) / "cryfs.config").exists():
            argv += ["--cipher", self.cipher, "--blocksize", str(self.blocksize)]
        return [*argv, str(self.store(volume)), str(self.mountpoint(volume))]

    def describe_store(self, volume: Volume) -> dict[str, Any]:
        return {"cipher": self.cipher, "block_size": self.blocksize}


class SecurefsBackend(FuseBackend):
    """securefs: key file only (``--keyfile``), no password prompt."""

    params = (Param("format", parse_int(1, 4), 4, "store format 1-4 (4: the 'lite' format)"), KDF_PARAM)
    kdf_settings = KDF_SETTINGS
    binary = "securefs"
    package = "securefs"
    encryption = "securefs"
    secret_via = "file"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.format: int = self.options["format"]

    def init_store(self, volume: Volume) -> None:
        host.run(self.init_command(volume, self.secret_file(volume)), timeout=300)
        volume.state["secrets"].discard("password")

    def init_command(self, volume: Volume, keyfile: Path) -> list[str]:
        # the key file is random: a fast KDF is enough (argon2id, the default, costs seconds)
        fast = ["--pbkdf", "pkcs5-pbkdf2-hmac-sha256", "--rounds", str(SECUREFS_PBKDF_ROUNDS)]
        return [
            "securefs", "create", "--format", str(self.format), "--keyfile", str(keyfile),
            *(fast if self.kdf == "fast" else []), str(self.store(volume)),
        ]  # fmt: skip

    def kdf_label(self, volume: Volume | None = None) -> str:
        if self.kdf == "fast":
            return f"PBKDF2-HMAC-SHA256, {SECUREFS_PBKDF_ROUNDS} rounds (benchmark only)"
        return "securefs's default (argon2id)"

    def mount_command(self, volume: Volume) -> list[str]:
        keyfile = self.secret_file(volume)
        return [
            "securefs",
            "mount",
            "--keyfile",
            str(keyfile),
            str(self.store(volume)),
            str(self.mountpoint(volume)),
        ]

    def version(self) -> str:
        return package_version("securefs")  # `securefs version` prints GIT-NOTFOUND on Debian

    def describe_store(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {"format": self.format, "cipher": "AES-256-GCM"}
        try:
            config = json.loads((self.store(volume) / ".securefs.json").read_text())
            info["block_size"] = config.get("block_size", 4096)
            info["iv_size"] = config.get("iv_size")
            info["pbkdf"] = f"{config.get('pbkdf', '?')} x{config.get('iterations', '?')}"
        except (OSError, ValueError):
            info["block_size"] = 4096
        return info
