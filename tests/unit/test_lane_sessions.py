"""tests/helpers/lane_sessions.py: the gocryptfs ceiling measured once for the suite, read back after."""

from __future__ import annotations

import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_encperf.ceiling import Ceiling
from tests.helpers import lane_sessions


def counting_measure(calls: list[str], mb_per_s: float | None = 123.0) -> Callable[[str, float], Ceiling]:
    def measure(cipher: str, seconds: float = 0.3) -> Ceiling:
        calls.append(cipher)
        how = "gocryptfs -speed, AES-GCM-256-Go" if mb_per_s else "not measured: no gocryptfs"
        return Ceiling(cipher, mb_per_s, how)

    return measure


@pytest.fixture
def gocryptfs_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    binary = tmp_path / "bin" / "gocryptfs"
    monkeypatch.setattr(shutil, "which", lambda name: str(binary) if name == "gocryptfs" else None)
    return binary


def test_a_gocryptfs_ceiling_is_measured_once_then_read_back(gocryptfs_at: Path, tmp_path: Path) -> None:
    calls: list[str] = []
    known = tmp_path / "speeds.json"
    first = lane_sessions.measure_gocryptfs_once(counting_measure(calls), known)
    second = lane_sessions.measure_gocryptfs_once(counting_measure(calls), known)  # another session
    measured = first("gocryptfs:AES-GCM-256", 0.3)
    assert (
        second("gocryptfs:AES-GCM-256", 0.3)
        == measured
        == Ceiling("gocryptfs:AES-GCM-256", 123.0, "gocryptfs -speed, AES-GCM-256-Go")
    )
    assert calls == ["gocryptfs:AES-GCM-256"]
    assert stat.S_IMODE(known.stat().st_mode) == 0o600 and list(tmp_path.glob("speeds.json.*")) == []
    second("gocryptfs:AES-SIV-512", 0.3)  # another cipher: measured
    second("kernel:xts(aes):512", 0.3)  # not gocryptfs: always measured
    second("kernel:xts(aes):512", 0.3)
    assert calls == ["gocryptfs:AES-GCM-256", "gocryptfs:AES-SIV-512", *["kernel:xts(aes):512"] * 2]


def test_a_ceiling_not_measured_is_asked_again_and_another_gocryptfs_measures_its_own(
    gocryptfs_at: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    known = tmp_path / "speeds.json"
    failing = lane_sessions.measure_gocryptfs_once(counting_measure(calls, None), known)
    failing("gocryptfs:AES-GCM-256", 0.3)
    failing("gocryptfs:AES-GCM-256", 0.3)
    assert calls == ["gocryptfs:AES-GCM-256"] * 2 and not known.exists()
    lane_sessions.measure_gocryptfs_once(counting_measure(calls), known)("gocryptfs:AES-GCM-256", 0.3)
    stand_in = tmp_path / "stand-in" / "gocryptfs"  # a test's own gocryptfs first on PATH
    monkeypatch.setattr(shutil, "which", lambda name: str(stand_in))
    lane_sessions.measure_gocryptfs_once(counting_measure(calls), known)("gocryptfs:AES-GCM-256", 0.3)
    assert calls == ["gocryptfs:AES-GCM-256"] * 4
