"""A fio job file of your own (db-mixed.fio beside this file) on each backend against plain: each
job section is a workload named after it, run with fio and the job's own options.

    pytest benchmarks/examples/test_fio_job.py --encperf-backends=fscrypt,gocryptfs --encperf-size=1GiB

The same without a test file: ``pytest benchmarks/ --encperf-fio-job=benchmarks/examples/db-mixed.fio``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_encperf.runner import Runner
from pytest_encperf.workloads import Workload

JOBS = Workload.from_fio_job(Path(__file__).with_name("db-mixed.fio"))


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
@pytest.mark.parametrize("job", JOBS, ids=str)
def test_fio_job(encperf: Runner, job: Workload) -> None:
    result = encperf.run(job)
    assert result.rounds and all(m.ios > 0 for m in result.rounds)
