"""The CrystalDiskMark set (``--encperf-profile``) on every selected backend vs plain."""

from pytest_encperf.runner import Runner
from pytest_encperf.workloads import Workload


def test_workload(encperf: Runner, encperf_workload: Workload) -> None:
    result = encperf.run(encperf_workload)
    assert len(result.rounds) == len(result.baseline_rounds) > 0
    assert all(m.bytes > 0 for m in result.rounds + result.baseline_rounds)
