"""What the gate's checks do not cover, in its verdict: a baseline of other hardware (strict fails
unless it is accepted) and the timings it never gates (kdf, in-place), listed in its header."""

from __future__ import annotations

from pytest_encperf import gatescope
from pytest_encperf.gate import Verdict, judge, parse_rules
from pytest_encperf.model import RunData
from pytest_encperf.report import markdown_report, verdict_header, verdict_report
from pytest_encperf.workloads import MiB
from tests.helpers.fakes import fakecrypt_result as result
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)

HERE = {
    "machine": "x86_64", "cpu_model": "CPU A", "cpu_count": 8, "cpu_flags": ["aes"],
    "device_model": "disk 1", "kernel": "6.1.0-1", "node": "ci-1",
}  # fmt: skip
KERNEL_UPDATE = {**HERE, "kernel": "6.1.0-2"}
IDENTICAL_SERVER = {**HERE, "node": "ci-2"}
OTHER_CPU = {**HERE, "cpu_model": "CPU B", "cpu_count": 16}
SETTINGS = {"size": str(256 * MiB), "runtime": "1.5", "target": "container"}


def test_the_same_hardware_is_no_finding_whatever_else_changed() -> None:
    for info in (HERE, KERNEL_UPDATE, IDENTICAL_SERVER):
        assert gatescope.other_hardware("m1/0001_main.json", info, HERE, allowed=False) == ([], [])


def test_other_hardware_is_not_checked_unless_accepted() -> None:
    notes, unchecked = gatescope.other_hardware("m2/0001_main.json", OTHER_CPU, HERE, allowed=False)
    assert notes == []
    assert unchecked == [
        "reference run m2/0001_main.json was measured on other hardware (cpu_model CPU B -> CPU A; cpu_count "
        "16 -> 8): a difference may be the hardware's, not the code's (--encperf-allow-other-hardware "
        "accepts such a reference run)"
    ]
    notes, unchecked = gatescope.other_hardware("m2/0001_main.json", OTHER_CPU, HERE, allowed=True)
    assert unchecked == []
    assert notes == [
        "reference run m2/0001_main.json was measured on other hardware (cpu_model CPU B -> CPU A; cpu_count "
        "16 -> 8), accepted by --encperf-allow-other-hardware: a difference may be the hardware's, not the "
        "code's"
    ]
    _, named = gatescope.other_hardware("m2", OTHER_CPU, HERE, allowed=False, flag="--allow-other-hardware")
    assert "(--allow-other-hardware accepts such a reference run)" in named[0]
    # nothing asked to be gated (no --encperf-fail): a note, nothing left unchecked
    _, finding = gatescope.other_hardware("m2/0001_main.json", OTHER_CPU, HERE, allowed=False)
    ungated = gatescope.other_hardware("m2/0001_main.json", OTHER_CPU, HERE, allowed=False, gated=False)
    assert ungated == (finding, [])


def verdict_on(reference_info: dict, current_info: dict, *, strict: bool, allowed: bool) -> Verdict:
    """A passing check against a reference measured on ``reference_info``'s machine, with the
    hardware rule applied as the session and `encperf compare` apply it."""
    reference = RunData("m2/0001_main.json", (result(50, 10),), SETTINGS, reference_info)
    current = RunData("this run", (result(50, 3),), SETTINGS, current_info)
    verdict = judge(current, reference, parse_rules("10%"), strict=strict)
    notes, unchecked = gatescope.other_hardware(
        reference.label, reference.machine_info, current.machine_info, allowed
    )
    verdict.notes += notes
    verdict.unchecked += unchecked
    return verdict


def test_strict_fails_on_other_hardware_only_when_it_is_not_accepted() -> None:
    assert verdict_on(OTHER_CPU, HERE, strict=True, allowed=False).failed
    assert not verdict_on(OTHER_CPU, HERE, strict=False, allowed=False).failed  # said, not failed
    assert not verdict_on(OTHER_CPU, HERE, strict=True, allowed=True).failed
    assert not verdict_on(KERNEL_UPDATE, HERE, strict=True, allowed=False).failed
    verdict = verdict_on(OTHER_CPU, HERE, strict=True, allowed=False)
    lines = [text for _, _, text in verdict_report(verdict)]
    said = "encperf: not checked: reference run m2/0001_main.json was measured on other hardware (cpu_model"
    assert any(line.startswith(said) for line in lines)
    assert lines[-1] == "encperf: exit status 7 (performance gate failed)"


def test_kdf_and_inplace_timings_are_listed_as_not_gated() -> None:
    timings = {"kdf": {"luks2": {}, "gocryptfs": {}}, "inplace": {"luks2": {}}, "lifecycle": {"luks2": {}}}
    assert gatescope.ungated_timings(timings) == [
        "kdf timings (luks2, gocryptfs)",
        "in-place timings (luks2)",
    ]
    assert gatescope.ungated_timings({"kdf": {}, "inplace": None}) == []
    no_key_derivation = {"spec": "fscrypt", "settings": {}, "note": "no key derivation"}
    timed = {"spec": "luks2", "settings": {"fast": {"label": "pbkdf2", "create": 1.0, "mount": 0.1}}}
    assert gatescope.ungated_timings({"kdf": {"fscrypt": no_key_derivation}}) == []
    assert gatescope.ungated_timings({"kdf": {"fscrypt": no_key_derivation, "luks2": timed}}) == [
        "kdf timings (luks2)"
    ]
    assert gatescope.ungated_in_document({"encperf": {"kdf": {"luks2": {}}}}) == ["kdf timings (luks2)"]
    assert gatescope.ungated_in_document({"benchmarks": []}) == []
    assert gatescope.ungated_in_document([]) == []


def test_the_header_names_what_is_not_gated() -> None:
    verdict = verdict_on(HERE, HERE, strict=True, allowed=False)
    assert verdict_header(verdict) == "encperf: 0 regressions, 2 within threshold"  # plain too: its prior
    verdict.not_gated = ["kdf timings (luks2)", "in-place timings (luks2)"]
    header = verdict_header(verdict)
    assert header.endswith("; not gated: kdf timings (luks2), in-place timings (luks2)")
    assert not verdict.failed  # listed, not failing, strict or not
    lines = [text for _, _, text in verdict_report(verdict)]
    assert lines[1] == header
    explained = "encperf: not gated: kdf timings (luks2), in-place timings (luks2): one timing per backend"
    assert any(line.startswith(explained) for line in lines)
    assert header in markdown_report([], verdict)
    nothing = Verdict(not_gated=["kdf timings (luks2)"])
    assert verdict_header(nothing) == "encperf: nothing was checked; not gated: kdf timings (luks2)"
