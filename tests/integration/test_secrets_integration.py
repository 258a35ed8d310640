"""Secrets never leave their place, for every backend.

While a volume is mounted the scan looks at every process's ``/proc/*/cmdline`` and ``environ``,
the run's journal and every file of the run directory (the disk being measured, the volume's
data included); after the run, at the terminal output and every file the session wrote (JUnit
XML, JSON and Markdown reports). Key files of ours may exist only in a 0700 directory on a RAM
file system (``secretdirs.SecretDir``), and none may outlive the run.

Every registered backend is tried (new ones are included automatically), the ones that open
someone else's volume with a volume and password file from ``tests.helpers.support.spec_for`` (the
shared BitLocker image; for tcrypt a VeraCrypt-format volume, the shared ones being too small
for a file system); veracrypt also as the program (``tool=cli``, the stand-in where the real
one is missing). The dm-crypt based ones (marked ``dmcrypt``) need device-mapper: where the
host has none they run in the UML lane (``tests/integration/test_uml_lane.py``).

A backend's secret material is found where backends keep it: bytes in ``volume.state`` (e.g.
fscrypt's ``raw_key``, dm-crypt's ``key``), strings under ``passphrase`` / ``password`` /
``secret`` / ``key``, the files of its secret directories, and the passwords the test gave.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import backends
from pytest_encperf.backends import BASELINE, parse_backend_list
from pytest_encperf.backends.dmcrypt import CryptsetupBackend
from pytest_encperf.benchmarkentries import measured
from tests.helpers.support import (
    bitlk_passwords,
    disk_dir,
    given_file,
    problems_here,
    secret_dirs,
    spec_for,
    with_veracrypt_standin,
)

pytestmark = pytest.mark.integration

SCAN = r"""
import base64, json, os, re, stat
from pathlib import Path

from pytest_encperf import host, mounting, secretdirs

HERE = Path(__file__).parent
SECRET_KEY = re.compile(r"(secret|pass(word|phrase)?|^key|_key)$")
RUN_DIR = Path(os.environ["ENCPERF_DIR"])


def material(volume):
    found = [bytes.fromhex(line) for line in (HERE / "given-secrets.hex").read_text().split()]
    for key, value in volume.state.items():
        if isinstance(value, (bytes, bytearray)) and "identifier" not in key:
            found.append(bytes(value))
        elif isinstance(value, str) and SECRET_KEY.search(key):
            found.append(value.encode())
    for directory in (p for base in secretdirs.secret_bases() for p in base.glob(f"encperf-{os.getpid()}-*")):
        assert mounting.filesystem_type(directory) in secretdirs.MEMORY_FILESYSTEMS, directory
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
        for path in directory.iterdir():
            assert stat.S_IMODE(path.lstat().st_mode) == 0o600, path
            found.append(path.read_bytes())
    return [secret for secret in found if len(secret) >= 8]


def forms(secret):
    return {secret, secret.hex().encode(), secret.hex().upper().encode(), base64.b64encode(secret)}


def leaks_in(data, secrets, where):
    found = [secret for secret in secrets for form in forms(secret) if form in data]
    return [f"{where} ({len(secret)}-byte secret)" for secret in found]


def run_files():
    for run_dir in RUN_DIR.glob(f"encperf-{os.getpid()}-*"):
        for directory, _, names in os.walk(run_dir):
            for name in names:
                path = Path(directory, name)
                if path.is_file() and not path.is_symlink():
                    yield path


def test_no_secret_in_processes_journal_or_run_directory(encperf, encperf_workload, encperf_volume):
    encperf.run(encperf_workload)
    secrets = material(encperf_volume.volume)
    (HERE / "secrets.hex").write_text("\n".join(secret.hex() for secret in secrets))
    (HERE / "session.pid").write_text(str(os.getpid()))
    leaks = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        for what in ("cmdline", "environ"):
            try:
                data = (proc / what).read_bytes()
            except OSError:
                continue  # exited meanwhile
            found = leaks_in(data, secrets, f"/proc/{proc.name}/{what}")
            if found and what == "cmdline":
                program = data.split(bytes(1))[0].decode()
                found = [f"{leak}: {program}" for leak in found]
            leaks += found
    for path in (RUN_DIR / ".encperf-runs").glob("*.json"):
        leaks += leaks_in(path.read_bytes(), secrets, str(path))
    scanned = 0
    for path in run_files():
        leaks += leaks_in(path.read_bytes(), secrets, str(path))
        scanned += 1
    assert scanned, "no file of the run directory was scanned"
    daemons = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in encperf_volume.daemon_pids]
    (HERE / "daemons.json").write_text(json.dumps([d.decode().split(chr(0)) for d in daemons]))
    assert not leaks, f"secret exposed in: {leaks}"
"""


def cases() -> list[object]:
    found = []
    for name in backends.known_names():
        if name == "luks":
            continue  # an alias of luks2
        dm = issubclass(backends.backend_class(name), CryptsetupBackend)
        found.append(pytest.param(name, False, id=name, marks=[pytest.mark.dmcrypt] if dm else []))
    return [*found, pytest.param("veracrypt", True, id="veracrypt-cli")]  # the program, or the stand-in


@pytest.fixture
def given() -> Iterator[Path]:
    """Where the test puts what a user would give (volume images, password files)."""
    path = Path(tempfile.mkdtemp(prefix="encperf-given-", dir=workspace()))
    yield path
    shutil.rmtree(path)


def workspace() -> Path:
    base = disk_dir()
    return base if base.is_dir() else Path(tempfile.gettempdir())


# Under xdist, what a worker sends to the controller (over the wire, for a remote worker).
WORKER_OUTPUT = """
import json


def pytest_testnodedown(node, error):
    with open("workeroutput.json", "w") as file:
        json.dump(node.workeroutput, file, default=str)
"""


def scanned_session(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    spec: str,
    user_secrets: list[str],
    *extra: str,
) -> tuple[pytest.RunResult, list[bytes], dict[str, bytes]]:
    """Run the scan in a session of ``spec``; its outcome, the secrets found, the files it wrote."""
    run_dir = Path(tempfile.mkdtemp(prefix="encperf-secrets-", dir=workspace()))
    try:
        pytester.makepyfile(test_scan=SCAN)
        if extra:
            pytester.makeconftest(WORKER_OUTPUT)
        (pytester.path / "given-secrets.hex").write_text("\n".join(s.encode().hex() for s in user_secrets))
        monkeypatch.setenv("ENCPERF_DIR", str(run_dir))
        result = pytester.runpytest_subprocess(
            f"--encperf-backends={spec}",
            "--encperf-size=2MiB",
            "--encperf-runtime=0.05",
            "--encperf-rounds=1",
            "--encperf-verify=yes",
            "--junitxml=report.xml",
            "--encperf-json=results.json",
            "--encperf-markdown=report.md",
            "-rA",
            "-k",
            "SEQ1M-Q1T1-write",
            "-p",
            "no:cacheprovider",
            *extra,
        )
        assert list(run_dir.glob("encperf-*")) == [], "run directory left behind"
        assert list(run_dir.glob(".encperf-runs/*.json")) == [], "journal left behind"
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    secrets = [bytes.fromhex(line) for line in (pytester.path / "secrets.hex").read_text().split()]
    written = {"stdout": result.stdout.str().encode(), "stderr": result.stderr.str().encode()}
    for path in pytester.path.rglob("*"):
        if path.is_file() and path.name not in ("secrets.hex", "given-secrets.hex"):
            written[str(path)] = path.read_bytes()
    pid = int((pytester.path / "session.pid").read_text())
    assert secret_dirs(pid) == [], "a secret directory outlived its run"
    return result, secrets, written


def leaks_in_written(written: dict[str, bytes], secrets: list[bytes]) -> list[str]:
    return [
        where
        for where, data in written.items()
        for secret in secrets
        for form in (secret, secret.hex().encode(), secret.hex().upper().encode())
        if form in data
    ]


@pytest.mark.parametrize(("name", "cli"), cases())
def test_secret_is_never_exposed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, given: Path, name: str, cli: bool
) -> None:
    if cli:
        if shutil.which("veracrypt") is None:
            for key, value in with_veracrypt_standin(given).items():
                monkeypatch.setenv(key, value)
        spec, user_secrets = "veracrypt:tool=cli,mode=fuse", []
    else:
        spec, user_secrets = spec_for(name, given)
        spec = "veracrypt:tool=native" if name == "veracrypt" else spec
    problems = problems_here(spec, workspace())
    if problems:
        pytest.skip(f"{name}: {'; '.join(problems)}")
    result, secrets, written = scanned_session(pytester, monkeypatch, spec, user_secrets)
    result.assert_outcomes(passed=1)
    if name != BASELINE:
        assert secrets, f"{name}: no secret material found to scan for (see this module's docstring)"
    assert {"report.xml", "results.json", "report.md"} <= {Path(p).name for p in written}
    assert leaks_in_written(written, secrets) == []


def test_a_recovery_password_goes_to_argv_only_with_consent(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, given: Path
) -> None:
    """dislocker takes a recovery password only in its arguments. It overwrites them with X once
    it has read them, so the scan of a mounted volume finds nothing, but until then any local
    user can read it: refused unless the spec says secret-in-argv=yes."""
    spec, _ = spec_for("bitlocker", given)
    recovery = bitlk_passwords(given)["RP"]
    image = spec.split("image=")[1].split(",")[0]
    secret = given_file(given, "given-recovery", recovery)
    refused = f"bitlocker:image={image},recovery-file={secret},filesystem=ext4"
    with pytest.raises(ValueError, match="add secret-in-argv=yes to accept that"):
        parse_backend_list(refused)
    spec = f"{refused},secret-in-argv=yes"
    problems = problems_here(spec, workspace())
    if problems:
        pytest.skip(f"bitlocker: {'; '.join(problems)}")
    result, secrets, written = scanned_session(pytester, monkeypatch, spec, [recovery])
    result.assert_outcomes(passed=1)
    (daemon, *_) = json.loads((pytester.path / "daemons.json").read_text())
    assert daemon[0] == "dislocker-fuse" and f"-p{'X' * len(recovery)}" in daemon, daemon
    assert leaks_in_written(written, secrets) == [], "the recovery password reached a report or log"
    (document,) = measured(json.loads(written[str(pytester.path / "results.json")])["benchmarks"])
    assert document["extra_info"]["encperf"]["description"]["secret_in_argv"] is True


# The control: a backend that hands its passphrase to a daemon on the command line must be caught.
LEAKY_CONFTEST = """
import os, subprocess
from pytest_encperf.backends.plain import PlainBackend

class Leaky(PlainBackend):
    def mount(self, volume):
        data_dir = super().mount(volume)
        volume.state["passphrase"] = os.urandom(16).hex()
        argv = ["sh", "-c", "sleep 60", "daemon", volume.state["passphrase"]]
        daemon = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        volume.mounted.process(daemon)
        return data_dir

def pytest_encperf_register_backends(config):
    return {"leaky": Leaky}
"""

# The control for the run directory: a backend that keeps its key file on the measured disk.
KEY_ON_DISK_CONFTEST = """
import os
from pytest_encperf.backends.plain import PlainBackend

class KeyOnDisk(PlainBackend):
    def mount(self, volume):
        data_dir = super().mount(volume)
        volume.state["key"] = os.urandom(32)
        (volume.workdir / "volume.key").write_bytes(volume.state["key"])
        return data_dir

def pytest_encperf_register_backends(config):
    return {"key-on-disk": KeyOnDisk}
"""


@pytest.mark.parametrize(
    ("backend", "conftest", "where"),
    [
        ("leaky", LEAKY_CONFTEST, "/proc/*/cmdline (32-byte secret): sh"),
        ("key-on-disk", KEY_ON_DISK_CONFTEST, "*/encperf-*/02-key-on-disk/volume.key (32-byte secret)"),
    ],
)
def test_the_scan_catches_a_secret_in_argv_or_on_the_measured_disk(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, backend: str, conftest: str, where: str
) -> None:
    pytester.makepyfile(test_scan=SCAN)
    pytester.makeconftest(conftest)
    (pytester.path / "given-secrets.hex").write_text("")
    monkeypatch.setenv("ENCPERF_DIR", str(pytester.path))
    result = pytester.runpytest_subprocess(
        "--encperf-target=directory",
        f"--encperf-backends={backend}",
        "--encperf-size=1MiB",
        "--encperf-runtime=0.02",
        "--encperf-rounds=1",
        "-k",
        "SEQ1M-Q1T1-write",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*secret exposed in: *'{where}'*"])


def test_a_failing_open_shows_the_password_nowhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, given: Path
) -> None:
    """A wrong password file, the whole session, the real dislocker: the volume's setup fails,
    and pytest prints its traceback with every function's arguments (--tb=long) and locals (-l),
    Volume.state included, to the terminal and the JUnit XML."""
    spec, _ = spec_for("bitlocker", given)
    wrong = "wrong-password-8d2e71"
    password = given_file(given, "given-wrong", wrong + "\n")
    spec = spec.replace(f"password-file={given / 'given-password'}", f"password-file={password}")
    problems = problems_here(spec, workspace())
    if problems:
        pytest.skip(f"bitlocker: {'; '.join(problems)}")
    run_dir = Path(tempfile.mkdtemp(prefix="encperf-secrets-", dir=workspace()))
    try:
        monkeypatch.setenv("ENCPERF_DIR", str(run_dir))
        pytester.makepyfile(test_open="def test_w(encperf_volume):\n    pass\n")
        options = ("--tb=long", "-l", "--junitxml=report.xml", "-p", "no:cacheprovider")
        result = pytester.runpytest_subprocess(f"--encperf-backends={spec}", *options)
        assert list(run_dir.glob("encperf-*")) == [], "run directory left behind"
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    result.assert_outcomes(errors=1)
    shown = result.stdout.str()
    assert "dislocker-fuse exited with status 1 before mounting" in shown
    assert "Unable to grab VMK or FVEK" in shown  # the password reached dislocker, which refused it
    assert re.search(r"^secret +\= <secret>$", shown, re.M), "the frame holding it shows a placeholder"
    junit = (pytester.path / "report.xml").read_text()
    assert "Unable to grab VMK or FVEK" in junit
    written = {"stdout": result.stdout.str(), "stderr": result.stderr.str(), "junit": junit}
    assert [where for where, text in written.items() if wrong in text or wrong.encode().hex() in text] == []


@pytest.mark.parametrize("name", ["fscrypt", "gocryptfs"])
def test_what_a_worker_sends_to_the_controller_carries_no_secret(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Under xdist the worker makes and uses the secrets; what crosses to the controller (for an
    ssh worker: the wire) is its results, skips and notes, scanned here like every report."""
    pytest.importorskip("xdist")
    problems = problems_here(name, workspace())
    if problems:
        pytest.skip(f"{name}: {'; '.join(problems)}")
    result, secrets, written = scanned_session(pytester, monkeypatch, name, [], "-n", "1")
    result.assert_outcomes(passed=1)
    assert secrets, f"{name}: no secret material found to scan for"
    sent = json.loads(written[str(pytester.path / "workeroutput.json")])
    assert sent["encperf_machine"]["results"], "the worker sent no results"
    assert leaks_in_written(written, secrets) == []
