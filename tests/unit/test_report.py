"""The Markdown report for pull requests (report.markdown_report): header, compact table,
details block, size cap; and which profiles a set of results shows (report.shown_profiles)."""

from __future__ import annotations

import json

import pytest

from pytest_encperf import verdict as verdict_model
from pytest_encperf.gate import FAIL, PASS, SAVED, Check, Verdict, judge, parse_rules
from pytest_encperf.model import RunData
from pytest_encperf.report import (
    cpu_line,
    lifecycle_table,
    markdown_report,
    shown_profiles,
    verdict_header,
    verdict_messages,
)
from pytest_encperf.workloads import ATTO, CDM, MATRIX, MiB, fit_to_size
from tests.unit.test_charts import result


def check(workload: str, status: str, backend: str = "fscrypt") -> Check:
    reason = "worse by 50.0% > 10%, adjusted p=0.001 <= 0.05" if status == FAIL else "not worse"
    return Check(
        SAVED, backend, workload, "throughput", "x plain", "paired ratios", 0.5, 0.25, -50.0, 50.0,
        (0.4, 0.6), 0.001, (10, 10), 10.0, "10%", status, reason, gated=True, p_adjusted=0.001,
    )  # fmt: skip


def test_markdown_leads_with_the_verdict_the_failures_and_the_compact_table() -> None:
    results = [result("fscrypt", w, [50, 60], [100, 120]) for w in CDM]
    verdict = Verdict(reference="m/0001_main.json", checks=[check("SEQ1M-Q8T1-read", FAIL), check("x", PASS)])
    text = markdown_report(results, verdict)
    lines = text.splitlines()
    assert lines[2] == f"**❌ {verdict_header(verdict)}** (reference run `m/0001_main.json`)"
    assert lines[2].startswith("**❌ encperf: 1 regression, 1 within threshold")
    failure = next(i for i, line in enumerate(lines) if line.startswith("- FAIL: fscrypt SEQ1M-Q8T1-read"))
    table = next(
        i for i, line in enumerate(lines) if line.startswith("| backend   | SEQ1M Q8T1<br>MB/s read")
    )
    assert failure < table < lines.index("<details>")
    # the summary table's three lines in one cell: best, best of plain beside it, the change
    # the change with half the width of its 95% interval (two pairs of ratios 0.5: ±0.0)
    assert "| fscrypt   | 60.0 / 60.0<br>plain 120.0 / 120.0<br>-50.0% ±0.0 / -50.0% ±0.0 " in text
    details = text[text.index("<details>") :]
    assert details.startswith("<details>\n<summary>Details: every result and check</summary>\n")
    assert "| fscrypt   | SEQ1M-Q8T1-read" in details  # every result
    assert "| rounds now/before" in details and details.rstrip().endswith("</details>")
    assert len(text) < 60_000


def test_markdown_stays_under_the_cap_keeping_the_header_and_the_failures() -> None:
    workloads = [fit_to_size(w, 16 * MiB) for w in (*CDM, *ATTO, *MATRIX)]
    results = [result(f"backend{b}", w, [50, 60], [100, 120]) for b in range(12) for w in workloads]
    checks = [
        check(w.name, FAIL if i % 50 == 0 else PASS, f"backend{b}")
        for b in range(12)
        for i, w in enumerate(workloads)
    ]
    verdict = Verdict(reference="m/0001_main.json", checks=checks)
    full = markdown_report(results, verdict, limit=10**9)
    assert len(full) > 60_000  # what it would be
    text = markdown_report(results, verdict, profiles=["cdm", "atto", "matrix"])
    assert len(text) < 60_000
    assert text.splitlines()[2].startswith("**❌ encperf: 12 regressions, ")
    failures = [line for line in text.splitlines() if line.startswith("- FAIL:")]
    assert len(failures) == 12
    assert "_details cut to keep this report under 60,000 characters: see the JSON or HTML report_" in text
    tiny = markdown_report(results, verdict, limit=2_000)  # not even the failures fit: as many as do
    assert len(tiny) < 2_000 and tiny.startswith("## encperf\n\n**❌ encperf: 12 regressions")
    assert tiny.rstrip().endswith("more") and "- FAIL:" in tiny


def test_shown_profiles_are_those_given_or_those_that_ran_whole() -> None:
    cdm = [result("fscrypt", w, [50], [100]) for w in CDM]
    grid = [result("fscrypt", fit_to_size(w, 16 * MiB), [50], [100]) for w in MATRIX]
    found = {profile.name: workloads for profile, workloads in shown_profiles([*cdm, *grid])}
    # cdm-nvme shares two workloads with cdm but did not run whole: not shown unless named
    assert list(found) == ["cdm", "matrix"]
    assert found["cdm"] == list(CDM) and found["matrix"][-1].label == "F16M R1M"
    named = {p.name: w for p, w in shown_profiles(cdm[:2], ["cdm", "cdm-nvme"])}
    assert [w.name for w in named["cdm-nvme"]] == ["SEQ1M-Q8T1-read", "SEQ1M-Q8T1-write"]


def test_cpu_line_names_governor_and_frequencies() -> None:
    found = {"governor": "powersave", "cpu_mhz": {"current": 1200.0, "min": 800.0, "max": 3500.0}}
    assert cpu_line(found) == "CPU at the start: governor powersave, 1200 MHz (max 3500 MHz)"
    vm = {"governor": "unknown", "cpu_mhz": {"current": 2596.1, "min": None, "max": None}}
    assert cpu_line(vm) == "CPU at the start: no cpufreq governor exposed, 2596 MHz"
    assert cpu_line({}) == "CPU at the start: no cpufreq governor exposed, frequency unknown"


def test_lifecycle_table_puts_plain_first_and_marks_missing_steps() -> None:
    steps = {"create": 1.234, "mount": 0.5, "first write": 0.00076, "unmount": 0.01, "destroy": 0.02}
    table = lifecycle_table({"gocryptfs": {"create": 2.0, "mount": 0.1}, "plain": steps}, ["gocryptfs"])
    header, _, plain, gocryptfs = table.splitlines()
    assert header.split() == ["backend", "create", "mount", "first", "write", "unmount", "destroy", "cycles"]
    # one float per step: a run saved before --encperf-lifecycle-cycles, one cycle
    assert plain.split() == ["plain", "1.23", "0.5", "0.00076", "0.01", "0.02", "1"]
    assert gocryptfs.split() == ["gocryptfs", "2", "0.1", "-", "-", "-", "1"]
    assert lifecycle_table({}) == ""


def test_lifecycle_table_shows_the_median_of_the_cycles_and_their_number() -> None:
    cycles = {"create": [3.0, 1.0, 2.0], "mount": [0.4, 0.2, 0.3], "first write": [0.01, 0.03, 0.02]}
    cycles |= {"unmount": [0.1, 0.1, 0.9], "destroy": [0.05, 0.06, 0.07]}
    _, _, row = lifecycle_table({"fscrypt": cycles}).splitlines()
    assert row.split() == ["fscrypt", "2", "0.3", "0.02", "0.1", "0.06", "3"]


def test_kdf_table_shows_both_settings_the_ratio_and_backends_without_one() -> None:
    from pytest_encperf.report import kdf_table

    rows = {
        "plain": {"spec": "plain", "settings": {}, "note": "no key derivation", "ratio": None},
        "gocryptfs": {
            "spec": "gocryptfs",
            "settings": {
                "fast": {"label": "scrypt N=2^10 (benchmark only)", "create": 0.07, "mount": 0.06},
                "default": {"label": "scrypt N=2^16 (gocryptfs's default)", "create": 0.3, "mount": 0.21},
            },
            "note": "",
            "ratio": 3.5,
        },
        "cryfs": {
            "spec": "cryfs",
            "settings": {
                "default": {"label": "scrypt at CryFS's own settings", "create": 0.01, "mount": 6.3}
            },
            "note": "no fast setting: benchmark volumes already use its own",
            "ratio": None,
        },
    }
    lines = kdf_table(rows, ["gocryptfs", "cryfs"]).splitlines()
    assert lines[0].split()[:2] == ["backend", "fast"]
    plain, gocryptfs, cryfs = lines[2:]
    assert plain.split() == ["plain", "no", "key", "derivation"]
    assert "scrypt N=2^10 (benchmark only)" in gocryptfs and "0.21" in gocryptfs and "3.5x" in gocryptfs
    assert "no fast setting" in cryfs and "6.3" in cryfs
    assert kdf_table({}) == ""


@pytest.mark.parametrize(
    ("size", "mb_per_s", "text"),
    [
        (10**12, 10**12 / 15_000 / 1e6, "about 4 h 10 min"),  # 1 TB in 15000 s
        (10**12, 10**12 / 14_400 / 1e6, "about 4 h"),
        (10**9, 100.0, "about 10 s"),
        (10**9, 10**9 / 0.2 / 1e6, "about 1 s"),
        (10**12, 10**12 / (12 * 60) / 1e6, "about 12 min"),
        (10**12, 10**12 / (3 * 86400 + 2 * 3600) / 1e6, "about 3 d 2 h"),
        (10**12, 0.0, "never (nothing was encrypted)"),
    ],
)
def test_projected_time_reads_like_a_person_would_say_it(size: int, mb_per_s: float, text: str) -> None:
    from pytest_encperf.report import projected_time

    assert projected_time(size, mb_per_s) == text


def test_inplace_table_shows_rate_projection_and_the_check() -> None:
    from pytest_encperf.report import inplace_table

    rows = {
        "luks2": {
            "spec": "luks2", "method": "cryptsetup reencrypt --encrypt", "bytes": 100 * 10**6,
            "seconds": 2.0, "mb_per_s": 50.0, "intact": True, "format_after": "LUKS2",
        },
        "gocryptfs": {
            "spec": "gocryptfs", "method": "fill (sequential write + fdatasync)", "bytes": 10**6,
            "seconds": 0.01, "mb_per_s": 100.0, "intact": None, "format_after": "",
        },
    }  # fmt: skip
    lines = inplace_table(rows, 10**12, ["luks2", "gocryptfs"]).splitlines()
    assert "1 TB would take" in lines[0]
    luks2, gocryptfs = lines[2:]
    assert "50" in luks2 and "about 5 h 33 min" in luks2 and "data intact, LUKS2 after" in luks2
    assert "about 2 h 47 min" in gocryptfs and "intact" not in gocryptfs


def test_the_line_under_the_header_names_the_users_prior_when_the_gate_was_given_one() -> None:
    estimates = {"fscrypt|SEQ1M-Q8T1-read": {"runs": 10, "df_between": 9, "sd_between_percent": 2.0}}
    users = verdict_model.read_noise_prior(json.dumps({"estimates": estimates}), "noise-runner.json")
    before, now = (
        RunData(label, (result("fscrypt", CDM[0], [50, 52, 51], [100, 101, 99]),)) for label in ("ref", "now")
    )
    given = judge(now, before, parse_rules("10%"), noise=users)
    assert [c.between for c in given.checks if c.gated] == [
        "between-run sd 2.0% (prior of fscrypt SEQ1M-Q8T1-read, noise-runner.json)"
    ]
    shown = [text for _, text in verdict_messages(given)]
    assert "between-run prior: noise-runner.json (10 runs, --encperf-noise)" in shown
    # the same runs judged without it: the built-in prior, named as such (nothing stayed behind)
    builtin = [text for _, text in verdict_messages(judge(now, before, parse_rules("10%")))]
    assert any(
        text.startswith("between-run prior: built-in, measured on the development") for text in builtin
    )
    assert not any("noise-runner.json" in text for text in builtin)
