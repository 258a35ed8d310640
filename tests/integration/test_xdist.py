"""pytest-xdist: the controller alone reports, one measurement per disk at a time, fleets.

Plugin behaviour through pytester with the scripted engine of test_gate (exact numbers, no
disks); the engine here also sleeps through each round (SCRIPTED_SLEEP seconds), so rounds of
two workers would overlap in time if nothing kept them apart. Workers "on two machines" are two
``--tx popen`` workers whose machine info a conftest hook changes (FAKE_MACHINE).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import storage
from tests.functional.test_gate import CONFTEST, LOW_NOISE, SCRIPTED_BENCHMARK, gate  # noqa: F401 (a fixture)
from tests.functional.test_xdist import BENCHMARK, FLEET_CONFTEST, bench, overlaps, rounds_of, run  # noqa: F401
from tests.helpers.support import loop_device

pytest.importorskip("xdist")

# Every worker (and the controller) is the machine FAKE_MACHINE names, when set.


# ----------------------------------------------------------------------------- the controller reports


# ----------------------------------------------------------------------------- one measurement at a time


def test_only_parallel_devices_lets_rounds_on_two_disks_overlap(
    bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers, each with --encperf-dir on its own disk (ext4 on a loop device over a file in
    RAM: nothing below it is shared), given through the workers' environment."""
    if os.geteuid() != 0:
        pytest.skip("needs root: loop devices and mounts")
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm to put the two disks' images on")
    monkeypatch.setenv("ENCPERF_DIR", str(bench.path))  # the controller's own
    monkeypatch.setenv("SCRIPTED_SLEEP", "0.1")
    with two_disks(bench.path) as (first, second):
        found = {}
        for flag in ((), ("--encperf-parallel-devices",)):
            out = bench.path / f"two{len(flag)}.json"
            result = run(
                bench, "--tx", f"popen//env:ENCPERF_DIR={first}", "--tx", f"popen//env:ENCPERF_DIR={second}",
                "--dist", "load", f"--encperf-json={out}", "-W", "ignore::pytest.PytestWarning", *flag,
            )  # fmt: skip
            result.assert_outcomes(passed=8)
            # each disk is a machine id of its own (the disk's model is part of it): a file each
            files = sorted(bench.path.glob(f"two{len(flag)}.*.json"))
            assert len(files) == 2
            found[bool(flag)] = overlaps(
                [r for f in files for r in storage.results_of(json.loads(f.read_text()))]
            )
        assert found[False] == []
        assert found[True] != []


@contextlib.contextmanager
def two_disks(base: Path) -> Iterator[tuple[Path, Path]]:
    """Two ext4 file systems, each on a loop device over an image in /dev/shm, mounted under base."""
    with contextlib.ExitStack() as stack:
        mounts = []
        for name in ("disk-a", "disk-b"):
            image = Path(tempfile.mkdtemp(prefix="encperf-test-", dir="/dev/shm")) / "image"
            stack.callback(shutil.rmtree, image.parent)
            device = stack.enter_context(loop_device(image, 64 * 1024 * 1024))
            subprocess.run(["mkfs.ext4", "-q", "-F", str(device)], check=True)
            mountpoint = base / name
            mountpoint.mkdir()
            subprocess.run(["mount", str(device), str(mountpoint)], check=True)
            stack.callback(subprocess.run, ["umount", str(mountpoint)], check=True)
            mounts.append(mountpoint)
        yield mounts[0], mounts[1]


# ----------------------------------------------------------------------------- fleets


# ----------------------------------------------------------------------------- warnings


# ----------------------------------------------------------------------------- a fleet over ssh

SSHD = Path("/usr/sbin/sshd")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, even by SIGKILL."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def local_sshd(base: Path) -> Iterator[Path]:
    """An OpenSSH server on 127.0.0.1 for this test only: host and client keys made here, root
    by key only; yields an ssh_config naming it ``encperf-test``. Stopped (and checked gone) after."""
    base.mkdir(mode=0o700)
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / key)], check=True)
    shutil.copy(base / "client_key.pub", base / "authorized_keys")
    port = _free_port()
    (base / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host_key'}\nPidFile {base / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
        # the keys live under /tmp or /var/tmp, which others may write: sshd's owner checks refuse that
        "StrictModes no\n"
    )
    host_key = (base / "host_key.pub").read_text().strip()
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n")
    config = base / "ssh_config"
    config.write_text(
        f"Host encperf-test\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
        f"  IdentityFile {base / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {base / 'known_hosts'}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
    )
    privsep = Path("/run/sshd")  # sshd refuses to start without it
    made_privsep = not privsep.exists()
    if made_privsep:
        privsep.mkdir(mode=0o755)
    server = subprocess.Popen(
        [str(SSHD), "-D", "-e", "-f", str(base / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=(base / "sshd.log").open("wb"),
        preexec_fn=_die_with_parent,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and server.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.05)
        assert server.poll() is None, f"sshd did not start: {(base / 'sshd.log').read_text()}"
        yield config
    finally:
        server.terminate()
        server.wait(timeout=10)
        for line in sshd_processes(base):  # a connection's own sshd, if one outlived the server
            os.kill(int(line.split()[0]), signal.SIGTERM)
        if made_privsep:
            with contextlib.suppress(OSError):
                privsep.rmdir()


@pytest.mark.integration
def test_a_fleet_over_ssh_measures_on_the_remote_side(bench: pytest.Pytester) -> None:
    """One worker through a real OpenSSH server on 127.0.0.1 (execnet's ssh gateway, as for a
    real host), one local: two machines, each with its section and saved run."""
    missing = [tool for tool in ("ssh", "ssh-keygen") if shutil.which(tool) is None]
    if not SSHD.exists() or missing:
        pytest.skip(f"needs openssh-server and openssh-client (missing: {', '.join(missing) or SSHD})")
    if os.geteuid() != 0:
        pytest.skip("the test's sshd logs in as root, like a benchmark host")
    with local_sshd(bench.path / "ssh") as config:
        remote = (
            f"ssh=encperf-test//ssh_config={config}//python={sys.executable}//chdir={bench.path}"
            f"//env:FAKE_MACHINE=remote//env:SCRIPTED_NOISE={LOW_NOISE}"
        )
        result = run(
            bench, "--tx", remote, "--tx", "popen//env:FAKE_MACHINE=local", "--dist", "each",
            f"--encperf-dir={bench.path}", "--encperf-save=ssh", "--encperf-backends=fakecrypt",
        )  # fmt: skip
    assert sshd_processes(config.parent) == []
    result.assert_outcomes(passed=8)
    saved = storage.list_runs(bench.path / ".encperf")
    runs = {storage.load(run.path)[0]["machine_info"]["node"]: run for run in saved}
    assert set(runs) == {"remote", "local"}
    for run_file in runs.values():
        assert {r.machine_id for r in storage.load(run_file.path)[1]} == {run_file.machine_id}
    result.stdout.fnmatch_lines(
        [
            f"*encperf: machine {runs['remote'].machine_id} (remote)*",
            f"*encperf: machine {runs['local'].machine_id} (local)*",
            "*encperf: across machines*",
        ]
    )


def sshd_processes(base: Path) -> list[str]:
    found = subprocess.run(["pgrep", "-af", str(base / "sshd_config")], capture_output=True, text=True)
    return found.stdout.splitlines()
