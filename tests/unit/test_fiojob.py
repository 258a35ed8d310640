"""The user's fio job files (fiojob.py): parsed from disk (property tests), each section a workload,
every refused option named, the job fio is given, and the option and gate rules that name them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_encperf import fiojob
from pytest_encperf.backends import known_names
from pytest_encperf.fiojob import FioJob, FioJobError, parse_job_text
from pytest_encperf.gate import parse_rules, selector_clash
from pytest_encperf.model import Measurement, Result
from pytest_encperf.settings import Settings, resolve
from pytest_encperf.workloads import MiB, Workload

DB_MIXED = """\
; a database-like mix
[global]
ioengine=psync
bs=8k
rw=randrw
rwmixread=70

[db-mixed]
fdatasync=32
# a comment
[stream-read]
rw = read
bs=1m
direct
"""

names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,20}", fullmatch=True).filter(
    lambda n: n != "global" and selector_clash(n, known_names()) is None  # a name a gate rule can carry
)
keys = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True).filter(lambda k: k != "include")
values = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20).map(str.strip)
options = st.lists(st.tuples(keys, values), max_size=6)


def render(sections: list[tuple[str, list[tuple[str, str]]]]) -> str:
    lines = []
    for name, pairs in sections:
        lines.append(f"[{name}]")
        lines += [f"{key}={value}" if value else key for key, value in pairs]
    return "\n".join(lines) + "\n"


@settings(deadline=None)
@given(
    global_options=options,
    jobs=st.lists(st.tuples(names, options), min_size=1, max_size=4, unique_by=lambda job: job[0].lower()),
)
def test_a_rendered_job_file_parses_back_with_the_globals_before_each_job(
    global_options: list[tuple[str, str]], jobs: list[tuple[str, list[tuple[str, str]]]]
) -> None:
    # a value that starts a comment or a section would not be an option's value in fio either
    jobs = [(name, [(k, v) for k, v in pairs if not v.startswith((";", "#", "["))]) for name, pairs in jobs]
    global_options = [(k, v) for k, v in global_options if not v.startswith((";", "#", "["))]
    parsed = parse_job_text(render([("global", global_options), *jobs]))
    assert [job.section for job in parsed] == [name for name, _ in jobs]
    for job, (_, pairs) in zip(parsed, jobs, strict=True):
        assert job.options == (*global_options, *pairs)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text(max_size=400))
def test_any_text_gives_jobs_or_a_job_file_error_and_nothing_else(text: str) -> None:
    try:
        jobs = parse_job_text(text)
    except FioJobError as exc:
        assert str(exc)
        return
    assert jobs and all(fiojob.SECTION_NAME.fullmatch(job.section) for job in jobs)
    for job in jobs:  # what was read is checkable: a reason or None, never an exception
        fiojob.refusal(job, 64 * MiB)
        fiojob.workload_of(job)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_on_disk_load_as_workloads_or_a_job_file_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.getbasetemp() / "any.fio"
    path.write_bytes(data)
    try:
        workloads = fiojob.load(path)
    except FioJobError:
        return
    assert all(w.kind == "job" for w in workloads)


def test_each_section_is_a_workload_named_after_it(tmp_path: Path) -> None:
    path = tmp_path / "db.fio"
    path.write_text(DB_MIXED)
    mixed, seq = Workload.from_fio_job(path)
    assert (mixed.name, mixed.direction, mixed.unit, mixed.block_size) == ("db-mixed", "mixed", "IOPS", 8192)
    assert mixed.job == (("ioengine", "psync"), ("bs", "8k"), ("rw", "randrw"), ("rwmixread", "70"),
                         ("fdatasync", "32"))  # fmt: skip
    assert (seq.name, seq.direction, seq.unit, seq.is_read, fiojob.direct(seq)) == (
        "stream-read",
        "read",
        "MB/s",
        True,
        True,
    )
    assert Workload.from_fio_job(path, section="stream-read") == [seq]
    with pytest.raises(FioJobError, match=r"no job section \[nope\]"):
        Workload.from_fio_job(path, section="nope")


def test_a_saved_job_workload_reads_back_equal_and_hashable() -> None:
    job = fiojob.workload_of(parse_job_text(DB_MIXED)[0])
    round_ = Measurement("fio", "3", 8192, 1.0, 1, 1.0, 2.0, 3.0, 0.1, "buffered")
    result = Result(backend="fscrypt", workload=job, rounds=[round_], baseline_rounds=[round_])
    again = Result.from_dict(result.to_dict())
    assert again.workload == job and hash(again.workload) == hash(job)


REFUSED = [
    *[(f"{name}=/dev/sda", name) for name in fiojob.OTHER_FILES],
    *[(f"{name}=/bin/sh", name) for name in fiojob.COMMANDS],
    *[(f"{name}=10", name) for name in fiojob.SET_BY_ENCPERF],
    ("ioengine=external:/tmp/x.so", "ioengine=external"),
    ("ioengine=exec", "ioengine=exec"),
    ("ioengine=net", "ioengine=net"),
    ("mem=mmaphuge:/hugepages/file", "mem=mmaphuge"),
    ("rw=trim", "rw=trim"),
]


@pytest.mark.parametrize(("line", "named"), REFUSED, ids=[line for line, _ in REFUSED])
def test_each_refused_option_is_named(tmp_path: Path, line: str, named: str) -> None:
    path = tmp_path / "bad.fio"
    path.write_text(f"[global]\nbs=4k\n[job]\n{line}\n")
    with pytest.raises(FioJobError) as refused:
        fiojob.load(path)
    assert str(refused.value).startswith(f"{path} [job]: {named}")


@pytest.mark.parametrize(
    ("line", "fits"),
    [("size=64m", True), ("size=65m", False), ("size=100%", True), ("offset=32m\nsize=33m", False),
     ("offset=50%\nsize=50%", True), ("filesize=1g", False), ("size=1g-2g", False)],
)  # fmt: skip
def test_a_job_asking_more_room_than_the_test_file_is_refused(line: str, fits: bool) -> None:
    (job,) = parse_job_text(f"[job]\n{line}\n")
    why = fiojob.refusal(job, 64 * MiB)
    assert (why is None) == fits, why
    if not fits:
        assert why is not None and why.split("=")[0] in ("size", "filesize")


def test_the_option_reads_every_file_and_refuses_with_its_name(tmp_path: Path) -> None:
    first, second = tmp_path / "a.fio", tmp_path / "b.fio"
    first.write_text(DB_MIXED)
    second.write_text("[other]\nrw=write\n")
    chosen = resolve({"fio-job": f"{first},{second}", "size": "64MiB"}, {}, environ={})
    assert [w.name for w in chosen.workloads] == ["db-mixed", "stream-read", "other"]  # the jobs alone
    both = resolve({"fio-job": str(second), "profile": "dd"}, {}, environ={})
    assert [w.name for w in both.workloads] == ["DD-4K-write", "other"]
    second.write_text("[other]\nexec_prerun=/bin/true\n")
    with pytest.raises(ValueError, match=rf"^--encperf-fio-job: {second} \[other\]: exec_prerun: "):
        resolve({"fio-job": str(second)}, {}, environ={})
    with pytest.raises(ValueError, match=r"^--encperf-fio-job \(from ENCPERF_FIO_JOB\): .*cannot read"):
        resolve({}, {}, environ={"ENCPERF_FIO_JOB": str(tmp_path / "missing.fio")})
    second.write_text("[other]\nsize=1g\n")
    chosen = resolve({"fio-job": str(second), "size": "64MiB"}, {}, environ={})
    with pytest.raises(FioJobError, match=r"^--encperf-fio-job: \[other\]: size=1g: asks for more room"):
        fiojob.check_room(chosen.fio_job, chosen.size)


def test_the_job_fio_reads_has_the_jobs_options_then_encperfs(tmp_path: Path) -> None:
    job = fiojob.workload_of(parse_job_text(DB_MIXED)[0])
    text = fiojob.job_text(job, Path("/v/a:b/encperf-test.dat"), runtime=1.5)
    lines = text.splitlines()
    assert lines[0] == "[db-mixed]" and lines[1:6] == ["ioengine=psync", "bs=8k", "rw=randrw", "rwmixread=70",
                                                       "fdatasync=32"]  # fmt: skip
    assert lines[6:] == [
        "filename=/v/a\\:b/encperf-test.dat", "allow_file_create=0", "time_based=1", "runtime=1500ms",
        "lat_percentiles=1", "group_reporting=1",
    ]  # fmt: skip
    assert fiojob.FIO_ARGS == ["fio", "--output-format=json", "-"]
    assert fiojob.definition(job).startswith("fio-job ")


def test_gate_rules_name_a_timed_function_by_its_tests_name_and_a_fio_job_by_its_class() -> None:
    (timed,) = parse_rules("fscrypt:test_inserts[wal]:seconds:20%", ["fscrypt", "plain"])
    assert (timed.backend, timed.workload, timed.metric) == ("fscrypt", "test_inserts[wal]", "seconds")
    (plain_name,) = parse_rules("test_inserts:20%", ["fscrypt", "plain"])
    assert plain_name.workload == "test_inserts"
    with pytest.raises(ValueError, match="unknown part 'db-mixed'"):  # a typo is still one
        parse_rules("db-mixed:20%", ["fscrypt", "plain"])
    (by_class,) = parse_rules("rnd:20%", ["fscrypt", "plain"])
    job = fiojob.workload_of(FioJob("db-mixed", (("rw", "randrw"),)))
    assert by_class.matches("fscrypt", job) and not parse_rules("seq:20%")[0].matches("fscrypt", job)


def test_a_gate_rule_names_a_job_of_the_fio_job_option_by_its_section(tmp_path: Path) -> None:
    """--encperf-fail and --encperf-max-overhead take a job section of --encperf-fio-job as a
    WORKLOAD (in any case, as every part of a rule); it selects that job, and only it."""
    path = tmp_path / "db.fio"
    path.write_text(DB_MIXED.replace("[db-mixed]", "[DB-Mixed]"))
    chosen = resolve(
        {"fio-job": str(path), "fail": "fscrypt:db-mixed:latency-p99:20%,stream-read:5%",
         "max-overhead": "DB-Mixed:40%"},
        {}, environ={},
    )  # fmt: skip
    mixed, stream = chosen.fio_job
    latency, by_name = chosen.fail
    assert (latency.backend, latency.workload, latency.metric) == ("fscrypt", "db-mixed", "latency-p99")
    assert latency.matches("fscrypt", mixed) and not latency.matches("fscrypt", stream)
    assert by_name.matches("gocryptfs", stream) and not by_name.matches("gocryptfs", mixed)
    (overhead,) = chosen.max_overhead
    assert overhead.matches("fscrypt", mixed) and not overhead.matches("fscrypt", stream)
    assert parse_rules("db-mixed:20%", ["fscrypt"], job_names=["DB-Mixed"])[0].workload == "db-mixed"


@pytest.mark.parametrize("option", ["fail", "max-overhead"])
def test_a_rule_naming_no_job_of_the_run_is_a_usage_error_naming_the_jobs(
    tmp_path: Path, option: str
) -> None:
    """Checked once the tests are collected (usertiming.rule_name_refusals) when none may time a
    function under a name of its own; otherwise at the end, against what was measured."""
    path = tmp_path / "db.fio"
    path.write_text(DB_MIXED)

    def refusals(settings: Settings) -> list[str]:
        return settings.unknown_rule_names([], "collected")

    (message,) = refusals(resolve({"fio-job": str(path), option: "db-mixd:20%"}, {}, environ={}))
    assert re.match(
        rf"^--encperf-{option}: unknown part 'db-mixd': not a backend, metric, workload or a job section of "
        r"--encperf-fio-job \(db-mixed, stream-read\)",
        message,
    )
    (message,) = refusals(resolve({option: "fscrypt:db-mixed:20%"}, {}, environ={}))
    assert re.search(r"unknown part 'db-mixed': .*\(none: --encperf-fio-job not given\)", message)
    with pytest.raises(
        ValueError,
        match=rf"^--encperf-{option} \(from ENCPERF_.*\): "
        r"bad expression 'no such:5%': unknown part 'no such'",
    ):
        resolve({}, {}, environ={f"ENCPERF_{option.replace('-', '_').upper()}": "no such:5%"})
    (message,) = refusals(
        resolve({}, {}, environ={f"ENCPERF_{option.replace('-', '_').upper()}": "seq-reed:5%"})
    )
    assert message.startswith(f"--encperf-{option} (from ENCPERF_{option.replace('-', '_').upper()}): ")


@pytest.mark.parametrize(
    ("section", "read_as"),
    [
        ("seq", "a built-in workload or workload class"),
        ("Rnd-Write", "a built-in workload or workload class"),
        ("seq1m-q8t1-read", "a built-in workload or workload class"),
        ("iops", "a metric"),
        ("seconds", "a metric"),
        ("archive", "a real-work task"),
        ("lifecycle-mount", "a life-cycle step"),
        ("fscrypt", "a backend"),
        ("plain", "a backend"),
    ],
)
def test_a_job_a_gate_rule_could_not_tell_apart_is_refused_naming_why(section: str, read_as: str) -> None:
    with pytest.raises(
        FioJobError,
        match=rf"job \[{section}\]: a gate rule \(--encperf-fail\) would read its name as {read_as}",
    ):
        parse_job_text(f"[{section}]\nrw=read\n")
    with pytest.raises(FioJobError, match=r"job \[DB\] appears twice \(gate rules ignore case\)"):
        parse_job_text("[db]\nrw=read\n[DB]\nrw=write\n")
