"""The cipher ceiling: each backend's own cipher, measured where it can be, or none."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pytest_encperf import ceiling
from pytest_encperf.ceiling import gocryptfs_speeds, measure

# `gocryptfs -speed` of gocryptfs 2.3 on the development machine
GOCRYPTFS_SPEED = """\
gocryptfs 2.3; go-fuse 2.1.0+git20220822.58a7e14; 2023-04-09 go1.19.8 linux/amd64
cpu: AMD EPYC; with AES acceleration
AES-GCM-256-OpenSSL       \t1550.91 MB/s
AES-GCM-256-Go            \t3630.24 MB/s\t(selected in auto mode)
AES-SIV-512-Go            \t 212.23 MB/s
XChaCha20-Poly1305-OpenSSL\t1141.19 MB/s
XChaCha20-Poly1305-Go     \t1595.30 MB/s\t(selected in auto mode)
"""


def test_gocryptfs_speed_gives_the_implementation_it_selects(monkeypatch: pytest.MonkeyPatch) -> None:
    speeds = gocryptfs_speeds(GOCRYPTFS_SPEED)
    assert speeds["AES-GCM-256-Go"] == (3630.24, True) and speeds["AES-GCM-256-OpenSSL"] == (1550.91, False)

    def recorded(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        assert argv == ["gocryptfs", "-speed"]
        return subprocess.CompletedProcess(argv, 0, GOCRYPTFS_SPEED, "")

    monkeypatch.setattr(ceiling.subprocess, "run", recorded)
    gcm = measure("gocryptfs:AES-GCM-256")
    assert (gcm.mb_per_s, gcm.how) == (3630.24, "gocryptfs -speed, AES-GCM-256-Go")
    assert measure("gocryptfs:AES-SIV-512").mb_per_s == 212.23  # the only one: Go's


@pytest.mark.skipif(shutil.which("gocryptfs") is None, reason="gocryptfs is not installed")
def test_real_gocryptfs_speed() -> None:
    gcm = measure("gocryptfs:AES-GCM-256")
    assert (
        gcm.mb_per_s is not None and gcm.mb_per_s > 0 and gcm.how.startswith("gocryptfs -speed, AES-GCM-256-")
    )
