"""VeraCrypt: our volume format against real VeraCrypt images, and the veracrypt CLI's exact
command lines through a recording stand-in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_encperf.backends import BackendSpec, make_backend, vcformat
from pytest_encperf.targets import Target


def test_iteration_rule() -> None:
    assert vcformat.iterations("SHA-512", None) == 500_000
    assert vcformat.iterations("SHA-512", 0) == 500_000
    assert vcformat.iterations("SHA-256", 1234) == 15_000 + 1234 * 1000
    assert vcformat.iterations("SHA-512", 1) == 16_000


def test_written_volume_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "vol"
    size = 1 << 20
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, size)
        written = vcformat.write_volume(fd, size, b"benchmark-password", "SHA-512", 1)
    finally:
        os.close(fd)
    raw = path.read_bytes()
    assert len(raw) == size
    primary = vcformat.decrypt_header(raw[:512], b"benchmark-password", "SHA-512", 1)
    backup = vcformat.decrypt_header(
        raw[size - vcformat.BACKUP_AREA :][:512], b"benchmark-password", "SHA-512", 1
    )
    assert primary == written == backup
    assert raw[:64] != raw[size - vcformat.BACKUP_AREA :][:64], "backup header needs its own salt"
    assert primary.volume_size == size - 256 * 1024
    with pytest.raises(vcformat.FormatError):
        vcformat.decrypt_header(raw[:512], b"benchmark-password", "SHA-512", 2)  # PIM matters


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            "veracrypt:tool=native,encryption=AES-Twofish-Serpent",
            "encryption=AES-Twofish-Serpent needs the veracrypt",
        ),
        ("veracrypt:tool=native,mode=fuse", "mode=fuse needs the veracrypt program"),
        ("veracrypt:tool=native,hash=Whirlpool", "hash=Whirlpool needs the veracrypt program"),
    ],
)
def test_native_limits_are_skip_reasons(spec: str, problem: str, tmp_path: Path) -> None:
    backend = make_backend(BackendSpec.parse(spec))
    assert any(problem in p for p in backend.problems(Target("container", tmp_path, 1 << 20)))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("veracrypt:mode=turbo", "veracrypt: mode: bad value 'turbo': expected one of kernel, fuse"),
        ("veracrypt:pim=-1", "veracrypt: pim: bad value '-1': expected a whole number from 0 to 2147468"),
        ("veracrypt:hash=MD5", "veracrypt: hash: bad value 'MD5': expected one of SHA-512, SHA-256"),
        ("veracrypt:tool=gui", "veracrypt: tool: bad value 'gui': expected one of auto, cli, native"),
    ],
)
def test_bad_parameters(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_backend(BackendSpec.parse(spec))


def test_kdf_and_pim_together_are_refused() -> None:
    with pytest.raises(ValueError, match="kdf and pim both set"):
        make_backend(BackendSpec.parse("veracrypt:kdf=default,pim=5"))
