"""--encperf-verify: data written through a backend must read back intact after unmount + mount."""

from __future__ import annotations

import pytest

BENCHMARK = """
def test_workload(encperf, encperf_workload):
    encperf.run(encperf_workload)
"""

# Directory volumes that log every mount; "corrupt" flips a byte of each file at remount.
CONFTEST = """
from pathlib import Path
from pytest_encperf.backends import Param
from pytest_encperf.backends.plain import PlainBackend

LOG = Path(__file__).parent / "mounts.log"

class Remounting(PlainBackend):
    params = (Param("corrupt", help="flip a byte of each file at remount"),)

    def mount(self, volume):
        data_dir = super().mount(volume)
        with LOG.open("a") as log:
            log.write(f"mount {self.spec}\\n")
        if volume.state.setdefault("mounts", 0) and self.spec.param_dict.get("corrupt"):
            for path in sorted(data_dir.iterdir()):
                with path.open("r+b") as handle:
                    first = handle.read(1)
                    handle.seek(0)
                    handle.write(bytes([first[0] ^ 0xFF]))
        volume.state["mounts"] += 1
        return data_dir

def pytest_encperf_register_backends(config):
    return {"remounting": Remounting}
"""

# what is verified is the backend's data, not an engine's: the in-process engine and no warm-up (fio's
# start-up per round was most of these runs; tests/integration runs --encperf-verify with fio)
QUICK = (
    "--encperf-size=1MiB", "--encperf-runtime=0.02", "--encperf-rounds=1", "--encperf-warmup=0",
    "--encperf-engine=native", "-p", "no:cacheprovider",
)  # fmt: skip


def run(pytester: pytest.Pytester, spec: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_bench=BENCHMARK)
    pytester.makeconftest(CONFTEST)
    return pytester.runpytest(
        "--encperf-target=directory",
        f"--encperf-dir={pytester.path}",
        f"--encperf-backends={spec}",
        *QUICK,
        *args,
    )


def test_verify_remounts_after_each_write_workload(pytester: pytest.Pytester) -> None:
    result = run(pytester, "remounting", "--encperf-verify=yes")
    result.assert_outcomes(passed=8)
    mounts = (pytester.path / "mounts.log").read_text().splitlines()
    assert mounts == ["mount remounting"] * 5, "one mount, then one remount per write workload (4)"


def test_verify_is_off_by_default(pytester: pytest.Pytester) -> None:
    result = run(pytester, "remounting")
    result.assert_outcomes(passed=8)
    assert (pytester.path / "mounts.log").read_text().splitlines() == ["mount remounting"]


def test_corruption_fails_the_write_test_naming_file_and_backend(pytester: pytest.Pytester) -> None:
    result = run(pytester, "remounting:corrupt=1", "--encperf-verify=on", "-k", "SEQ1M-Q8T1")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*IntegrityError: remounting:corrupt=1: data did not read back intact after unmount + mount: "
            "encperf-verify.bin: sha256 *... written, *... read back; encperf-test.dat: sha256*",
            "FAILED *test_workload?remounting?corrupt=1-SEQ1M-Q8T1-write*",
        ]
    )
    assert not list(pytester.path.glob("encperf-*")), "torn down after the failure"
