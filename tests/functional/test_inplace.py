"""In-place encryption: the fill's bytes and digest, and the option's plugin behaviour."""

from __future__ import annotations

import pytest


def test_without_the_option_nothing_is_encrypted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inplace="def test_in_place(encperf_inplace):\n    assert False\n")
    result = pytester.runpytest("--encperf-backends=gocryptfs", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*in-place encryption is not asked for (--encperf-inplace)*"])
