"""host.py: what secrets look like wherever pytest or a report may print them, and the
measurement lock (no root needed: the locks live in a directory the test names).

(host.run's timeouts, process groups and redaction are tested in test_journal.py.)
"""

from __future__ import annotations

import pprint
import threading
import time
from pathlib import Path

import pytest

from pytest_encperf import host, redaction
from pytest_encperf.backends import BackendSpec, Volume, make_backend
from pytest_encperf.backends.existingvolumes import read_password
from pytest_encperf.targets import Target

VALUE = b"hunter2-not-shown"


def test_a_secret_prints_as_a_placeholder_everywhere() -> None:
    secret = redaction.Secret(VALUE)
    assert secret == VALUE and bytes(secret) == VALUE and len(secret) == len(VALUE)
    for shown in (repr(secret), str(secret), f"{secret}", "%s" % secret):  # noqa: UP031
        assert shown == "<secret>"
    held = {"key": secret, "list": [secret]}
    assert "hunter2" not in repr(held) and "hunter2" not in pprint.pformat(held)
    assert repr(redaction.SecretText("--password=hunter2")) == "<secret>"
    assert "hunter2" not in repr(["tool", redaction.SecretText("--password=hunter2")])


def test_what_backends_hold_and_hand_to_tools_is_a_secret(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_bytes(VALUE + b"\n")
    assert isinstance(read_password(str(password), "tcrypt"), redaction.Secret)
    for spec in (
        f"tcrypt:image={password},password-file={password}",
        f"bitlk:image={password},password-file={password}",
    ):
        backend = make_backend(BackendSpec.parse(spec))
        volume = Volume(backend, Target("container", tmp_path, 1 << 20), tmp_path)
        _, stdin = backend.open_command(volume, Path("/dev/loop99"), "encperf-x")  # type: ignore[attr-defined]
        assert isinstance(stdin, redaction.Secret) and stdin == VALUE + b"\n"
    for spec, method in (("luks2", "secret_key"), ("veracrypt:tool=native", "password")):
        backend = make_backend(BackendSpec.parse(spec))
        volume = Volume(backend, Target("container", tmp_path, 1 << 20), tmp_path)
        assert isinstance(getattr(backend, method)(volume), redaction.Secret)
        (key,) = volume.state
        assert repr(volume.state) == f"{{{key!r}: <secret>}}" and "<secret>" in repr(volume)
        volume.created.release()


Log = list[tuple[str, float, float]]  # (who, got the lock, let go)


def hold(directory: Path, disks: list[str] | None, seconds: float, log: Log, name: str) -> threading.Thread:
    """A thread that takes the lock, notes (name, got it, let go) and holds it ``seconds``."""

    def work() -> None:
        with host.measurement_lock(disks, directory):
            got = time.monotonic()
            time.sleep(seconds)
            log.append((name, got, time.monotonic()))

    return threading.Thread(target=work)


def overlapped(log: Log, a: str, b: str) -> bool:
    (_, a0, a1), (_, b0, b1) = (next(e for e in log if e[0] == n) for n in (a, b))
    return a0 < b1 and b0 < a1


def run_together(directory: Path, first: list[str] | None, second: list[str] | None) -> bool:
    log: Log = []
    threads = [hold(directory, first, 0.3, log, "first"), hold(directory, second, 0.3, log, "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return overlapped(log, "first", "second")


def test_the_whole_machine_excludes_everyone(tmp_path: Path) -> None:
    assert not run_together(tmp_path, None, None)
    assert not run_together(tmp_path, None, ["8:0"])
    assert not run_together(tmp_path, ["8:0"], None)


def test_one_disk_at_a_time_different_disks_together(tmp_path: Path) -> None:
    assert not run_together(tmp_path, ["8:0"], ["8:0"])
    assert not run_together(tmp_path, ["8:0", "8:16"], ["8:16"])
    assert run_together(tmp_path, ["8:0"], ["8:16"])


def test_the_wait_is_what_is_yielded_and_locks_are_private(tmp_path: Path) -> None:
    log: Log = []
    holder = hold(tmp_path, None, 0.3, log, "holder")
    holder.start()
    time.sleep(0.05)
    with host.measurement_lock(None, tmp_path) as waited:
        assert waited > 0.15
    holder.join()
    with host.measurement_lock(None, tmp_path) as waited:
        assert waited < 0.1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measure.lock"]
    assert (tmp_path / "measure.lock").stat().st_mode & 0o777 == 0o600


def test_the_locks_live_where_only_this_user_can_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(host.LOCK_DIR_ENV, raising=False)  # the suite's own (conftest.py)
    monkeypatch.setattr(host, "is_root", lambda: True)
    assert host.lock_directory() == Path("/run/encperf")
    monkeypatch.setattr(host, "is_root", lambda: False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert host.lock_directory() == runtime / "encperf"
    runtime.chmod(0o777)  # others could hold our locks there
    assert host.lock_directory() == tmp_path / "home" / ".cache" / "encperf"
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/dir")
    assert host.lock_directory() == tmp_path / "home" / ".cache" / "encperf"


def test_the_suite_measures_under_locks_of_its_own() -> None:
    # conftest.py: a benchmark beside the suite never waits for it, nor it for the benchmark
    assert host.lock_directory() != Path("/run/encperf")
    assert host.is_private_directory(str(host.lock_directory()))


def version_tool(directory: Path, version: str) -> Path:
    """A tool that prints ``version`` and counts its starts (one line each in ``starts``)."""
    directory.mkdir(exist_ok=True)
    tool = directory / "sometool"
    tool.write_text(f'#!/bin/sh\necho started >> "{directory}/starts"\necho "sometool {version} (build 7)"\n')
    tool.chmod(0o755)
    return tool


def starts(directory: Path) -> int:
    path = directory / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_tool_is_asked_its_version_once_per_program_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is the tool's own, as often as it is asked; the program runs again only when the
    name finds another file, the file changed, the arguments differ or the last try timed out."""
    first, second = tmp_path / "first", tmp_path / "second"
    version_tool(first, "2.6.1")
    version_tool(second, "3.0")
    monkeypatch.setenv("PATH", f"{first}:/usr/bin:/bin")
    assert [host.tool_version(["sometool", "--version"]) for _ in range(3)] == ["2.6.1"] * 3
    assert starts(first) == 1
    assert host.tool_version([str(first / "sometool"), "--version"]) == "2.6.1"  # the same file
    assert starts(first) == 1
    assert host.tool_version(["sometool", "-V"]) == "2.6.1"  # other arguments: asked
    assert starts(first) == 2
    monkeypatch.setenv("PATH", f"{second}:/usr/bin:/bin")  # the name finds another program
    assert host.tool_version(["sometool", "--version"]) == "3.0"
    assert starts(second) == 1
    tool = version_tool(second, "3.1")  # replaced in place (another size and time)
    tool.write_text(tool.read_text() + "# 3.1\n")
    assert host.tool_version(["sometool", "--version"]) == "3.1"
    assert starts(second) == 2
    assert host.tool_version(["no-such-tool-encperf", "--version"]) == "unknown"
    real_run = host.subprocess.run

    def timing_out(argv: list[str], **kwargs: object) -> object:
        raise host.subprocess.TimeoutExpired(argv, 10)

    version_tool(second, "3.2")
    monkeypatch.setattr(host.subprocess, "run", timing_out)
    assert host.tool_version(["sometool", "--version"]) == "unknown"
    monkeypatch.setattr(host.subprocess, "run", real_run)
    assert host.tool_version(["sometool", "--version"]) == "3.2"  # the timeout was not kept
    assert starts(second) == 3
