"""Shared by the tests that run every registered backend that can run here."""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host, loopdev, mounting, mounttable, secretdirs
from pytest_encperf.backends import BackendSpec, make_backend, vcformat
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB

from . import uml
from .standin import install_veracrypt

TESTDATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "testdata" / "cryptsetup"
TESTDATA = Path(os.environ.get("ENCPERF_CRYPTSETUP_TESTDATA", TESTDATA))
BITLK_IMAGE = "bitlk-aes-xts-128"  # NTFS inside (its data area is wiped in the test image)
VOLUME_PASSWORD = "encperf-test-volume-password"  # of the VeraCrypt volume made for tcrypt


def disk_dir() -> Path:
    """Where integration tests make their volumes: $ENCPERF_TEST_DIR, else /var/tmp (on disk;
    /tmp is often tmpfs, which the container target refuses)."""
    return Path(os.environ.get("ENCPERF_TEST_DIR", "/var/tmp"))


def extract(archive: str, member: str, into: Path, *more: str) -> Path:
    """One member of a shared test archive (GNU tar keeps the BitLocker images sparse), and
    ``more`` of them in the same pass (tar decompresses the whole archive for any member); the
    test skips, naming the archive, where this machine has none (the images are optional test data)."""
    if not (TESTDATA / archive).is_file():
        pytest.skip(f"cryptsetup's test images: no {TESTDATA / archive} (set ENCPERF_CRYPTSETUP_TESTDATA)")
    subprocess.run(["tar", "-xJf", str(TESTDATA / archive), "-C", str(into), member, *more], check=True)
    return into / member


def bitlk_passwords(into: Path) -> configparser.SectionProxy:
    """The shared BitLocker image's password (PW) and recovery passphrase (RP)."""
    conf = configparser.ConfigParser(interpolation=None)
    conf.optionxform = str  # type: ignore[assignment,method-assign]
    conf.read(extract("bitlk-images.tar.xz", "bitlk-images/images.conf", into))
    return conf[BITLK_IMAGE]


def given_file(directory: Path, name: str, text: str) -> Path:
    """A file the user names in a spec (a password file): 0600, outside every run directory."""
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


def spec_for(name: str, given: Path) -> tuple[str, list[str]]:
    """A spec of backend ``name`` that a generic test can run, and the secrets the user gives it.

    Backends that open someone else's volume get one, with its password file, in ``given``
    (a directory outside the test's --encperf-dir): bitlk and bitlocker the shared BitLocker
    image; tcrypt a VeraCrypt-format volume written by vcformat (the shared TrueCrypt/VeraCrypt
    images, a few hundred KiB, have no room for a file system). veracrypt runs as the program
    (``tool=cli,mode=fuse``) when one is on PATH (the real one, or the stand-in of
    :func:`with_veracrypt_standin`).
    """
    if name in ("bitlk", "bitlocker"):
        password = bitlk_passwords(given)["PW"]
        image = extract("bitlk-images.tar.xz", f"bitlk-images/{BITLK_IMAGE}.img", given)
        secret = given_file(given, "given-password", password)
        if name == "bitlk":
            return f"bitlk:image={image},password-file={secret}", [password]
        return f"bitlocker:image={image},password-file={secret},filesystem=ext4", [password]
    if name == "tcrypt":
        image = given / "given-veracrypt.img"
        fd = os.open(image, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            size = container_size(2 * MiB) + vcformat.DATA_OFFSET + vcformat.BACKUP_AREA
            os.ftruncate(fd, size)
            vcformat.write_volume(fd, size, VOLUME_PASSWORD.encode(), "SHA-512", 1)
        finally:
            os.close(fd)
        secret = given_file(given, "given-password", VOLUME_PASSWORD + "\n")
        return f"tcrypt:image={image},password-file={secret},hash=sha512,veracrypt-pim=1", [VOLUME_PASSWORD]
    if name == "veracrypt" and host.missing_tools("veracrypt") == []:
        return "veracrypt:tool=cli,mode=fuse", []
    return name, []


def with_veracrypt_standin(directory: Path) -> dict[str, str]:
    """Environment that puts the VeraCrypt stand-in first on PATH (state in ``directory``)."""
    install_veracrypt(directory / "bin")
    return {
        "PATH": f"{directory / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VERACRYPT_STANDIN_STATE": str(directory / "state"),
    }


def problems_here(spec: str, base: Path) -> list[str]:
    """Why backend ``spec`` cannot run on a small container in ``base``."""
    try:
        backend = make_backend(BackendSpec.parse(spec))
    except ValueError as exc:
        return [f"needs parameters: {exc}"]
    return backend.unavailable_reasons(Target("container", base, container_size(2 * MiB)))


def secret_dirs(pid: int) -> list[Path]:
    """Secret directories of process ``pid`` on the RAM file systems (must not outlive it)."""
    return [path for base in secretdirs.secret_bases() for path in base.glob(f"encperf-{pid}-*")]


def veracrypt_leftovers(base: Path, state: Path) -> list[str]:
    """What a VeraCrypt volume of a container under ``base``, mapped in FUSE mode, leaves when
    nobody dismounts it: the program's own FUSE mount (/tmp/.veracrypt_aux_mntN), loop devices
    over its ``volume`` file, and the stand-in's record of the mapping (in ``state``)."""
    slots = sorted(state.glob("slot[0-9]*.json"))
    aux = {json.loads(path.read_text())["aux"] for path in slots}
    for fields in mounttable.lines(Path("/proc/self/mountinfo")):
        mountpoint = fields[4]
        if mountpoint.startswith("/tmp/.veracrypt_aux_mnt") and base.name in fields[3]:
            aux.add(str(Path(mountpoint).parent))  # the container of this test bound on "volume"
    found = [f"stand-in mapping {path.name}" for path in slots]
    for directory in sorted(aux):
        found += [f"mount {m}" for m in mounting.mounts_under(Path(directory))]
        found += [f"loop device {d} over {directory}/volume" for d in host.loops_backed_by(Path(directory))]
        if os.path.lexists(directory):
            found.append(f"directory {directory}")
    return found


def mounts_and_loops_left(path: Path) -> list[str]:
    """Mounts and loop devices of ours still there after a test that worked under ``path``.

    Includes loop devices whose backing file belongs to a mount that is gone (a FUSE export
    unmounted under them): the kernel then names "/" as their backing file, so they are no
    longer "under path", but a leak all the same.
    """
    found = [f"mount {m}" for m in mounting.mounts_under(path)]
    found += [f"loop device {d}" for d in host.loops_backed_by(path)]
    # Such a device cannot be told from another xdist worker's for the moment its release takes
    # (its export unmounted, its loop device not yet detached): only one that stays counts.
    orphans = orphaned_loops()
    deadline = time.monotonic() + ORPHAN_GRACE
    while orphans and time.monotonic() < deadline:
        time.sleep(0.1)
        orphans &= orphaned_loops()
    found += [
        f"orphaned loop device /dev/{name} (backing file of a vanished mount)" for name in sorted(orphans)
    ]
    return found


ORPHAN_GRACE = 2.0  # seconds an orphaned loop device may take to go before it counts as left


def orphaned_loops() -> set[str]:
    """Loop devices (names) whose backing file the kernel names "/": a file on a mount gone."""
    names = set()
    for entry in Path("/sys/block").glob("loop*"):
        with contextlib.suppress(OSError):
            if (entry / "loop" / "backing_file").read_text().strip() == "/":
                names.add(entry.name)
    return names


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A new directory under disk_dir(), checked for mounts and loop devices of ours and removed
    when the test is done with it, also when it failed or skipped (but never with a mount or loop
    device left under it: rmtree would descend into the mount)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=disk_dir()))
    try:
        yield path
    finally:
        left = mounts_and_loops_left(path)
        if not left:
            shutil.rmtree(path)
    assert left == [], "mount or loop device left behind"


def write_mbr(
    target: Path, start: int = 2048, sectors: int = 32 * MiB // 512, *more: tuple[int, int]
) -> None:
    """An MBR with one Linux partition (what fdisk writes), without needing fdisk; ``more``:
    further partitions (start, sectors), written as given, overlapping or not (fdisk refuses to)."""
    fd = os.open(target, os.O_WRONLY)
    try:
        for index, (first, count) in enumerate([(start, sectors), *more]):
            entry = struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", first, count)
            os.pwrite(fd, entry, 446 + 16 * index)
        os.pwrite(fd, b"\x55\xaa", 510)
        os.fsync(fd)
    finally:
        os.close(fd)


def still_backs(device: Path, image: Path) -> bool:
    """Is ``device`` still attached to ``image``: the kernel's name of its file (removed or not),
    or, while ``image`` exists, its device and inode number (the kernel names a file it reached
    through a mount since gone "/")?

    Tests ask this, never "is ``device`` free": once detached, the name is another xdist
    worker's to take at once, and their loop device is none of ours to look at or detach.
    """
    named = host.loop_backing_file(device)
    if named is None:
        return False
    if named.removesuffix(host.DELETED) == str(image):
        return True
    try:
        fd = loopdev.open_device(device)
    except OSError:
        return False
    try:
        bound = loopdev.status(fd)
        return bound is not None and bound.backs(os.lstat(image))
    except OSError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def loop_device(image: Path, size: int) -> Iterator[Path]:
    """A loop device (direct I/O) over a new sparse ``image`` of ``size`` bytes, detached after."""
    with image.open("wb") as handle:
        handle.truncate(size)
    loop = host.attach_loop(image, direct_io=True)
    try:
        yield loop.path
    finally:
        host.detach_loop(loop.path, image)


@contextlib.contextmanager
def loop_on(backing: Path, offset: int = 0, sizelimit: int = 0) -> Iterator[Path]:
    """A loop device over a block device or file, ``backing`` (``losetup -o``, ``--sizelimit``), detached
    after."""
    argv = [
        *["losetup", "--find", "--show", *(["--offset", str(offset)] if offset else [])],
        *(["--sizelimit", str(sizelimit)] if sizelimit else []),
        str(backing),
    ]
    with host.machine_lock(host.LOOP_LOCK):  # two --find at once may pick the same device
        loop = Path(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip())
    attached = (host.loop_backing_file(loop) or "").removesuffix(host.DELETED)  # the kernel's name for it
    try:
        yield loop
    finally:
        host.detach_loop(loop, Path(attached))


@contextlib.contextmanager
def partitioned_loop(
    image: Path, size: int = 96 * MiB, *more: tuple[int, int]
) -> Iterator[tuple[Path, Path]]:
    """A loop device over a new ``image`` with one 32 MiB partition: (whole device, partition);
    ``more``: further partitions (start, sectors), see write_mbr."""
    with image.open("wb") as handle:
        handle.truncate(size)
    write_mbr(image, 2048, 32 * MiB // 512, *more)
    with host.machine_lock(host.LOOP_LOCK):  # two --find at once may pick the same device
        out = subprocess.run(
            ["losetup", "--find", "--show", "--partscan", str(image)],
            capture_output=True,
            text=True,
            check=True,
        )
    device = Path(out.stdout.strip())
    try:
        part = Path(f"{device}p1")
        if not part.exists():  # a kernel without the MBR parser: add it the way partx does (BLKPG)
            subprocess.run(["partx", "--add", str(device)], check=True, capture_output=True)
        for _ in range(50):  # devtmpfs makes the node right after
            if part.exists():
                break
            time.sleep(0.05)
        assert part.exists(), f"{part} did not appear"
        yield device, part
    finally:
        subprocess.run(["partx", "--delete", str(device)], capture_output=True)
        host.detach_loop(device, image)


def guest_engine() -> list[str]:
    """The engine option of a session the UML lane runs: the native engine there. Under UML a
    process start costs about 2 s, so a fio run per round made up half of the lane's sweep and
    full-session tests (ciphers sweep 58 s with fio, 27 s native; dm-crypt full session 44 s,
    22 s). The fio engine is tested on the host, and on dm-crypt in the guest by
    test_full_session_with_dm_crypt_backends, which asks for it. Empty elsewhere (the default
    engine). An --encperf-engine given after it wins."""
    return ["--encperf-engine=native"] if uml.in_guest() else []


TINY_BENCHMARK = "def test_workload(encperf, encperf_workload):\n    encperf.run(encperf_workload)\n"


def tiny_session(
    pytester: pytest.Pytester, directory: Path, *options: str, rounds: int = 1
) -> pytest.RunResult:
    """A plugin session end to end at a tiny size, volumes under ``directory``: SEQ1M-Q1T1 read
    and write, 2 MiB, ``rounds`` rounds of 0.05 s (guest_engine's engine in the UML lane);
    ``options`` name the backends and the rest."""
    return _benchmark_session(
        pytester, directory, "test_bench", TINY_BENCHMARK, "--encperf-size=2MiB", "--encperf-runtime=0.05",
        f"--encperf-rounds={rounds}", *guest_engine(), *options, "-k", "SEQ1M-Q1T1",
    )  # fmt: skip


def _benchmark_session(
    pytester: pytest.Pytester, directory: Path, module: str, source: str, *options: str
) -> pytest.RunResult:
    """``source`` as the test module ``module``, run in-process with volumes under ``directory``."""
    pytester.makepyfile(**{module: source})
    return pytester.runpytest(f"--encperf-dir={directory}", *options, "-p", "no:cacheprovider")


KDF_BENCHMARK = "def test_key_derivation(encperf_kdf):\n    assert encperf_kdf.note or encperf_kdf.settings\n"


def kdf_session(pytester: pytest.Pytester, directory: Path, *options: str) -> pytest.RunResult:
    """A plugin session of the kdf profile alone (``--encperf-profile=kdf``), volumes of 2 MiB
    under ``directory``; ``options`` name the backends and the rest."""
    return _benchmark_session(
        pytester,
        directory,
        "test_kdf",
        KDF_BENCHMARK,
        "--encperf-size=2MiB",
        "--encperf-profile=kdf",
        *options,
    )


INPLACE_BENCHMARK = "def test_in_place(encperf_inplace):\n    assert encperf_inplace.seconds > 0\n"


def inplace_session(pytester: pytest.Pytester, directory: Path, *options: str) -> pytest.RunResult:
    """A plugin session of the in-place encryption benchmark alone (``--encperf-inplace``), a
    file of 4 MiB, volumes under ``directory``; ``options`` name the backends and the rest."""
    return _benchmark_session(
        pytester,
        directory,
        "test_inplace",
        INPLACE_BENCHMARK,
        "--encperf-size=4MiB",
        "--encperf-inplace",
        "-rs",
        *options,
    )
