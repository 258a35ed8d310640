"""The CrystalDiskMark set (``--encperf-profile``) on every selected backend vs plain."""

import pytest

from pytest_encperf.backends import BASELINE
from pytest_encperf.runner import Runner
from pytest_encperf.workloads import Workload


def test_workload(encperf: Runner, encperf_workload: Workload) -> None:
    result = encperf.run(encperf_workload)
    assert len(result.rounds) > 0
    assert all(m.bytes > 0 for m in result.rounds)
    if not result.baseline_rounds:
        # a partition holds one volume at a time: plain's own volume there is the baseline itself
        assert result.backend == BASELINE, f"{result.backend} was measured without the plain baseline"
        pytest.skip(
            f"{BASELINE}: measured (its numbers are in the summary), compared with nothing: on the "
            "partition target plain's volume is the baseline itself; name an encrypted backend in "
            "--encperf-backends for a comparison"
        )
    assert len(result.rounds) == len(result.baseline_rounds)
    assert all(m.bytes > 0 for m in result.baseline_rounds)
