"""A saved run as pytest-benchmark reads it: plain's side of each pair as entries of its own, the
unit in every entry's name, and runs saved before either still loading and comparing."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from pytest_encperf import benchmarkentries, cli, storage
from pytest_encperf.gate import PASS, judge, parse_rules
from pytest_encperf.model import Measurement, Result
from pytest_encperf.workloads import CDM
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)

NOW = dt.datetime(2026, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
# Saved by encperf before plain's side had entries and names their unit (made by the code of then)
BEFORE = Path(__file__).resolve().parents[1] / "helpers" / "data" / "saved-run-before-plain-entries.json"
MACHINE = "x86_64-0123456789ab"  # BEFORE's machine id


def measured(mb_per_s: float, started: float) -> Measurement:
    moved = int(mb_per_s * 1e6 * 1.5)
    return Measurement(
        "native", "0.1", moved, 1.5, moved // CDM[0].block_size, 900.0, 1800.0, 2500.0, 0.4, "direct", 1, 2,
        started=started,
    )  # fmt: skip


def results(scale: float = 1.0) -> list[Result]:
    """BEFORE's backends and plain rounds (gocryptfs about 0.45 x plain, fscrypt 0.89 x), the
    encrypted side times ``scale``."""
    t = 1767312000.0
    gocryptfs = [measured(v * scale, t + dt_) for v, dt_ in ((410, 1), (400, 2), (405, 5))]
    fscrypt = [measured(v * scale, t + dt_) for v, dt_ in ((800, 7), (810, 8), (790, 11))]
    return [
        Result(
            "gocryptfs", CDM[0], gocryptfs, [measured(v, t + d) for v, d in ((900, 0), (905, 3), (895, 4))]
        ),
        Result("fscrypt", CDM[0], fscrypt, [measured(v, t + d) for v, d in ((902, 6), (898, 9), (900, 10))]),
    ]


def document(scale: float = 1.0, at: dt.datetime = NOW) -> dict:
    info = json.loads(BEFORE.read_text())["machine_info"]
    return storage.document(results(scale), info, MACHINE, {"id": "fedcba"}, {"rounds": "3"}, at)


def test_plain_rounds_have_entries_of_their_own_named_for_their_pair() -> None:
    doc = document()
    names = [entry["name"] for entry in doc["benchmarks"]]
    assert names == [
        "SEQ1M-Q8T1-read[gocryptfs] per GiB",
        "SEQ1M-Q8T1-read[fscrypt] per GiB",
        "SEQ1M-Q8T1-read[plain-beside-gocryptfs] per GiB",
        "SEQ1M-Q8T1-read[plain-beside-fscrypt] per GiB",
    ]
    plain = doc["benchmarks"][2]
    assert plain["group"] == doc["benchmarks"][0]["group"] == "SEQ1M-Q8T1-read"  # one table
    assert plain["fullname"] == "encperf::SEQ1M-Q8T1-read[plain-beside-gocryptfs]"
    assert plain["params"] == {"backend": "plain", "workload": "SEQ1M-Q8T1-read", "beside": "gocryptfs"}
    assert plain["extra_info"][benchmarkentries.PLAIN_SIDE] == "gocryptfs"
    assert "encperf" not in plain["extra_info"]  # every round is in the backend's entry already
    plain_rounds = results()[0].baseline_rounds
    assert plain["stats"]["data"] == [m.seconds_per_gib for m in plain_rounds]
    assert plain["stats"]["rounds"] == 3
    assert plain["extra_info"]["mb_per_s"] == pytest.approx(900, rel=1e-6)
    # the backend's entry: the same names as before, but for the unit in the name
    assert doc["benchmarks"][0]["fullname"] == "encperf::SEQ1M-Q8T1-read[gocryptfs]"
    assert doc["benchmarks"][0]["param"] == "gocryptfs-SEQ1M-Q8T1-read"


def test_plain_itself_and_a_result_without_plain_rounds_get_no_plain_entry() -> None:
    rounds = results()[0].rounds
    assert benchmarkentries.plain_entry(Result("plain", CDM[0], rounds, rounds)) is None
    assert benchmarkentries.plain_entry(Result("gocryptfs", CDM[0], rounds, [])) is None
    assert benchmarkentries.plain_entry(Result("gocryptfs", CDM[0], [], rounds)) is None


def test_encperf_reads_past_the_plain_entries(tmp_path: Path) -> None:
    path = storage.save(tmp_path, MACHINE, "main", document())
    _, loaded = storage.load(path)
    assert loaded == results()
    entries = benchmarkentries.measured(json.loads(path.read_text())["benchmarks"])
    assert [entry["name"] for entry in entries] == [
        "SEQ1M-Q8T1-read[gocryptfs] per GiB",
        "SEQ1M-Q8T1-read[fscrypt] per GiB",
    ]


def test_an_entry_without_encperf_data_that_is_not_plains_side_is_still_refused() -> None:
    entry = {"extra_info": {benchmarkentries.PLAIN_SIDE: "gocryptfs", "encperf": {"format": 99}}}
    with pytest.raises(storage.StorageError, match="unsupported encperf format 99"):
        storage.results_of({"benchmarks": [entry]})
    with pytest.raises(storage.StorageError, match="missing field 'encperf'"):
        storage.results_of({"benchmarks": [{"extra_info": {"plain_side": "gocryptfs"}}]})


def test_a_run_saved_before_plain_entries_loads_and_compares_both_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / MACHINE / "0001_main.json"
    old.parent.mkdir()
    shutil.copy(BEFORE, old)
    doc, loaded = storage.load(old)
    assert [entry["name"] for entry in doc["benchmarks"]] == [
        "SEQ1M-Q8T1-read[gocryptfs]",
        "SEQ1M-Q8T1-read[fscrypt]",
    ]
    assert loaded == results()  # the same rounds the new shape saves
    storage.save(tmp_path, MACHINE, "pr", document(at=NOW))
    rules = parse_rules("10%")
    before, now = (storage.load_run(run) for run in storage.list_runs(tmp_path))
    for reference, current in ((before, now), (now, before)):
        verdict = judge(current, reference, rules)
        assert [check.status for check in verdict.checks if check.gated] == [PASS] * 3  # plain too: its prior
        assert not verdict.failed and not verdict.only_in_reference
    assert cli.main(["--storage", str(tmp_path), "compare", "main", "pr", "--fail", "10%"]) == 0
    assert cli.main(["--storage", str(tmp_path), "compare", "pr", "main", "--fail", "10%"]) == 0
    assert "encperf: 0 regressions, 3 within threshold" in capsys.readouterr().out
