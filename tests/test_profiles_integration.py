"""Every profile runs end to end on plain and fscrypt (container target, tiny sizes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_encperf.workloads import PROFILES

pytestmark = pytest.mark.integration

BENCH = """
def test_workload(encperf, encperf_workload):
    result = encperf.run(encperf_workload)
    assert len(result.rounds) == len(result.baseline_rounds) == 1
    assert all(m.bytes > 0 and m.ios > 0 for m in result.rounds + result.baseline_rounds)
"""


@pytest.mark.parametrize("profile", list(PROFILES))
def test_profile_on_plain_and_fscrypt(pytester: pytest.Pytester, profile: str) -> None:
    base = Path(os.environ.get("ENCPERF_TEST_DIR", "/var/tmp"))
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest(
        f"--encperf-dir={base}",
        "--encperf-backends=fscrypt",
        f"--encperf-profile={profile}",
        "--encperf-size=8MiB",  # ATTO's largest transfer
        "--encperf-runtime=0.03",
        "--encperf-rounds=1",
        "--encperf-warmup=0",
        "-p",
        "no:cacheprovider",
    )
    count = len({w.name for w in PROFILES[profile].workloads})
    result.assert_outcomes(passed=count)
    title = PROFILES[profile].title
    result.stdout.fnmatch_lines([f"{title} [[]{profile}]*", "*plain (baseline)*", "*fscrypt*%*"])
    labels = list(dict.fromkeys(w.label for w in PROFILES[profile].workloads))
    for label in labels[:3]:
        result.stdout.fnmatch_lines([f"*{label}*"])
    if PROFILES[profile].mean_column:
        result.stdout.fnmatch_lines(["*mean vs plain*"])
    assert "could not print the summary" not in result.stdout.str()
    # fscrypt here serves O_DIRECT through the page cache, so both sides ran buffered
    result.stdout.fnmatch_lines(["*direct-requested-but-buffered*"])
