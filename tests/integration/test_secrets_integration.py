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
host has none they run in the UML lane (``tests/integration/test_uml_lane.py``). They and eCryptfs
(which the lane runs too) are scanned in one session, a scan of each backend in it, and each test
checks its backend's part (``shared_scan``).

A backend's secret material is found where backends keep it: bytes in ``volume.state`` (e.g.
fscrypt's ``raw_key``, dm-crypt's ``key``), strings under ``passphrase`` / ``password`` /
``secret`` / ``key``, the files of its secret directories, and the passwords the test gave.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_encperf import backends
from pytest_encperf.backends import BASELINE, BackendSpec, parse_backend_list
from pytest_encperf.backends.dmcrypt import CryptsetupBackend
from pytest_encperf.benchmarkentries import measured
from tests.helpers.support import (
    bitlk_passwords,
    disk_dir,
    given_file,
    guest_engine,
    problems_here,
    secret_dirs,
    spec_for,
    with_veracrypt_standin,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sessions_of_this_test_alone")]

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
    name = encperf_volume.backend.name  # several backends may share a session: a file each
    (HERE / f"secrets-{name}.hex").write_text("\n".join(secret.hex() for secret in secrets))
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
    (HERE / f"daemons-{name}.json").write_text(json.dumps([d.decode().split(chr(0)) for d in daemons]))
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


def session_options(spec: str) -> list[str]:
    """The scanned session's options: the scan of ``spec``'s backends (one test each), every report
    (in the UML lane measured with the native engine: support.guest_engine)."""
    return [
        f"--encperf-backends={spec}",
        *guest_engine(),
        "--encperf-size=2MiB",
        "--encperf-runtime=0.05",
        "--encperf-rounds=1",
        "--encperf-warmup=0",  # the secrets are the volume's, made once; warm-up rounds add none
        "--encperf-verify=yes",
        "--junitxml=report.xml",
        "--encperf-json=results.json",
        "--encperf-markdown=report.md",
        "-rA",
        "-k",
        "SEQ1M-Q1T1-write",
        "-p",
        "no:cacheprovider",
    ]


def left_behind(run_dir: Path, directory: Path) -> list[str]:
    """What a scanned session, run in ``directory`` with volumes under ``run_dir``, left that it must not."""
    left = [f"run directory {path}" for path in run_dir.glob("encperf-*")]
    left += [f"journal {path}" for path in run_dir.glob(".encperf-runs/*.json")]
    pid = directory / "session.pid"
    if pid.exists():
        left += [f"secret directory {path}" for path in secret_dirs(int(pid.read_text()))]
    return left


def findings(directory: Path, stdout: str, stderr: str) -> tuple[dict[str, list[bytes]], dict[str, bytes]]:
    """The secrets each backend's scan found (by backend name), and what the session wrote: its
    terminal output and every file in ``directory`` but the secrets' own lists."""
    secrets = {
        path.name.removeprefix("secrets-").removesuffix(".hex"): [
            bytes.fromhex(line) for line in path.read_text().split()
        ]
        for path in directory.glob("secrets-*.hex")
    }
    written = {"stdout": stdout.encode(), "stderr": stderr.encode()}
    for path in directory.rglob("*"):
        if path.is_file() and not SECRET_LISTS.fullmatch(path.name):
            written[str(path)] = path.read_bytes()
    return secrets, written


SECRET_LISTS = re.compile(r"(given-)?secrets(-.+)?\.hex")


def scanned_session(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    spec: str,
    user_secrets: list[str],
    *extra: str,
) -> tuple[pytest.RunResult, dict[str, list[bytes]], dict[str, bytes]]:
    """Run the scan in a session of ``spec``; its outcome, the secrets found (by backend name), the
    files it wrote."""
    run_dir = Path(tempfile.mkdtemp(prefix="encperf-secrets-", dir=workspace()))
    try:
        pytester.makepyfile(test_scan=SCAN)
        if extra:
            pytester.makeconftest(WORKER_OUTPUT)
        (pytester.path / "given-secrets.hex").write_text("\n".join(s.encode().hex() for s in user_secrets))
        monkeypatch.setenv("ENCPERF_DIR", str(run_dir))
        result = pytester.runpytest_subprocess(*session_options(spec), *extra)
        left = left_behind(run_dir, pytester.path)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    assert left == [], "left behind"
    secrets, written = findings(pytester.path, result.stdout.str(), result.stderr.str())
    return result, secrets, written


# The dm-crypt based backends and eCryptfs scan in one session, a test each in it: where they run
# (the UML lane, one virtual CPU; a host with device-mapper) a session of their own cost each
# about 30 s, most of it the session's start and plain's volume (issue 26: the suite's long pole).
def shares_a_session(name: str) -> bool:
    return name == "ecryptfs" or issubclass(backends.backend_class(name), CryptsetupBackend)


@dataclass
class SharedScan:
    """The session that scanned the backends that share one (those that can run here)."""

    problems: dict[str, list[str]]  # backend name -> why it cannot run here (then not in the session)
    outcomes: dict[str, str]  # backend name -> its scan's outcome in the session (JUnit)
    secrets: dict[str, list[bytes]]  # backend name -> what its scan found
    written: dict[str, bytes]
    left: list[str]
    output: str  # the session's terminal output, for a failure's message


def junit_outcome(case: ET.Element) -> str:
    found = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
    return found[-1] if found else "passed"


@pytest.fixture(scope="module")
def shared_scan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedScan]:
    given = Path(tempfile.mkdtemp(prefix="encperf-given-", dir=workspace()))
    try:
        specs: dict[str, str] = {}
        problems: dict[str, list[str]] = {}
        user_secrets: list[str] = []
        for name in (n for n in backends.known_names() if n != "luks" and shares_a_session(n)):
            own = given / name  # spec_for names its files alike for every backend
            own.mkdir()
            spec, gives = spec_for(name, own)
            spec = "veracrypt:tool=native" if name == "veracrypt" else spec
            problems[name] = problems_here(spec, workspace())
            if not problems[name]:
                specs[name], user_secrets = spec, user_secrets + gives
        if not specs:
            yield SharedScan(problems, {}, {}, {}, [], "")
            return
        directory = tmp_path_factory.mktemp("shared-scan")
        (directory / "test_scan.py").write_text(SCAN)
        (directory / "given-secrets.hex").write_text("\n".join(s.encode().hex() for s in user_secrets))
        run_dir = Path(tempfile.mkdtemp(prefix="encperf-secrets-", dir=workspace()))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "TOX_ENV_DIR")}
        path = os.pathsep.join(filter(None, [str(directory), env.get("PYTHONPATH", "")]))
        env |= {"ENCPERF_DIR": str(run_dir), "HOME": str(directory), "PY_COLORS": "0", "PYTHONPATH": path}
        try:
            argv = [sys.executable, "-m", "pytest", f"--basetemp={directory / 'basetemp'}"]
            done = subprocess.run(
                [*argv, *session_options(",".join(specs.values()))],
                cwd=directory, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            )  # fmt: skip
            left = left_behind(run_dir, directory)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        report = directory / "report.xml"
        cases = ET.parse(report).getroot().iter("testcase") if report.exists() else iter(())
        by_name = {case.get("name", ""): junit_outcome(case) for case in cases}
        outcomes = {
            name: by_name.get(f"{SCAN_TEST}[{BackendSpec.parse(spec)}-SEQ1M-Q1T1-write]", "missing")
            for name, spec in specs.items()
        }
        secrets, written = findings(directory, done.stdout, done.stderr)
        yield SharedScan(
            problems, outcomes, secrets, written, left, done.stdout[-6000:] + done.stderr[-2000:]
        )
    finally:
        shutil.rmtree(given)


SCAN_TEST = "test_no_secret_in_processes_journal_or_run_directory"


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
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    given: Path,
    request: pytest.FixtureRequest,
    name: str,
    cli: bool,
) -> None:
    if not cli and shares_a_session(name):
        shared: SharedScan = request.getfixturevalue("shared_scan")  # only where such a backend runs
        if shared.problems[name]:
            pytest.skip(f"{name}: {'; '.join(shared.problems[name])}")
        assert shared.left == [], "left behind"
        assert shared.outcomes[name] == "passed", shared.output
        secrets, written = shared.secrets.get(name, []), shared.written
    else:
        user_secrets: list[str] = []
        if cli:
            if shutil.which("veracrypt") is None:
                for key, value in with_veracrypt_standin(given).items():
                    monkeypatch.setenv(key, value)
            spec = "veracrypt:tool=cli,mode=fuse"
        else:
            spec, user_secrets = spec_for(name, given)
        problems = problems_here(spec, workspace())
        if problems:
            pytest.skip(f"{name}: {'; '.join(problems)}")
        result, found, written = scanned_session(pytester, monkeypatch, spec, user_secrets)
        result.assert_outcomes(passed=1)
        secrets = found.get(BackendSpec.parse(spec).name, [])
    if name != BASELINE:
        assert secrets, f"{name}: no secret material found to scan for (see this module's docstring)"
    assert {"report.xml", "results.json", "report.md"} <= {Path(p).name for p in written}
    assert leaks_in_written(written, secrets) == []


def test_the_scanned_sessions_also_verify_a_remount() -> None:
    """A scanned session checks its written file after the backend's unmount + mount, and
    test_secret_is_never_exposed asserts it passed: for CryFS this is its verify test
    (test_reliability_integration.VERIFIED_IN_THE_SECRETS_SCAN)."""
    options = session_options("cryfs")
    assert "--encperf-verify=yes" in options
    assert options[options.index("-k") + 1].endswith("-write")  # verify follows write workloads


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
    result, found, written = scanned_session(pytester, monkeypatch, spec, [recovery])
    result.assert_outcomes(passed=1)
    (daemon, *_) = json.loads((pytester.path / "daemons-bitlocker.json").read_text())
    assert daemon[0] == "dislocker-fuse" and f"-p{'X' * len(recovery)}" in daemon, daemon
    assert leaks_in_written(written, found["bitlocker"]) == [], (
        "the recovery password reached a report or log"
    )
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
    result, found, written = scanned_session(pytester, monkeypatch, name, [], "-n", "1")
    result.assert_outcomes(passed=1)
    secrets = found.get(name, [])
    assert secrets, f"{name}: no secret material found to scan for"
    sent = json.loads(written[str(pytester.path / "workeroutput.json")])
    assert sent["encperf_machine"]["results"], "the worker sent no results"
    assert leaks_in_written(written, secrets) == []
