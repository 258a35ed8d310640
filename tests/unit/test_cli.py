"""The ``encperf`` command on saved runs (no pytest session)."""

from __future__ import annotations

import datetime as dt
import json
import tomllib
from pathlib import Path

import pytest

import pytest_encperf
from pytest_encperf import cli, fiojob, storage, sweep
from pytest_encperf.backends import recommend
from pytest_encperf.gate import EXIT_REGRESSION
from pytest_encperf.model import Measurement, Result
from pytest_encperf.report import drawing
from pytest_encperf.workloads import CDM, Workload
from tests.helpers.priors import (  # noqa: F401 (quiet_prior autouse: a quiet machine's between-run prior)
    quiet_noise_file,
    quiet_prior,
)

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def save(
    root: Path,
    name: str,
    mb_per_s: float,
    machine_id: str = "m1",
    *,
    rounds: int = 3,
    workload: Workload = CDM[0],
) -> Path:
    """A run of fscrypt at ``mb_per_s`` against plain at 100 MB/s; m2 is other hardware."""

    def measured(value: float) -> list[Measurement]:
        return [
            Measurement(
                "native",
                "0.1",
                int(value * 1e6 * (1 + 0.001 * k * (-1) ** k)),
                1.0,
                100,
                10.0,
                20.0,
                30.0,
                0.5,
                "direct",
            )
            for k in range(rounds)
        ]

    results = [Result("fscrypt", workload, measured(mb_per_s), measured(100))]
    info = {"cpu_model": "test cpu" if machine_id == "m1" else "other cpu", "kernel": "6.1"}
    doc = storage.document(results, info, machine_id, {"id": "c0ffee"}, {"rounds": str(rounds)}, NOW)
    return storage.save(root, machine_id, name, doc)


def encperf(root: Path, *args: str) -> int:
    return cli.main(["--storage", str(root), *args])


def test_list_shows_runs_per_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    save(tmp_path, "pr", 100, machine_id="m2")
    (tmp_path / "m2" / "0002_broken.json").write_text("{")
    assert encperf(tmp_path, "list") == 0
    out = capsys.readouterr().out
    assert "m1:\n  0001_main.json  2026-01-02T03:04:05+00:00  commit c0ffee  1 results  fscrypt" in out
    assert "m2:\n  0001_pr.json" in out
    assert "0002_broken.json  unreadable:" in out
    assert encperf(tmp_path / "none", "list") == 0
    assert "no saved runs" in capsys.readouterr().out


def test_compare_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 50, rounds=10)
    save(tmp_path, "same", 50)
    save(tmp_path, "slow", 40)
    assert encperf(tmp_path, "compare", "main", "same", "--fail", "10%") == 0
    assert "encperf: 0 regressions, 2 within threshold" in capsys.readouterr().out  # plain: its prior
    assert encperf(tmp_path, "compare", "main", "slow", "--fail", "10%") == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "encperf: 1 regression, 1 within threshold" in out
    assert (
        "FAIL: fscrypt SEQ1M-Q8T1-read throughput: reference run 0.500 x plain -> now 0.400 x plain "
        "(-20.0%" in out
    )
    assert encperf(tmp_path, "compare", "main", "slow") == 0  # no rule: a table, no verdict
    assert "-20.0%" in capsys.readouterr().out


def test_compare_uses_the_same_judge_strict_and_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for value in (50, 50.5, 49.5):  # three saved runs: plain's absolute throughput gets a history
        save(tmp_path, "main", value, rounds=10)
    save(tmp_path, "pr", 50)
    assert encperf(tmp_path, "compare", "main", "pr", "--fail", "10%") == 0
    out = capsys.readouterr().out
    assert "encperf: 0 regressions, 2 within threshold" in out
    assert "history: 3 saved runs (m1/0003_main.json, m1/0002_main.json, m1/0001_main.json)" in out
    assert encperf(tmp_path, "compare", "main", "pr", "--fail", "10%", "--history", "0") == 0
    assert "rounds + run prior" in capsys.readouterr().out  # no history: plain by its prior
    save(tmp_path, "other-backend", 50)
    path = tmp_path / "m1" / "0005_other-backend.json"
    path.write_text(path.read_text().replace('"fscrypt"', '"luks2"'))
    assert (
        encperf(tmp_path, "compare", "main", "other-backend", "--fail", "10%", "--strict") == EXIT_REGRESSION
    )
    assert (
        "not checked: fscrypt SEQ1M-Q8T1-read: in m1/0003_main.json, not in this run"
        in capsys.readouterr().out
    )


def test_compare_judges_with_the_noise_file_it_is_given_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``encperf compare --noise FILE``, no pytest session: that runner's prior decides the checks
    and the line under the verdict's header names it; the next call without it is back to the
    built-in prior (the prior is an argument of the judge, not the process's state)."""
    runs = tmp_path / "runs"
    save(runs, "main", 50, rounds=10)
    save(runs, "pr", 50)
    noise = quiet_noise_file(tmp_path, [(backend, CDM[0].name) for backend in ("fscrypt", "plain")])
    assert encperf(runs, "compare", "main", "pr", "--fail", "10%", "--noise", str(noise)) == 0
    out = capsys.readouterr().out
    assert "encperf: 0 regressions, 2 within threshold" in out
    assert "encperf: between-run prior: noise-quiet.json (10 runs, --encperf-noise)" in out
    assert encperf(runs, "compare", "main", "pr", "--fail", "10%") == 0
    out = capsys.readouterr().out
    assert "encperf: between-run prior: built-in, measured on the development machine" in out
    assert "noise-quiet.json" not in out


def test_compare_takes_max_overhead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 50, rounds=10)
    save(tmp_path, "pr", 50, rounds=5)
    assert encperf(tmp_path, "compare", "main", "pr", "--max-overhead", "40%") == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "FAIL: fscrypt SEQ1M-Q8T1-read throughput: plain in this run 100.0 MB/s -> now 50.0 MB/s" in out
    assert encperf(tmp_path, "compare", "main", "pr", "--max-overhead", "60%") == 0


def test_compare_across_machines_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    save(tmp_path, "other", 100, machine_id="m2")
    assert (
        encperf(tmp_path, "compare", "m1/1", "m2/1", "--fail", "10%", "--markdown", str(tmp_path / "r.md"))
        == 0
    )
    out = capsys.readouterr().out
    assert "the runs come from different machines (m1, m2)" in out
    # m2 is other hardware: the checks pass, but a difference could be the hardware's
    assert (
        "not checked: reference run m1/0001_main.json was measured on other hardware (cpu_model test cpu -> "
        "other cpu): a difference may be the hardware's, not the code's (--allow-other-hardware accepts "
        "such a reference run)" in out
    )
    # yellow, as in the terminal: what other hardware may explain is not checked (strict fails it)
    assert "**⚠️ encperf: 0 regressions, 2 within threshold" in (tmp_path / "r.md").read_text()


def test_strict_fails_on_other_hardware_unless_it_is_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save(tmp_path, "main", 100)
    save(tmp_path, "other", 100, machine_id="m2")
    assert encperf(tmp_path, "compare", "m1/1", "m2/1", "--fail", "10%", "--strict") == EXIT_REGRESSION
    assert "exit status 7 (performance gate failed)" in capsys.readouterr().out
    allowed = ("--fail", "10%", "--strict", "--allow-other-hardware")
    assert encperf(tmp_path, "compare", "m1/1", "m2/1", *allowed) == 0
    out = capsys.readouterr().out
    assert "accepted by --allow-other-hardware: a difference may be the hardware's" in out
    assert "not checked" not in out
    save(tmp_path, "pr", 100)  # the same hardware: nothing to accept
    assert encperf(tmp_path, "compare", "m1/1", "m1/2", "--fail", "10%", "--strict") == 0
    assert "other hardware" not in capsys.readouterr().out
    if drawing.matplotlib_problem():
        pytest.skip(f"encperf report draws its charts with matplotlib: {drawing.matplotlib_problem()}")
    report = ("report", "m1/1", "m2/1", "-o", str(tmp_path / "r.html"), "--fail", "10%", "--strict")
    assert encperf(tmp_path, *report) == EXIT_REGRESSION
    assert encperf(tmp_path, *report, "--allow-other-hardware") == 0


def test_compare_says_kdf_and_inplace_timings_are_not_gated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save(tmp_path, "main", 50, rounds=10)
    path = save(tmp_path, "pr", 50)
    doc = json.loads(path.read_text())
    doc["encperf"]["kdf"] = {"luks2": {"spec": "luks2"}}
    doc["encperf"]["inplace"] = {"luks2": {"spec": "luks2"}}
    path.write_text(json.dumps(doc))
    assert encperf(tmp_path, "compare", "main", "pr", "--fail", "10%", "--strict") == 0
    out = capsys.readouterr().out
    assert (
        "encperf: 0 regressions, 2 within threshold; "
        "not gated: kdf timings (luks2), in-place timings (luks2)" in out
    )


def test_show_prints_machine_and_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    assert encperf(tmp_path, "show", "main") == 0
    out = capsys.readouterr().out
    assert "m1/0001_main.json" in out and "machine: test cpu" in out
    assert "CPU at the start: no cpufreq governor exposed, frequency unknown" in out  # not recorded
    (row,) = [line for line in out.splitlines() if "SEQ1M-Q8T1-read" in line]
    assert row.split()[:3] == ["fscrypt", "SEQ1M-Q8T1-read", "100.0"]


def test_show_ranks_the_configurations_of_a_saved_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def measured(value: float) -> list[Measurement]:
        return [
            Measurement(
                "native", "0.1", int(value * 1e6 * (1 + 0.001 * k)), 1.0, 100, 10.0, 20.0, 30.0, 0.5, "direct"
            )
            for k in range(3)
        ]

    results = [
        Result(spec, workload, measured(value), measured(100))
        for spec, value in (("gocryptfs:openssl=0", 80), ("gocryptfs:openssl=1", 40))
        for workload in CDM[:2]
    ]
    doc = storage.document(results, {"cpu_model": "test cpu"}, "m1", {}, {}, NOW)
    storage.save(tmp_path, "m1", "sweep", doc)
    assert encperf(tmp_path, "show", "sweep") == 0
    out = capsys.readouterr().out
    assert "sweep: gocryptfs, 2 configurations ranked over 2 workloads" in out
    # a run that saved its ranking is shown as it ranked, skipped configurations included
    specs = ["gocryptfs:openssl=0", "gocryptfs:openssl=1", "gocryptfs:openssl=auto"]
    doc["encperf"]["sweeps"] = [ranking.to_dict() for ranking in recommend(sweep.rank(results, specs))]
    storage.save(tmp_path, "m1", "saved", doc)
    assert encperf(tmp_path, "show", "saved") == 0
    saved_out = capsys.readouterr().out
    assert "sweep: gocryptfs, 2 of 3 configurations ranked over 2 workloads" in saved_out
    assert "not ranked: no results (skipped or failed)" in saved_out
    assert "recommendation for gocryptfs: openssl=0 (-20.0% vs plain)" in out
    assert "gocryptfs -openssl=false CIPHERDIR MOUNTPOINT" in out


def test_errors_are_messages_with_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, "main", 100)
    assert encperf(tmp_path, "show", "nope") == 1
    assert "encperf: error: no saved run matches 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        encperf(tmp_path, "compare", "main", "main", "--fail", "seq-reed:5%")
    assert info.value.code == 2
    assert "unknown part 'seq-reed'" in capsys.readouterr().err


def test_compare_fail_names_a_fio_job_of_the_runs_by_its_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = fiojob.workload_of(fiojob.FioJob("db-mixed", (("rw", "read"), ("bs", "1m"))))
    save(tmp_path, "main", 90, workload=job)
    save(tmp_path, "pr", 90, workload=job)
    assert encperf(tmp_path, "compare", "main", "pr", "--fail", "fscrypt:DB-Mixed:20%") == 0
    assert "fscrypt:DB-Mixed:20%" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        encperf(tmp_path, "compare", "main", "pr", "--fail", "db-mixd:20%")
    assert info.value.code == 2
    assert (
        "--fail: unknown part 'db-mixd': not a backend, metric, workload or a job section of "
        in (err := capsys.readouterr().err)
        and "(db-mixed)" in err
    )


def test_version_prints_the_package_version_from_its_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"encperf {pytest_encperf.__version__}\n"
    # the package's metadata reads the same attribute: the version is written in one place
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pytest_encperf.__version__"}


def test_backends_doctor_lists_every_backend_with_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["backends", "--target", "directory", "--dir", "/dev/shm"]) == 0
    out = capsys.readouterr().out
    assert "target: directory in /dev/shm" in out
    assert "plain" in out and "fscrypt" in out
    assert "/dev/shm is on tmpfs (memory, not a disk)" in out


def test_backends_doctor_lists_one_backends_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["backends", "luks2", "--target", "directory", "--dir", "/dev/shm"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "512 | 1024 | 2048 | 4096" in rows["sector-size"]
    assert "bypass dm-crypt's read and write workqueues" in rows["no-workqueue"]
    assert "luks2:key=a|b (quoted)" in out
    assert cli.main(["backends", "plain", "--target", "directory", "--dir", "/dev/shm"]) == 0
    assert "plain has no parameters" in capsys.readouterr().out
    assert cli.main(["backends", "nope"]) == 2
    assert "unknown backend 'nope'" in capsys.readouterr().err


def test_backends_doctor_bad_target_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["backends", "--target", "cloud"])
    assert exc.value.code == 2
    assert "expected one of container, directory" in capsys.readouterr().err
