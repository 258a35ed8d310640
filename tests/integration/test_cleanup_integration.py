"""``encperf cleanup`` goes on past a release that fails, on real loop devices and mounts.

A dead run's journal holds a plain volume (container file, loop device, ext4 mounted from it)
and a VeraCrypt volume whose dismount fails (the veracrypt program is missing here). The plain
volume does not rest on the VeraCrypt one: it is released. The VeraCrypt volume's container,
and the run directory holding it, are not (the volume may still use them); the journal keeps
exactly those for a later cleanup, which the exit status asks for.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import cli, deadruns, host, mounttable
from pytest_encperf.backends import veracrypt
from tests.functional.test_journal import dead_pid, run_dir, write_journal
from tests.helpers.support import still_backs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (losetup, mount)"),
]


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def plain_volume(tmp_path: Path) -> Iterator[tuple[Path, Path, Path, Path]]:
    """(run directory, container, loop device, mount point) of a dead run's plain volume; whatever
    the test leaves attached is released afterwards."""
    pid = dead_pid()
    run = run_dir(tmp_path, pid)
    container = run / "plain.img"
    with open(container, "wb") as handle:
        handle.truncate(16 << 20)
    device = host.attach_loop(container, direct_io=False).path
    assert still_backs(device, container)
    mountpoint = run / "plain-mnt"
    try:
        host.run(["mkfs.ext4", "-q", str(device)])
        mountpoint.mkdir(mode=0o700)
        host.run(["mount", str(device), str(mountpoint)])
        yield run, container, device, mountpoint
    finally:
        if str(mountpoint) in mounttable.mountpoints():
            subprocess.run(["umount", "-l", str(mountpoint)], check=False)
        host.detach_loop(device, container)  # only while it is ours: the name may be reused at once


def test_a_failed_release_leaves_what_does_not_rest_on_it_released(
    tmp_path: Path,
    plain_volume: tuple[Path, Path, Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run, container, device, mountpoint = plain_volume
    pid = int(run.name.split("-")[1])
    monkeypatch.setattr(veracrypt, "VERACRYPT", "encperf-test-no-such-veracrypt")
    secret = run / "veracrypt"
    secret.mkdir(mode=0o700)
    vc_container = secret / "container.img"
    vc_container.write_bytes(b"\0" * 4096)
    entries = [
        {"kind": "path", "ident": str(run)},
        {"kind": "path", "ident": str(container)},
        {"kind": "loop", "ident": str(device), "detail": os.path.realpath(container)},
        {"kind": "path", "ident": str(mountpoint)},
        {"kind": "mount", "ident": str(mountpoint)},
        {"kind": "path", "ident": str(secret)},
        {"kind": "path", "ident": str(vc_container)},
        {"kind": veracrypt.KIND, "ident": str(vc_container)},
    ]
    path = write_journal(tmp_path, pid, 1.0, entries)

    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 1

    out, err = capsys.readouterr()
    head = f"run pid {pid} ({path.name})"
    assert (
        f"{head}: FAILED {veracrypt.KIND} {vc_container}: encperf-test-no-such-veracrypt: not installed"
        in out
    )
    # the plain volume does not rest on the VeraCrypt one: released
    assert str(mountpoint) not in mounttable.mountpoints()
    assert not still_backs(device, container)
    assert not container.exists() and not mountpoint.exists()
    assert f"{head}: unmounted {mountpoint}" in out and f"{head}: detached {device}" in out
    # what the VeraCrypt volume may rest on is kept, and said so
    assert vc_container.exists() and run.exists()
    for kept in (vc_container, secret, run):
        assert (
            f"{head}: KEPT path {kept}: {veracrypt.KIND} {vc_container} is not released and may rest on it"
            in out
        )
    assert "could not release 1 resource(s) or journal(s)" in err
    assert "kept 3 resource(s) they may rest on in the journal" in err
    # the journal keeps exactly what was not released, for a later cleanup
    left = [(r["kind"], r["ident"]) for r in json.loads(path.read_text())["resources"]]
    assert left == [
        (veracrypt.KIND, str(vc_container)),
        ("path", str(vc_container)),
        ("path", str(secret)),
        ("path", str(run)),
    ]
    assert deadruns.journals(tmp_path) == [path]

    # once the VeraCrypt volume can be released (here: it is not mapped), a later cleanup ends it
    monkeypatch.setattr(veracrypt, "mapped_device", lambda container: None)
    assert cli.main(["cleanup", "--dir", str(tmp_path)]) == 0
    assert not run.exists() and deadruns.journals(tmp_path) == []
