"""VeraCrypt volumes: with the ``veracrypt`` console program, or written by us and opened by
cryptsetup.

``tool=cli`` (the default when ``veracrypt`` is on PATH): VeraCrypt creates the container
(``--text --create ... --filesystem=none --non-interactive``) and maps it without mounting
(``--filesystem=none``); we put ext4 on the mapped device and mount it ourselves.
``mode=kernel`` maps through dm-crypt (VeraCrypt's default on Linux); ``mode=fuse``
(``--mount-options=nokernelcrypto``) decrypts in VeraCrypt's FUSE process, which exposes the
volume through a loop device: we re-attach that loop device with direct I/O, or the numbers
would measure the page cache. VeraCrypt makes resources of its own when it maps a volume
(device-mapper targets, or in FUSE mode its FUSE mount ``/tmp/.veracrypt_aux_mntN``, a loop
device over it and two daemons): a "veracrypt-volume" resource is registered (journaled) before
the call that makes them, and released with ``veracrypt --text --dismount <container>``, by this
run or by the cleanup of a killed one. The password goes to VeraCrypt on stdin (``--stdin``) when
its ``--help`` lists that switch (newer releases); older releases only take ``--password=`` on
the command line, where other local users can read it in /proc while the command runs: such a
run is refused unless the spec says ``secret-in-argv=yes``, and then describe() says
``secret_in_argv: True`` and errors show ``<secret>`` in its place.

``tool=native`` (the default without the binary): we write the volume in VeraCrypt's format
(``vcformat``: salt, PBKDF2-HMAC-SHA-512/256, XTS-encrypted header, backup header) and open
it with ``cryptsetup open --type tcrypt --veracrypt``. VeraCrypt's own Linux data path is
dm-crypt with the same cipher, so this measures the same thing. AES only (cascades need
the binary).

Benchmark volumes get a random password, kept in this process's memory only, and PIM 1 by
default (16000 PBKDF2 iterations instead of 500000): quick to open, NOT fit for real secrets.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

from .. import children, footprints, host, mounttable, redaction, resources
from ..parsing import parse_bool, parse_choice, parse_int
from ..resources import Cleanup, Resource
from ..targets import Target
from . import KDF_PARAM, KDF_SETTINGS, MAX_PIM, BackendSpec, Param, Volume
from .dmcrypt import CryptsetupBackend, device_mapper_problems, mapping_name
from .ext4 import make_ext4, mount_ext4
from .fusedaemon import boot_ticks, foreign_daemon_pids

VERACRYPT = "veracrypt"
CLI_HASHES = ("SHA-512", "SHA-256", "Whirlpool", "Streebog", "BLAKE2s-256")
NATIVE_ENCRYPTION = ("AES",)
DEFAULT_PIM = 1


_stdin_support: dict[str, bool] = {}
KIND = "veracrypt-volume"  # a container VeraCrypt has (or may have) mapped: ident = container path


def cli_reads_stdin() -> bool:
    """Whether this veracrypt lists ``--stdin`` (read the password from standard input)."""
    path = shutil.which(VERACRYPT) or VERACRYPT
    if path not in _stdin_support:
        try:
            # 1.26 lists its options (--stdin among them) only in the usage line on stderr
            text = host.run(["sh", "-c", 'exec "$0" --text --help 2>&1', VERACRYPT])
        except host.HostError as exc:
            text = str(exc)  # some releases print the help and exit non-zero
        _stdin_support[path] = "--stdin" in text
    return _stdin_support[path]


def parse_encryption(text: str) -> str:
    """A VeraCrypt algorithm or cascade of them."""
    if not re.fullmatch(r"[A-Za-z0-9]+(-[A-Za-z0-9]+)*", text):
        raise ValueError(
            f"bad value {text!r}: expected an algorithm or cascade, e.g. AES or AES-Twofish-Serpent"
        )
    return text


class VeracryptBackend(CryptsetupBackend):
    params = (
        Param(
            "encryption",
            parse_encryption,
            "AES",
            "AES; Serpent, Twofish, Camellia, cascades like AES-Twofish-Serpent (cli)",
        ),
        Param(
            "hash",
            parse_choice(CLI_HASHES),
            "SHA-512",
            "header key derivation: SHA-512, SHA-256; Whirlpool, Streebog, BLAKE2s-256 (cli)",
        ),
        Param(
            "pim",
            parse_int(0, MAX_PIM),
            None,
            f"VeraCrypt PIM (default {DEFAULT_PIM}: fast, benchmark only; 0 = VeraCrypt's default)",
        ),
        Param(
            "mode",
            parse_choice(("kernel", "fuse")),
            "kernel",
            "kernel (dm-crypt) or fuse (VeraCrypt's own user-space crypto; cli only)",
        ),
        Param(
            "tool",
            parse_choice(("auto", "cli", "native")),
            "auto",
            "cli (the veracrypt program), native (our writer + cryptsetup) or auto (cli when installed)",
        ),
        Param(
            "secret-in-argv",
            parse_bool,
            False,
            "yes: accept that a veracrypt without --stdin gets the password in argv (cli)",
        ),
        KDF_PARAM,
    )
    kdf_settings = KDF_SETTINGS

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.encryption: str = self.options["encryption"]
        self.hash: str = self.options["hash"]
        self.kdf_conflict("pim")
        given_pim: int | None = self.options["pim"]
        # PIM 0 is VeraCrypt's default (500000 PBKDF2 iterations with SHA-512 or SHA-256)
        self.pim: int = given_pim if given_pim is not None else (DEFAULT_PIM if self.kdf == "fast" else 0)
        self.mode: str = self.options["mode"]
        tool = self.options["tool"]
        if tool == "auto":
            tool = "cli" if shutil.which(VERACRYPT) else "native"
        self.tool: str = tool
        self.secret_in_argv: bool = self.options["secret-in-argv"]

    # ------------------------------------------------------------ checks
    def partition_refusal(self, target: Target) -> str | None:
        if self.tool == "native":
            return None  # formats the partition, as luks2 does
        return "tool=cli supports the container target only (tool=native formats the partition)"

    def target_problems(self, target: Target) -> list[str]:
        if self.tool == "native":
            return super().target_problems(target)
        return target.problems() if target.kind == "container" else []

    def requirements(self, target: Target) -> list[str]:
        if self.tool == "native":
            found = super().requirements(target)
            if self.encryption not in NATIVE_ENCRYPTION:
                found.append(
                    f"veracrypt: encryption={self.encryption} needs the veracrypt program "
                    f"(without it only {', '.join(NATIVE_ENCRYPTION)} is written natively)"
                )
            if self.hash not in ("SHA-512", "SHA-256"):
                found.append(f"veracrypt: hash={self.hash} needs the veracrypt program")
            if self.mode == "fuse":
                found.append("veracrypt: mode=fuse needs the veracrypt program")
            try:
                import cryptography  # noqa: F401
            except ImportError:
                found.append("veracrypt: native format needs the Python package cryptography")
            return found
        found = []
        if target.kind == "directory":  # a partition: see partition_refusal
            found.append(
                "veracrypt: tool=cli supports the container target only (tool=native: partitions too)"
            )
        if shutil.which(VERACRYPT) is None:
            found.append("veracrypt: tool=cli but the veracrypt program is not installed")
        elif not cli_reads_stdin() and not self.secret_in_argv:
            found.append(
                "veracrypt: this veracrypt has no --stdin and takes the password only in its arguments, "
                "where every local user can read it (/proc/PID/cmdline): pass secret-in-argv=yes to accept"
            )
        if self.mode == "kernel":
            kernel = [p.replace("cryptsetup:", "veracrypt (kernel mode):") for p in device_mapper_problems()]
            if kernel and not found and not self.fuse_sibling().problems(target):
                kernel.append(
                    f"{self.fuse_sibling().spec} runs here (VeraCrypt's own crypto, no device-mapper)"
                )
            found += kernel
        elif not Path("/dev/fuse").exists():
            found.append("veracrypt: mode=fuse needs FUSE (/dev/fuse missing)")
        elif not host.is_root():
            found.append("veracrypt: needs root (losetup, mount)")
        return found

    def kdf_label(self, volume: Volume | None = None) -> str:
        if self.pim == 0:
            return "VeraCrypt's default PIM"
        fast = " (benchmark only)" if self.pim == DEFAULT_PIM else ""
        return f"PIM {self.pim}{fast}"

    def fuse_sibling(self) -> VeracryptBackend:
        """This spec in ``mode=fuse``: what to suggest where kernel mode cannot run."""
        params = dict(self.spec.params)
        params["mode"] = "fuse"
        return VeracryptBackend(BackendSpec(self.spec.name, tuple(params.items())))

    def password(self, volume: Volume) -> bytes:
        """The volume's random password, made on first use; in memory only, forgotten at destroy."""
        if "password" not in volume.state:
            # printable: VeraCrypt limits passwords to 64 (128 since 1.26) ASCII characters
            volume.state["password"] = redaction.Secret(secrets.token_urlsafe(32).encode())
            volume.created.push("forget the password", lambda: volume.state.pop("password", None))
        return volume.state["password"]

    # ------------------------------------------------------------ native: format + cryptsetup
    def format(self, volume: Volume, device: Path) -> None:
        if self.tool == "cli":
            return
        from .vcformat import write_volume

        fd = os.open(device, os.O_RDWR)
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            write_volume(fd, size, self.password(volume), self.hash, self.pim)
        finally:
            os.close(fd)

    def open_command(self, volume: Volume, device: Path, name: str) -> tuple[list[str], bytes | None]:
        argv = ["cryptsetup", "open", "--type", "tcrypt", "--veracrypt"]
        if self.pim:
            argv += ["--veracrypt-pim", str(self.pim)]  # a cost parameter, not a secret
        argv += ["--hash", self.hash.lower().replace("-", ""), str(device), name]
        return argv, redaction.Secret(self.password(volume) + b"\n")

    # ------------------------------------------------------------ cli: the veracrypt program
    def cli_common(self, password_args: list[str]) -> list[str]:
        # --text must come first (VeraCrypt refuses it anywhere else)
        return [VERACRYPT, "--text", "--non-interactive", *password_args, f"--pim={self.pim}", "--keyfiles="]

    def cli_password(self, volume: Volume) -> tuple[list[str], bytes]:
        """Arguments and stdin that give VeraCrypt the password: stdin when it can read it, argv
        only when the spec accepts that (secret-in-argv=yes)."""
        password = self.password(volume)
        if cli_reads_stdin():
            return ["--stdin"], redaction.Secret(password + b"\n")
        if not self.secret_in_argv:
            raise host.HostError("veracrypt has no --stdin: refusing to pass the password in argv")
        volume.state["secret_in_argv"] = True
        return [redaction.SecretText(f"--password={password.decode()}")], b""

    def run_cli(
        self, volume: Volume, argv: list[str], stdin: bytes, timeout: float, *, daemons: bool = False
    ) -> str:
        return host.run(argv, input=stdin, timeout=timeout, secrets=[self.password(volume)], daemons=daemons)

    def cli_create_command(self, container: Path, size: int, password_args: list[str]) -> list[str]:
        return [
            *self.cli_common(password_args),
            "--create", str(container), f"--size={size}", "--volume-type=normal",
            f"--encryption={self.encryption}", f"--hash={self.hash}", "--filesystem=none",
            "--random-source=/dev/urandom",
        ]  # fmt: skip

    def cli_map_command(self, container: Path, password_args: list[str]) -> list[str]:
        argv = [*self.cli_common(password_args), "--protect-hidden=no", "--filesystem=none"]
        if self.mode == "fuse":
            argv.append("--mount-options=nokernelcrypto")
        return [*argv, str(container)]

    def cli_create(self, volume: Volume) -> Path:
        container = volume.workdir / "container.img"
        volume.created.path(container)
        args, stdin = self.cli_password(volume)
        self.run_cli(volume, self.cli_create_command(container, volume.target.size, args), stdin, 600)
        return container

    def cli_map(self, volume: Volume, cleanup: Cleanup) -> Path:
        container: Path = volume.state["container"]
        # journaled before the call: VeraCrypt makes its own mapping (dm, or a FUSE mount, a loop
        # device and daemons), which a kill during or after the call must not leave behind
        cleanup.add(Resource(KIND, str(container)), f"veracrypt --dismount {container}")
        args, stdin = self.cli_password(volume)
        started = boot_ticks()
        # its daemons (FUSE mode) outlive the call on purpose: a dead run's cleanup ends the call
        # itself first, then dismounts, which stops them (children.py)
        self.run_cli(volume, self.cli_map_command(container, args), stdin, 120, daemons=True)
        device = self.cli_device(container)
        if self.mode == "fuse":
            # VeraCrypt forks its FUSE daemon, which decrypts: its CPU time is the volume's
            volume.foreign_daemons[:] = foreign_daemon_pids(str(container), started, executable=VERACRYPT)
            cleanup.push("forget veracrypt's daemons", volume.foreign_daemons.clear)
            # VeraCrypt attaches its FUSE image without direct I/O: the page cache would answer reads
            host.run(["losetup", "--direct-io=on", str(device)])
            volume.loop_direct_io = host.loop_direct_io(device)
        return device

    def cli_device(self, container: Path) -> Path:
        """The virtual device VeraCrypt made for ``container`` (``--list``: slot: file device mnt)."""
        device = mapped_device(container)
        if device is None:
            raise host.HostError(f"veracrypt --list does not show {container}")
        return device

    # ------------------------------------------------------------ life cycle
    def build(self, volume: Volume) -> None:
        if self.tool == "native":
            super().build(volume)
            return
        volume.state["container"] = self.cli_create(volume)
        mapping = Cleanup()
        device = self.cli_map(volume, mapping)
        try:
            make_ext4(device, label=self.fs_label)
        finally:
            mapping.release()

    def open(self, volume: Volume) -> Path:
        if self.tool == "native":
            return super().open(volume)
        return mount_ext4(volume, self.cli_map(volume, volume.mounted))

    def describe(self, volume: Volume) -> dict[str, Any]:
        info = super().describe(volume)
        info.update(
            encryption="veracrypt",
            veracrypt_encryption=self.encryption,
            hash=self.hash,
            pim=self.pim,
            kdf=self.kdf_label(),
            tool=self.tool,
            mode=self.mode if self.tool == "cli" else "kernel (cryptsetup tcrypt)",
        )
        if self.tool == "cli":
            info["veracrypt"] = host.tool_version([VERACRYPT, "--text", "--version"])
            info["secret_in_argv"] = bool(volume.state.get("secret_in_argv"))
        return info


def mapped_device(container: Path) -> Path | None:
    """The device VeraCrypt lists for ``container`` (``--list``: "slot: file device mount"), or
    None when it lists no such volume. HostError when veracrypt cannot be run."""
    try:
        listing = host.run([VERACRYPT, "--text", "--non-interactive", "--list"])
    except host.HostError as exc:
        if "not installed" in str(exc):
            raise
        return None  # "Error: No volumes mounted." (exit 1)
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 3 and os.path.realpath(fields[1]) == os.path.realpath(container):
            return Path(fields[2])
    return None


AUX_MOUNT = re.compile(r"\.veracrypt_aux_mnt[0-9]+")  # <TMPDIR>/.veracrypt_aux_mntN: its FUSE mount
CONTROL_READ_TIMEOUT = 10.0  # seconds: a FUSE daemon that does not answer must not hang a cleanup


def serialized_path(path: str) -> bytes:
    """The ``Path`` field of a volume's description as VeraCrypt's Serializer writes it: each
    of name and value a big-endian 64-bit size (itself preceded by the size of that size, 8),
    then the name NUL-terminated, the value as NUL-terminated wchar_t (UTF-32, little-endian here)."""
    name, value = b"Path\0", f"{path}\0".encode("utf-32-le")
    return struct.pack(">QQ", 8, len(name)) + name + struct.pack(">QQ", 8, len(value)) + value


def _control_names(control: Path, container: Path) -> bool:
    """Whether the ``control`` file of a VeraCrypt FUSE mount names ``container``: VeraCrypt's
    FUSE service serves the volume's description there (serialized_path). Read by ``cat`` with
    a timeout: a read from a FUSE daemon that hangs would hang here too."""
    try:
        done = subprocess.run(
            ["cat", "--", str(control)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CONTROL_READ_TIMEOUT,
            **children.popen_options(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    names = {str(container), os.path.realpath(container)}
    return done.returncode == 0 and any(serialized_path(name) in done.stdout for name in names)


def unnoted_loop_devices(container: Path, noted: Path | None) -> list[tuple[Path, Path]]:
    """(device, image) of the loop devices over the FUSE image (``<aux mount>/volume``) of
    ``container``'s VeraCrypt mapping other than ``noted``, the device VeraCrypt lists for it.

    VeraCrypt notes its loop device in its FUSE service after its ``losetup`` returns: killed in
    between (with the run, or ended by a dead run's cleanup), it leaves one that its dismount
    knows nothing of, and its FUSE mount cannot be unmounted from under it. Only root attaches
    loop devices, and the mount is the one whose control file names the run's container."""
    found = []
    for mountpoint in mounttable.mountpoints():
        aux = Path(mountpoint)
        if not AUX_MOUNT.fullmatch(aux.name) or not _control_names(aux / "control", container):
            continue
        image = aux / "volume"
        for entry in sorted(Path("/sys/block").glob("loop*")):
            device = Path("/dev") / entry.name
            if device != noted and host.loop_backing_file(device) == str(image):
                found.append((device, image))
    return found


def dismount(resource: Resource) -> str:
    """Release a "veracrypt-volume": ``veracrypt --text --dismount <container>`` when VeraCrypt
    still lists it (its mapping, FUSE mount, loop device and daemons all go with it), after
    detaching a loop device over its FUSE image that VeraCrypt never noted (unnoted_loop_devices)."""
    container = Path(resource.ident)
    noted = mapped_device(container)
    if noted is None:
        return f"veracrypt volume {container}: not mapped any more"
    detached = [
        f"detached {device} (over {image}, never noted by veracrypt), "
        for device, image in unnoted_loop_devices(container, noted)
        if host.detach_loop(device, image)
    ]
    host.run([VERACRYPT, "--text", "--non-interactive", "--dismount", str(container)])
    return f"{''.join(detached)}dismounted veracrypt volume {container}"


def footprint(resource: Resource) -> footprints.Footprint:
    """A volume's container and the device VeraCrypt maps it to (what a file system on it is
    mounted from); the container alone when veracrypt cannot say (not installed: nothing mapped
    by it can be released either)."""
    container = resource.ident
    try:
        device = mapped_device(Path(container))
    except host.HostError:
        return (container,)
    return (container,) if device is None else (container, str(device))


resources.register_kind(KIND, dismount, footprint=footprint)


__all__ = ["VeracryptBackend", "cli_reads_stdin", "mapping_name"]
