"""Command lines and checks of the userspace backends (no root, nothing mounted)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import mounting
from pytest_encperf.backends import (
    BackendError,
    BackendSpec,
    Volume,
    bitlocker,
    make_backend,
    parse_backend_list,
    placement_problems,
)
from pytest_encperf.backends.bitlocker import BitlockerBackend, protected_regions
from pytest_encperf.backends.fuse import (
    CryfsBackend,
    EncfsBackend,
    FuseBackend,
    GocryptfsBackend,
    SecurefsBackend,
)
from pytest_encperf.backends.qemu import QemuLuksBackend
from pytest_encperf.host import HostError
from pytest_encperf.secretdirs import SecretDir, secret_base
from pytest_encperf.targets import Target

PASSWORD = b"not-in-argv-7f3a9c"


def volume_for(backend: FuseBackend | QemuLuksBackend | BitlockerBackend, tmp_path: Path) -> Volume:
    volume = Volume(backend, Target("directory", tmp_path, 64 << 20), tmp_path)
    volume.state.update(root=str(tmp_path), password=PASSWORD, secret=PASSWORD)
    volume.state["secrets"] = SecretDir.create(volume.created)
    _made.append(volume)
    return volume


_made: list[Volume] = []


@pytest.fixture(autouse=True)
def no_secret_left() -> Iterator[None]:
    """Each test's secret directory (on a RAM file system) goes with its volume."""
    before = set(secret_dirs())
    yield
    while _made:
        _made.pop().created.release()
    assert set(secret_dirs()) - before == set(), "secret directory left behind"


def secret_dirs() -> list[Path]:
    return list(secret_base().glob(f"encperf-{os.getpid()}-*"))


def argv_text(argv: list[str]) -> str:
    return " ".join(argv)


@pytest.mark.parametrize(
    "spec",
    [
        "gocryptfs",
        "gocryptfs:aessiv=1,plaintextnames=1,scryptn=12",
        "encfs:mode=paranoia",
        "cryfs",
        "securefs",
    ],
)
def test_fuse_mount_commands_keep_the_password_out_of_argv(spec: str, tmp_path: Path) -> None:
    backend = make_backend(BackendSpec.parse(spec))
    assert isinstance(backend, FuseBackend)
    volume = volume_for(backend, tmp_path)
    argv = backend.mount_command(volume)
    assert PASSWORD.decode() not in argv_text(argv)
    assert argv[0] == backend.binary
    assert str(backend.mountpoint(volume).resolve()) in argv[-1]
    # foreground, so the daemon stays our child and we know when it has exited
    assert {"-fg", "-f"} & set(argv) or argv[:2] == ["securefs", "mount"]
    if backend.secret_via == "file":
        # in a 0600 file of a 0700 directory on a RAM file system, never under the measured dir
        secret = volume.state["secrets"].path / "password"
        assert secret.read_bytes() == PASSWORD
        assert secret.stat().st_mode & 0o777 == 0o600
        assert secret.parent.stat().st_mode & 0o777 == 0o700
        assert mounting.filesystem_type(secret) in ("tmpfs", "ramfs")
        assert str(secret) in argv
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and PASSWORD in p.read_bytes()]
    volume.created.release()
    assert not volume.state["secrets"].path.exists()


def test_gocryptfs_init_command_carries_the_parameters(tmp_path: Path) -> None:
    backend = GocryptfsBackend(BackendSpec.parse("gocryptfs:aessiv=1,plaintextnames=1,scryptn=12"))
    volume = volume_for(backend, tmp_path)
    argv = backend.init_command(volume, volume.state["secrets"].path / "password")
    assert argv[:2] == ["gocryptfs", "-init"]
    assert argv[argv.index("-scryptn") + 1] == "12"
    assert "-aessiv" in argv and "-plaintextnames" in argv
    assert "-passfile" in argv and PASSWORD.decode() not in argv_text(argv)
    default = GocryptfsBackend(BackendSpec("gocryptfs")).init_command(volume, tmp_path / "p")
    assert default[default.index("-scryptn") + 1] == "10"
    assert "-aessiv" not in default


@pytest.mark.parametrize(
    ("value", "flag", "ceiling"),
    [("auto", None, "gocryptfs:AES-GCM-256"), ("1", "-openssl=true", "gocryptfs:AES-GCM-256-OpenSSL"),
     ("0", "-openssl=false", "gocryptfs:AES-GCM-256-Go")],
)  # fmt: skip
def test_gocryptfs_crypto_implementation_reaches_the_mount_and_the_ceiling(
    tmp_path: Path, value: str, flag: str | None, ceiling: str
) -> None:
    backend = GocryptfsBackend(BackendSpec.parse(f"gocryptfs:openssl={value}"))
    volume = volume_for(backend, tmp_path)
    argv = backend.mount_command(volume)
    assert [a for a in argv if a.startswith("-openssl")] == ([flag] if flag else [])
    assert backend.describe_store(volume)["cipher_ceiling"] == ceiling


def test_encfs_creates_with_its_mode_only_once(tmp_path: Path) -> None:
    backend = EncfsBackend(BackendSpec.parse("encfs:mode=paranoia"))
    volume = volume_for(backend, tmp_path)
    backend.store(volume).mkdir()
    assert "--paranoia" in backend.mount_command(volume)
    assert "--stdinpass" in backend.mount_command(volume)
    (backend.store(volume) / ".encfs6.xml").write_text("<boost_serialization/>")
    assert "--paranoia" not in backend.mount_command(volume)


def test_cryfs_keeps_its_state_in_the_volume(tmp_path: Path) -> None:
    backend = CryfsBackend(BackendSpec.parse("cryfs:cipher=aes-256-gcm,blocksize=32768"))
    volume = volume_for(backend, tmp_path)
    backend.store(volume).mkdir()
    argv = backend.mount_command(volume)
    assert argv[argv.index("--cipher") + 1] == "aes-256-gcm"
    assert argv[argv.index("--blocksize") + 1] == "32768"
    env = backend.daemon_env(volume)
    assert env["XDG_DATA_HOME"].startswith(str(tmp_path)) and env["HOME"].startswith(str(tmp_path))
    assert env["CRYFS_FRONTEND"] == "noninteractive"
    assert env["CRYFS_NO_UPDATE_CHECK"] == "true"


def test_securefs_uses_a_key_file(tmp_path: Path) -> None:
    backend = SecurefsBackend(BackendSpec.parse("securefs:format=2"))
    volume = volume_for(backend, tmp_path)
    create = backend.init_command(volume, volume.state["secrets"].path / "password")
    assert create[create.index("--format") + 1] == "2"
    assert "--keyfile" in create and "--pass" not in create
    assert create[create.index("--pbkdf") + 1] == "pkcs5-pbkdf2-hmac-sha256"  # fast: the key is random
    assert "--keyfile" in backend.mount_command(volume)


def test_qemu_commands_pass_the_secret_by_file(tmp_path: Path) -> None:
    backend = QemuLuksBackend(BackendSpec("qemu-luks"))
    volume = volume_for(backend, tmp_path)
    keyfile = volume.state["secrets"].path / "passphrase"
    for argv in (
        backend.luks_format_command(tmp_path / "luks.img", keyfile),
        backend.qemu_img_command(tmp_path / "luks.img", keyfile, 64 << 20),
        backend.daemon_command(volume),
    ):
        assert PASSWORD.decode() not in argv_text(argv)
        assert str(keyfile) in argv_text(argv)
    luks = backend.luks_format_command(tmp_path / "luks.img", keyfile)
    assert luks[luks.index("--type") + 1] == "luks1"
    assert luks[luks.index("--pbkdf-force-iterations") + 1] == "1000"
    assert "cipher-alg=aes-256,cipher-mode=xts" in argv_text(
        backend.qemu_img_command(tmp_path / "luks.img", keyfile, 1)
    )
    assert "type=fuse" in argv_text(backend.daemon_command(volume))


def test_bitlocker_password_goes_to_stdin_not_argv(tmp_path: Path) -> None:
    backend = BitlockerBackend(
        BackendSpec.parse(f"bitlocker:image={tmp_path}/x.img,password-file={tmp_path}/pw")
    )
    volume = volume_for(backend, tmp_path)
    argv = backend.dislocker_command(volume)
    assert PASSWORD.decode() not in argv_text(argv)
    assert "-u" in argv
    # FUSE's foreground flag after "--": before it, dislocker reads -f as a BEK file
    assert argv[argv.index("--") + 1] == "-f"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "gocryptfs:aessiv=2",
            "gocryptfs: aessiv: bad switch value '2': expected 1/true/yes/on or 0/false/no/off",
        ),
        ("gocryptfs:scryptn=3", "gocryptfs: scryptn: bad value '3': expected a whole number from 10 to 28"),
        ("gocryptfs:openssl=yes", "gocryptfs: openssl: bad value 'yes': expected one of auto, 1, 0"),
        ("encfs:mode=fast", "encfs: mode: bad value 'fast': expected one of standard, paranoia"),
        (
            "cryfs:blocksize=abc",
            "cryfs: blocksize: bad value 'abc': expected a whole number from 4096 to 16777216",
        ),
        ("securefs:format=9", "securefs: format: bad value '9': expected a whole number from 1 to 4"),
        ("securefs:cipher=x", "has no parameter 'cipher'"),
        (
            "qemu-luks:key-size=100",
            "qemu-luks: key-size: bad value '100': expected one of 128, 256, 384, 512",
        ),
        (
            "qemu-luks:cipher=aes",
            "qemu-luks: cipher: bad value 'aes': expected a cipher spec like aes-xts-plain64",
        ),
        ("bitlocker:image=/a,device=/b", "image= or device=, not both"),
        (
            "bitlocker:filesystem=ntfs",
            "bitlocker: filesystem: bad value 'ntfs': expected one of existing, ext4",
        ),
    ],
)
def test_bad_parameters_are_usage_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_backend_list(spec)


def test_all_userspace_backends_are_registered() -> None:
    specs = parse_backend_list("gocryptfs,encfs,cryfs,securefs,qemu-luks,bitlocker:image=/x,password-file=/p")
    assert [s.name for s in specs] == ["gocryptfs", "encfs", "cryfs", "securefs", "qemu-luks", "bitlocker"]


@pytest.mark.parametrize(
    ("spec", "binary", "package"),
    [
        ("gocryptfs", "gocryptfs", "gocryptfs"),
        ("encfs", "encfs", "encfs"),
        ("cryfs", "cryfs", "cryfs"),
        ("securefs", "securefs", "securefs"),
        ("qemu-luks", "qemu-storage-daemon", "qemu-system-common"),
        ("bitlocker:image=/x,password-file=/p", "dislocker-fuse", "dislocker"),
    ],
)
def test_problems_name_binary_and_package(
    spec: str, binary: str, package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_which = shutil.which
    monkeypatch.setattr(
        shutil,
        "which",
        lambda name: None if name in (binary, "fusermount", "fusermount3") else real_which(name),
    )
    backend = make_backend(BackendSpec.parse(spec))
    problems = backend.problems(Target("directory", tmp_path, 1 << 20))
    name = spec.split(":")[0]
    assert f"{name}: needs {binary} (Debian package {package})" in problems
    assert f"{name}: needs fusermount3 or fusermount (Debian package fuse3)" in problems


def test_bitlocker_without_a_volume_is_a_skip_reason(tmp_path: Path) -> None:
    problems = BitlockerBackend(BackendSpec("bitlocker")).problems(Target("directory", tmp_path, 1 << 20))
    assert any("needs an existing BitLocker volume: image=PATH or device=PATH" in p for p in problems)
    assert any("password-file=PATH, recovery-file=PATH or bek-file=PATH" in p for p in problems)


BITLOCKER_DEVICE = "bitlocker:device=/dev/sdz3,password-file=/root/pw,filesystem=ext4"


@pytest.mark.parametrize("kind", ["container", "directory"])
def test_bitlocker_device_is_refused_off_the_partition_target(kind: str, tmp_path: Path) -> None:
    """dislocker opens device= read-write and filesystem=ext4 formats it: only the partition
    target's own device, which the user named twice on the command line, may be used."""
    backend = make_backend(BackendSpec.parse(BITLOCKER_DEVICE))
    problems = backend.problems(Target(kind, tmp_path, 1 << 20))
    assert (
        "bitlocker: device=/dev/sdz3 is opened read-write by dislocker (filesystem=ext4 overwrites it): "
        "name it with --encperf-target=partition --encperf-device=/dev/sdz3 "
        "--encperf-allow-destroy=/dev/sdz3"
    ) in problems


def test_bitlocker_device_must_be_the_partition_target_s_device(tmp_path: Path) -> None:
    backend = make_backend(BackendSpec.parse(BITLOCKER_DEVICE))
    other = Target("partition", tmp_path, 1 << 20, device=Path("/dev/sdz4"))
    same = Target("partition", tmp_path, 1 << 20, device=Path("/dev/sdz3"))
    assert any("device=/dev/sdz3 is opened read-write" in p for p in backend.problems(other))
    assert placement_problems(backend, other) != []
    assert not any("device=/dev/sdz3 is opened read-write" in p for p in backend.problems(same))
    assert placement_problems(backend, same) == []


def test_bitlocker_create_refuses_the_device_even_when_problems_were_not_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = tmp_path / "pw"
    password.write_bytes(PASSWORD)
    backend = make_backend(BackendSpec.parse(f"bitlocker:device=/dev/null,password-file={password}"))
    started: list[object] = []
    monkeypatch.setattr(bitlocker, "start_fuse_daemon", lambda *a, **k: started.append(a))
    with pytest.raises(BackendError, match="device=/dev/null is opened read-write by dislocker"):
        backend.create(Target("container", tmp_path, 1 << 20), tmp_path)
    assert started == [], "dislocker was started on a device the user did not allow"


def test_bitlocker_image_must_be_a_regular_file(tmp_path: Path) -> None:
    backend = make_backend(BackendSpec.parse("bitlocker:image=/dev/null,password-file=/root/pw"))
    problems = backend.problems(Target("container", tmp_path, 1 << 20))
    assert "bitlocker: image=/dev/null is not a regular file (a partition goes in device=)" in problems


DISLOCKER_METADATA = """
[INFO]   Sector size: 0x0200 (512) bytes
[INFO]   First metadata header offset:  0x0000000002195000
[INFO]   Second metadata header offset: 0x0000000002c1d000
[INFO]   Third metadata header offset:  0x000000000373a000
[INFO]   Number of boot sectors backuped: 16 sectors (0x10)
[INFO]   First metadata header offset:  0x2195000
[INFO]   Second metadata header offset: 0x2c1d000
[INFO]   Third metadata header offset:  0x373a000
[INFO]   Boot sectors backup address:   0x21a5000
"""


def test_bitlocker_protected_regions_are_what_dislocker_refuses_to_write() -> None:
    # measured on cryptsetup's bitlk-aes-xts-128 image: EIO exactly over these ranges
    assert protected_regions(DISLOCKER_METADATA) == [
        (0x2195000, 0x21A5000),
        (0x21A5000, 0x21A7000),
        (0x2C1D000, 0x2C2D000),
        (0x373A000, 0x374A000),
    ]
    with pytest.raises(HostError, match="cannot find the three BitLocker metadata offsets"):
        protected_regions("[INFO] Sector size: 0x0200 (512) bytes")


def test_default_kdf_leaves_out_the_fast_settings(tmp_path: Path) -> None:
    """kdf=default: each tool's own key derivation cost; kdf=fast (the default) says benchmark only."""
    go = GocryptfsBackend(BackendSpec.parse("gocryptfs:kdf=default"))
    volume = volume_for(go, tmp_path)
    assert "-scryptn" not in go.init_command(volume, tmp_path / "p")
    assert go.kdf_label() == "scrypt N=2^16 (gocryptfs's default)"
    assert "benchmark only" in GocryptfsBackend(BackendSpec("gocryptfs")).kdf_label()
    secure = SecurefsBackend(BackendSpec.parse("securefs:kdf=default"))
    create = secure.init_command(volume, tmp_path / "p")
    assert "--pbkdf" not in create and "--rounds" not in create
    qemu = QemuLuksBackend(BackendSpec.parse("qemu-luks:kdf=default"))
    luks = qemu.luks_format_command(tmp_path / "luks.img", tmp_path / "p")
    assert "--pbkdf-force-iterations" not in luks
    assert "iter-time" not in argv_text(qemu.qemu_img_command(tmp_path / "luks.img", tmp_path / "p", 1))
    assert "iter-time=10" in argv_text(
        QemuLuksBackend(BackendSpec("qemu-luks")).qemu_img_command(tmp_path / "luks.img", tmp_path / "p", 1)
    )
    with pytest.raises(ValueError, match="kdf and scryptn both set"):
        GocryptfsBackend(BackendSpec.parse("gocryptfs:kdf=fast,scryptn=12"))


@pytest.mark.parametrize(
    ("failures", "message", "formatted"),
    [
        (11, "qemu-img: luks.img: Unable to get accurate CPU usage", True),  # its calibration: a new try
        (12, "qemu-img: luks.img: Unable to get accurate CPU usage", False),
        (2, "qemu-img: Invalid parameter 'iter-time'", True),
        (3, "qemu-img: Invalid parameter 'iter-time'", False),  # any other error: 3 tries
    ],
)
def test_qemu_img_is_tried_again_when_its_pbkdf_calibration_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int, message: str, formatted: bool
) -> None:
    """qemu-img times its PBKDF by the thread's user CPU time, which tick-based accounting can leave
    at 0 ms: it refuses then, now and then, and a new process draws afresh."""
    from pytest_encperf.backends import qemu

    calls: list[list[str]] = []

    def run(argv: list[str], **_: object) -> None:
        calls.append(argv)
        if argv[0] == "cryptsetup":
            raise HostError("cryptsetup: not usable here")
        if len(calls) - 1 <= failures:
            raise HostError(message)

    monkeypatch.setattr(qemu.host, "run", run)
    monkeypatch.setattr(qemu.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(qemu.time, "sleep", lambda seconds: None)
    backend = QemuLuksBackend(BackendSpec("qemu-luks"))
    volume = volume_for(backend, tmp_path)
    if formatted:
        backend.format_image(volume, tmp_path / "key")
        assert volume.state["formatted_by"] == "qemu-img"
        assert len(calls) == 1 + failures + 1
    else:
        with pytest.raises(HostError, match="could not write a LUKS1 header") as raised:
            backend.format_image(volume, tmp_path / "key")
        assert len(calls) == 1 + failures
        assert str(raised.value).count(message) == 1  # the same error once, not once per try
