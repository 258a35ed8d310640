"""--encperf-fio-job through pytester on the directory target against ``fakecrypt``
(tests/functional/test_gate.py's): a refused job is a usage error naming the option, and a job
runs as a workload of its own, named after its section, with fio."""

from __future__ import annotations

import json
import shutil

import pytest

from pytest_encperf.benchmarkentries import measured
from tests.functional.test_usertiming import run, user  # noqa: F401 (the fixture)


@pytest.mark.parametrize(
    "line", ["filename=/dev/sda", "directory=/etc", "exec_prerun=/bin/true", "ioengine=external:/x.so",
             "size=2g"],
)  # fmt: skip
def test_a_refused_fio_job_is_a_usage_error_naming_the_option(user: pytest.Pytester, line: str) -> None:
    job = user.path / "bad.fio"
    job.write_text(f"[bad-job]\nrw=randread\n{line}\n")
    result = run(user, f"--encperf-fio-job={job}", "--encperf-size=1MiB")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    key = line.split("=")[0]
    result.stderr.fnmatch_lines([f"*--encperf-fio-job*[[]bad-job[]]: {key}*"])


def test_a_fio_job_runs_as_a_workload_of_its_own(user: pytest.Pytester) -> None:
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed (apt-get install fio)")
    job = user.path / "db.fio"
    job.write_text(
        "[global]\nioengine=psync\nbs=8k\n[db-mixed]\nrw=randrw\nrwmixread=70\n[stream]\nrw=read\nbs=1m\n"
    )
    user.makepyfile(
        test_bench="def test_workload(encperf, encperf_workload):\n    encperf.run(encperf_workload)\n"
    )
    report = user.path / "run.json"
    result = run(
        user, "test_bench.py", f"--encperf-fio-job={job}", "--encperf-size=2MiB", "--encperf-runtime=0.2",
        "--encperf-rounds=2", "--encperf-warmup=0", f"--encperf-json={report}",
        "--encperf-max-overhead=DB-Mixed:99%",  # a gate rule names a job by its section
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*db-mixed*stream*", "*IOPS mixed*MB/s read*"])
    entries = {e["params"]["workload"]: e for e in measured(json.loads(report.read_text())["benchmarks"])}
    assert sorted(entries) == ["db-mixed", "stream"]
    rounds = entries["db-mixed"]["extra_info"]["encperf"]["rounds"]
    assert all(
        r["engine"] == "fio" and r["ios"] > 0 and r["round_definition"].startswith("fio-job") for r in rounds
    )
