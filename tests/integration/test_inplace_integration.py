"""In-place encryption throughput through a real plugin session: the fill of plain and gocryptfs
here; luks2's cryptsetup reencrypt runs in the UML lane (test_dmcrypt_integration.py) and is a
precise skip where the kernel has no device-mapper."""

from __future__ import annotations

import json

import pytest

from pytest_encperf import host
from pytest_encperf.backends.dmcrypt import device_mapper_problems
from tests.helpers.support import inplace_session, problems_here, scratch_dir

pytestmark = pytest.mark.integration


def test_fill_rates_and_projection_are_reported_and_saved(pytester: pytest.Pytester) -> None:
    with scratch_dir("encperf-inplace-") as scratch:
        reasons = problems_here("gocryptfs", scratch)
        if reasons:
            pytest.skip("; ".join(reasons))
        out = pytester.path / "inplace.json"
        result = inplace_session(
            pytester,
            scratch,
            "--encperf-backends=gocryptfs",
            "--encperf-project-size=1TB",
            f"--encperf-json={out}",
        )
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(["in-place encryption*", "*1 TB would take*", "gocryptfs *fill*about *"])
        saved = json.loads(out.read_text())["encperf"]
        assert saved["project_size"] == 10**12
        for spec in ("plain", "gocryptfs"):
            row = saved["inplace"][spec]
            assert row["bytes"] == 4 * 2**20 and row["mb_per_s"] > 0 and row["intact"] is None
        assert list(scratch.glob("encperf-*")) == [], "run directory left behind"


def test_luks2_reencrypt_is_skipped_without_device_mapper(pytester: pytest.Pytester) -> None:
    if not any("device-mapper" in reason for reason in device_mapper_problems()):
        pytest.skip("this kernel has device-mapper: the reencrypt runs (UML lane test)")
    if host.missing_tools("cryptsetup"):  # then the skip names the missing tool, not the kernel
        pytest.skip("cryptsetup is not installed (apt-get install cryptsetup-bin)")
    with scratch_dir("encperf-inplace-") as scratch:
        result = inplace_session(pytester, scratch, "--encperf-backends=luks2")
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(
            ["*luks2: cryptsetup: kernel has no device-mapper (device-mapper not in /proc/misc)*"]
        )
