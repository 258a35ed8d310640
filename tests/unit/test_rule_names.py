"""Gate rules that name a test or a timed function (encperf.time): a test's name selects every
parametrization and its full id one (which beats it), a name nothing could measure is a usage error
listing the names there are, a ``name=`` a rule would misread is refused, and the gate's expected
family counts a timed function whose ``name=`` is known only when it is called."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_encperf import usertiming
from pytest_encperf.gate import (
    GRAMMAR,
    expected_family_size,
    judge,
    named_selectors,
    parse_rules,
    select_rule,
    selects_name,
    unmatched_names,
)
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.settings import resolve
from pytest_encperf.workloads import CDM, REALWORK
from tests.helpers.priors import quiet_prior, table  # noqa: F401 (autouse: a quiet machine's between-run prior)

SEQ_READ = CDM[0]
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
BACKENDS = ["fscrypt", "gocryptfs", "plain"]
WAL, DELETE = usertiming.user_workload("test_sqlite[wal]"), usertiming.user_workload("test_sqlite[delete]")


def test_a_tests_name_selects_every_parametrization_and_its_full_id_one() -> None:
    (every,) = parse_rules("test_sqlite:20%", BACKENDS)
    assert every.matches("fscrypt", WAL) and every.matches("fscrypt", DELETE)
    assert every.matches("fscrypt", usertiming.user_workload("test_sqlite"))  # not parametrized
    for other in ("test_sqlite_big", "test_sqlite_big[wal]", "test_sqlit[wal]"):
        assert not every.matches("fscrypt", usertiming.user_workload(other))
    (one,) = parse_rules("fscrypt:TEST_SQLITE[WAL]:seconds:20%", BACKENDS)  # any case, as every part
    assert (one.backend, one.workload, one.metric) == ("fscrypt", "test_sqlite[wal]", "seconds")
    assert one.matches("fscrypt", WAL) and not one.matches("fscrypt", DELETE)
    assert selects_name("test_sqlite", "Test_Sqlite[WAL]") and not selects_name(
        "test_sqlite[wal]", "test_sqlite"
    )
    # a task's name is no class: seq selects block workloads, not a timed function called seq[1]
    assert not parse_rules("seq:20%")[0].matches("fscrypt", usertiming.user_workload("seq[1]"))


@pytest.mark.parametrize(
    "order", ["test_sqlite:20%,test_sqlite[wal]:5%", "test_sqlite[wal]:5%,test_sqlite:20%"]
)
def test_the_full_id_beats_the_tests_name_in_any_order_and_a_backend_beats_both(order: str) -> None:
    rules = parse_rules(order, BACKENDS)
    assert select_rule(rules, "fscrypt", WAL, "throughput").text == "test_sqlite[wal]:5%"
    assert select_rule(rules, "fscrypt", DELETE, "throughput").text == "test_sqlite:20%"
    with_backend = parse_rules(f"{order},fscrypt:30%", BACKENDS)
    assert select_rule(with_backend, "fscrypt", WAL, "throughput").text == "fscrypt:30%"
    assert select_rule(with_backend, "gocryptfs", WAL, "throughput").text == "test_sqlite[wal]:5%"


def test_a_name_that_selects_nothing_is_found_and_its_error_lists_the_names_there_are() -> None:
    rules = parse_rules(
        "test_sqlite:20%,my-step:10%,seq-read:5%,archive:9%,db-mixed:8%,my-stpe:1%", BACKENDS, None
    )
    # built-in selectors and the run's jobs are no names of tests or timed functions
    assert named_selectors(rules, ["db-mixed"]) == ["test_sqlite", "my-step", "my-stpe"]
    assert unmatched_names(rules, ["db-mixed"], ["test_sqlite[wal]", "my-step"]) == ["my-stpe"]
    assert unmatched_names(rules, [], []) == ["test_sqlite", "my-step", "db-mixed", "my-stpe"]

    settings = resolve({"fail": "test_sqlite:20%", "max-overhead": "my-stpe:40%"}, {}, environ={})
    (message,) = settings.unknown_rule_names(["test_sqlite[wal]", "my-step"], "measured by this run")
    assert message.startswith(
        "--encperf-max-overhead: unknown part 'my-stpe': not a backend, metric, workload or a job section of "
        "--encperf-fio-job (none: --encperf-fio-job not given), nor a test, timed function or test's own "
        "workload measured by this run (test_sqlite[wal], my-step); "
    )
    assert GRAMMAR in message
    from_env = resolve({}, {}, environ={"ENCPERF_FAIL": "seq-reed:5%"})
    (message,) = from_env.unknown_rule_names([], "collected")
    assert message.startswith("--encperf-fail (from ENCPERF_FAIL): unknown part 'seq-reed'")


def test_a_rule_naming_no_job_or_function_is_refused_at_collection_unless_a_test_may_time_one(
    tmp_path: Path,
) -> None:
    """When no collected test asks for ``encperf`` (the built-in workloads' tests ask for
    ``encperf_workload`` too), nothing can be measured under a name of its own: a usage error
    at once. When one may, the name is checked at the end, against what was measured."""
    path = tmp_path / "db.fio"
    path.write_text("[db-mixed]\nrw=randrw\nbs=8k\n")
    settings = resolve({"fio-job": str(path), "fail": "db-mixd:20%,db-mixed:10%"}, {}, environ={})
    builtin = SimpleNamespace(fixturenames=("encperf", "encperf_workload", "encperf_volume"))
    timing = SimpleNamespace(fixturenames=("encperf", "encperf_volume"))
    (message,) = usertiming.rule_name_refusals(settings, [builtin])
    assert message.startswith(
        "--encperf-fail: unknown part 'db-mixd': not a backend, metric, workload or a job section of "
        "--encperf-fio-job (db-mixed), nor a test, timed function or test's own workload collected (none)"
    )
    assert usertiming.rule_name_refusals(settings, [builtin, timing]) == []


@pytest.mark.parametrize(
    ("name", "read_as"),
    [
        ("seconds", "a metric"),
        ("Seq", "a built-in workload or workload class"),
        ("seq1m-q8t1-read", "a built-in workload or workload class"),
        ("archive", "a real-work task"),
        ("lifecycle-mount", "a life-cycle step"),
        ("fscrypt", "a backend"),
        ("-step", "nothing: a rule's WORKLOAD starts with a letter, a digit or _"),
    ],
)
def test_a_name_a_gate_rule_would_misread_is_refused(name: str, read_as: str) -> None:
    with pytest.raises(ValueError, match=f"a gate rule would read the name '{name}' as {read_as}"):
        usertiming.timed_name(name, "test_x")
    assert usertiming.timed_name("my-step", "test_x") == "my-step"
    assert usertiming.timed_name(None, "test_x[wal]") == "test_x[wal]"
    (rule,) = parse_rules("my-step:20%", BACKENDS, None)  # what a rule reads it as: the workload
    assert rule.workload == "my-step" and rule.backend is None and rule.metric == "throughput"


def calls(seconds: list[float]) -> list[Measurement]:
    return [Measurement(usertiming.ENGINE, "3", 0, s, 0, 0.0, 0.0, 0.0, 0.1, "buffered") for s in seconds]


def timed_run(label: str, name: str, backends: list[str], factor: float = 1.0) -> RunData:
    volume = [2 * factor * (1 + 0.001 * k) for k in range(10)]
    plain = [1.0 * (1 + 0.001 * k) for k in range(10)]
    workload = usertiming.user_workload(name)
    return RunData(label, tuple(Result(b, workload, calls(volume), calls(plain)) for b in backends))


@pytest.mark.parametrize(
    ("rules", "overhead"), [("20%", ""), ("", "my-step:40%"), ("my-step:20%", "fscrypt:40%")]
)
def test_the_expected_family_counts_a_call_named_in_the_call_whatever_its_name(
    rules: str, overhead: str
) -> None:
    """``test_named`` calls ``encperf.time(fn, name="my-step")``: collection knows only the test's
    name. The family the gate expects (the session's test_cells and Outcome's later_named_cells)
    is at least the gated checks the verdict finds once my-step was measured; counted by the
    test's name alone it was fewer (what happened before)."""
    backends = ["fscrypt", "gocryptfs"]
    items = [
        SimpleNamespace(
            name=f"test_named[{b}]",
            originalname="test_named",
            fixturenames=("encperf", "encperf_volume"),
            callspec=SimpleNamespace(params={"encperf_volume": b}),
            iter_markers=lambda name: iter(()),
        )
        for b in backends
    ]
    cells = usertiming.expected_cells(items)
    assert sorted((b, w.name) for b, w in cells) == [("fscrypt", "test_named"), ("gocryptfs", "test_named")]
    fail, overhead_rules = parse_rules(rules, BACKENDS, None), parse_rules(overhead, BACKENDS, None)
    reference = timed_run("ref", "my-step", [*backends, "plain"])
    verdict = judge(timed_run("now", "my-step", [*backends, "plain"], 1.01), reference, fail, overhead_rules)
    gated = sum(check.gated for check in verdict.checks)
    assert gated > 0

    def family(test_cells: list) -> int:
        return expected_family_size(
            backends, [SEQ_READ], fail, overhead_rules, reference, test_cells=test_cells
        )

    later = usertiming.later_named_cells(
        cells, [r.workload for r in reference.results], named_selectors([*fail, *overhead_rules], [])
    )
    assert sorted({w.name for _, w in later}) == ["my-step"]
    assert family(cells) < gated <= family([*cells, *later])
    # a real-work task of the reference is no timed function: no cell of its own name
    task = Result("fscrypt", REALWORK[0], calls([1.0]), calls([1.0]))
    workloads = [r.workload for r in (*reference.results, task)]
    assert usertiming.later_named_cells(cells, workloads, []) == later


def test_encperf_compare_fail_gates_every_parametrization_by_the_tests_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_encperf import cli, storage

    def save(name: str, factor: float) -> None:
        runs = [timed_run(name, w.name, ["fscrypt"], factor) for w in (WAL, DELETE)]
        results = [result for run in runs for result in run.results]
        doc = storage.document(results, {"cpu_model": "cpu"}, "m1", {"id": "c0ffee"}, {"rounds": "10"}, NOW)
        storage.save(tmp_path, "m1", name, doc)

    save("main", 1.0)
    save("pr", 1.0)
    assert cli.main(["--storage", str(tmp_path), "compare", "main", "pr", "--fail", "test_sqlite:20%"]) == 0
    out = capsys.readouterr().out
    checked = [line for line in out.splitlines() if "test_sqlite:20%" in line]
    assert any("test_sqlite[wal]" in line for line in checked)
    assert any("test_sqlite[delete]" in line for line in checked)
    with pytest.raises(SystemExit) as info:
        cli.main(["--storage", str(tmp_path), "compare", "main", "pr", "--fail", "test_sqlit:20%"])
    assert info.value.code == 2
    assert (
        "--fail: unknown part 'test_sqlit': not a backend, metric, workload or a job section of "
        "--encperf-fio-job (none: --encperf-fio-job not given), nor a test, timed function or test's own "
        "workload in the runs "
        "(test_sqlite[wal], test_sqlite[delete]); "
    ) in capsys.readouterr().err
