"""Real userspace volumes (root, FUSE): gocryptfs, EncFS, CryFS, securefs, qemu-luks, bitlocker.

Each test checks what it leaves: no mount, loop device, daemon process or file of ours.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pytest_encperf import children, host, mounting
from pytest_encperf.backends import BackendBase, BackendError, BackendSpec, Volume, make_backend
from pytest_encperf.backends.fuse import FuseBackend
from pytest_encperf.mountedvolume import open_volume
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB
from tests.helpers.support import (
    BITLK_IMAGE,
    TESTDATA,
    bitlk_passwords,
    disk_dir,
    extract,
    mounts_and_loops_left,
    tiny_session,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sessions_of_this_test_alone")]

MARKER = b"ENCPERF-PLAINTEXT-MARKER-7f3a9c"
NAME_MARKER = "encperf-secret-filename-7f3a9c"
BITLK_TARBALL = TESTDATA / "bitlk-images.tar.xz"


def skip_unless_usable(backend: BackendBase, target: Target) -> None:
    problems = backend.problems(target)
    if problems:
        pytest.skip("; ".join(problems))


def processes_mentioning(path: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(str(path) in arg for arg in cmdline):
            found.append(f"{proc.info['pid']}: {' '.join(cmdline)}")
    return found


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory on disk for the volumes; afterwards nothing of ours may remain."""
    parent = disk_dir()
    path = Path(tempfile.mkdtemp(prefix="encperf-test-", dir=parent))
    yield path
    assert mounts_and_loops_left(path) == [], "mount or loop device left behind"
    assert processes_mentioning(path) == [], "daemon left behind"
    leftovers = [p for p in path.rglob("*") if not p.is_dir() and not p.name.startswith("given-")]
    assert leftovers == [], "files left behind"
    shutil.rmtree(path)


def target_for(kind: str, base: Path) -> Target:
    return Target(kind, base, container_size(8 * MiB))


def write_marker_file(directory: Path) -> str:
    payload = MARKER * 4096
    with (directory / NAME_MARKER).open("wb") as handle:
        handle.write(payload)
        os.fsync(handle.fileno())
    return hashlib.sha256(payload).hexdigest()


def read_digest(directory: Path) -> str:
    return hashlib.sha256((directory / NAME_MARKER).read_bytes()).hexdigest()


def leaks_in_files(paths: list[Path]) -> list[str]:
    """Which markers (content, file name) appear in these files' names or bytes."""
    found = set()
    for path in paths:
        if NAME_MARKER in str(path):
            found.add("name")
        if path.is_file():
            data = path.read_bytes()
            if MARKER in data:
                found.add("content")
            if NAME_MARKER.encode() in data:
                found.add("name")
    return sorted(found)


def daemons(volume: Volume) -> list[psutil.Process]:
    """The daemons registered on the volume (by the mark each carries, see children.py)."""
    return [
        marked.process
        for r in volume.mounted.resources
        if r.kind == "daemon"
        for marked in children.marked_processes(r.ident)
    ]


def assert_daemons_are_our_children(volume: Volume) -> list[int]:
    procs = daemons(volume)
    assert procs, "no daemon registered"
    for proc in procs:
        assert proc.status() != psutil.STATUS_ZOMBIE
        assert proc.ppid() == os.getpid(), "daemon detached itself: we could not tell when it exits"
    return [proc.pid for proc in procs]


FUSE_CASES = [
    ("gocryptfs", "container"),
    ("gocryptfs:aessiv=1", "directory"),
    ("encfs", "container"),
    ("encfs:mode=paranoia", "directory"),
    ("cryfs:cipher=aes-256-gcm,blocksize=8192", "container"),
    ("securefs", "container"),
    ("securefs:format=2", "directory"),
]


@pytest.mark.parametrize(("spec", "kind"), FUSE_CASES)
def test_fuse_volume_round_trip_without_leaks(spec: str, kind: str, base: Path) -> None:
    backend = make_backend(BackendSpec.parse(spec))
    assert isinstance(backend, FuseBackend)
    target = target_for(kind, base)
    skip_unless_usable(backend, target)
    mounted = open_volume(backend, target, base / "vol")
    volume = mounted.volume
    try:
        pids = assert_daemons_are_our_children(volume)
        assert mounting.is_mounted(backend.mountpoint(volume))
        digest = write_marker_file(mounted.data_dir)
        assert read_digest(mounted.data_dir) == digest
        for log in (base / "vol").glob("*.log"):
            assert volume.state["password"] not in log.read_bytes(), f"password in {log.name}"
        backend.unmount(volume)
        assert not mounting.is_mounted(backend.mountpoint(volume))
        assert not any(psutil.pid_exists(pid) for pid in pids), "daemon still running after unmount"
        store_files = list(backend.store(volume).rglob("*"))
        assert store_files, "empty store"
        assert leaks_in_files(store_files) == []
        if not spec.startswith("cryfs"):  # each CryFS mount costs ~20 s of scrypt here
            assert read_digest(backend.mount(volume)) == digest
        info = mounted.description
        assert info["version"] != "unknown" and info["cipher"] and info["target"] == kind
        if kind == "container":
            assert info["loop_direct_io"] is True
    finally:
        backend.destroy(volume)
    backend.destroy(volume)  # idempotent


def test_leak_check_sees_plaintext_names(base: Path) -> None:
    """Positive control: gocryptfs with plaintextnames=1 stores the name in clear."""
    backend = make_backend(BackendSpec.parse("gocryptfs:plaintextnames=1"))
    target = target_for("directory", base)
    skip_unless_usable(backend, target)
    mounted = open_volume(backend, target, base / "vol")
    try:
        write_marker_file(mounted.data_dir)
        backend.unmount(mounted.volume)
        assert leaks_in_files(list(backend.store(mounted.volume).rglob("*"))) == ["name"]
    finally:
        backend.destroy(mounted.volume)


def break_password(backend: BackendBase, volume: Volume) -> None:
    volume.state["password"] = b"wrong-password"


def corrupt_gocryptfs(backend: BackendBase, volume: Volume) -> None:
    assert isinstance(backend, FuseBackend)
    (backend.store(volume) / "gocryptfs.conf").write_text("{not json")


def corrupt_encfs(backend: BackendBase, volume: Volume) -> None:
    assert isinstance(backend, FuseBackend)
    (backend.store(volume) / ".encfs6.xml").write_text("garbage")


@pytest.mark.parametrize(
    ("spec", "damage", "cause"),
    [
        ("gocryptfs", break_password, r"(?i)password incorrect"),
        ("gocryptfs", corrupt_gocryptfs, r"config file"),
        ("encfs", break_password, r"(?i)password"),
        ("encfs", corrupt_encfs, r"(?i)config|unable|version"),
        ("securefs", break_password, r"(?i)password|key|mac|invalid"),
        ("qemu-luks", break_password, r"(?i)invalid password|cannot unlock"),
    ],
    ids=[
        "gocryptfs-password",
        "gocryptfs-corrupt",
        "encfs-password",
        "encfs-corrupt",
        "securefs-key",
        "qemu-password",
    ],
)
def test_bad_secret_or_store_is_a_clear_error_and_leaves_nothing(spec, damage, cause, base: Path) -> None:
    backend = make_backend(BackendSpec.parse(spec))
    target = target_for("container", base)
    skip_unless_usable(backend, target)
    mounted = open_volume(backend, target, base / "vol")
    try:
        backend.unmount(mounted.volume)
        damage(backend, mounted.volume)
        with pytest.raises(BackendError, match=rf"(?s)^{spec}: mount: .*") as caught:
            backend.mount(mounted.volume)
        assert caught.match(cause)
        assert mounted.volume.data_dir is None
        assert len(mounted.volume.mounted) == 0, "partial mount not released"
    finally:
        backend.destroy(mounted.volume)


def test_qemu_luks_round_trip_without_leaks(base: Path) -> None:
    backend = make_backend(BackendSpec("qemu-luks"))
    target = target_for("container", base)
    skip_unless_usable(backend, target)
    mounted = open_volume(backend, target, base / "vol")
    volume = mounted.volume
    try:
        pids = assert_daemons_are_our_children(volume)
        assert mounting.is_mounted(base / "vol" / "export.raw")
        digest = write_marker_file(mounted.data_dir)
        backend.unmount(volume)  # umount, detach loop, stop the daemon, wait
        assert not any(psutil.pid_exists(pid) for pid in pids)
        assert mounts_and_loops_left(base) == []
        image = base / "vol" / "luks.img"
        assert image.read_bytes()[:6] == b"LUKS\xba\xbe"
        assert leaks_in_files([image]) == []
        assert read_digest(backend.mount(volume)) == digest
        info = mounted.description
        assert info["cipher"] == "aes-xts-plain64" and info["key_bits"] == 512
        assert info["formatted_by"] in ("cryptsetup", "qemu-img")
        assert isinstance(info["loop_direct_io"], bool)
    finally:
        backend.destroy(volume)
    assert not (base / "vol" / "luks.img").exists()


def test_qemu_luks_falls_back_to_qemu_img(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_encperf.backends import qemu

    backend = make_backend(BackendSpec("qemu-luks"))
    target = target_for("container", base)
    skip_unless_usable(backend, target)
    if host.missing_tools("qemu-img"):
        pytest.skip("needs qemu-img (Debian package qemu-utils)")
    real_which = shutil.which
    monkeypatch.setattr(
        qemu.shutil, "which", lambda name, **kw: None if name == "cryptsetup" else real_which(name, **kw)
    )
    mounted = open_volume(backend, target, base / "vol")
    try:
        assert mounted.description["formatted_by"] == "qemu-img"
        digest = write_marker_file(mounted.data_dir)
        assert read_digest(mounted.data_dir) == digest
    finally:
        backend.destroy(mounted.volume)


# ---------------------------------------------------------------- bitlocker


@pytest.fixture(scope="session")
def bitlk_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, configparser.SectionProxy]:
    if not BITLK_TARBALL.exists():
        pytest.skip(f"BitLocker test images not found ({BITLK_TARBALL})")
    directory = tmp_path_factory.mktemp("bitlk")
    passwords = bitlk_passwords(directory)
    return extract("bitlk-images.tar.xz", f"bitlk-images/{BITLK_IMAGE}.img", directory), passwords


@pytest.fixture
def bitlk_image(bitlk_source: tuple[Path, configparser.SectionProxy], base: Path) -> tuple[Path, Path]:
    """A private copy of the image and a 0600 file with its password (``given-`` files are ours)."""
    source, entry = bitlk_source
    image = base / "given-bitlk.img"
    subprocess.run(["cp", "--sparse=always", str(source), str(image)], check=True)
    password = base / "given-password"
    password.write_text(entry["PW"])
    password.chmod(0o600)
    return image, password


def bitlocker_spec(image: Path, password: Path, extra: str = "") -> BackendSpec:
    return BackendSpec.parse(f"bitlocker:image={image},password-file={password}{extra}")


def test_bitlocker_reformatted_round_trip_without_leaks(bitlk_image: tuple[Path, Path], base: Path) -> None:
    image, password = bitlk_image
    backend = make_backend(bitlocker_spec(image, password, ",filesystem=ext4"))
    target = target_for("container", base)
    skip_unless_usable(backend, target)
    mounted = open_volume(backend, target, base / "vol")
    volume = mounted.volume
    try:
        cmdlines = [" ".join(p.cmdline()) for p in daemons(volume)]
        assert all("anaconda" not in c for c in cmdlines), "password in argv"
        assert_daemons_are_our_children(volume)
        digest = write_marker_file(mounted.data_dir)
        # fill the file system: ext4 must keep off BitLocker's metadata (dislocker: EIO there)
        free = shutil.disk_usage(mounted.data_dir).free - 2 * MiB
        with (mounted.data_dir / "fill").open("wb") as handle:
            chunk = os.urandom(MiB)
            for _ in range(free // MiB):
                handle.write(chunk)
            os.fsync(handle.fileno())
        assert free > 60 * MiB
        backend.unmount(volume)
        assert mounts_and_loops_left(base) == []
        assert leaks_in_files([image]) == []
        assert read_digest(backend.mount(volume)) == digest
        info = mounted.description
        assert info["cipher"].startswith("AES-XTS-128") and info["filesystem"] == "ext4"
    finally:
        backend.destroy(volume)
    assert image.exists(), "the user's image must never be deleted"


def test_bitlocker_existing_damaged_ntfs_is_reported_precisely(
    bitlk_image: tuple[Path, Path], base: Path
) -> None:
    image, password = bitlk_image
    backend = make_backend(bitlocker_spec(image, password))
    target = target_for("container", base)
    skip_unless_usable(backend, target)
    if host.missing_tools("ntfs-3g"):
        pytest.skip("needs ntfs-3g (Debian package ntfs-3g)")
    # the test image decrypts correctly but its NTFS data area was wiped: ntfs-3g refuses it
    with pytest.raises(
        BackendError,
        match=r"(?s)^bitlocker:image=[^:]*: mount: .*ntfs file system cannot be mounted: "
        r"ntfs-3g exited .*MFTMirr",
    ):
        open_volume(backend, target, base / "vol")


def test_bitlocker_wrong_password_and_missing_image(bitlk_image: tuple[Path, Path], base: Path) -> None:
    image, password = bitlk_image
    target = target_for("container", base)
    wrong = base / "given-wrong"
    wrong.write_text("not-the-password")
    backend = make_backend(bitlocker_spec(image, wrong))
    skip_unless_usable(backend, target)
    with pytest.raises(
        BackendError,
        match=r"(?s)^bitlocker:image=[^:]*: open: dislocker-fuse exited .*Unable to grab VMK or FVEK",
    ):
        open_volume(backend, target, base / "vol1")
    missing = make_backend(bitlocker_spec(base / "nowhere.img", password))
    with pytest.raises(BackendError, match=r"^bitlocker:image=[^:]*: image .*nowhere.img does not exist"):
        open_volume(missing, target, base / "vol2")


# ---------------------------------------------------------------- the whole plugin


def test_quick_cdm_profile_on_every_userspace_backend(
    pytester: pytest.Pytester, base: Path, bitlk_image: tuple[Path, Path]
) -> None:
    image, password = bitlk_image
    names = ["gocryptfs", "encfs", "cryfs", "securefs", "qemu-luks"]
    target = target_for("container", base)
    for name in names:
        skip_unless_usable(make_backend(BackendSpec(name)), target)
    bitlocker = f"bitlocker:image={image},password-file={password},filesystem=ext4"
    backends = f"--encperf-backends={','.join(names)},{bitlocker}"
    result = tiny_session(pytester, base, backends, "--encperf-warmup=0")  # each backend measured: enough
    result.assert_outcomes(passed=2 * (len(names) + 1))  # read and write
    lines = result.stdout.lines
    for name in [*names, "bitlocker"]:
        rows = [line for line in lines if f"│ {name}" in line]
        assert rows, f"no summary row for {name}"
        cells = [cell.strip() for cell in rows[0].split("│")[2:]]
        assert any(re.fullmatch(r"[\d.]+ / [\d.]+", cell) for cell in cells), f"no numbers: {rows[0]}"
    # eff.: only gocryptfs names a cipher whose speed is measured here (gocryptfs -speed)
    header = next(line for line in lines if line.startswith("backend ") and " eff. " in line)
    start, end = header.index("eff."), header.index("engine")
    efficiency: dict[str, set[str]] = {}
    for line in lines[lines.index(header) + 2 :]:
        if not line.strip() or line.startswith("*"):
            break
        efficiency.setdefault(line.split()[0].split(":")[0], set()).add(line[start:end].strip())
    assert set(efficiency) == {*names, "bitlocker"}
    assert all(cells == {"-"} for name, cells in efficiency.items() if name != "gocryptfs"), efficiency
    assert all(cell.endswith("%") for cell in efficiency["gocryptfs"]), efficiency
