"""fusedaemon: starting a FUSE daemon (errors quote its log, secrets as placeholders; a daemon
that never mounts is stopped) and finding the daemons another program forked for a volume."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_encperf.backends import BackendSpec, Volume, fusedaemon
from pytest_encperf.backends.fuse import GocryptfsBackend
from pytest_encperf.host import HostError
from pytest_encperf.targets import Target

PASSWORD = b"not-in-argv-7f3a9c"


def test_daemon_that_exits_before_mounting_is_reported_with_its_messages(tmp_path: Path) -> None:
    volume = Volume(GocryptfsBackend(BackendSpec("gocryptfs")), Target("directory", tmp_path, 1), tmp_path)
    argv = ["sh", "-c", "read secret; echo 'bad password' >&2; exit 3"]
    with pytest.raises(HostError, match="fake exited with status 3 before mounting: bad password"):
        fusedaemon.start_fuse_daemon(
            volume, argv, tmp_path / "m", tmp_path / "log", what="fake", stdin_data=b"x\n"
        )
    assert len(volume.mounted) == 0


def test_daemon_that_never_mounts_is_stopped_after_the_timeout(tmp_path: Path) -> None:
    volume = Volume(GocryptfsBackend(BackendSpec("gocryptfs")), Target("directory", tmp_path, 1), tmp_path)
    (tmp_path / "m").mkdir()
    argv = ["sh", "-c", "echo waiting; exec sleep 60"]
    with pytest.raises(HostError, match=r"fake did not mount .*/m within 0.3 s: waiting"):
        fusedaemon.start_fuse_daemon(volume, argv, tmp_path / "m", tmp_path / "log", what="fake", timeout=0.3)
    assert len(volume.mounted) == 0
    assert not [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] == ["sleep", "60"] and p.ppid() == os.getpid()
    ]


def test_a_daemons_messages_show_its_secrets_as_placeholders(tmp_path: Path) -> None:
    volume = Volume(GocryptfsBackend(BackendSpec("gocryptfs")), Target("directory", tmp_path, 1), tmp_path)
    argv = ["sh", "-c", 'read pw; echo "wrong password $pw, recovery $0" >&2; exit 3', "-p123456-654321"]
    with pytest.raises(HostError) as failed:
        fusedaemon.start_fuse_daemon(
            volume, argv, tmp_path / "m", tmp_path / "log", what="fake", stdin_data=PASSWORD + b"\n",
            secrets=["123456-654321"],
        )  # fmt: skip
    assert str(failed.value).endswith("before mounting: wrong password <secret>, recovery -p<secret>")


def sleeper(*args: str) -> subprocess.Popen[bytes]:
    """A detached process whose command line carries ``args``, as VeraCrypt's forked daemon
    carries the arguments of the command that forked it."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", *args], start_new_session=True
    )


def test_foreign_daemons_are_found_by_their_argument_and_start_time(tmp_path: Path) -> None:
    container = tmp_path / "vol" / "container.img"
    container.parent.mkdir()
    container.touch()
    earlier = sleeper(str(container))  # started before the call: not this volume's daemon
    try:
        time.sleep(0.2)
        since = fusedaemon.boot_ticks()
        ours = sleeper("--text", "--filesystem=none", str(tmp_path / "vol" / ".." / "vol" / "container.img"))
        other = sleeper(str(tmp_path / "someone-else.img"))
        try:
            found = fusedaemon.foreign_daemon_pids(str(container), since)
            assert found == [ours.pid]
        finally:
            for proc in (ours, other):
                proc.kill()
                proc.wait()
        # once it exits, it is not found
        assert fusedaemon.foreign_daemon_pids(str(container), since) == []
    finally:
        earlier.kill()
        earlier.wait()
    assert os.getpid() not in fusedaemon.foreign_daemon_pids(sys.argv[0], 0)
    # another program than the one named is not the daemon
    named = sleeper(str(container))
    try:
        assert fusedaemon.foreign_daemon_pids(str(container), since, executable="veracrypt") == []
    finally:
        named.kill()
        named.wait()
