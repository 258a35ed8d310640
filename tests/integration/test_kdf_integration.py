"""The kdf profile through a real plugin session: gocryptfs and qemu-luks opened with their
fast (benchmark) and default key derivation."""

from __future__ import annotations

import json

import pytest

from tests.helpers.support import kdf_session, problems_here, scratch_dir

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["gocryptfs", "qemu-luks"])
def test_kdf_profile_shows_default_slower_than_fast(pytester: pytest.Pytester, name: str) -> None:
    """The kdf profile shows default > fast for a backend that has both; plain says it has none;
    everything is gone afterwards."""
    with scratch_dir("encperf-kdf-") as scratch:
        reasons = problems_here(name, scratch)
        if reasons:
            pytest.skip("; ".join(reasons))
        out = pytester.path / "kdf.json"
        result = kdf_session(pytester, scratch, f"--encperf-backends={name}", f"--encperf-json={out}")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(
            ["key derivation ?kdf?:*", "*plain*no key derivation*", f"{name} *(benchmark only)*default*"]
        )
        rows = json.loads(out.read_text())["encperf"]["kdf"]
        assert rows["plain"]["note"] == "no key derivation"
        fast, default = rows[name]["settings"]["fast"], rows[name]["settings"]["default"]
        assert default["mount"] > fast["mount"] > 0
        assert default["create"] > 0 and fast["create"] > 0
        assert "benchmark only" in fast["label"] and "benchmark only" not in default["label"]
        assert rows[name]["ratio"] > 1
        assert list(scratch.glob("encperf-*")) == [], "run directory left behind"


def test_the_gate_says_kdf_timings_are_not_gated(pytester: pytest.Pytester) -> None:
    """kdf timings have no check: a run that has them and a gate says so in the gate's header."""
    with scratch_dir("encperf-kdf-") as scratch:
        reasons = problems_here("gocryptfs", scratch)
        if reasons:
            pytest.skip("; ".join(reasons))
        result = kdf_session(pytester, scratch, "--encperf-backends=gocryptfs", "--encperf-fail=10%")
        result.assert_outcomes(passed=2)
        assert result.ret == pytest.ExitCode.OK
        # plain has no key derivation, so no timing to leave ungated
        result.stdout.fnmatch_lines(["encperf: nothing was checked (*); not gated: kdf timings (gocryptfs)"])
        assert list(scratch.glob("encperf-*")) == [], "run directory left behind"
