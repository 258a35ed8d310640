"""FUSE file systems that encrypt file by file: gocryptfs, EncFS, CryFS, securefs.

They need no device-mapper and no kernel crypto, so they run wherever FUSE does. Each volume
keeps its encrypted store and its mount point inside the target: in the volume's directory on
the directory target, or on a fresh ext4 on the container's loop device (so the container
target measures the same disk path as plain). The daemon runs in the foreground as our child
(never daemonized: we must know when it has exited), with stdin closed or carrying the password;
its messages go to a log file in the volume directory that errors quote.

Unmount is ``fusermount -u`` (retried while busy, then lazy with a warning: ``host.unmount``);
FUSE unmount is asynchronous, so the daemon is waited for before anything below it is removed.

Passwords are random per volume and kept in memory; a tool that reads a file (gocryptfs
``-passfile``, securefs ``--keyfile``) gets one in a ``SecretDir`` on a RAM file system,
removed as soon as the tool has read it; the others read stdin.

The helpers at the top (``start_fuse_daemon``, ``fuse_problems``) are shared with qemu.py and
bitlocker.py, whose daemons are FUSE servers too.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from .. import host
from ..host import HostError, Secret
from ..resources import SecretDir
from ..targets import Target, create_container
from . import BackendBase, BackendSpec, Volume
from .ext4 import e2fsprogs_version, make_ext4

MOUNT_TIMEOUT = 120.0  # CryFS derives its key with a costly scrypt: ~20 s on a slow CPU
LOG_TAIL = 2000  # characters of a daemon's log quoted in an error
SECUREFS_PBKDF_ROUNDS = 1000


# ---------------------------------------------------------------- shared FUSE plumbing


def fuse_problems(name: str) -> list[str]:
    """What FUSE itself needs: /dev/fuse and fusermount."""
    found = []
    if not Path("/dev/fuse").exists():
        found.append(
            f"{name}: needs FUSE (/dev/fuse missing: load the fuse module or pass --device /dev/fuse)"
        )
    if host.fusermount_binary() is None:
        found.append(f"{name}: needs fusermount3 or fusermount (Debian package fuse3)")
    return found


def tool_problems(name: str, binary: str, package: str) -> list[str]:
    if shutil.which(binary) is None:
        return [f"{name}: needs {binary} (Debian package {package})"]
    return []


def package_version(package: str) -> str:
    """The installed Debian package's version (for tools that don't report their own)."""
    if shutil.which("dpkg-query") is None:
        return "unknown"
    try:
        return host.run(["dpkg-query", "-W", "-f=${Version}", package], timeout=10).strip() or "unknown"
    except HostError:
        return "unknown"


def read_log_tail(log: Path, start: int = 0) -> str:
    """What the daemon wrote to ``log`` since offset ``start`` (its last lines)."""
    try:
        with log.open("rb") as handle:
            handle.seek(start)
            text = handle.read().decode(errors="replace").strip()
    except OSError:
        return ""
    return text[-LOG_TAIL:]


def start_fuse_daemon(
    volume: Volume,
    argv: Sequence[str | os.PathLike[str]],
    mountpoint: Path,
    log: Path,
    *,
    what: str,
    stdin_data: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = MOUNT_TIMEOUT,
    exits_on_unmount: bool = True,
    secrets: Sequence[bytes | str] = (),
) -> subprocess.Popen[bytes]:
    """Start a foreground FUSE daemon and wait until ``mountpoint`` is in /proc/self/mounts.

    The process is registered on ``volume.mounted`` the moment it exists, and its mount right
    after, before it appears (released newest first: unmount, then the daemon gets 10 s to exit
    by itself, then SIGTERM; a daemon that outlives its unmount, such as qemu-storage-daemon,
    gets SIGTERM at once). On failure everything is released and a HostError quotes the
    daemon's messages, with ``secrets`` (and ``stdin_data``) shown as <secret>.
    """
    __tracebackhide__ = True  # its arguments and locals may carry a secret
    args = [os.fspath(a) for a in argv]
    log_start = log.stat().st_size if log.exists() else 0  # quote only this start's messages
    log_handle = open(log, "ab")  # noqa: SIM115 - handed to the child, closed right after
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=log_handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the daemon
        )
    except FileNotFoundError as exc:
        raise HostError(f"{args[0]}: not installed") from exc
    finally:
        log_handle.close()
    volume.mounted.process(proc, wait=10.0 if exits_on_unmount else 0.0)
    volume.mounted.mount(mountpoint)
    hidden = [*secrets, *([stdin_data] if stdin_data else [])]
    if stdin_data is not None and proc.stdin is not None:
        try:
            proc.stdin.write(stdin_data)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died already; reported below with its log
    deadline = time.monotonic() + timeout
    while not host.is_mounted(mountpoint):
        code = proc.poll()
        if code is not None:
            volume.mounted.release()
            detail = host.redact(read_log_tail(log, log_start) or "no message", hidden)
            raise HostError(f"{what} exited with status {code} before mounting: {detail}")
        if time.monotonic() > deadline:
            host.stop_process(psutil.Process(proc.pid))  # never mounted: don't wait for it to exit
            volume.mounted.release()
            detail = host.redact(read_log_tail(log, log_start) or "no message", hidden)
            raise HostError(f"{what} did not mount {mountpoint} within {timeout:g} s: {detail}")
        time.sleep(0.05)
    return proc


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

    def problems(self, target: Target) -> list[str]:
        found = target.problems()
        found += tool_problems(self.name, self.binary, self.package)
        found += fuse_problems(self.name)
        if target.kind == "container":
            found += [f"{self.name}: needs {tool} (e2fsprogs)" for tool in host.missing_tools("mkfs.ext4")]
        return found

    # -- layout
    def root(self, volume: Volume) -> Path:
        return Path(volume.state["root"])

    def store(self, volume: Volume) -> Path:
        return self.root(volume) / "store"

    def mountpoint(self, volume: Volume) -> Path:
        return self.root(volume) / "plain"

    def log(self, volume: Volume) -> Path:
        return volume.workdir / f"{self.name}.log"

    def secret_file(self, volume: Volume) -> Path:
        """The password in a 0600 file of the volume's SecretDir (RAM), written from memory at
        each use; discard it once the tool has read it."""
        return volume.state["secrets"].write("password", volume.state["password"])

    def create(self, target: Target, workdir: Path) -> Volume:
        volume = Volume(self, target, workdir)
        # Random per volume; kept in memory for remounts, forgotten at destroy.
        volume.state["password"] = Secret(secrets.token_urlsafe(24).encode())
        volume.created.push("forget password", lambda: volume.state.pop("password", None))
        with self.undo_on_failure(volume, "create", self.destroy):
            if self.secret_via == "file":
                volume.state["secrets"] = SecretDir.create(volume.created)
            volume.created.path(self.log(volume))
            if target.kind == "container":
                loop = create_container(target, workdir, volume.created)
                volume.state.update(device=loop.path, loop_direct_io=loop.direct_io)
                make_ext4(loop.path)
                root = workdir / "mnt"
                root.mkdir()
                volume.created.path(root)
                host.mount(loop.path, root, "ext4")
                volume.created.mount(root)
            else:
                root = workdir
            volume.state["root"] = str(root)
            for directory in (self.store(volume), self.mountpoint(volume)):
                directory.mkdir()
                volume.created.path(directory)
            self.init_store(volume)
        return volume

    def init_store(self, volume: Volume) -> None:
        """Write the store's configuration (default: the first mount does it)."""

    def mount_command(self, volume: Volume) -> list[str]:
        raise NotImplementedError

    def daemon_env(self, volume: Volume) -> dict[str, str] | None:
        return None

    def mount(self, volume: Volume) -> Path:
        mountpoint = self.mountpoint(volume)
        stdin_data = Secret(volume.state["password"] + b"\n") if self.secret_via == "stdin" else None
        with self.undo_on_failure(volume, "mount", self.unmount):
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
            data_dir = mountpoint / "data"
            data_dir.mkdir(exist_ok=True)
        volume.data_dir = data_dir
        return data_dir

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
        if volume.target.kind == "container":
            info.update(
                filesystem="ext4 (under the store)",
                e2fsprogs=e2fsprogs_version(),
                loop_direct_io=volume.state.get("loop_direct_io"),
            )
        else:
            info["filesystem"] = host.filesystem_type(volume.workdir) + " (under the store)"
        return info


def _flag(spec: BackendSpec, key: str) -> bool:
    value = spec.param_dict.get(key, "0").lower()
    if value in ("1", "yes", "true", "on"):
        return True
    if value in ("0", "no", "false", "off"):
        return False
    raise ValueError(f"{spec.name}: {key} must be 0 or 1, not {value!r}")


def _int_param(spec: BackendSpec, key: str, default: int, low: int, high: int) -> int:
    text = spec.param_dict.get(key, str(default))
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"{spec.name}: {key} must be an integer from {low} to {high}, not {text!r}"
        ) from None
    if not low <= value <= high:
        raise ValueError(f"{spec.name}: {key} must be an integer from {low} to {high}, not {value}")
    return value


class GocryptfsBackend(FuseBackend):
    """gocryptfs: AES-256-GCM (or AES-SIV) per 4 KiB block; password from ``-passfile``."""

    accepted_params = {
        "aessiv": "1 = AES-256-SIV instead of AES-256-GCM (default 0)",
        "plaintextnames": "1 = leave file names unencrypted (default 0)",
        "scryptn": "log2 of scrypt's cost N (10-28; default 10: fast, benchmark-only; gocryptfs's own is 16)",
    }
    binary = "gocryptfs"
    package = "gocryptfs"
    encryption = "gocryptfs"
    secret_via = "file"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.aessiv = _flag(spec, "aessiv")
        self.plaintextnames = _flag(spec, "plaintextnames")
        self.scryptn = _int_param(spec, "scryptn", 10, 10, 28)

    def init_command(self, volume: Volume, passfile: Path) -> list[str]:
        argv = ["gocryptfs", "-init", "-q", "-passfile", str(passfile), "-scryptn", str(self.scryptn)]
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
            str(self.store(volume)),
            str(self.mountpoint(volume)),
        ]

    def version(self) -> str:
        return host.tool_version(["gocryptfs", "-version"])

    def describe_store(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {
            "cipher": "AES-256-SIV" if self.aessiv else "AES-256-GCM",
            # the efficiency reference: gocryptfs's own speed for the implementation it selects
            "cipher_ceiling": "gocryptfs:AES-SIV-512" if self.aessiv else "gocryptfs:AES-GCM-256",
            "block_size": 4096,
            "file_names": "plaintext" if self.plaintextnames else "encrypted (EME)",
            "scrypt_n": 2**self.scryptn,
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

    accepted_params = {
        "mode": "standard (AES-192, 1 KiB blocks) or paranoia (AES-256, MAC headers, chained IVs)"
    }
    binary = "encfs"
    package = "encfs"
    encryption = "encfs"
    MODES = ("standard", "paranoia")

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.mode = spec.param_dict.get("mode", "standard")
        if self.mode not in self.MODES:
            raise ValueError(f"encfs: mode must be one of {', '.join(self.MODES)}, not {self.mode!r}")

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

    accepted_params = {
        "cipher": "one of `cryfs --show-ciphers` (default xchacha20-poly1305)",
        "blocksize": "ciphertext block size in bytes (default 16384)",
    }
    binary = "cryfs"
    package = "cryfs"
    encryption = "cryfs"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.cipher = spec.param_dict.get("cipher", "xchacha20-poly1305")
        self.blocksize = _int_param(spec, "blocksize", 16384, 4096, 2**24)

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

    accepted_params = {"format": "store format 1-4 (default 4, the 'lite' format)"}
    binary = "securefs"
    package = "securefs"
    encryption = "securefs"
    secret_via = "file"

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.format = _int_param(spec, "format", 4, 1, 4)

    def init_store(self, volume: Volume) -> None:
        host.run(self.init_command(volume, self.secret_file(volume)), timeout=300)
        volume.state["secrets"].discard("password")

    def init_command(self, volume: Volume, keyfile: Path) -> list[str]:
        return [
            "securefs", "create", "--format", str(self.format), "--keyfile", str(keyfile),
            # the key file is random: a fast KDF is enough (argon2id, the default, costs seconds)
            "--pbkdf", "pkcs5-pbkdf2-hmac-sha256", "--rounds", str(SECUREFS_PBKDF_ROUNDS),
            str(self.store(volume)),
        ]  # fmt: skip

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
