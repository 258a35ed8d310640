"""bitlocker: an existing BitLocker volume opened in userspace by dislocker (FUSE).

BitLocker volumes cannot be created on Linux: the user names one (``image=`` a regular file,
or ``device=`` a block device: only the partition target's own device, named twice on the
command line, since dislocker opens it read-write) and how to unlock it (``password-file=``,
``recovery-file=`` or ``bek-file=``). ``dislocker-fuse`` exposes the decrypted volume as
``dislocker-file``; a loop device (``--direct-io=on``) over that file carries the file system
Windows made on it, which is mounted as it is: NTFS with ntfs-3g (FUSE, kept in the foreground
as our child), FAT/exFAT/ext4 with the kernel's driver. ``filesystem=ext4`` instead puts a fresh
ext4 on the decrypted volume (destroys its content: for throw-away images only).

Secrets: the user password goes to dislocker on stdin (``-u`` without a value prompts and
reads stdin). dislocker reads a *recovery* password only from its argument (``-p VALUE``) or a
terminal, so with ``recovery-file=`` the recovery password is visible in /proc/PID/cmdline
while the daemon runs: such a spec is refused unless it also says ``secret-in-argv=yes``
(documented in docs/reference/backends.md; describe() then says ``secret_in_argv: True``, and errors show
<secret> in its place). Prefer ``password-file=`` or ``bek-file=``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .. import host, mounting
from ..host import HostError
from ..parsing import parse_bool, parse_choice, parse_path
from ..redaction import Secret, SecretText
from ..targets import Target
from . import BackendBase, BackendError, BackendSpec, Param, Volume, named_device_problems
from .ext4 import MKFS_OPTIONS, e2fsprogs_version, mount_ext4
from .fusedaemon import fuse_problems, package_version, start_fuse_daemon, tool_problems

UNLOCK_PARAMS = ("password-file", "recovery-file", "bek-file")
EXT4_BLOCK = 4096
METADATA_BLOCK = 64 * 1024  # what dislocker protects at each FVE metadata header offset
_HEX = r"(0x[0-9a-fA-F]+)"


def protected_regions(metadata: str) -> list[tuple[int, int]]:
    """[start, end) byte ranges of the decrypted volume that dislocker refuses to write.

    From ``dislocker-metadata``: the three FVE metadata blocks and the boot-sector backup.
    Raises HostError when the output does not name them (never guess with someone's volume).
    """
    offsets = {int(m, 16) for m in re.findall(r"metadata header offset:\s+" + _HEX, metadata)}
    if len(offsets) != 3:
        raise HostError("cannot find the three BitLocker metadata offsets in dislocker-metadata's output")
    regions = [(offset, offset + METADATA_BLOCK) for offset in sorted(offsets)]
    backup = re.search(r"Boot sectors backup address:\s+" + _HEX, metadata)
    count = re.search(r"Number of boot sectors backuped:\s+(\d+)", metadata)
    sector = re.search(r"Sector size: \S+ \((\d+)\)", metadata)
    if backup and count and sector:
        start = int(backup.group(1), 16)
        regions.append((start, start + int(count.group(1)) * int(sector.group(1))))
    return sorted(regions)


FILESYSTEMS = ("existing", "ext4")


class BitlockerBackend(BackendBase):
    store_below = True  # dislocker reads the image (or partition) through the page cache
    params = (
        Param("image", parse_path, help="path of a BitLocker volume image file"),
        Param("device", parse_path, help="path of a BitLocker block device (partition)"),
        Param("password-file", parse_path, help="file holding the user password (sent on stdin)"),
        Param(
            "recovery-file",
            parse_path,
            help="file holding the 48-digit recovery password (dislocker takes it in argv)",
        ),
        Param("bek-file", parse_path, help="BitLocker external key file (.BEK)"),
        Param(
            "filesystem",
            parse_choice(FILESYSTEMS),
            "existing",
            "existing (mount what Windows made) or ext4 (reformat: destroys the content)",
        ),
        Param(
            "secret-in-argv",
            parse_bool,
            False,
            "yes: accept that with recovery-file= the recovery password is in dislocker's argv",
        ),
    )
    data_dir_name = "encperf-data"  # beside what the volume holds
    create_step = "open"  # it makes nothing: it opens the user's volume

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.filesystem: str = self.options["filesystem"]
        self.image: Path | None = self.options["image"]
        self.device: Path | None = self.options["device"]
        if self.image is not None and self.device is not None:
            raise ValueError("bitlocker: give image= or device=, not both")
        given = [key for key in UNLOCK_PARAMS if self.options[key] is not None]
        if len(given) > 1:
            raise ValueError(f"bitlocker: give one of {', '.join(UNLOCK_PARAMS)}, not {' and '.join(given)}")
        self.source = self.image or self.device
        self.unlock: tuple[str, Path] | None = (given[0], self.options[given[0]]) if given else None
        self.secret_in_argv: bool = self.options["secret-in-argv"]
        if given == ["recovery-file"] and not self.secret_in_argv:
            raise ValueError(
                "bitlocker: dislocker takes a recovery password only in its arguments, where every "
                "local user can read it (/proc/PID/cmdline) while the volume is mounted: add "
                "secret-in-argv=yes to accept that, or use password-file= or bek-file="
            )

    def partition_refusal(self, target: Target) -> str | None:
        if self.device is not None and str(self.device) == str(target.device):
            return None  # device= names the partition itself
        return (
            f"it reads the BitLocker volume its spec names ({self.source}), not {target.device} where "
            "the plain baseline runs: the table would compare two different disks (name the partition "
            f"with device={target.device})"
        )

    def requirements(self, target: Target) -> list[str]:
        found = []
        name = self.name
        if self.source is None:
            found.append(
                f"{name}: needs an existing BitLocker volume: image=PATH or device=PATH "
                "(BitLocker volumes cannot be created on Linux)"
            )
        found += self.source_problems(target)
        if self.unlock is None:
            found.append(f"{name}: needs password-file=PATH, recovery-file=PATH or bek-file=PATH")
        found += tool_problems(name, "dislocker-fuse", "dislocker")
        found += fuse_problems(name)
        if not host.is_root() and target.kind != "container":
            found.append(f"{name}: needs root (losetup and mount over dislocker-file)")
        found += [f"{name}: needs {tool} (util-linux)" for tool in host.missing_tools("losetup", "blkid")]
        if self.filesystem == "ext4":
            found += [f"{name}: needs {tool} (e2fsprogs)" for tool in host.missing_tools("mkfs.ext4")]
            found += tool_problems(name, "dislocker-metadata", "dislocker")
        return found

    def source_problems(self, target: Target) -> list[str]:
        """dislocker opens the volume read-write (and ``filesystem=ext4`` overwrites it): a
        ``device=`` only as the partition target's own device, named twice on the command line;
        an ``image=`` only as a regular file (never a device under another parameter's name)."""
        if self.device is not None:
            use = "is opened read-write by dislocker (filesystem=ext4 overwrites it)"
            return named_device_problems(self.name, "device", self.device, target, use)
        if self.image is not None and self.image.exists() and not self.image.is_file():
            return [f"{self.name}: image={self.image} is not a regular file (a partition goes in device=)"]
        return []

    # -- dislocker
    def dislocker_command(self, volume: Volume) -> list[str]:
        assert self.source is not None and self.unlock is not None
        # device=: the partition target's own device (source_problems), by its kernel node
        source = volume.target.node() if self.device is not None else self.source
        argv = ["dislocker-fuse", "-V", str(source)]
        kind, path = self.unlock
        if kind == "password-file":
            argv.append("-u")  # no value: dislocker prompts and reads the password from stdin
        elif kind == "recovery-file":
            argv.append(SecretText("-p" + volume.state["secret"].decode()))  # no other way
        else:
            argv += ["-f", str(path)]
        return [*argv, "--", "-f", str(self.dislocker_dir(volume))]  # -f after --: FUSE foreground

    @staticmethod
    def dislocker_dir(volume: Volume) -> Path:
        return volume.workdir / "dislocker"

    def open_volume(self, volume: Volume) -> None:
        """dislocker-fuse + loop device over dislocker-file, registered on ``volume.mounted``."""
        assert self.unlock is not None
        secret = volume.state.get("secret")
        start_fuse_daemon(
            volume,
            self.dislocker_command(volume),
            self.dislocker_dir(volume),
            volume.workdir / "dislocker.log",
            what="dislocker-fuse",
            stdin_data=Secret(secret + b"\n") if self.unlock[0] == "password-file" and secret else None,
            secrets=[secret] if secret else [],
        )
        decrypted = self.dislocker_dir(volume) / "dislocker-file"
        loop = host.attach_loop(decrypted, direct_io=True)
        volume.mounted.loop(loop.path, decrypted)
        volume.device, volume.loop_direct_io = loop.path, loop.direct_io

    def build(self, volume: Volume) -> None:
        # create() checked problems() (source and unlock given, the device allowed)
        assert self.source is not None and self.unlock is not None
        if not self.source.exists():
            what = "image" if self.image is not None else "device"
            raise BackendError(f"{self.spec}: {what} {self.source} does not exist")
        kind, path = self.unlock
        try:
            if kind != "bek-file":
                # kept in memory for remounts; forgotten at destroy
                volume.state["secret"] = Secret(path.read_bytes().strip())
                volume.created.push("forget password", lambda: volume.state.pop("secret", None))
            elif not path.is_file():
                raise FileNotFoundError(2, "no such file", str(path))
        except OSError as exc:
            raise BackendError(f"{self.spec}: {kind} {path}: {exc.strerror}") from exc
        self.dislocker_dir(volume).mkdir()
        volume.created.path(self.dislocker_dir(volume))
        volume.created.path(volume.workdir / "dislocker.log")
        self.open_volume(volume)
        if self.filesystem == "ext4":
            self.make_ext4_around_metadata(volume)

    def metadata_text(self) -> str:
        """``dislocker-metadata`` output: the volume's header, readable without the key."""
        assert self.source is not None
        return host.run(["dislocker-metadata", "-V", str(self.source)], timeout=30)

    def make_ext4_around_metadata(self, volume: Volume) -> None:
        """ext4 that never writes where BitLocker keeps its metadata.

        dislocker answers EIO to writes over the three FVE metadata blocks and the backup of
        the boot sectors (Windows' NTFS keeps those clusters allocated); ext4 gets them as bad
        blocks, or it would fail as soon as it allocates there.
        """
        regions = protected_regions(self.metadata_text())
        blocks = sorted(
            {n for start, end in regions for n in range(start // EXT4_BLOCK, (end - 1) // EXT4_BLOCK + 1)}
        )
        volume.state["protected_regions"] = [f"{start:#x}+{end - start}" for start, end in regions]
        badblocks = volume.workdir / "bitlocker-metadata.blocks"
        badblocks.write_text("".join(f"{n}\n" for n in blocks))
        volume.created.path(badblocks)
        device = volume.device
        host.run(
            [
                "mkfs.ext4",
                *MKFS_OPTIONS,
                "-L",
                "encperf",
                "-b",
                str(EXT4_BLOCK),
                "-l",
                str(badblocks),
                str(device),
            ],
            timeout=300,
        )

    def filesystem_type(self, device: Path) -> str:
        try:
            return host.run(["blkid", "-p", "-o", "value", "-s", "TYPE", str(device)]).strip()
        except HostError:
            return ""  # blkid exits 2 when it finds nothing

    def mount_filesystem(self, volume: Volume) -> Path:
        try:
            return self._mount_filesystem(volume)
        except HostError as exc:
            fstype = volume.state.get("fstype", "?")
            raise HostError(
                f"the BitLocker volume is unlocked, but its {fstype} file system cannot be mounted: {exc}"
            ) from exc

    def _mount_filesystem(self, volume: Volume) -> Path:
        device = volume.device
        assert device is not None  # unlocked onto a device first
        fstype = self.filesystem_type(device)
        volume.state["fstype"] = fstype or "none"
        if not fstype:
            raise HostError("no file system found inside the BitLocker volume (blkid -p found none)")
        if fstype == "ext4":
            return mount_ext4(volume, device)
        mountpoint = volume.workdir / "mnt"
        mountpoint.mkdir(exist_ok=True)
        if fstype == "ntfs":
            if host.missing_tools("ntfs-3g"):
                raise HostError("the volume holds NTFS: needs ntfs-3g (Debian package ntfs-3g) to write it")
            try:
                start_fuse_daemon(
                    volume,
                    ["ntfs-3g", "-o", "no_detach", str(device), str(mountpoint)],
                    mountpoint,
                    volume.workdir / "ntfs-3g.log",
                    what="ntfs-3g",
                    timeout=60,
                )
            finally:
                volume.created.path(volume.workdir / "ntfs-3g.log")
            return mountpoint
        known = Path("/proc/filesystems").read_text().split()
        if fstype not in known:
            raise HostError(
                f"the volume holds {fstype}, which this kernel cannot mount (not in /proc/filesystems)"
            )
        volume.mounted.mount(mountpoint)  # journaled before the call, as mount_ext4 does
        mounting.mount(device, mountpoint, fstype)
        return mountpoint

    def open(self, volume: Volume) -> Path:
        if not volume.mounted:  # after an unmount: unlock again
            self.open_volume(volume)
        return self.mount_filesystem(volume)

    def describe(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {
            "encryption": "BitLocker (dislocker userspace)",
            "dislocker": package_version("dislocker"),
            "unlock": self.unlock[0] if self.unlock else None,
            "secret_in_argv": self.unlock is not None and self.unlock[0] == "recovery-file",
            "filesystem": volume.state.get("fstype"),
            "target": "image" if self.image is not None else "device",
            "loop_direct_io": volume.loop_direct_io,
        }
        if "protected_regions" in volume.state:
            info["ext4_bad_blocks_over"] = ",".join(volume.state["protected_regions"])
        info.update(self.metadata(volume))
        if info["filesystem"] == "ext4":
            info["e2fsprogs"] = e2fsprogs_version()
        elif info["filesystem"] == "ntfs":
            info["ntfs-3g"] = package_version("ntfs-3g")
        return info

    def metadata(self, volume: Volume) -> dict[str, Any]:
        """Cipher and sector size from dislocker-metadata (reads the header, no key needed)."""
        if self.source is None or host.missing_tools("dislocker-metadata"):
            return {}
        try:
            text = self.metadata_text()
        except HostError:
            return {}
        info: dict[str, Any] = {}
        for line in text.splitlines():
            if "Encryption Type:" in line and "cipher" not in info:
                info["cipher"] = line.split("Encryption Type:", 1)[1].strip()
            elif "Sector size:" in line and "sector_size" not in info:
                match = re.search(r"\((\d+)\)", line)
                if match:
                    info["sector_size"] = int(match.group(1))
        return info
