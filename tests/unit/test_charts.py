"""The data behind each chart of the HTML report (report/charts.py): pure functions, exact numbers."""

from __future__ import annotations

import math

import pytest

from pytest_encperf.gate import FAIL, NOT_COMPARABLE, PASS, SAVED, Check, Verdict
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.report import charts
from pytest_encperf.workloads import ATTO, CDM, MATRIX, MiB, fit_to_size

SEQ_READ, SEQ_WRITE, RND_READ = CDM[0], CDM[1], CDM[4]


def m(mb_per_s: float = 100.0, *, mode: str = "direct", **fields: object) -> Measurement:
    moved = int(mb_per_s * 1e6)
    values: dict = {
        "engine": "fio", "engine_version": "3", "bytes": moved, "seconds": 1.0, "ios": moved // 4096,
        "lat_p50_us": 10.0, "lat_p99_us": 20.0, "lat_p999_us": 30.0, "cpu_seconds": 0.5, "io_mode": mode,
    }  # fmt: skip
    values.update(fields)
    return Measurement(**values)


def result(backend: str, workload, mine, plain, **kwargs) -> Result:
    return Result(backend, workload, [m(v, **kwargs) for v in mine], [m(v, **kwargs) for v in plain])


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (12.0, "faster"), (5.0, "faster"), (4.9, "same"), (-5.0, "same"), (-5.1, "slower"),
        (-25.0, "slower"), (-25.1, "much-slower"), (-50.0, "much-slower"), (-50.1, "severe"),
        (-99.0, "severe"), (None, "none"), (math.nan, "none"),
    ],
)  # fmt: skip
def test_tile_colour_thresholds(change: float | None, expected: str) -> None:
    assert charts.tone(change) == expected


def test_tiles_follow_the_summary_table_and_mark_what_is_not_a_clean_comparison() -> None:
    clean = result("fscrypt", SEQ_READ, [40, 50, 60], [180, 200, 220])
    buffered = Result(
        "gocryptfs", SEQ_READ, [m(90, mode="buffered")], [m(100, mode="buffered")],
        {"o_direct": "direct-requested-but-buffered"},
    )  # fmt: skip
    cached = result(
        "fscrypt", SEQ_WRITE, [50], [100], logical_write_bytes=100_000_000, physical_write_bytes=0
    )
    modes = Result("gocryptfs", SEQ_WRITE, [m(50, mode="buffered")], [m(100)])
    caveat = result("fscrypt", RND_READ, [50], [100], caveats=("loop-dio-off",))
    rows = charts.tile_rows(
        [clean, buffered, cached, modes, caveat], ["fscrypt", "gocryptfs", "luks2"], list(CDM), "best",
        {"luks2": "needs device-mapper"},
    )  # fmt: skip
    assert [row.label for row in rows] == ["SEQ1M Q8T1", "SEQ1M Q1T1", "RND4K Q32T1", "RND4K Q1T1"]
    (read, read_tiles), (write, write_tiles) = rows[0].cells
    assert (read, write) == ("read", "write")
    fscrypt, gocryptfs, luks = read_tiles
    # best of each side and the change between them: 60 / 220 - 1, like the summary table
    assert (fscrypt.value, fscrypt.plain, fscrypt.tone) == (60, 220, "severe")
    assert fscrypt.change == pytest.approx(-72.73, abs=0.01) and fscrypt.marks == ()
    assert gocryptfs.change == pytest.approx(-10.0) and gocryptfs.tone == "slower"
    assert gocryptfs.marks == (charts.Mark("buffered", "buffered*"),)
    assert (luks.value, luks.tone, luks.skipped) == (None, "none", "needs device-mapper")
    cached_tile, modes_tile, _ = write_tiles
    assert charts.Mark("cached", "cached 1/1, plain 1") in cached_tile.marks
    assert modes_tile.change is None and modes_tile.tone == "none"
    assert modes_tile.marks[0] == charts.Mark("not-comparable", "not comparable (buffered vs plain direct)")
    caveat_tile = rows[2].cells[0][1][0]
    assert charts.Mark("caveat", "loop dio off") in caveat_tile.marks


def test_overhead_bars_are_the_estimate_and_interval_of_the_overhead_check() -> None:
    four = result("fscrypt", SEQ_READ, [50, 51, 49, 50.5], [100, 101, 99, 100.5])
    three = result("gocryptfs", SEQ_READ, [80, 81, 79], [100, 101, 99])
    modes = Result("gocryptfs", SEQ_WRITE, [m(50, mode="buffered")], [m(100)])
    bars = {(b.backend, b.workload): b for b in charts.overhead_bars([four, three, modes])}
    bar = bars[("fscrypt", "SEQ1M-Q8T1-read")]
    assert bar.estimate == pytest.approx(-50.0, abs=0.3)
    assert bar.low is not None and bar.high is not None and bar.low < bar.estimate < bar.high
    # the t interval of the mean log ratio (verdict.estimate; one run: no between-run part)
    assert bar.low == pytest.approx(-51.1, abs=0.1) and bar.high == pytest.approx(-48.76, abs=0.1)
    short = bars[("gocryptfs", "SEQ1M-Q8T1-read")]
    assert short.estimate == pytest.approx(-20.0, abs=0.5)
    assert short.low is not None and short.high is not None  # 3 vs 3 rounds bound a t interval ...
    assert short.high - short.low > bar.high - bar.low  # ... wider than 4 vs 4 rounds' of the same spread
    assert short.note == ""
    assert bars[("gocryptfs", "SEQ1M-Q8T1-write")].estimate is None
    assert bars[("gocryptfs", "SEQ1M-Q8T1-write")].note == "not comparable"


def test_latency_and_cpu_bars_put_plain_first_with_every_plain_round() -> None:
    rounds = [m(10, lat_p50_us=v, lat_p99_us=2 * v, lat_p999_us=3 * v) for v in (100, 300, 200)]
    fscrypt = Result("fscrypt", RND_READ, rounds, [m(10, lat_p50_us=10.0)] * 3)
    gocryptfs = Result(
        "gocryptfs", RND_READ, [m(10, daemon_cpu_seconds=0.25)] * 2, [m(10, lat_p50_us=40.0)] * 2
    )
    seq = result("fscrypt", SEQ_READ, [50], [100])
    latency = charts.latency_bars([fscrypt, gocryptfs, seq])
    assert [(b.backend, b.workload) for b in latency] == [
        ("plain", "RND4K-Q32T1-read"), ("fscrypt", "RND4K-Q32T1-read"), ("gocryptfs", "RND4K-Q32T1-read"),
    ]  # fmt: skip  # 4K workloads only
    assert latency[0].p50_us == 10.0  # median of all five plain rounds (10, 10, 10, 40, 40)
    assert (latency[1].p50_us, latency[1].p99_us, latency[1].p999_us) == (200, 400, 600)
    cpu = {(b.backend, b.workload): b for b in charts.cpu_bars([fscrypt, gocryptfs, seq])}
    goc = cpu[("gocryptfs", "RND4K-Q32T1-read")]
    # 0.25 CPU s per 10 MB round: per GiB moved
    assert goc.daemon_s_per_gib == pytest.approx(0.25 / (10e6 / 2**30))
    assert goc.cpu_s_per_gib == pytest.approx(0.5 / (10e6 / 2**30))
    assert cpu[("fscrypt", "SEQ1M-Q8T1-read")].daemon_s_per_gib is None  # not measured
    assert cpu[("plain", "SEQ1M-Q8T1-read")].daemon_s_per_gib is None


def test_atto_lines_and_matrix_grids() -> None:
    atto = [result("fscrypt", w, [w.block_size / 1e4], [2 * w.block_size / 1e4]) for w in ATTO]
    lines = charts.atto_lines(atto)
    assert [(line.backend, line.direction) for line in lines] == [
        ("plain", "read"), ("plain", "write"), ("fscrypt", "read"), ("fscrypt", "write"),
    ]  # fmt: skip
    sizes = [size for size, _ in lines[2].points]
    assert sizes == sorted(sizes) and sizes[0] == 512 and sizes[-1] == 8 * MiB
    assert lines[2].points[0][1] == pytest.approx(512 / 1e4) and lines[0].points[0][1] == pytest.approx(
        1024 / 1e4
    )
    grid = [fit_to_size(w, 16 * MiB) for w in MATRIX]
    rows = [result("fscrypt", w, [50 if w.is_read else 75], [100]) for w in grid]
    rows.append(result("plain", grid[0], [100], []))
    (read, write) = charts.matrix_grids(rows)
    assert (read.backend, read.direction) == ("fscrypt", "read")
    assert read.file_sizes == (4 * MiB, 16 * MiB) and read.record_sizes == (4096, 65536, MiB)
    assert read.cells[(16 * MiB, 4096)] == charts.GridCell(50.0, -50.0)
    assert write.cells[(4 * MiB, MiB)].change == pytest.approx(-25.0)
    assert all(charts.is_sweep(w) for w in [*grid, *ATTO]) and not charts.is_sweep(SEQ_READ)


def check(backend: str, workload: str, status: str) -> Check:
    nan = math.nan
    return Check(
        SAVED, backend, workload, "throughput", "x plain", "paired ratios", nan, nan, nan, nan,
        (nan, nan), nan, (3, 3), 10.0, "10%", status, "",
    )  # fmt: skip


def test_history_series_from_several_runs_with_the_verdict_on_the_newest() -> None:
    def run(label: str, value: float, workloads=(SEQ_READ, RND_READ)) -> RunData:
        return RunData(label, tuple(result("fscrypt", w, [value] * 3, [100] * 3) for w in workloads))

    runs = [run("m/0001_a.json", 50), run("m/0002_b.json", 60, (SEQ_READ,)), run("m/0003_c.json", 40)]
    verdict = Verdict(
        checks=[
            check("fscrypt", "SEQ1M-Q8T1-read", PASS),
            check("fscrypt", "SEQ1M-Q8T1-read", FAIL),  # the most serious status wins
            check("fscrypt", "RND4K-Q32T1-read", NOT_COMPARABLE),
        ]
    )
    series = {(s.backend, s.workload): s for s in charts.history_series(runs, verdict)}
    assert list(series)[:2] == [("plain", "SEQ1M-Q8T1-read"), ("plain", "RND4K-Q32T1-read")]  # plain first
    seq = series[("fscrypt", "SEQ1M-Q8T1-read")]
    assert [p.value for p in seq.points] == [50, 60, 40] and seq.unit == "MB/s"
    assert [p.change for p in seq.points] == pytest.approx([-50, -40, -60])
    assert [p.status for p in seq.points] == ["", "", FAIL]  # only the newest run is judged
    rnd = series[("fscrypt", "RND4K-Q32T1-read")]
    assert rnd.points[1] is None and rnd.unit == "IOPS"  # not in the second run
    assert rnd.points[2].status == NOT_COMPARABLE and rnd.points[2].value == pytest.approx(40e6 / 4096, abs=1)
    plain = series[("plain", "SEQ1M-Q8T1-read")]
    assert [p.value for p in plain.points] == [100, 100, 100] and plain.points[0].change is None
    assert all(p.status == "" for s in charts.history_series(runs) for p in s.points if p)


def test_a_task_is_drawn_as_its_change_in_speed() -> None:
    from pytest_encperf.workloads import PROFILES

    archive = PROFILES["realwork"].workloads[0]
    rounds = [m(seconds=s) for s in (20.0, 20.2, 19.8, 20.1)]
    plain = [m(seconds=s) for s in (10.0, 10.1, 9.9, 10.05)]
    (bar,) = charts.overhead_bars([Result("fscrypt", archive, rounds, plain)])
    assert bar.estimate == pytest.approx(-50.0, abs=0.5)  # twice plain's time: half its speed
    assert bar.low is not None and bar.high is not None and bar.low < bar.estimate < bar.high < 0
