"""Saved runs: numbering, atomic never-overwriting writes, loading, resolving references."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_encperf import storage
from pytest_encperf.model import Measurement, Result
from pytest_encperf.workloads import CDM

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def sample_results() -> list[Result]:
    m = Measurement("native", "0.1", 100_000_000, 1.0, 95, 10.0, 20.0, 30.0, 0.5, "direct", 1, 2)
    return [Result("fscrypt:contents=adiantum", CDM[0], [m, m, m], [m, m, m], {"cipher": "adiantum"})]


def doc(at: dt.datetime = NOW, **info: str) -> dict:
    machine = {"cpu_model": "x", "kernel": "6.1.0-1", **info}
    return storage.document(sample_results(), machine, "m1", {"id": "abc"}, {"rounds": "3"}, at)


def test_results_round_trip_through_a_saved_file(tmp_path: Path) -> None:
    path = storage.save(tmp_path, "m1", "main", doc())
    assert path == tmp_path / "m1" / "0001_main.json"
    loaded_doc, results = storage.load(path)
    assert results == sample_results()
    assert loaded_doc["datetime"] == "2026-01-02T03:04:05+00:00"
    assert loaded_doc["benchmarks"][0]["params"] == {
        "backend": "fscrypt:contents=adiantum",
        "workload": "SEQ1M-Q8T1-read",
    }
    extra = loaded_doc["benchmarks"][0]["extra_info"]
    assert extra["latency"].startswith("total latency of each I/O, from its submission to its completion")
    assert extra["caveats"] == {}
    # no device counters in these rounds: nothing known, nothing flagged
    assert extra["cached_below"] is False
    assert extra["device_per_logical"]["plain"] == {"bytes": None, "requests": None, "request_size": None}


def test_a_saved_read_says_whether_it_beat_plain_through_memory_below(tmp_path: Path) -> None:
    def read_round(ios: int, requests: int) -> Measurement:
        moved = ios * 4096
        return Measurement(
            "native", "0.1", moved, 1.0, ios, 10.0, 20.0, 30.0, 0.5, "buffered",
            physical_read_bytes=moved, physical_read_requests=requests, logical_read_bytes=moved,
        )  # fmt: skip

    rnd_read = next(w for w in CDM if w.name == "RND4K-Q1T1-read")
    result = Result("gocryptfs", rnd_read, [read_round(1300, 325)], [read_round(1000, 1000)])
    extra = storage.benchmark_entry(result)["extra_info"]
    assert extra["cached_below"] is True
    assert extra["device_per_logical"]["volume"]["request_size"] == 16384
    assert extra["device_per_logical"]["plain"] == {"bytes": 1.0, "requests": 1 / 4096, "request_size": 4096}


def test_save_never_overwrites_and_numbers_per_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = storage.save(tmp_path, "m1", "main", doc())
    first_text = first.read_text()
    second = storage.save(tmp_path, "m1", "main", doc())
    other = storage.save(tmp_path, "m2", "main", doc())
    assert (first.name, second.name, other.name) == ("0001_main.json", "0002_main.json", "0001_main.json")
    assert first.read_text() == first_text
    # another session takes number 3 between our look and our link: we move on to 4
    real_list_runs = storage.list_runs
    calls = []

    def racing_list_runs(root: Path, machine_id: str | None = None) -> list[storage.SavedRun]:
        runs = real_list_runs(root, machine_id)
        if not calls:
            calls.append(1)
            (tmp_path / "m1" / "0003_main.json").write_text("theirs")
        return runs

    monkeypatch.setattr(storage, "list_runs", racing_list_runs)
    fourth = storage.save(tmp_path, "m1", "main", doc())
    assert fourth.name == "0004_main.json"
    assert (tmp_path / "m1" / "0003_main.json").read_text() == "theirs"
    assert not list((tmp_path / "m1").glob(".tmp-*")), "temporary file left behind"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"benchmarks": [', "corrupted (not valid JSON"),
        ('{"machine_info": {}}', "not an encperf result file (missing field 'benchmarks')"),
        ('{"benchmarks": [{"extra_info": {}}]}', "not an encperf result file (missing field 'encperf')"),
        ('{"benchmarks": [{"extra_info": {"encperf": {"format": 99}}}]}', "unsupported encperf format 99"),
        ("[1, 2]", "not an encperf result file"),
    ],
)
def test_bad_files_are_errors_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "m1" / "0001_x.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(storage.StorageError, match=r"not an encperf|corrupted|unsupported") as info:
        storage.load(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(storage.StorageError, match=f"{tmp_path / 'nope.json'}: cannot read"):
        storage.load(tmp_path / "nope.json")


def test_resolve_references(tmp_path: Path) -> None:
    for machine, name in [("m1", "main"), ("m1", "pr"), ("m1", "main"), ("m2", "nightly")]:
        storage.save(tmp_path, machine, name, doc())
    assert storage.resolve(tmp_path, "latest", "m1")[0].path.name == "0003_main.json"
    assert storage.resolve(tmp_path, "", "m1")[0].path.name == "0003_main.json"
    assert storage.resolve(tmp_path, "2", "m1")[0].path.name == "0002_pr.json"
    assert storage.resolve(tmp_path, "0001", "m1")[0].path.name == "0001_main.json"
    assert storage.resolve(tmp_path, "main", "m1") == (
        storage.SavedRun(tmp_path / "m1/0003_main.json", "m1", 3, "main"),
        None,
    )
    run, warning = storage.resolve(tmp_path, "nightly", "m1")
    assert run.label == "m2/0001_nightly.json"
    assert "comes from another machine (this one is m1)" in warning
    assert storage.resolve(tmp_path, "m2/1", "m1")[0].label == "m2/0001_nightly.json"
    assert storage.resolve(tmp_path, str(tmp_path / "m1/0002_pr.json"), "m1")[0].name == "pr"
    with pytest.raises(storage.StorageError, match=r"no saved run matches 'latest' in .*m3"):
        storage.resolve(tmp_path, "latest", "m3")
    with pytest.raises(storage.StorageError, match="ambiguous"):
        storage.resolve(tmp_path, "1", None)
    with pytest.raises(storage.StorageError, match="no saved run matches 'main'"):
        storage.resolve(tmp_path / "empty", "main", "m1")


def test_latest_and_names_cross_a_kernel_update_but_not_other_hardware(tmp_path: Path) -> None:
    # m1 and m2 are one machine before and after a kernel update; m3 is another CPU
    storage.save(tmp_path, "m1", "main", doc())
    storage.save(tmp_path, "m3", "main", doc(cpu_model="y"))
    storage.save(tmp_path, "m3", "other", doc(cpu_model="y"))
    now = {"cpu_model": "x", "kernel": "6.1.0-2"}
    run, warning = storage.resolve(tmp_path, "latest", "m2", now)
    assert (run.label, warning) == ("m1/0001_main.json", None)
    assert storage.resolve(tmp_path, "main", "m2", now) == (run, None)
    with pytest.raises(storage.NoSavedRun):
        storage.resolve(tmp_path, "1", "m2", now)  # numbers are per machine id
    other, warning = storage.resolve(tmp_path, "other", "m2", now)  # named: allowed, with a warning
    assert other.label == "m3/0002_other.json" and "comes from another machine" in warning
    with pytest.raises(storage.NoSavedRun):
        storage.resolve(tmp_path, "latest", "m4", {"cpu_model": "z"})  # never other hardware


def test_history_is_the_reference_and_earlier_runs_of_this_hardware(tmp_path: Path) -> None:
    saves = [("m1", "main"), ("m1", "pr"), ("m2", "main"), ("m1", "main"), ("m3", "main")]
    for minute, (machine, name) in enumerate(saves):  # saved in this order ...
        at = NOW + dt.timedelta(minutes=minute)
        path = storage.save(tmp_path, machine, name, doc(at, cpu_model="y" if machine == "m3" else "x"))
        os.utime(path, (1000 - minute, 1000 - minute))  # ... whatever the files' times say
    reference = storage.resolve(tmp_path, "main", "m1")[0]
    assert reference.label == "m1/0003_main.json"
    labels = [run.label for run in storage.history(tmp_path, reference, "main", 5)]
    assert labels == ["m1/0003_main.json", "m2/0001_main.json", "m1/0001_main.json"]  # same name only
    labels = [run.label for run in storage.history(tmp_path, reference, "latest", 3)]
    assert labels == ["m1/0003_main.json", "m2/0001_main.json", "m1/0002_pr.json"]
    assert storage.history(tmp_path, reference, "main", 0) == []
    labels = [run.label for run in storage.history(tmp_path, reference, "m1/main", 5)]
    assert labels == ["m1/0003_main.json", "m2/0001_main.json", "m1/0001_main.json"]
    other = storage.resolve(tmp_path, "m3/main", "m1", {"cpu_model": "x"})
    assert other[1] is not None and "comes from another machine" in other[1]  # named, other hardware
    assert [run.label for run in storage.history(tmp_path, other[0], "m3/main", 5)] == ["m3/0001_main.json"]
    older = storage.resolve(tmp_path, "m1/2", None)[0]

    assert [run.label for run in storage.history(tmp_path, older, "2", 5)] == [
        "m1/0002_pr.json",
        "m1/0001_main.json",
    ]  # nothing saved after the reference


def test_load_run_keeps_settings_and_machine(tmp_path: Path) -> None:
    storage.save(tmp_path, "m1", "main", doc())
    run = storage.load_run(storage.resolve(tmp_path, "main", "m1")[0])
    assert (run.label, run.settings) == ("m1/0001_main.json", {"rounds": "3"})
    assert run.machine_info["cpu_model"] == "x" and run.machine_info["machine_id"] == "m1"
    assert run.results == tuple(sample_results())


@pytest.mark.parametrize("name", ["main", "v1.2", "pr-17", "a_b+c"])
def test_parse_name_accepts(name: str) -> None:
    assert storage.parse_name(name) == name


@pytest.mark.parametrize("name", ["../x", "a/b", "-x", "", "a b", "x" * 101])
def test_parse_name_rejects(name: str) -> None:
    with pytest.raises(ValueError, match="bad run name"):
        storage.parse_name(name)


def test_autosave_name() -> None:
    assert (
        storage.autosave_name({"id": "0123456789abcdef", "dirty": False}, NOW)
        == "0123456789ab_20260102_030405"
    )
    assert storage.autosave_name({"id": "abc", "dirty": True}, NOW) == "abc_20260102_030405_dirty"


def test_write_json_replaces_reports_atomically(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "r.json"
    storage.write_json(path, {"a": 1})
    storage.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]


def test_an_identical_server_is_another_machine_found_last_and_never_in_the_history(tmp_path: Path) -> None:
    """A fleet of one server model: gen8a and gen8b share hardware (and, before a fleet told them
    apart, a machine id). Each finds its own runs first, under any of its ids; the other's only
    when it has none, with a warning; a history never mixes them."""
    later = NOW + dt.timedelta(minutes=5)
    storage.save(tmp_path, "m1", "main", doc(node="gen8a"))
    storage.save(tmp_path, "m1-gen8b", "main", doc(later, node="gen8b"))  # newer, the other server
    storage.save(tmp_path, "m2", "main", doc(later, node="gen8a", kernel="6.1.0-2"))
    gen8a = {"cpu_model": "x", "node": "gen8a"}
    run, warning = storage.resolve(tmp_path, "latest", "m1", gen8a)
    assert (run.label, warning) == ("m1/0001_main.json", None)  # its own id first, though older
    run, warning = storage.resolve(tmp_path, "main", "m3", gen8a)  # a new kernel: a new id
    assert (run.label, warning) == ("m2/0001_main.json", None)  # this host under another id
    run, warning = storage.resolve(tmp_path, "latest", "m1", {"cpu_model": "x", "node": "gen8c"})
    assert run.label == "m1-gen8b/0001_main.json" and "comes from another machine" in (warning or "")
    assert [
        r.label for r in storage.history(tmp_path, storage.resolve(tmp_path, "m2/1", None)[0], "", 5)
    ] == [
        "m2/0001_main.json",
        "m1/0001_main.json",
    ]


@pytest.mark.parametrize(
    ("saved", "loaded"),
    [
        ({"plain": {"create": 0.25, "mount": 0.5}}, {"plain": {"create": [0.25], "mount": [0.5]}}),
        ({"plain": {"mount": [0.5, 0.75, 0.25]}}, {"plain": {"mount": [0.5, 0.75, 0.25]}}),
        (None, {}),
    ],
    ids=["one float per step (older runs)", "seconds per cycle", "no life cycle"],
)
def test_load_run_reads_the_life_cycle_of_older_and_newer_runs(
    tmp_path: Path, saved: dict | None, loaded: dict
) -> None:
    document = doc()
    if saved is not None:
        document["encperf"]["lifecycle"] = saved
    storage.save(tmp_path, "m1", "main", document)
    run = storage.load_run(storage.resolve(tmp_path, "main", "m1")[0])
    assert run.lifecycle == loaded


def incomplete_doc(at: dt.datetime = NOW, why: str = "interrupted by SIGTERM; 1 of 2 tests ran") -> dict:
    return storage.document(sample_results(), {"cpu_model": "x"}, "m1", {"id": "abc"}, {}, at, why)


def test_an_incomplete_run_keeps_pytest_benchmarks_shape_and_says_why(tmp_path: Path) -> None:
    path = storage.save(tmp_path, "m1", "base", incomplete_doc())
    saved, results = storage.load(path)
    assert saved["encperf"]["incomplete"] == "interrupted by SIGTERM; 1 of 2 tests ran"
    assert results == sample_results()
    assert [entry["name"] for entry in saved["benchmarks"]] == [
        "SEQ1M-Q8T1-read[fscrypt:contents=adiantum] per GiB",
        "SEQ1M-Q8T1-read[plain-beside-fscrypt:contents=adiantum] per GiB",  # plain's side of the pair
    ]
    assert storage.list_runs(tmp_path)[0].incomplete == "interrupted by SIGTERM; 1 of 2 tests ran"
    assert "incomplete" not in doc()["encperf"]  # a complete run has no such field
    assert storage.SavedRun(tmp_path / "m1" / "0001_base.json", "m1", 1, "base").incomplete


def test_names_and_latest_never_pick_an_incomplete_run(tmp_path: Path) -> None:
    storage.save(tmp_path, "m1", "base", incomplete_doc())
    with pytest.raises(storage.NoSavedRun) as refused:
        storage.resolve(tmp_path, "base", "m1")
    message = str(refused.value)
    assert "no complete saved run matches 'base'" in message
    assert (
        "1 matching run(s) incomplete, not used (the newest: m1/0001_base.json (interrupted by SIGTERM"
        in message
    )
    assert "ask for base!" in message
    with pytest.raises(storage.NoSavedRun, match=r"no complete saved run matches 'latest'.*ask for latest!"):
        storage.resolve(tmp_path, "latest", "m1")
    with pytest.raises(storage.NoSavedRun, match="no complete saved run matches 'base'"):
        storage.resolve(tmp_path, "base", None)  # the CLI: every machine
    for asked in ("base!", "latest!", "1", "m1/base!", str(tmp_path / "m1" / "0001_base.json")):
        run, warning = storage.resolve(tmp_path, asked, "m1")
        assert run.label == "m1/0001_base.json"
        assert warning == (
            f"m1/0001_base.json (interrupted by SIGTERM; 1 of 2 tests ran) is incomplete: used because "
            f"{asked!r} asks for it"
        )


def test_a_name_picks_the_newest_complete_run_and_says_what_it_left_out(tmp_path: Path) -> None:
    storage.save(tmp_path, "m1", "base", doc(NOW))
    storage.save(tmp_path, "m1", "base", incomplete_doc(NOW + dt.timedelta(minutes=1)))
    storage.save(tmp_path, "m1", "base", doc(NOW + dt.timedelta(minutes=2)))
    storage.save(tmp_path, "m1", "base", incomplete_doc(NOW + dt.timedelta(minutes=3), "stopped early"))
    run, warning = storage.resolve(tmp_path, "base", "m1")
    assert run.label == "m1/0003_base.json"
    assert warning == (
        "left out the newer incomplete run m1/0004_base.json (stopped early): add ! to use it (base!)"
    )
    assert storage.resolve(tmp_path, "base!", "m1")[0].label == "m1/0004_base.json"
    # never in the history either, whatever the reference
    labels = [r.label for r in storage.history(tmp_path, run, "base", 5)]
    assert labels == ["m1/0003_base.json", "m1/0001_base.json"]
    latest = storage.resolve(tmp_path, "latest!", "m1")[0]
    labels = [r.label for r in storage.history(tmp_path, latest, "latest!", 5)]
    assert labels == ["m1/0004_base.json", "m1/0003_base.json", "m1/0001_base.json"]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=8,
    )
)
def test_the_incomplete_field_of_any_document_is_read_without_error(document: object) -> None:
    reason = storage.incomplete_reason(document)
    assert isinstance(reason, str)
    assert storage.incomplete_reason({"encperf": {"incomplete": document}}) == (
        str(document) if document else ""
    )
