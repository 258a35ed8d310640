"""Rounds (warm-up, steady state), the honesty fields and how the report shows them."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_encperf.ceiling import kernel_xts_driver
from pytest_encperf.model import Measurement, Result
from pytest_encperf.optionparsers import parse_steady_cv, parse_warmup
from pytest_encperf.report import detail_table, summary_table
from pytest_encperf.roundplan import WARMUP_SECONDS, RoundPlan
from pytest_encperf.runner import Runner, measure_all
from pytest_encperf.workloads import (
    ATTO,
    CDM,
    MATRIX,
    PROFILES,
    SMALLFILES,
    KiB,
    MiB,
    Workload,
    profile_workloads,
    with_tree,
)
from tests.helpers.fakes import FakeEngine, measurement, mounted

SEQ_READ = CDM[0]


def runner(tmp_path: Path, engine: FakeEngine, **kwargs) -> Runner:
    results: list[Result] = []
    plan = RoundPlan(MiB, 0.01, kwargs.pop("rounds", 2), kwargs.pop("warmup", 1))
    return Runner(
        engine, mounted(tmp_path, "vol"), mounted(tmp_path, "base"), plan, results.append, **kwargs,
    )  # fmt: skip


def test_warmup_rounds_are_run_on_both_sides_and_discarded(tmp_path: Path) -> None:
    # the warm-up pair is 1 MB/s, then plain 100 and the volume 200, in A B B A order
    engine = FakeEngine([1.0, 1.0, 100.0, 200.0, 200.0, 100.0])
    result = runner(tmp_path, engine, warmup=1).run(SEQ_READ)
    assert len(engine.runs) == 6  # (1 warm-up + 2 counted) x 2 sides
    assert [p.parent.name for _, p in engine.runs] == ["base", "vol", "base", "vol", "vol", "base"]
    assert [m.mb_per_s for m in result.baseline_rounds] == [100.0, 100.0]
    assert [m.mb_per_s for m in result.rounds] == [200.0, 200.0]
    assert result.warmup_rounds == 1 and result.stop_reason == "2 rounds"


class RuntimeEngine(FakeEngine):
    """FakeEngine that also keeps each round's runtime."""

    def __init__(self, values: list[float]) -> None:
        super().__init__(values)
        self.runtimes: list[float] = []

    def run(self, workload, path, *, runtime, direct, observe=None) -> Measurement:
        self.runtimes.append(runtime)
        return super().run(workload, path, runtime=runtime, direct=direct, observe=observe)


def test_on_a_partition_plain_and_the_volume_are_measured_alone_by_one_routine(tmp_path: Path) -> None:
    engine = RuntimeEngine([1.0, 100.0, 100.0, 1.0, 80.0, 80.0])
    plan = RoundPlan(MiB, 5.0, 2, 1)
    task = with_tree(PROFILES["realwork"].workloads[0], MiB, 1)
    plain = measure_all(engine, mounted(tmp_path, "base"), [SEQ_READ, task], plan)
    assert list(plain) == [SEQ_READ.name]  # a task needs plain beside the volume: not here
    results: list[Result] = []
    alone = Runner(engine, mounted(tmp_path, "vol"), None, plan, results.append, measured_baseline=plain)
    result = alone.run(SEQ_READ)
    assert [m.mb_per_s for m in result.baseline_rounds] == [100.0, 100.0]
    assert [m.mb_per_s for m in result.rounds] == [80.0, 80.0] and results == [result]
    assert result.stop_reason == "2 rounds (partition: no confirmation rounds)"
    assert result.description["baseline"] == "before/after"
    # plain's warm-up is a whole round; the volume's at most WARMUP_SECONDS, as beside plain
    assert engine.runtimes == [5.0, 5.0, 5.0, WARMUP_SECONDS, 5.0, 5.0]


def test_steady_state_adds_rounds_until_the_cv_is_low(tmp_path: Path) -> None:
    # noisy at first (50, 150), then steady at 100
    engine = FakeEngine([50, 50, 150, 150, *([100] * 40)])
    result = runner(tmp_path, engine, warmup=0, steady_cv=0.2, steady_budget=30).run(SEQ_READ)
    assert result.cv() is not None and result.cv() < 0.2 and result.cv(baseline=True) < 0.2
    assert len(result.rounds) > 2 and "CV < 20%" in result.stop_reason


def test_steady_state_stops_at_the_budget(tmp_path: Path) -> None:
    engine = FakeEngine([50, 50, 150, 150])  # never steady
    result = runner(tmp_path, engine, warmup=0, steady_cv=0.01, steady_budget=0.05).run(SEQ_READ)
    assert "CV target not reached" in result.stop_reason


def test_median_best_and_cv() -> None:
    result = Result("x", SEQ_READ, rounds=[measurement(v) for v in (90, 100, 130)])
    assert result.median("mb_per_s") == 100 and result.best("mb_per_s") == 130
    assert result.cv() == pytest.approx(0.1952, abs=1e-3)
    assert Result("x", SEQ_READ, rounds=[measurement()]).cv() is None


def test_cached_flag_reads_and_writes() -> None:
    read = measurement(logical_read_bytes=100 * MiB, physical_read_bytes=10 * MiB)
    assert read.cached is True
    assert replace(read, physical_read_bytes=100 * MiB).cached is False
    assert replace(read, physical_read_bytes=None).cached is None  # no device: unknown
    write = measurement(logical_read_bytes=0, logical_write_bytes=100 * MiB, physical_write_bytes=MiB)
    assert write.cached is True
    assert measurement().cached is None


def test_modes_that_differ_are_never_compared() -> None:
    result = Result(
        "fscrypt", SEQ_READ, rounds=[measurement(50, mode="direct")],
        baseline_rounds=[measurement(100, mode="buffered")],
    )  # fmt: skip
    assert not result.comparable and result.ratio() is None and result.change_percent is None
    table = summary_table([result], {}, ["fscrypt"], list(CDM))
    assert "modes differ (direct vs buffered)" in table
    assert "NOT COMPARED" in detail_table([result])


def test_the_tables_and_the_gate_share_one_ratio_to_plain() -> None:
    from pytest_encperf.gate import METRICS, cells_of

    paired = Result("fscrypt", SEQ_READ, [measurement(v) for v in (40, 45, 50)], [measurement(100)] * 3)
    before_after = Result(
        "fscrypt", SEQ_READ, [measurement(v) for v in (40, 45, 50)],
        [measurement(v) for v in (80, 90, 100, 110)], {"baseline": "before/after"},
    )  # fmt: skip
    for result in (paired, before_after):
        (cell,) = [c for (backend, _), c in cells_of([result]).items() if backend == "fscrypt"]
        assert result.ratio() == pytest.approx(statistics.median(cell.samples(METRICS["throughput"])))
    assert before_after.ratio() == pytest.approx(45 / 95)  # over the median of the plain rounds


def test_a_volume_serving_o_direct_buffered_is_marked_with_a_note() -> None:

    buffered = measurement(mode="buffered")
    result = Result(
        "fscrypt", SEQ_READ, rounds=[buffered], baseline_rounds=[buffered],
        description={"o_direct": "direct-requested-but-buffered"},
    )  # fmt: skip
    detail = detail_table([result])
    assert " buffered* " in detail
    assert "* fscrypt: O_DIRECT gives direct-requested-but-buffered on this volume" in detail


def test_summary_flags_cached_rounds_and_detail_shows_device_bytes() -> None:
    cached = measurement(logical_read_bytes=100_000_000, physical_read_bytes=0)
    honest = measurement(logical_read_bytes=100_000_000, physical_read_bytes=100_000_000)
    result = Result("fscrypt", SEQ_READ, rounds=[honest], baseline_rounds=[cached])
    assert "cached!" in summary_table([result], {}, ["fscrypt"], list(CDM))
    detail = detail_table([result])
    assert "r 1.00 (plain r 0.00 CACHED 1/1)" in detail


def test_detail_shows_the_size_the_device_saw_each_request_at() -> None:
    # 1 MiB reads that reached the device as two requests each: 512 KiB/req
    split = measurement(
        logical_read_bytes=100 * MiB, physical_read_bytes=100 * MiB, physical_read_requests=200
    )
    whole = replace(split, physical_read_requests=100)
    detail = detail_table([Result("fscrypt", SEQ_READ, rounds=[split], baseline_rounds=[whole])])
    assert "r 1.00, 512 KiB/req" in detail
    unknown = replace(split, physical_read_requests=None)  # results saved before the count existed
    assert "KiB/req" not in detail_table([Result("fscrypt", SEQ_READ, rounds=[unknown])])


def test_cdm_shows_the_best_round_and_efficiency_uses_the_backends_own_cipher() -> None:
    result = Result(
        "fscrypt", SEQ_READ, rounds=[measurement(v) for v in (80, 120)],
        baseline_rounds=[measurement(200), measurement(200)],
        description={"encryption": "fscrypt", "cipher_ceiling": "kernel:xts(aes):512"},
    )  # fmt: skip
    assert "120.0" in summary_table([result], {}, ["fscrypt"], list(CDM), value="best")
    assert "100.0" in summary_table([result], {}, ["fscrypt"], list(CDM), value="median")
    assert result.efficiency(None) is None  # no ceiling for its cipher: no efficiency
    assert result.efficiency(125.0) == pytest.approx(0.8)  # 100 / its cipher's 125
    assert result.efficiency(1000.0) == pytest.approx(0.5)  # 100 / plain 200
    assert " 80%" in detail_table([result], {"kernel:xts(aes):512": 125.0})
    # another cipher's speed (the old user-space AES-XTS figure) is never used
    assert " 80%" not in detail_table([result], {"kernel:adiantum(xchacha12,aes):256": 125.0})
    unnamed = replace(result, description={"encryption": "fscrypt"})
    assert " 80%" not in detail_table([unnamed], {"kernel:xts(aes):512": 125.0})
    across_modes = replace(result, baseline_rounds=[measurement(200, mode="buffered")] * 2)
    assert across_modes.efficiency(125.0) is None  # never computed across I/O modes


def cell_lines(table: str, backend: str, column: int = 1) -> list[str]:
    """The lines of one backend's cell in a summary table (its first workload column)."""
    rows = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    start = next(i for i, row in enumerate(rows) if row[1].strip() == backend)
    cells = [rows[start][column + 1].strip()]
    for row in rows[start + 1 :]:
        if row[1].strip():
            break
        cells.append(row[column + 1].strip())
    return [c for c in cells if c]


def test_each_backend_shows_its_own_plain_rounds_and_the_change_follows_from_them() -> None:
    """Before: one pooled plain row (every backend's plain rounds together), so the change of a
    backend whose plain rounds ran slower could not be derived from the numbers shown."""
    fast = Result(
        "fscrypt", SEQ_READ, rounds=[measurement(v) for v in (40, 50, 60)],
        baseline_rounds=[measurement(v) for v in (180, 200, 220)],
    )  # fmt: skip
    slow = Result(
        "gocryptfs", SEQ_READ, rounds=[measurement(v) for v in (30, 45, 50)],
        baseline_rounds=[measurement(v) for v in (90, 100, 150)],
    )  # fmt: skip
    table = summary_table([fast, slow], {}, ["fscrypt", "gocryptfs"], list(CDM), value="median")
    # 50 / 200 - 1, then half the width of the 95% interval of the paired ratios (3 pairs)
    assert cell_lines(table, "fscrypt") == ["50.0 / -", "plain 200.0 / -", "-75.0% ±6.4"]
    assert cell_lines(table, "gocryptfs") == ["45.0 / -", "plain 100.0 / -", "-55.0% ±16.4"]  # 45 / 100 - 1
    assert "plain (baseline)" not in table
    best = summary_table([fast], {}, ["fscrypt"], list(CDM), value="best")
    assert "60.0 / -" in best and "plain 220.0 / -" in best and "-72.7%" in best


def test_caveats_are_flagged_in_both_tables_and_kept_in_the_json() -> None:
    loop = measurement(
        logical_read_bytes=100_000_000, physical_read_bytes=100_000_000, caveats=("loop-dio-off",)
    )
    plain = measurement(caveats=("cache-not-dropped",))
    result = Result("qemu-luks", SEQ_READ, rounds=[loop, loop], baseline_rounds=[measurement(), plain])
    assert result.caveats == {"cache-not-dropped": (0, 1), "loop-dio-off": (2, 0)}
    summary = summary_table([result], {}, ["qemu-luks"], list(CDM))
    assert "cache not dropped!" in summary and "loop dio off!" in summary
    detail = detail_table([result])
    assert "cache not dropped 0/2, plain 1/2; loop dio off 2/2, plain 0/2" in detail
    assert "loop dio off: a loop device under the volume has direct I/O off" in detail
    document = json.loads(json.dumps(result.to_dict()))  # as saved
    assert document["rounds"][0]["caveats"] == ["loop-dio-off"]
    restored = Result.from_dict(document)
    assert restored.rounds[0].caveats == ("loop-dio-off",) and restored.caveats == result.caveats
    assert (
        "caveats" not in detail_table([Result("fscrypt", SEQ_READ, rounds=[measurement()])]).split("\n", 2)[2]
    )


def test_the_detail_table_names_the_engine_of_each_row() -> None:
    # the small-files cycle is not block I/O: fio hands it to the native engine
    files = Result("fscrypt", SMALLFILES[0], rounds=[measurement(engine="native")],
                   baseline_rounds=[measurement(engine="native")])  # fmt: skip
    seq = Result(
        "fscrypt", SEQ_READ, rounds=[measurement(engine="fio")], baseline_rounds=[measurement(engine="fio")]
    )
    rows = {line.split()[1]: line for line in detail_table([files, seq]).splitlines()[2:4]}
    assert " native " in rows[SMALLFILES[0].name] and " fio " in rows["SEQ1M-Q8T1-read"]


def test_non_cdm_columns_a_mean_column_and_a_transposed_sweep() -> None:
    smallfiles = SMALLFILES[0]
    result = Result("fscrypt", smallfiles, rounds=[measurement(10)], baseline_rounds=[measurement(20)])
    table = summary_table([result], {}, ["fscrypt"], [smallfiles])
    assert "files/s mixed" in table and "-50.0%" in table
    grid = [
        Result(
            "fscrypt", w, rounds=[measurement(50 if w.is_read else 75)], baseline_rounds=[measurement(100)]
        )
        for w in MATRIX
    ]
    table = summary_table(grid, {}, ["fscrypt"], list(MATRIX), mean_column=True)
    assert "mean vs plain" in table and "-37.5%" in table
    assert "not measured" in summary_table([], {}, ["fscrypt"], list(ATTO))
    rows = [Result("fscrypt", w, rounds=[measurement()], baseline_rounds=[measurement()]) for w in ATTO]
    lines = summary_table(rows, {}, ["fscrypt"], list(ATTO)).splitlines()
    assert "workload" in lines[1] and "fscrypt" in lines[1]  # transposed: backends are columns
    assert any("ATTO 8M" in line for line in lines)


def test_catalogue() -> None:
    names = ["cdm", "cdm-nvme", "cdm-legacy", "dd", "atto", "smallfiles", "matrix", "realwork"]
    assert list(PROFILES) == names
    sizes = sorted({w.block_size for w in ATTO})
    assert sizes[0] == 512 and sizes[-1] == 8 * MiB and len(sizes) == 15
    assert {w.iodepth for w in ATTO} == {4}
    nvme = {w.label: w for w in PROFILES["cdm-nvme"].workloads}
    assert nvme["RND4K Q32T16"].numjobs == 16 and nvme["SEQ128K Q32T1"].iodepth == 32
    assert {w.label for w in PROFILES["cdm-legacy"].workloads} == {"Seq Q32T1", "4K Q32T1", "Seq", "4K"}
    (dd,) = PROFILES["dd"].workloads
    assert dd.amount and dd.block_size == 4096 and dd.rw == "write"
    assert len(MATRIX) == 12 and len({w.name for w in MATRIX}) == 12
    assert SMALLFILES[0].kind == "files" and SMALLFILES[0].direction == "mixed"
    with pytest.raises(ValueError, match="files > 0"):
        Workload("x", "files", 4096)


def test_matrix_cells_larger_than_the_test_file_say_what_they_measured() -> None:
    # a 16 MiB test file: the F64M cells really use 16 MiB, so they are named F16M
    fitted = profile_workloads(["matrix"], 16 * MiB)
    labels = sorted({w.label for w in fitted})
    assert labels == ["F16M R1M", "F16M R4K", "F16M R64K", "F4M R1M", "F4M R4K", "F4M R64K"]
    assert {w.extent for w in fitted} == {4 * MiB, 16 * MiB}
    assert PROFILES["matrix"].workloads_for(16 * MiB) == fitted
    # a 4 MiB file: both file sizes are the same measurement, run (and shown) once
    assert len(profile_workloads(["matrix"], 4 * MiB)) == 6
    assert profile_workloads(["matrix"], 256 * MiB) == list(MATRIX)
    assert profile_workloads(["cdm"], MiB) == list(CDM)  # no extent: nothing to fit


def test_new_options_parse() -> None:
    assert parse_warmup("0") == 0 and parse_steady_cv("off") is None
    assert parse_steady_cv("5%") == pytest.approx(0.05) and parse_steady_cv("0.1") == pytest.approx(0.1)
    with pytest.raises(ValueError, match="expected a whole number from 0 to 10000"):
        parse_warmup("-1")
    with pytest.raises(ValueError, match="expected off, or a CV"):
        parse_steady_cv("150%")


def test_kernel_xts_driver_picks_the_highest_priority(tmp_path: Path) -> None:
    crypto = tmp_path / "crypto"
    crypto.write_text(
        "name         : xts(aes)\ndriver       : xts(ecb(aes-generic))\npriority     : 100\n\n"
        "name         : xts(aes)\ndriver       : xts-aes-aesni\npriority     : 401\n\n"
        "name         : aes\ndriver       : aes-generic\npriority     : 100\n"
    )
    assert kernel_xts_driver(crypto) == "xts-aes-aesni"
    assert kernel_xts_driver(tmp_path / "missing") == "none"


RND_READ = next(w for w in CDM if w.label == "RND4K Q1T1" and w.rw == "randread")


def random_read_round(iops: float, device_bytes: int, requests: int) -> Measurement:
    logical = int(iops) * 4 * KiB
    return measurement(
        iops * 4 * KiB / 1e6, ios=int(iops), bytes=logical, mode="buffered",
        logical_read_bytes=logical, physical_read_bytes=device_bytes, physical_read_requests=requests,
    )  # fmt: skip


def test_a_read_beating_plain_with_fewer_device_requests_is_flagged_cached_below() -> None:
    # gocryptfs-like: 1300 reads served by 400 device requests of 16 KiB (read-ahead below)
    below = random_read_round(1300, 1300 * 4 * KiB, 400)
    plain = random_read_round(1000, 1000 * 4 * KiB, 1000)
    result = Result("gocryptfs", RND_READ, rounds=[below] * 3, baseline_rounds=[plain] * 3)
    assert result.cached_below
    assert result.device_per_logical().requests == pytest.approx(400 / (1300 * 4 * KiB))
    assert result.device_per_logical(baseline=True).request_size == 4 * KiB
    assert "+30.0% ±0.0 cached below!" in summary_table([result], {}, ["gocryptfs"], list(CDM))
    detail = detail_table([result])
    assert "+30.0% ±0.0 cached below" in detail and "(plain r 1.00, 4 KiB/req)" in detail
    assert "cached below: a read that beats plain" in detail
    # fewer device bytes per byte read flags it too
    fewer_bytes = random_read_round(1300, 1300 * 2 * KiB, 1300)
    assert Result("gocryptfs", RND_READ, rounds=[fewer_bytes], baseline_rounds=[plain]).cached_below


def test_slower_reads_writes_and_equal_traffic_are_not_flagged() -> None:
    plain = random_read_round(1000, 1000 * 4 * KiB, 1000)
    slower = random_read_round(800, 800 * 4 * KiB, 200)  # read-ahead below, still slower: no claim
    assert not Result("gocryptfs", RND_READ, rounds=[slower], baseline_rounds=[plain]).cached_below
    faster = random_read_round(1100, 1100 * 4 * KiB, 1100)  # same traffic per byte: really faster
    result = Result("gocryptfs", RND_READ, rounds=[faster], baseline_rounds=[plain])
    assert not result.cached_below and "cached below" not in detail_table([result])
    barely = random_read_round(1100, 1100 * 4 * KiB, 1050)  # 95% of plain's requests: noise
    assert not Result("gocryptfs", RND_READ, rounds=[barely], baseline_rounds=[plain]).cached_below
    # a sequential read in larger requests than plain's (plain's split, say) is not caching
    seq_plain = measurement(
        logical_read_bytes=100 * MiB, physical_read_bytes=100 * MiB, physical_read_requests=200
    )
    seq_whole = replace(seq_plain, bytes=int(120e6), physical_read_requests=100)
    assert not Result("gocryptfs", SEQ_READ, rounds=[seq_whole], baseline_rounds=[seq_plain]).cached_below
    write = next(w for w in CDM if w.label == "RND4K Q1T1" and w.rw == "randwrite")
    fewer = random_read_round(1300, 1300 * 4 * KiB, 400)
    assert not Result("gocryptfs", write, rounds=[fewer], baseline_rounds=[plain]).cached_below
    unknown = replace(fewer, physical_read_bytes=None, physical_read_requests=None)
    assert not Result("gocryptfs", RND_READ, rounds=[unknown], baseline_rounds=[plain]).cached_below
