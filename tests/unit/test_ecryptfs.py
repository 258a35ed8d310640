"""eCryptfs backend: keys, mount options, parameters and skip reasons (no eCryptfs needed).

The real mounts are in tests/integration/test_ecryptfs_integration.py (run in the UML lane)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from pytest_encperf import host, redaction, resources
from pytest_encperf.backends import (
    BackendSpec,
    ecryptfs,
    make_backend,
    parse_backend_list,
    placement_problems,
)
from pytest_encperf.backends.ecryptfs import (
    FNEK_SALT,
    KEY_KIND,
    SALT,
    EcryptfsBackend,
    auth_token,
    kernel_problems,
    mount_options,
    passphrase_key,
)
from pytest_encperf.host import HostError
from pytest_encperf.resources import Cleanup, Resource
from pytest_encperf.targets import Target
from pytest_encperf.trust import RunScope

# What ecryptfs-add-passphrase 111 (Debian 12) put in the user keyring for this passphrase
# (`printf %s encperf-test-passphrase-1 | ecryptfs-add-passphrase -`, read with keyctl pipe):
# "Inserted auth tok with sig [810b45bd7664fd3a]", a 740-byte payload whose key begins 5a27b130...
PASSPHRASE = b"encperf-test-passphrase-1"
TOOL_SIG = "810b45bd7664fd3a"
TOOL_KEY_START = bytes.fromhex("5a27b130e9423afd")


def backend(spec: str = "ecryptfs") -> EcryptfsBackend:
    made = make_backend(BackendSpec.parse(spec))
    assert isinstance(made, EcryptfsBackend)
    return made


def test_key_and_signature_are_ecryptfs_utils_ones() -> None:
    key, sig = passphrase_key(PASSPHRASE, SALT)
    assert sig == TOOL_SIG
    assert key[:8] == TOOL_KEY_START and len(key) == 64
    assert repr(key) == "<secret>"


def test_auth_token_layout_is_ecryptfs_utils_payload() -> None:
    token, sig = auth_token(PASSPHRASE, SALT)
    assert len(token) == 740 and sig == TOOL_SIG
    assert token[0:2] == b"\x04\x00"  # version 0.4, token type 0 (password), flags 0
    assert token[2:628] == bytes(626)  # no session key: the kernel makes one per file
    password = token[628:]
    assert password[4:8] == (10).to_bytes(4, "little")  # SHA-512
    assert password[12:16] == (64).to_bytes(4, "little")  # key bytes
    assert password[16:20] == (2).to_bytes(4, "little")  # session key encryption key set
    assert password[20:28] == TOOL_KEY_START
    assert password[84:101] == TOOL_SIG.encode() + b"\x00"
    assert password[101:109] == SALT
    assert token[737:] == bytes(3)


def test_file_name_key_has_its_own_signature() -> None:
    _, sig = passphrase_key(PASSPHRASE, SALT)
    _, fnek_sig = passphrase_key(PASSPHRASE, FNEK_SALT)
    assert fnek_sig != sig and len(fnek_sig) == 16
    assert FNEK_SALT == b"99887766"  # the tool's quirk: the hex text's first 8 characters


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "ecryptfs",
            "ecryptfs_sig=S,ecryptfs_fnek_sig=F,ecryptfs_cipher=aes,ecryptfs_key_bytes=16,"
            "ecryptfs_unlink_sigs,ecryptfs_mount_auth_tok_only",
        ),
        (
            "ecryptfs:cipher=twofish,key-bytes=32,filename-encryption=0",
            "ecryptfs_sig=S,ecryptfs_cipher=twofish,ecryptfs_key_bytes=32,"
            "ecryptfs_unlink_sigs,ecryptfs_mount_auth_tok_only",
        ),
        (
            "ecryptfs:cipher=aes,key-bytes=24,passthrough=0",
            "ecryptfs_sig=S,ecryptfs_fnek_sig=F,ecryptfs_cipher=aes,ecryptfs_key_bytes=24,"
            "ecryptfs_unlink_sigs,ecryptfs_mount_auth_tok_only",
        ),
    ],
)
def test_mount_options_follow_the_parameters(spec: str, expected: str) -> None:
    made = backend(spec)
    fnek = "F" if made.filename_encryption else None
    options = mount_options(made.cipher, made.key_bytes, "S", fnek)
    assert options == expected
    assert "passthrough" not in options  # off: the kernel's default


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ecryptfs:cipher=rot13", "ecryptfs: cipher: bad value 'rot13': expected one of aes, twofish"),
        ("ecryptfs:key-bytes=64", "key-bytes for aes must be one of 16/24/32, not 64"),
        ("ecryptfs:cipher=des3_ede,key-bytes=16", "key-bytes for des3_ede must be one of 24"),
        ("ecryptfs:filename-encryption=maybe", "ecryptfs: filename-encryption: bad switch value 'maybe'"),
        ("ecryptfs:passthrough=1", "passthrough=1 is refused"),
        ("ecryptfs:sig=abc", r"has no parameter 'sig' \(accepted: cipher, filename-encryption, key-bytes"),
    ],
)
def test_bad_parameters_are_usage_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_backend_list(spec)


def test_parameter_table_names_every_parameter() -> None:
    table = {param.name: param for param in EcryptfsBackend.params}
    assert set(table) == {"cipher", "key-bytes", "filename-encryption", "passthrough"}
    assert "0 only" in table["passthrough"].help
    made = backend()
    assert (made.cipher, made.key_bytes, made.filename_encryption) == ("aes", 16, True)


def test_describe_names_the_kernel_cipher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = backend("ecryptfs:cipher=aes,key-bytes=32")
    monkeypatch.setattr(made, "requirements", lambda target: [])  # create() runs here without eCryptfs
    volume = made.create(Target("directory", tmp_path, 1 << 20), tmp_path)
    try:
        info = made.describe(volume)
        assert info["cipher_ceiling"] == "kernel:cbc(aes):256"
        assert info["filename_encryption"] is True and info["passthrough"] is False
        assert (tmp_path / "lower").is_dir() and (tmp_path / "plain").is_dir()
        assert isinstance(volume.state["passphrase"], redaction.Secret)
    finally:
        made.destroy(volume)
    assert not (tmp_path / "lower").exists() and "passphrase" not in volume.state


def test_refused_on_the_partition_target(tmp_path: Path) -> None:
    target = Target("partition", tmp_path, 1 << 20, device=Path("/dev/sdz9"))
    (reason,) = placement_problems(backend(), target)
    assert "ecryptfs: refused on the partition target: its lower directory would be" in reason


# ---------------------------------------------------------------- why it cannot run


def config_gz(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "config.gz"
    path.write_bytes(gzip.compress(f"CONFIG_KEYS=y\n{line}\n".encode()))
    return path


def test_kernel_with_ecryptfs_has_no_problem(tmp_path: Path) -> None:
    filesystems = tmp_path / "filesystems"
    filesystems.write_text("nodev\tproc\n\text4\nnodev\tecryptfs\n")
    assert kernel_problems(filesystems, config_gz(tmp_path, "# CONFIG_ECRYPT_FS is not set")) == []


def test_kernel_built_without_ecryptfs_says_so(tmp_path: Path) -> None:
    filesystems = tmp_path / "filesystems"
    filesystems.write_text("\text4\n")
    (reason,) = kernel_problems(filesystems, config_gz(tmp_path, "# CONFIG_ECRYPT_FS is not set"))
    release = os.uname().release
    assert reason == (
        f"ecryptfs: kernel {release} has no eCryptfs (ecryptfs not in {filesystems}, "
        f"and {tmp_path / 'config.gz'} says CONFIG_ECRYPT_FS is not set)"
    )


def test_module_that_cannot_be_loaded_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    filesystems = tmp_path / "filesystems"
    filesystems.write_text("\text4\n")
    calls: list[list[str]] = []

    def modprobe(argv: list[str], **_: object) -> str:
        calls.append(argv)
        raise HostError("modprobe: FATAL: Module ecryptfs not found in directory /lib/modules/9.9")

    monkeypatch.setattr(host, "run", modprobe)
    (reason,) = kernel_problems(filesystems, config_gz(tmp_path, "CONFIG_ECRYPT_FS=m"))
    assert calls == [["modprobe", "-n", "ecryptfs"]]  # a dry run: nothing is loaded to check
    assert reason.endswith(
        "and `modprobe ecryptfs` cannot load it: "
        "modprobe: FATAL: Module ecryptfs not found in directory /lib/modules/9.9)"
    )


def test_loadable_module_is_no_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mount(2) loads the module by itself (request_module "fs-ecryptfs")."""
    filesystems = tmp_path / "filesystems"
    filesystems.write_text("\text4\n")
    monkeypatch.setattr(host, "run", lambda argv, **_: "")
    assert kernel_problems(filesystems, tmp_path / "no-config.gz") == []


def test_skip_reason_on_this_host(tmp_path: Path) -> None:
    """Where the host kernel has no eCryptfs (this project's CI), the backend says exactly why."""
    if "ecryptfs" in Path("/proc/filesystems").read_text().split():
        pytest.skip("this kernel has eCryptfs")
    reasons = backend().problems(Target("directory", tmp_path, 1 << 20))
    (reason,) = [r for r in reasons if "eCryptfs" in r]
    assert reason.startswith(f"ecryptfs: kernel {os.uname().release} has no eCryptfs (ecryptfs not in ")
    assert "CONFIG_ECRYPT_FS is not set" in reason or "`modprobe ecryptfs` cannot load it: " in reason


# ---------------------------------------------------------------- keys as resources


def needs_keyrings() -> None:
    if not Path("/proc/keys").exists():
        pytest.skip("kernel has no key retention service (/proc/keys missing)")


def test_a_key_is_released_by_its_kind() -> None:
    """A key added to this process's keyring and registered is gone after release, and a
    second release says so (no eCryptfs needed: keys are the kernel's key service)."""
    needs_keyrings()
    token, sig = auth_token(os.urandom(16).hex().encode(), SALT)
    cleanup = Cleanup()
    serial = ecryptfs.add_process_key(sig, token)
    cleanup.add(Resource(KEY_KIND, str(serial), sig))
    ecryptfs._keyctl(ecryptfs.KEYCTL_SETPERM, serial, ecryptfs.KEY_PERM)
    description = ecryptfs.describe_key(serial)
    assert description is not None and description.startswith(f"user;{os.geteuid()};")
    assert description.endswith(f";{sig}") and description.split(";")[3] == "3f090000"
    assert ecryptfs.keys_in_proc({sig}), "the key should be in /proc/keys"
    cleanup.release()
    assert ecryptfs.describe_key(serial) is None
    assert resources.release(Resource(KEY_KIND, str(serial), sig)).endswith("gone already")


def test_a_serial_naming_another_key_is_left_alone() -> None:
    needs_keyrings()
    token, sig = auth_token(os.urandom(16).hex().encode(), SALT)
    serial = ecryptfs.add_process_key(sig, token)
    try:
        message = resources.release(Resource(KEY_KIND, str(serial), "0123456789abcdef"))
        assert message.endswith("left alone") and ecryptfs.describe_key(serial) is not None
    finally:
        resources.release(Resource(KEY_KIND, str(serial), sig))
    assert ecryptfs.describe_key(serial) is None


@pytest.mark.parametrize(
    ("ident", "detail", "reason"),
    [
        ("12345", "0123456789abcdef", None),
        ("@u", "0123456789abcdef", "'@u' is not a key serial number"),
        ("12345", "_uid.0", "'_uid.0' is not an eCryptfs key signature"),
    ],
)
def test_a_dead_runs_key_entry_is_checked(ident: str, detail: str, reason: str | None) -> None:
    check = resources.KINDS[KEY_KIND].check
    assert check(Resource(KEY_KIND, ident, detail), RunScope(1, (Path("/tmp"),))) == reason
