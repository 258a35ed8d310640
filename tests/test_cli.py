"""The ``encperf`` command."""

from __future__ import annotations

import pytest

from pytest_encperf.cli import main


def test_backends_doctor_lists_every_backend_with_reason(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    assert main(["backends", "--target", "directory", "--dir", "/dev/shm"]) == 0
    out = capsys.readouterr().out
    assert "target: directory in /dev/shm" in out
    assert "plain" in out and "fscrypt" in out
    assert "/dev/shm is on tmpfs (memory, not a disk)" in out


def test_bad_target_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["backends", "--target", "cloud"])
    assert exc.value.code == 2
    assert "expected one of container, directory" in capsys.readouterr().err
