"""Every profile runs end to end on plain and fscrypt (container target, tiny sizes)."""

from __future__ import annotations

import pytest

from pytest_encperf.workloads import PROFILES, MiB
from tests.helpers.support import disk_dir

pytestmark = pytest.mark.integration

BENCH = """
def test_workload(encperf, encperf_workload):
    result = encperf.run(encperf_workload)
    assert len(result.rounds) == len(result.baseline_rounds) == 2  # 1 round: one whole A B B A block
    assert all(m.bytes > 0 and m.ios > 0 for m in result.rounds + result.baseline_rounds)
"""


@pytest.mark.parametrize("profile", list(PROFILES))
def test_profile_on_plain_and_fscrypt(pytester: pytest.Pytester, profile: str) -> None:
    base = disk_dir()
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
    workloads = PROFILES[profile].workloads_for(8 * MiB)
    result.assert_outcomes(passed=len(workloads))
    title = PROFILES[profile].title
    result.stdout.fnmatch_lines([f"{title} [[]{profile}]*", "*fscrypt*", "*plain *", "*%*"])
    labels = list(dict.fromkeys(w.label for w in workloads))
    for label in labels[:3]:
        result.stdout.fnmatch_lines([f"*{label}*"])
    if PROFILES[profile].mean_column:
        # the grid's 64 MiB file size ran on the whole 8 MiB file and is named for it
        result.stdout.fnmatch_lines(["*F8M R1M*mean vs plain*"])
        assert "F64M" not in result.stdout.str()
    assert "could not print the summary" not in result.stdout.str()
    if profile == "realwork":  # the tools' own (buffered) I/O: no O_DIRECT to probe
        result.stdout.fnmatch_lines(["*fscrypt*archive*tools*buffered*"])
    else:  # fscrypt here serves O_DIRECT through the page cache, so both sides ran buffered
        result.stdout.fnmatch_lines(["*direct-requested-but-buffered*"])
