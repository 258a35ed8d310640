"""Command lines and checks of the userspace backends (no root, nothing mounted)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf.backends import (
    BackendSpec,
    parse_backend_list,
)
from pytest_encperf.backends.bitlocker import BitlockerBackend
from tests.helpers.standin import StandIns
from tests.unit.test_userspace_commands import BITLOCKER_DEVICE, PASSWORD, _made, secret_dirs, volume_for


@pytest.fixture(autouse=True)
def no_secret_left() -> Iterator[None]:
    """Each test's secret directory (on a RAM file system) goes with its volume."""
    before = set(secret_dirs())
    yield
    while _made:
        _made.pop().created.release()
    assert set(secret_dirs()) - before == set(), "secret directory left behind"


def test_a_bitlocker_device_from_the_environment_is_skipped_and_dislocker_never_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's case: the spec comes from ENCPERF_BACKENDS on the container target."""
    tools = StandIns(pytester.path / "bin")
    tools.add("dislocker-fuse")
    monkeypatch.setenv("PATH", tools.path_env)
    monkeypatch.setenv("ENCPERF_BACKENDS", BITLOCKER_DEVICE)
    pytester.makepyfile(test_bench="def test_w(encperf_volume):\n    pass\n")
    result = pytester.runpytest(f"--encperf-dir={pytester.path}", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*bitlocker: device=/dev/sdz3 is opened read-write by dislocker*"])
    assert tools.calls() == []


def test_bitlocker_recovery_password_goes_to_argv_only_with_consent(tmp_path: Path) -> None:
    spec = f"bitlocker:image={tmp_path}/x.img,recovery-file={tmp_path}/rk"
    with pytest.raises(ValueError, match="add secret-in-argv=yes to accept that, or use password-file="):
        parse_backend_list(spec)
    backend = BitlockerBackend(BackendSpec.parse(f"{spec},secret-in-argv=yes"))
    volume = volume_for(backend, tmp_path)
    assert f"-p{PASSWORD.decode()}" in backend.dislocker_command(volume)
    assert backend.describe(volume)["secret_in_argv"] is True
