"""Volumes someone else made, opened by ``cryptsetup``: TrueCrypt/VeraCrypt (``tcrypt``) and
BitLocker (``bitlk``).

The volume is an ``image=`` file (copied to the run directory first, so the user's file stays
intact) or a ``device=`` (used in place, and then it must be the allowed partition target); ext4
goes on the opened mapping, the volume's header stays. Passwords are read from a file the user
names and reach cryptsetup on its stdin (for tcrypt, ``--key-file`` means TrueCrypt keyfiles, not
the password), never argv. The mapping's life cycle is dmcrypt.CryptsetupBackend's.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from .. import host, redaction
from ..parsing import parse_bool, parse_int, parse_path
from ..targets import Target
from . import MAX_PIM, BackendError, BackendSpec, Param, Volume, named_device_problems
from .dmcrypt import CryptsetupBackend

EXISTING_VOLUME_PARAMS = (
    Param("image", parse_path, help="volume file (copied to the run directory first)"),
    Param(
        "device",
        parse_path,
        help="block device holding the volume (must also be the allowed partition target)",
    ),
)


def parse_paths(text: str) -> list[Path]:
    """Paths separated by ':'."""
    return [Path(part) for part in text.split(":")]


def read_password(path_text: str, backend: str) -> redaction.Secret:
    path = Path(path_text)
    try:
        # one password per file; a trailing newline from an editor is not part of it
        return redaction.Secret(path.read_bytes().rstrip(b"\r\n"))
    except OSError as exc:
        raise BackendError(f"{backend}: cannot read password file {path}: {exc.strerror}") from exc


class ExistingVolumeBackend(CryptsetupBackend):
    """A volume someone else made (``image=`` file, copied first; or ``device=``, used in place).

    The copy keeps the user's file intact; ext4 is put on the opened mapping (the volume's
    header stays), so the volume's former content is lost on the copy or the device.
    """

    cryptsetup_type = ""

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.image: Path | None = self.options["image"]
        self.device: Path | None = self.options["device"]
        if (self.image is None) == (self.device is None):
            raise ValueError(f"{spec.name}: give exactly one of image=FILE or device=/dev/X")

    def uses_container(self, target: Target) -> bool:
        return target.kind == "partition" and self.device is not None

    def partition_refusal(self, target: Target) -> str | None:
        if self.device is not None:
            return None  # the device= check in problems() makes it the partition
        return (
            f"image= is copied to a file under --encperf-dir ({target.directory}), not onto "
            f"{target.device} where the plain baseline runs: the table would compare two different "
            f"disks (name the partition with device={target.device})"
        )

    def requirements(self, target: Target) -> list[str]:
        found = super().requirements(target)
        if self.image is not None and not self.image.is_file():
            found.append(f"{self.name}: image {self.image} is not a file")
        if self.device is not None:
            found += self.device_problems(target)
        return found

    def device_problems(self, target: Target) -> list[str]:
        assert self.device is not None
        return named_device_problems(
            self.name, "device", self.device, target, "is overwritten (ext4 on the opened volume)"
        )

    def prepare_device(self, volume: Volume) -> Path:
        if self.device is not None:
            refused = self.device_problems(volume.target)
            if refused:  # problems() said so already; never rely on the caller having asked
                raise BackendError("; ".join(refused))
            return volume.target.node()  # the target's own device (checked above), by its kernel node
        assert self.image is not None
        copy = volume.workdir / "container.img"
        volume.created.path(copy)
        shutil.copyfile(self.image, copy)
        os.chmod(copy, 0o600)
        loop = host.attach_loop(copy, direct_io=True)
        volume.created.loop(loop.path, copy)
        volume.loop_direct_io = loop.direct_io
        return loop.path

    def password(self) -> bytes:
        raise NotImplementedError


class TcryptBackend(ExistingVolumeBackend):
    """``tcrypt``: an existing TrueCrypt (7.1a, CipherShed) or VeraCrypt volume."""

    cryptsetup_type = "tcrypt"
    params = (
        *EXISTING_VOLUME_PARAMS,
        Param("password-file", help="file holding the password (fed to cryptsetup on stdin)"),
        Param(
            "keyfiles",
            parse_paths,
            [],
            "TrueCrypt/VeraCrypt keyfiles, separated by ':' (cryptsetup --key-file)",
        ),
        Param("veracrypt", parse_bool, True, "1 (default): also try VeraCrypt's format; 0: TrueCrypt only"),
        Param("veracrypt-pim", parse_int(0, MAX_PIM), help="VeraCrypt PIM (personal iterations multiplier)"),
        Param("hash", help="header key derivation hash, to skip trying the others (e.g. sha512)"),
        Param("hidden", parse_bool, False, "1: open the hidden volume"),
    )

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.password_file: str | None = self.options["password-file"]
        self.keyfiles: list[Path] = self.options["keyfiles"]
        if self.password_file is None and not self.keyfiles:
            raise ValueError("tcrypt: give password-file=FILE and/or keyfiles=FILE[:FILE...]")
        self.veracrypt: bool = self.options["veracrypt"]
        self.pim: int | None = self.options["veracrypt-pim"]
        self.hash: str | None = self.options["hash"]
        self.hidden: bool = self.options["hidden"]

    def open_command(self, volume: Volume, device: Path, name: str) -> tuple[list[str], bytes | None]:
        argv = ["cryptsetup", "open", "--type", "tcrypt"]
        if self.veracrypt:
            argv.append("--veracrypt")
        if self.pim is not None:
            # --veracrypt-pim takes the number in argv: it is a cost parameter, not a secret
            argv += ["--veracrypt-pim", str(self.pim)]
        if self.hash:
            argv += ["--hash", self.hash]
        if self.hidden:
            argv.append("--tcrypt-hidden")
        for keyfile in self.keyfiles:
            argv += ["--key-file", str(keyfile)]
        password = read_password(self.password_file, self.name) if self.password_file else b""
        return [*argv, str(device), name], redaction.Secret(password + b"\n")

    def describe(self, volume: Volume) -> dict[str, Any]:
        info = super().describe(volume)
        info.update(veracrypt=self.veracrypt, hidden=self.hidden)
        if self.pim is not None:
            info["veracrypt_pim"] = self.pim
        return info


class BitlkBackend(ExistingVolumeBackend):
    """``bitlk``: an existing BitLocker volume, opened with its password or recovery key."""

    cryptsetup_type = "bitlk"
    params = (
        *EXISTING_VOLUME_PARAMS,
        Param("password-file", help="file holding the BitLocker password (fed to cryptsetup on stdin)"),
        Param(
            "recovery-key-file", help="file holding the 48-digit recovery password (stdin, like a password)"
        ),
    )

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        given = [key for key in ("password-file", "recovery-key-file") if self.options[key] is not None]
        if len(given) != 1:
            raise ValueError("bitlk: give exactly one of password-file=FILE or recovery-key-file=FILE")
        self.secret_file: str = self.options[given[0]]

    def open_command(self, volume: Volume, device: Path, name: str) -> tuple[list[str], bytes | None]:
        # cryptsetup tries the given passphrase against the password and the recovery keyslots
        argv = ["cryptsetup", "open", "--type", "bitlk", str(device), name]
        return argv, redaction.Secret(read_password(self.secret_file, self.name) + b"\n")
