"""The kdf profile's pure parts: which settings a backend is timed with, the row's ratio and
its saved form."""

from __future__ import annotations

import pytest

from tests.helpers.support import TINY_BENCHMARK


def test_without_the_kdf_profile_nothing_is_timed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kdf="def test_key_derivation(encperf_kdf):\n    assert False\n")
    result = pytester.runpytest("--encperf-backends=gocryptfs", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*the kdf profile is not selected (--encperf-profile)*"])
    assert "key derivation [kdf]" not in result.stdout.str()


def test_the_kdf_profile_alone_skips_the_io_benchmarks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=TINY_BENCHMARK)
    result = pytester.runpytest("--encperf-profile=kdf", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*the selected profiles run no I/O workload*"])
