"""Real eCryptfs mounts: round trip, no plaintext below, a wrong passphrase, a plugin session.

They need a kernel with eCryptfs. Where the host's has none (this project's CI),
``test_uml_lane.py`` runs this file inside user-mode Linux, which loads the ecryptfs module;
elsewhere each test skips with the backend's own reason.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host, mounting
from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.backends.ecryptfs import FNEK_SALT, SALT, EcryptfsBackend, auth_token, kernel_problems
from pytest_encperf.mountedvolume import open_volume
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB
from tests.helpers import uml
from tests.helpers.support import disk_dir, mounts_and_loops_left, tiny_session

pytestmark = pytest.mark.integration

MARKER = b"ENCPERF-PLAINTEXT-MARKER-e3c7f1"
FILE_NAME = "marker-name-9b2d"


def ecryptfs_keys(wait: float = 5.0) -> list[str]:
    """/proc/keys lines of "user" keys named like an eCryptfs signature (16 hex digits).

    An invalidated key (flag i) stays listed until the kernel's key garbage collector, a
    work item, has run: wait for that (``wait`` seconds at most)."""
    deadline = time.monotonic() + wait
    while True:
        lines = Path("/proc/keys").read_text().splitlines()
        found = [line for line in lines if re.search(r" user +[0-9a-f]{16}: ", line)]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def needs_ecryptfs() -> None:
    reasons = kernel_problems()
    if not host.is_root():
        reasons.append("ecryptfs: needs root (mount)")
    if reasons:
        pytest.skip("; ".join(reasons))


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory on a disk, checked for mounts, loop devices and keys of ours at the end."""
    assert ecryptfs_keys() == [], "an eCryptfs key was there before the test"
    path = Path(tempfile.mkdtemp(prefix="encperf-ecryptfs-", dir=disk_dir()))
    yield path
    assert mounts_and_loops_left(path) == [], "mount or loop device left behind"
    assert ecryptfs_keys() == [], "keyring entry left behind"
    shutil.rmtree(path)


def lower_files(lower: Path) -> dict[str, bytes]:
    return {str(p.relative_to(lower)): p.read_bytes() for p in lower.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("ecryptfs", "container"),
        ("ecryptfs:cipher=aes,key-bytes=32,filename-encryption=0", "container"),
        ("ecryptfs:cipher=twofish,key-bytes=16", "directory"),
    ],
)
def test_create_mount_write_remount_read_destroy(spec: str, kind: str, scratch: Path) -> None:
    backend = make_backend(BackendSpec.parse(spec))
    assert isinstance(backend, EcryptfsBackend)
    target = Target(kind, scratch, container_size(16 * MiB))
    workdir = scratch / "volume"
    mounted = open_volume(backend, target, workdir)
    volume = mounted.volume
    try:
        mountpoint, lower = backend.mountpoint(volume), backend.lower(volume)
        assert mounting.mount_type(mountpoint) == "ecryptfs"
        signatures = volume.state["signatures"]
        assert len(signatures) == (2 if backend.filename_encryption else 1)
        assert all(any(sig in line for line in ecryptfs_keys()) for sig in signatures)
        options = next(
            line for line in Path("/proc/self/mounts").read_text().splitlines() if " ecryptfs " in line
        )
        assert (
            f"ecryptfs_cipher={backend.cipher}" in options
            and f"ecryptfs_key_bytes={backend.key_bytes}" in options
        )
        assert (
            mounted.description["cipher_ceiling"] == f"kernel:cbc({backend.cipher}):{backend.key_bytes * 8}"
        )
        payload = MARKER * 8192
        (mounted.data_dir / FILE_NAME).write_bytes(payload)
        with (mounted.data_dir / FILE_NAME).open("rb+") as handle:
            os.fsync(handle.fileno())
        backend.unmount(volume)
        assert not mounting.is_mounted(mountpoint), "unmount must unmount"
        assert ecryptfs_keys() == [], "unmount must invalidate the keys"
        # the leak check: nothing of the content (nor, with FNEK, of the name) below
        below = lower_files(lower)
        assert len(below) == 1, below
        ((name, data),) = below.items()
        assert MARKER not in data, "plaintext in the lower file"
        assert len(data) >= len(payload)  # the whole file is there, encrypted (plus its header)
        if kind == "container":  # nor anywhere on the disk below (ext4's journal included)
            os.sync()
            assert MARKER not in (workdir / "container.img").read_bytes(), "plaintext on the disk"
        if backend.filename_encryption:
            assert FILE_NAME not in name and name.startswith("ECRYPTFS_FNEK_ENCRYPTED."), name
        else:
            assert name == f"data/{FILE_NAME}"
        data_dir = backend.mount(volume)
        assert (data_dir / FILE_NAME).read_bytes() == payload
    finally:
        backend.destroy(volume)
    assert not workdir.exists() or not any(workdir.iterdir())
    backend.destroy(volume)  # idempotent


def test_a_wrong_passphrase_gives_no_plaintext(scratch: Path) -> None:
    """eCryptfs does not check a passphrase at mount: the mount with the wrong keys succeeds,
    but a file written with the right ones cannot be opened (its header names keys the mount
    does not have), and with FNEK its name is not shown."""
    backend = make_backend(BackendSpec.parse("ecryptfs:filename-encryption=0"))
    assert isinstance(backend, EcryptfsBackend)
    target = Target("container", scratch, container_size(16 * MiB))
    mounted = open_volume(backend, target, scratch / "volume")
    volume = mounted.volume
    try:
        (mounted.data_dir / FILE_NAME).write_bytes(MARKER * 1024)
        backend.unmount(volume)
        mountpoint = backend.mount_with(volume, b"not-the-passphrase")
        assert volume.state["signatures"] != [auth_token(volume.state["passphrase"], SALT)[1]]
        wrong = mountpoint / "data" / FILE_NAME
        assert wrong.exists(), "without FNEK the name is shown"
        with pytest.raises(OSError) as raised:
            wrong.read_bytes()
        assert raised.value.errno in (errno.EIO, errno.ENOKEY), raised.value
        backend.unmount(volume)
        assert ecryptfs_keys() == []
        data_dir = backend.mount(volume)  # the right passphrase still opens it
        assert (data_dir / FILE_NAME).read_bytes() == MARKER * 1024
    finally:
        backend.destroy(volume)


def test_a_wrong_passphrase_hides_encrypted_names(scratch: Path) -> None:
    """With FNEK, a mount with the wrong keys lists nothing: the lower directory's one entry
    (the data directory, its name encrypted) cannot be decrypted, so it is not shown."""
    backend = make_backend(BackendSpec.parse("ecryptfs"))
    assert isinstance(backend, EcryptfsBackend)
    target = Target("directory", scratch, container_size(16 * MiB))
    mounted = open_volume(backend, target, scratch / "volume")
    volume = mounted.volume
    try:
        (mounted.data_dir / FILE_NAME).write_bytes(MARKER * 1024)
        backend.unmount(volume)
        mountpoint = backend.mount_with(volume, b"not-the-passphrase")
        (below,) = os.listdir(backend.lower(volume))
        assert below.startswith("ECRYPTFS_FNEK_ENCRYPTED.")
        assert os.listdir(mountpoint) == []
        backend.unmount(volume)
        assert ecryptfs_keys() == []
        data_dir = backend.mount(volume)
        assert os.listdir(data_dir.parent) == ["data"]
        assert (data_dir / FILE_NAME).read_bytes() == MARKER * 1024
    finally:
        backend.destroy(volume)


def test_keys_are_the_ones_ecryptfs_add_passphrase_adds() -> None:
    """Our auth tokens equal, byte for byte, what ecryptfs-utils adds for the same passphrase
    (`ecryptfs-add-passphrase --fnek -`, passphrase on stdin): a lower directory made here
    opens with ecryptfs-utils and the same passphrase. The tool adds them to the user keyring;
    the test reads them with keyctl and unlinks them."""
    for tool, package in (("ecryptfs-add-passphrase", "ecryptfs-utils"), ("keyctl", "keyutils")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (Debian package {package})")
    passphrase = os.urandom(12).hex().encode()
    expected = [auth_token(passphrase, salt) for salt in (SALT, FNEK_SALT)]
    added = subprocess.run(
        ["ecryptfs-add-passphrase", "--fnek", "-"], input=passphrase, capture_output=True, timeout=60
    )
    found = re.findall(rb"auth tok with sig \[([0-9a-f]{16})\]", added.stdout)
    try:
        assert added.returncode == 0, added.stdout + added.stderr
        assert [sig.decode() for sig in found] == [sig for _, sig in expected]
        for token, sig in expected:
            serial = subprocess.run(
                ["keyctl", "search", "@u", "user", sig], capture_output=True, text=True, check=True
            ).stdout.strip()
            payload = subprocess.run(["keyctl", "pipe", serial], capture_output=True, check=True).stdout
            assert payload == token, f"token of {sig} differs"
    finally:
        for sig in found:
            subprocess.run(["keyctl", "purge", "-s", "user", sig.decode()], capture_output=True)
    assert ecryptfs_keys() == []


def test_full_session_with_ecryptfs(pytester: pytest.Pytester, scratch: Path) -> None:
    """The plugin end to end: pytest --encperf-backends=ecryptfs at a tiny size. The table's
    ecryptfs rows are recorded (UML: one virtual CPU, not a performance figure). Without warm-up
    rounds, as test_full_session_with_dm_crypt_backends."""
    result = tiny_session(pytester, scratch, "--encperf-backends=ecryptfs", "--encperf-warmup=0")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*plain *", "*ecryptfs*"])
    assert list(scratch.glob("encperf-*")) == [], "run directory left behind"
    rows = [line for line in result.stdout.lines if "ecryptfs" in line or "plain " in line]
    assert rows
    if uml.in_guest():  # the lane prints them from its output directory
        (Path(uml.GUEST_OUTPUT_DIR) / "ecryptfs-session.txt").write_text("\n".join(rows) + "\n")
