"""Secrets never leave their place: not in any process's argv or environment while the volume is
mounted, not in the journal, the terminal output, JUnit XML or any file the run writes.

Runs for every registered backend that can run here (new backends are included automatically).
A backend's secret material is found where backends keep it: bytes in ``volume.state`` (e.g.
fscrypt's ``raw_key``), strings under ``passphrase`` / ``password`` / ``secret`` / ``key``, the
files of a ``host.PrivateDir`` kept in ``volume.state``, and files in ``encperf-secret-*``
private directories.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from pytest_encperf import backends
from pytest_encperf.backends import BASELINE
from tests.support import disk_dir, problems_here

pytestmark = pytest.mark.integration

SCAN = r"""
import base64, glob, os, re, tempfile
from pathlib import Path

HERE = Path(__file__).parent
SECRETS_FILE = HERE / "secrets.hex"  # for the outer test; excluded from the scans
SECRET_KEY = re.compile(r"(secret|pass(word|phrase)?|^key|_key)$")


def material(volume):
    found = []
    for key, value in volume.state.items():
        if isinstance(value, (bytes, bytearray)) and "identifier" not in key:
            found.append(bytes(value))
        elif isinstance(value, str) and SECRET_KEY.search(key):
            found.append(value.encode())
        elif hasattr(value, "files"):  # a host.PrivateDir
            found += [path.read_bytes() for path in value.files if path.exists()]
    for base in ("/dev/shm", tempfile.gettempdir()):
        for path in glob.glob(os.path.join(base, "encperf-secret-*", "*")):
            if os.path.isfile(path):
                found.append(Path(path).read_bytes())
    return [secret for secret in found if len(secret) >= 8]


def forms(secret):
    return {secret, secret.hex().encode(), secret.hex().upper().encode(), base64.b64encode(secret)}


def leaks_in(data, secrets, where):
    found = [secret for secret in secrets for form in forms(secret) if form in data]
    return [f"{where} ({len(secret)}-byte secret)" for secret in found]


def test_no_secret_in_processes_or_journal(encperf, encperf_workload, encperf_volume):
    encperf.run(encperf_workload)
    secrets = material(encperf_volume.volume)
    SECRETS_FILE.write_text("\n".join(secret.hex() for secret in secrets))
    leaks = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        for what in ("cmdline", "environ"):
            try:
                data = (proc / what).read_bytes()
            except OSError:
                continue  # exited meanwhile
            leaks += leaks_in(data, secrets, f"/proc/{proc.name}/{what}")
    for path in glob.glob(os.path.join(os.environ["ENCPERF_DIR"], ".encperf-runs", "*.json")):
        leaks += leaks_in(Path(path).read_bytes(), secrets, path)
    assert not leaks, f"secret exposed in: {leaks}"
"""


@pytest.mark.parametrize("name", backends.known_names())
def test_secret_is_never_exposed(
    pytester: pytest.Pytester, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = disk_dir()
    base = base if base.is_dir() else Path(tempfile.gettempdir())
    problems = problems_here(name, base)
    if problems:
        pytest.skip(f"{name}: {'; '.join(problems)}")
    pytester.makepyfile(test_scan=SCAN)
    monkeypatch.setenv("ENCPERF_DIR", str(base))
    result = pytester.runpytest_subprocess(
        f"--encperf-backends={name}",
        "--encperf-size=2MiB",
        "--encperf-runtime=0.05",
        "--encperf-rounds=1",
        "--encperf-verify=yes",
        "--junitxml=report.xml",
        "-rA",
        "-k",
        "SEQ1M-Q1T1-write",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    secrets = [bytes.fromhex(line) for line in (pytester.path / "secrets.hex").read_text().split()]
    if name != BASELINE:
        assert secrets, f"{name}: no secret material found to scan for (see this module's docstring)"
    written = {"stdout": result.stdout.str().encode(), "stderr": result.stderr.str().encode()}
    for path in pytester.path.rglob("*"):
        if path.is_file() and path.name != "secrets.hex":
            written[str(path)] = path.read_bytes()
    assert "report.xml" in " ".join(written)
    leaks = [
        where
        for where, data in written.items()
        for secret in secrets
        for form in (secret, secret.hex().encode(), secret.hex().upper().encode())
        if form in data
    ]
    assert leaks == []


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


def test_the_scan_catches_a_secret_in_argv(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_scan=SCAN)
    pytester.makeconftest(LEAKY_CONFTEST)
    monkeypatch.setenv("ENCPERF_DIR", str(pytester.path))
    result = pytester.runpytest_subprocess(
        "--encperf-target=directory",
        "--encperf-backends=leaky",
        "--encperf-size=1MiB",
        "--encperf-runtime=0.02",
        "--encperf-rounds=1",
        "-k",
        "SEQ1M-Q1T1-write",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*secret exposed in: ['/proc/*/cmdline (32-byte secret)'*"])
