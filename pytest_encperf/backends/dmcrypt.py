"""The dm-crypt family through ``cryptsetup``: LUKS2, LUKS1 and plain dm-crypt; TrueCrypt/VeraCrypt
(tcrypt) and BitLocker (bitlk) volumes someone else made are in existingvolumes.py, on the same base.

Life cycle: ``create`` makes the container (or copies the existing volume image), formats it
where we own the format (LUKS, plain), opens the mapping once to put ext4 on it and closes it;
``mount`` opens the mapping and mounts it; ``unmount`` unmounts and closes the mapping, so no
key stays in the kernel between uses. Every mapping gets a unique name
(``encperf-<pid>-<token>-<n>``, the token random per run) registered on a Cleanup the moment it exists.

Secrets: LUKS and plain volumes get a random key that lives in this process's memory only and
reaches cryptsetup on its stdin (``--key-file -``: read as binary key material, not as a
passphrase); tcrypt and bitlk passwords are read from a file the user names and written to
cryptsetup's stdin (for tcrypt, ``--key-file`` means TrueCrypt keyfiles, not the password).
Nothing secret is ever in argv or in a file of ours.

Benchmark LUKS volumes use a fast key derivation (``--pbkdf pbkdf2 --pbkdf-force-iterations
1000``): opening them is instant, and they are NOT fit for real secrets.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

from .. import devicemapper, host, redaction, resources, trust
from ..ceiling import dm_crypt_cipher
from ..parsing import parse_bool, parse_int, parse_int_choice
from ..targets import Target, wipe_own_signature
from . import (
    KDF_PARAM,
    KDF_SETTINGS,
    BackendBase,
    BackendError,
    BackendSpec,
    Param,
    Volume,
)
from .ext4 import e2fsprogs_version, make_ext4, mount_ext4

CRYPTSETUP_PACKAGE = "cryptsetup-bin"  # Debian/Ubuntu package with cryptsetup and dmsetup
FAST_KDF = ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"]
# cryptsetup reencrypt --encrypt --reduce-device-size: the room at the device's end the data is
# shifted into, so the LUKS2 header (16 MiB, half of it as cryptsetup advises) fits in front
REDUCE_DEVICE_SIZE = 32 * 1024 * 1024
KEY_BYTES = 64  # enough for the largest key size (512-bit XTS); cryptsetup reads what it needs
# LUKS's volume key is cryptsetup's own (not read from our key file): 512 bytes at most here,
# whatever the cipher takes is cryptsetup's to say
MAX_LUKS_KEY_BITS = 4096

_names = itertools.count()


def mapping_name() -> str:
    """A device-mapper name unique to this process and call, carrying its pid and run token
    (resources.dm_name): a dead run's journal cannot name a later run's mapping of the same pid."""
    return resources.dm_name(os.getpid(), resources.run_token(), next(_names))


PROC_MODULES = Path("/proc/modules")


def dm_target_present(target: str, module: str) -> bool:
    """Whether the kernel has (or can load) device-mapper target ``target`` (e.g. crypt).

    The loaded modules are read first: a loaded ``module`` has registered its target, and
    reading a file spares the process that ``dmsetup targets`` is (every backend's requirements
    ask, 0.4 s each in the UML lane: issue 26). A target built into the kernel, or one whose module
    is not loaded, is looked for as before: ``dmsetup targets``, then ``modprobe -n``."""
    try:
        loaded = PROC_MODULES.read_text()
        if any(line.split()[:1] == [module] for line in loaded.splitlines()):
            return True
    except OSError:
        pass
    try:
        listed = host.run(["dmsetup", "targets"])
        if any(line.split()[:1] == [target] for line in listed.splitlines()):
            return True
    except host.HostError:
        pass
    try:
        host.run(["modprobe", "-n", module])  # -n: only check that it could be loaded
        return True
    except host.HostError:
        return False


def device_mapper_problems() -> list[str]:
    """Why cryptsetup cannot map devices here (empty when it can)."""
    found = []
    if not host.is_root():
        found.append("cryptsetup: needs root (device-mapper, losetup, mount)")
    if host.missing_tools("cryptsetup"):
        found.append(f"cryptsetup: not installed (Debian package {CRYPTSETUP_PACKAGE})")
    try:
        misc = Path("/proc/misc").read_text()
    except OSError:
        misc = ""
    if "device-mapper" not in misc:
        found.append("cryptsetup: kernel has no device-mapper (device-mapper not in /proc/misc)")
    elif not host.missing_tools("dmsetup") and not dm_target_present("crypt", "dm_crypt"):
        found.append(
            "cryptsetup: kernel has no dm-crypt target (crypt not in dmsetup targets, no dm_crypt module)"
        )
    return found


def status(name: str) -> dict[str, str]:
    """``cryptsetup status`` as a dict (cipher, keysize, sector size, flags...)."""
    info: dict[str, str] = {}
    try:
        text = host.run(["cryptsetup", "status", name])
    except host.HostError:
        return info
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


def device_size(device: Path) -> int:
    """Bytes of a block device (or file)."""
    fd = os.open(device, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def cryptsetup_version() -> str:
    return host.tool_version(["cryptsetup", "--version"])


class CryptsetupBackend(BackendBase):
    """Shared plumbing: device, mapping, ext4. Subclasses say how to format and open."""

    fs_label = "encperf"

    def target_problems(self, target: Target) -> list[str]:
        return target.problems() if self.uses_container(target) else []

    def requirements(self, target: Target) -> list[str]:
        found = []
        if target.kind == "directory":
            found.append(f"{self.name}: needs a block device (--encperf-target=container or partition)")
        found += device_mapper_problems()
        found += [f"{self.name}: needs {tool} (e2fsprogs)" for tool in host.missing_tools("mkfs.ext4")]
        return found

    def uses_container(self, target: Target) -> bool:
        """Whether the volume lives on the target's block device (container file or partition)."""
        return target.kind in ("container", "partition")

    def partition_refusal(self, target: Target) -> str | None:
        return None  # formatted (or opened) on the partition itself

    # -- what subclasses provide
    def prepare_device(self, volume: Volume) -> Path:
        """Make or find the block device that holds the encrypted volume."""
        device = self.target_device(volume)
        assert device is not None  # a directory target is refused by requirements()
        return device

    def format(self, volume: Volume, device: Path) -> None:
        """Write the encryption header (nothing for formats we only open)."""

    def open_command(self, volume: Volume, device: Path, name: str) -> tuple[list[str], bytes | None]:
        raise NotImplementedError

    # -- the life cycle
    def build(self, volume: Volume) -> None:
        device = self.prepare_device(volume)
        volume.device = device
        self.format(volume, device)
        mapped = self.open_mapping(volume, volume.created)
        make_ext4(mapped, label=self.fs_label)
        self.close_mapping(volume)

    def open_mapping(self, volume: Volume, cleanup: resources.Cleanup) -> Path:
        name = mapping_name()
        assert volume.device is not None  # create() prepared it
        argv, stdin = self.open_command(volume, volume.device, name)
        # register before running: a failed or interrupted open may still leave the mapping
        cleanup.dm(name)
        volume.state["dm_name"] = name
        host.run(argv, input=stdin)
        return Path("/dev/mapper") / name

    def close_mapping(self, volume: Volume) -> None:
        name = volume.state.pop("dm_name", None)
        if name:
            devicemapper.remove_dm(name)

    def open(self, volume: Volume) -> Path:
        mapped = self.open_mapping(volume, volume.mounted)
        volume.state["status"] = status(volume.state["dm_name"])
        return mount_ext4(volume, mapped)

    def unmount(self, volume: Volume) -> None:
        super().unmount(volume)
        volume.state.pop("dm_name", None)
        volume.state.pop("dm_layers", None)

    def describe(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {"encryption": self.name, "target": volume.target.kind}
        dm_status = volume.state.get("status", {})
        for key in ("type", "cipher", "keysize", "sector size", "flags", "integrity"):
            if key in dm_status:
                info[key.replace(" ", "_")] = dm_status[key]
        bits = re.match(r"(\d+) bits", dm_status.get("keysize", ""))
        if "cipher" in dm_status and bits and "integrity" not in dm_status:
            info["cipher_ceiling"] = dm_crypt_cipher(dm_status["cipher"], int(bits.group(1)))
        info.update(
            filesystem="ext4",
            cryptsetup=cryptsetup_version(),
            e2fsprogs=e2fsprogs_version(),
            loop_direct_io=volume.loop_direct_io,
        )
        return info

    def secret_key(self, volume: Volume) -> bytes:
        """The volume's random key, made on first use; in memory only, forgotten at destroy."""
        if "key" not in volume.state:
            volume.state["key"] = redaction.Secret(os.urandom(KEY_BYTES))
            volume.created.push("forget the key", lambda: volume.state.pop("key", None))
        return volume.state["key"]


# ---------------------------------------------------------------- LUKS and plain

PERF_FLAGS = {
    "no-workqueue": ["--perf-no_read_workqueue", "--perf-no_write_workqueue"],
    "same-cpu-crypt": ["--perf-same_cpu_crypt"],
    "submit-from-crypt-cpus": ["--perf-submit_from_crypt_cpus"],
}
PERF_PARAMS = (
    Param(
        "no-workqueue",
        parse_bool,
        False,
        "1: bypass dm-crypt's read and write workqueues (--perf-no_*_workqueue)",
    ),
    Param(
        "same-cpu-crypt",
        parse_bool,
        False,
        "1: encrypt on the CPU that submitted the I/O (--perf-same_cpu_crypt)",
    ),
    Param(
        "submit-from-crypt-cpus",
        parse_bool,
        False,
        "1: submit writes from the crypt threads (--perf-submit_from_crypt_cpus)",
    ),
)
SECTOR_SIZES = parse_int_choice((512, 1024, 2048, 4096))


# the same flags as /etc/crypttab options (crypttab(5))
CRYPTTAB_OPTIONS = {
    "no-workqueue": "no-read-workqueue,no-write-workqueue",
    "same-cpu-crypt": "same-cpu-crypt",
    "submit-from-crypt-cpus": "submit-from-crypt-cpus",
}


class LuksBackend(CryptsetupBackend):
    """``luks2`` (alias ``luks``) and ``luks1``: we format, with a random key in a key file."""

    params = (
        Param("cipher", help="cipher spec, e.g. aes-xts-plain64 (cryptsetup's default), serpent-xts-plain64"),
        Param(
            "key-size",
            parse_int(8, MAX_LUKS_KEY_BITS, multiple_of=8),
            help="key bits, e.g. 256 or 512 (XTS: two keys)",
        ),
        Param("hash", help="hash for the key derivation and anti-forensic splitter, e.g. sha256"),
        Param("sector-size", SECTOR_SIZES, help="encryption sector bytes, 512..4096 (LUKS2 only)"),
        *PERF_PARAMS,
        Param("integrity", help="LUKS2 authenticated encryption through dm-integrity, e.g. hmac-sha256"),
        KDF_PARAM,
    )
    kdf_settings = KDF_SETTINGS

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.luks_type = "luks1" if spec.name == "luks1" else "luks2"
        self.cipher: str | None = self.options["cipher"]
        self.key_size: int | None = self.options["key-size"]
        self.hash: str | None = self.options["hash"]
        self.sector_size: int | None = self.options["sector-size"]
        self.integrity: str | None = self.options["integrity"]
        self.perf = [name for name in PERF_FLAGS if self.options[name]]
        if self.sector_size is not None and self.luks_type == "luks1":
            raise ValueError("luks1: sector-size needs LUKS2 (use luks2:sector-size=...)")
        if self.integrity and self.luks_type == "luks1":
            raise ValueError("luks1: integrity needs LUKS2 (use luks2:integrity=...)")

    def requirements(self, target: Target) -> list[str]:
        found = super().requirements(target)
        has_dm = not any("device-mapper" in p for p in found)
        if self.integrity and has_dm and not dm_target_present("integrity", "dm_integrity"):
            found.append(f"{self.name}: integrity needs the kernel's dm-integrity target (dm_integrity)")
        return found

    def format_command(self, device: Path, uuid: str | None = None) -> list[str]:
        """luksFormat, the key on stdin (``--key-file -``)."""
        argv = ["cryptsetup", "luksFormat", "--batch-mode", "--type", self.luks_type]
        if uuid:
            argv += ["--uuid", uuid]
        if self.cipher:
            argv += ["--cipher", self.cipher]
        if self.key_size:
            argv += ["--key-size", str(self.key_size)]
        if self.hash:
            argv += ["--hash", self.hash]
        if self.sector_size:
            argv += ["--sector-size", str(self.sector_size)]
        if self.integrity:
            # the fresh volume's integrity tags are garbage until written; ext4 writes all it reads
            argv += ["--integrity", self.integrity, "--integrity-no-wipe"]
        if self.kdf == "fast":
            argv += FAST_KDF
        return [*argv, "--key-file", "-", str(device)]

    def setup_commands(self) -> list[str]:
        argv = ["cryptsetup", "luksFormat", "--type", self.luks_type]
        for flag, value in (
            ("--cipher", self.cipher),
            ("--key-size", self.key_size),
            ("--hash", self.hash),
            ("--sector-size", self.sector_size),
            ("--integrity", self.integrity),
        ):
            if value:
                argv += [flag, str(value)]
        own_kdf = "   (cryptsetup's own key derivation, not the benchmark's)"
        lines = [" ".join([*argv, "/dev/DEVICE"]) + own_kdf]
        if self.perf:
            lines.append("crypttab options: " + ",".join(CRYPTTAB_OPTIONS[flag] for flag in self.perf))
            flags = " ".join(arg for flag in self.perf for arg in PERF_FLAGS[flag])
            lines.append(f"or kept in the LUKS2 header: cryptsetup refresh --persistent {flags} NAME")
        return lines

    def kdf_label(self, volume: Volume | None = None) -> str:
        if self.kdf == "fast":
            return "pbkdf2, 1000 iterations (benchmark only)"
        own = "argon2id" if self.luks_type == "luks2" else "pbkdf2"
        return f"cryptsetup's default ({own}, calibrated to its iteration time)"

    def in_place_method(self) -> str:
        if self.luks_type != "luks2" or self.integrity:
            return ""  # LUKS2 only here; authenticated encryption cannot be added in place
        return "cryptsetup reencrypt --encrypt"

    def reencrypt_command(self, device: Path) -> list[str]:
        """Encrypt the plain data on ``device`` in place, shifting it by REDUCE_DEVICE_SIZE (the
        file system must end before that room); the key on stdin."""
        argv = ["cryptsetup", "reencrypt", "--encrypt", "--batch-mode", "--type", "luks2"]
        argv += ["--reduce-device-size", f"{REDUCE_DEVICE_SIZE // (1024 * 1024)}M"]
        for flag, value in (
            ("--cipher", self.cipher),
            ("--key-size", self.key_size),
            ("--hash", self.hash),
            ("--sector-size", self.sector_size),
        ):
            if value:
                argv += [flag, str(value)]
        if self.kdf == "fast":
            argv += FAST_KDF
        return [*argv, "--key-file", "-", str(device)]

    def encrypt_in_place(
        self, target: Target, workdir: Path, fill: Callable[[Path], object]
    ) -> tuple[Volume, int, float]:
        if target.kind != "container":
            raise BackendError(f"{self.spec}: in-place encryption runs on the container target only")
        trust.make_private_dir(workdir)  # 0700 whatever the umask: dead-run cleanup checks it
        volume = Volume(self, target, workdir)
        with self.undo_on_failure(volume, "in-place encryption", self.destroy):
            device = self.target_device(volume)
            assert device is not None
            size = device_size(device)
            make_ext4(device, label=self.fs_label, size=size - REDUCE_DEVICE_SIZE)
            root = mount_ext4(volume, device)
            (root / self.data_dir_name).mkdir()
            fill(root / self.data_dir_name)
            self.unmount(volume)
            started = time.perf_counter()
            # its temporary LUKS2 header goes to the working directory: our private one, never
            # wherever the user started (read-only there, or theirs to find a header in)
            host.run(
                self.reencrypt_command(device), input=self.secret_key(volume), timeout=24 * 3600,
                cwd=volume.workdir,
            )  # fmt: skip
            seconds = time.perf_counter() - started
        return volume, size - REDUCE_DEVICE_SIZE, seconds

    def format(self, volume: Volume, device: Path) -> None:
        uuid = None
        if volume.target.kind == "partition":
            uuid = str(uuid4())
            # wipes only the LUKS header with this UUID: a luksFormat that failed before
            # writing it (a busy device, a bad parameter) is not followed by a wipe
            volume.created.push(f"wipe our LUKS header on {device}", lambda: wipe_own_signature(device, uuid))
        host.run(self.format_command(device, uuid), input=self.secret_key(volume), timeout=300)

    def open_command(self, volume: Volume, device: Path, name: str) -> tuple[list[str], bytes | None]:
        argv = ["cryptsetup", "open", "--type", self.luks_type, "--key-file", "-"]
        for flag in self.perf:
            argv += PERF_FLAGS[flag]
        return [*argv, str(device), name], self.secret_key(volume)

    def describe(self, volume: Volume) -> dict[str, Any]:
        info = super().describe(volume)
        # what cryptsetup opened (LUKS2 after an in-place encryption), beside the spec's type
        info.update(type=self.luks_type, opened_as=volume.state.get("status", {}).get("type", ""))
        info["pbkdf"] = self.kdf_label()
        for flag in self.perf:
            info[flag] = True
        return info


class PlainDmcryptBackend(CryptsetupBackend):
    """``dm-plain``: dm-crypt without a header (cryptsetup ``--type plain``); the key file is the key.

    ``cipher=a+b+c`` is a cascade: one plain mapping per cipher, stacked, each with its own key,
    as cryptsetup opens a TrueCrypt/VeraCrypt cascade. Listed as VeraCrypt names them
    (AES-Twofish-Serpent = ``aes-xts-plain64+twofish-xts-plain64+serpent-xts-plain64``): the
    first cipher is the layer on the device, the last the one the file system writes through,
    so data is encrypted with the last cipher first.
    """

    params = (
        Param(
            "cipher",
            default="aes-xts-plain64",
            help="cipher spec; a+b+c stacks one mapping per cipher (a cascade, up to 3)",
        ),
        Param(
            "key-size",
            parse_int(8, KEY_BYTES * 8, multiple_of=8),
            512,
            "key bits per cipher (512 for XTS: two keys)",
        ),
        Param("sector-size", SECTOR_SIZES, help="encryption sector bytes, 512..4096"),
        *PERF_PARAMS,
    )
    MAX_LAYERS = 3

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.cipher: str = self.options["cipher"]
        self.layers = self.cipher.split("+")
        if any(not layer for layer in self.layers) or len(self.layers) > self.MAX_LAYERS:
            raise ValueError(
                f"dm-plain: cipher {self.cipher!r}: one cipher spec, or up to {self.MAX_LAYERS} joined by +"
            )
        self.key_size: int = self.options["key-size"]
        self.sector_size: int | None = self.options["sector-size"]
        self.perf = [name for name in PERF_FLAGS if self.options[name]]

    def layer_command(self, cipher: str, device: Path, name: str) -> list[str]:
        argv = ["cryptsetup", "open", "--type", "plain", "--batch-mode", "--cipher", cipher]
        argv += ["--key-size", str(self.key_size), "--key-file", "-"]
        # read exactly the key's bytes: a plain key file (here stdin) is the key itself, not hashed
        argv += ["--keyfile-size", str(self.key_size // 8)]
        if self.sector_size:
            argv += ["--sector-size", str(self.sector_size)]
        for flag in self.perf:
            argv += PERF_FLAGS[flag]
        return [*argv, str(device), name]

    def open_command(self, volume: Volume, device: Path, name: str) -> tuple[list[str], bytes | None]:
        return self.layer_command(self.layers[0], device, name), self.layer_key(volume, 0)

    def setup_commands(self) -> list[str]:
        lines = []
        below = "/dev/DEVICE"
        for layer, cipher in enumerate(self.layers):
            name = "NAME" if layer == len(self.layers) - 1 else f"NAME_{layer + 1}"
            argv = self.layer_command(cipher, Path(below), name)
            argv.remove("--batch-mode")
            keyfile = "KEYFILE" if len(self.layers) == 1 else f"KEYFILE_{layer + 1}"  # a key per layer
            lines.append(" ".join(argv).replace("--key-file -", f"--key-file {keyfile}"))
            below = f"/dev/mapper/{name}"
        if self.perf:
            lines.append("crypttab options: " + ",".join(CRYPTTAB_OPTIONS[flag] for flag in self.perf))
        return lines

    def layer_key(self, volume: Volume, layer: int) -> bytes:
        """Each layer's own random key (a cascade's keys are independent): ``key`` for the first,
        ``key_<n>`` for the others, in memory only, forgotten at destroy."""
        if layer == 0:
            return self.secret_key(volume)
        name = f"key_{layer}"
        if name not in volume.state:
            volume.state[name] = redaction.Secret(os.urandom(KEY_BYTES))
            volume.created.push(f"forget {name}", lambda: volume.state.pop(name, None))
        return volume.state[name]

    def open_mapping(self, volume: Volume, cleanup: resources.Cleanup) -> Path:
        """The first layer on the device, each next one on the mapping below it."""
        mapped = super().open_mapping(volume, cleanup)
        below = [volume.state["dm_name"]]
        for layer in range(1, len(self.layers)):
            name = mapping_name()
            cleanup.dm(name)  # released before the one below it (last in, first out)
            volume.state["dm_name"] = name
            below.append(name)
            argv = self.layer_command(self.layers[layer], mapped, name)
            host.run(argv, input=self.layer_key(volume, layer))
            mapped = Path("/dev/mapper") / name
        volume.state["dm_layers"] = below
        return mapped

    def close_mapping(self, volume: Volume) -> None:
        names = volume.state.pop("dm_layers", [])
        volume.state.pop("dm_name", None)
        for name in reversed(names):
            devicemapper.remove_dm(name)

    def describe(self, volume: Volume) -> dict[str, Any]:
        info = super().describe(volume)
        if len(self.layers) > 1:
            info["cipher"] = self.cipher
            info["cascade_layers"] = len(self.layers)
            info.pop("cipher_ceiling", None)  # no single kernel cipher is its ceiling
        for flag in self.perf:
            info[flag] = True
        return info
