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

# The rows of a long profile that run (read and write each); the others are collected and deselected.
# Each row costs 4 fio rounds, each with a page-cache drop (about 10 s on a busy 2-core machine), and
# the rows between differ from these only in fio's block size or queue depth.
RUN_ROWS = {
    "cdm": ("SEQ1M Q8T1", "RND4K Q1T1"),  # the first and last rows
    "cdm-nvme": ("SEQ128K Q32T1", "RND4K Q32T16"),  # the shapes no other profile has (16 jobs)
    "cdm-legacy": ("Seq Q32T1", "4K"),  # its first and last rows
    "atto": ("ATTO 512B", "ATTO 8M"),  # the smallest transfer (below a page) and the largest
    "matrix": ("F4M R4K", "F8M R1M"),  # a row of the 4 MiB file size, and one of 64 MiB run on the 8 MiB file
}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_profile_on_plain_and_fscrypt(pytester: pytest.Pytester, profile: str) -> None:
    base = disk_dir()
    workloads = PROFILES[profile].workloads_for(8 * MiB)
    rows = RUN_ROWS.get(profile)
    ran = [w for w in workloads if rows is None or w.label in rows]
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest(
        f"--encperf-dir={base}",
        "--encperf-backends=fscrypt",
        f"--encperf-profile={profile}",
        "--encperf-size=8MiB",  # ATTO's largest transfer
        "--encperf-tree-size=2MiB",  # realwork's reference tree (64 MiB by default)
        "--encperf-runtime=0.03",
        "--encperf-rounds=1",
        "--encperf-warmup=0",
        *(["-k", " or ".join(f"fscrypt-{w.name}" for w in ran)] if rows else []),
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=len(ran), deselected=len(workloads) - len(ran))
    title = PROFILES[profile].title
    result.stdout.fnmatch_lines([f"{title} [[]{profile}]*", "*fscrypt*", "*plain *", "*%*"])
    labels = list(dict.fromkeys(w.label for w in ran))
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
