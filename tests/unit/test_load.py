"""What others took of the machine during a round (load.py), on scripted /proc text; the round
fields the runner records with it; --encperf-quiet-wait; the waiting lines of the plan and the
status line."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_encperf import host
from pytest_encperf.load import (
    BUSY_SHARE,
    PF_KTHREAD,
    Load,
    LoadMeter,
    ProcessTimes,
    Sample,
    load_between,
    others_ticks,
    parse_busy_ticks,
    parse_pid_stat,
    parse_pressure_total,
    parse_steal_ticks,
    wait_for_quiet,
)
from pytest_encperf.model import Measurement, Result
from pytest_encperf.progress import Plan, lock_wait_text, process_text, quiet_wait_text
from pytest_encperf.rounds import PairedRounds, RoundMeter, measure_rounds
from pytest_encperf.settings import resolve
from pytest_encperf.storage import benchmark_entry
from pytest_encperf.workloads import CDM

HZ = 100


def stat_line(
    pid: int, comm: str, ppid: int, ticks: int = 0, *, flags: int = 0, reaped: int = 0, start: int = 1000
) -> str:
    """A /proc/PID/stat line as the kernel writes it (utime carries the ticks, cutime the reaped)."""
    fields = ["S", ppid, pid, pid, 0, -1, flags, 0, 0, 0, 0, ticks, 0, reaped, 0, 20, 0, 1, 0, start]
    return f"{pid} ({comm}) " + " ".join(map(str, fields)) + " 0" * 32 + "\n"


def sample(at: float, *lines: str, steal: int | None = 0, pressure: int | None = 0) -> Sample:
    processes = {p.pid: p for p in (parse_pid_stat(line) for line in lines) if p is not None}
    return Sample(at, processes, steal, pressure)


def test_a_stat_line_is_read_from_the_last_parenthesis() -> None:
    parsed = parse_pid_stat(stat_line(42, "odd) (name", 7, 30, flags=PF_KTHREAD, reaped=5, start=99))
    assert parsed == ProcessTimes(42, 7, PF_KTHREAD, 30, 5, 99)
    assert parsed.kernel_thread
    assert parse_pid_stat("42 (truncated") is None and parse_pid_stat("") is None


def test_this_process_reads_as_psutil_sees_it() -> None:
    parsed = parse_pid_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert parsed is not None
    assert (parsed.pid, parsed.ppid) == (os.getpid(), os.getppid()) and not parsed.kernel_thread
    times = psutil.Process().cpu_times()
    assert parsed.ticks / os.sysconf("SC_CLK_TCK") == pytest.approx(times.user + times.system, abs=0.1)


@given(st.text(max_size=400))
def test_parsers_never_raise_on_any_text(text: str) -> None:
    parse_pid_stat(text)
    parse_steal_ticks(text)
    parse_busy_ticks(text)
    parse_pressure_total(text)


def test_steal_and_pressure_are_read_where_the_kernel_has_them() -> None:
    assert (
        parse_steal_ticks("cpu  64463 0 13666 88689 2047 0 250 180 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n") == 180
    )
    assert parse_steal_ticks("cpu  1 2 3 4\n") is None  # an old kernel without the column
    assert parse_busy_ticks("cpu  64463 7 13666 88689 2047 0 250 180 0 0\n") == 64463 + 7 + 13666
    psi = "some avg10=1.21 avg60=3.59 avg300=13.10 total=185649511\nfull avg10=0.00 total=0\n"
    assert parse_pressure_total(psi) == 185649511
    assert parse_pressure_total("full avg10=0.00 total=7\n") is None


# the run: pytest (100) with fio below it (101) and a FUSE daemon that detached (300, under init)
RUN = (100,)
DAEMON = 300


def test_others_exclude_this_run_its_daemons_and_kernel_workers_and_count_the_rest() -> None:
    before = sample(
        0.0,
        stat_line(1, "init", 0, 50),
        stat_line(2, "kthreadd", 0, 10, flags=PF_KTHREAD),
        stat_line(100, "pytest", 1, 500),
        stat_line(101, "fio", 100, 0),
        stat_line(300, "gocryptfs", 1, 100),
        stat_line(400, "kworker/u8:1-kcryptd", 2, 0, flags=PF_KTHREAD),
        stat_line(401, "fscrypt_read_queue", 2, 0),  # a kernel worker by its parent alone
        stat_line(500, "make", 1, 100),
        steal=1000,
        pressure=2_000_000,
    )
    after = sample(
        2.0,
        stat_line(1, "init", 0, 50),
        stat_line(2, "kthreadd", 0, 10, flags=PF_KTHREAD),
        stat_line(100, "pytest", 1, 600),
        stat_line(101, "fio", 100, 150),
        stat_line(300, "gocryptfs", 1, 250),
        stat_line(400, "kworker/u8:1-kcryptd", 2, 180, flags=PF_KTHREAD),
        stat_line(401, "fscrypt_read_queue", 2, 90),
        stat_line(500, "make", 1, 140),  # 40 ticks of its own
        stat_line(600, "cc1", 500, 60, start=1100),  # started in the round: all of its time
        steal=1025,
        pressure=2_700_000,
    )
    load = load_between(before, after, (*RUN, DAEMON), HZ)
    assert load.others_cpu_s == pytest.approx(1.0)  # make 40 + cc1 60 ticks
    assert load.steal_s == pytest.approx(0.25)
    assert load.cpu_pressure_s == pytest.approx(0.7)
    assert load.seconds == 2.0 and load.share == pytest.approx(0.625)
    # without the daemon among the run's own processes its 150 ticks would count as others'
    assert load_between(before, after, RUN, HZ).others_cpu_s == pytest.approx(2.5)


def test_an_exited_process_counts_through_its_reaper_only_for_its_time_in_the_round() -> None:
    before = sample(
        0.0,
        stat_line(1, "init", 0),
        stat_line(100, "pytest", 1),
        stat_line(500, "bash", 1, 10),
        stat_line(510, "subshell", 500, 0, reaped=400),  # reaped a job that ended before the round
        stat_line(520, "long job", 510, 900),  # ran 9 s before the round
        stat_line(700, "daemon", 1, 0),
        stat_line(710, "orphan", 1, 300),  # reaped by init
    )
    after = sample(
        1.0,
        stat_line(1, "init", 0, reaped=300 + 20),
        stat_line(100, "pytest", 1),
        stat_line(500, "bash", 1, 10, reaped=930 + 400),  # the subshell's, with both jobs'
        stat_line(700, "daemon", 1, 0),
    )
    # in the round: the long job 30 ticks, the orphan 20: not their whole lives (1600 ticks)
    assert others_ticks(before, after, RUN) == 50


def test_the_machine_wide_cpu_time_bounds_what_others_can_have_used() -> None:
    # a reaper whose reaped time grew by a child this sample never saw (it lived and ended
    # between the samples' listings of it), and the machine's own count of everyone's time
    lines = (stat_line(1, "init", 0), stat_line(100, "pytest", 1, 0), stat_line(700, "kworker", 2, 0))
    before = Sample(0.0, {p.pid: p for p in map(parse_pid_stat, lines) if p}, 0, 0, busy_ticks=1000)
    after_lines = (
        stat_line(1, "init", 0, reaped=5000),
        stat_line(100, "pytest", 1, 60),
        stat_line(700, "kworker", 2, 20),
    )
    after = Sample(
        1.0, {p.pid: p for p in map(parse_pid_stat, after_lines) if p}, 0, 0, busy_ticks=1000 + 130
    )
    assert others_ticks(before, after, RUN) == 5000
    # everyone used 130 ticks, this run 60 and the kernel 20: others at most 50
    assert load_between(before, after, RUN, HZ).others_cpu_s == pytest.approx(0.5)
    assert load_between(before, dataclasses.replace(after, busy_ticks=None), RUN, HZ).others_cpu_s == 50.0


def test_a_reused_pid_is_a_new_process() -> None:
    before = sample(0.0, stat_line(100, "pytest", 1), stat_line(800, "old", 1, 500, start=10))
    after = sample(1.0, stat_line(100, "pytest", 1), stat_line(800, "new", 1, 30, start=2000))
    assert others_ticks(before, after, RUN) == 30 + 500 - 500  # the old one's time was before


@pytest.mark.parametrize(
    ("others", "busy"), [(0.0, False), (BUSY_SHARE * 2.0, False), (BUSY_SHARE * 2.2, True)]
)
def test_a_round_is_busy_when_others_took_more_than_the_share_of_a_core(others: float, busy: bool) -> None:
    assert Load(2.0, others, 0.0, None).busy() is busy
    assert Load(2.0, 0.0, others, None).busy() is busy  # steal is others too (another guest)


def fake_proc(root: Path, ticks: int, *, pressure: int | None, steal: int = 0) -> None:
    for pid, line in ((100, stat_line(100, "pytest", 1, 0)), (900, stat_line(900, "hog", 1, ticks))):
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(line)
    (root / "stat").write_text(f"cpu  {ticks} 0 0 4 5 6 7 {steal} 0 0\n")  # the hog's time is all
    if pressure is not None:
        (root / "pressure").mkdir(exist_ok=True)
        (root / "pressure" / "cpu").write_text(f"some avg10=0.00 avg60=0.00 avg300=0.00 total={pressure}\n")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_meter_reads_a_proc_tree_and_a_kernel_without_pressure_stall_information(tmp_path: Path) -> None:
    clock = Clock()
    meter = LoadMeter(tmp_path, roots=RUN, clock=clock)
    fake_proc(tmp_path, 0, pressure=None)
    before = meter.sample()
    clock.sleep(1.0)
    fake_proc(tmp_path, meter.hz // 2, pressure=None, steal=meter.hz // 10)
    load = meter.between(before, meter.sample())
    assert (load.others_cpu_s, load.steal_s, load.cpu_pressure_s) == (pytest.approx(0.5), 0.1, None)
    assert load.busy()


def busy_meter(tmp_path: Path, clock: Clock, busy_windows: int) -> LoadMeter:
    """A meter over a scripted /proc whose hog takes a whole core for ``busy_windows`` windows."""
    meter = LoadMeter(tmp_path, roots=RUN, clock=clock)
    ticks = {"value": 0, "windows": 0}
    fake_proc(tmp_path, 0, pressure=0)

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        ticks["windows"] += 1
        if ticks["windows"] <= busy_windows:
            ticks["value"] += int(meter.hz * seconds)
        fake_proc(tmp_path, ticks["value"], pressure=0)

    meter.sleep = sleep  # type: ignore[attr-defined]
    return meter


def test_quiet_wait_waits_while_others_are_busy_and_gives_up_at_its_limit(tmp_path: Path) -> None:
    clock = Clock()
    meter = busy_meter(tmp_path, clock, busy_windows=3)
    told: list[Load] = []
    waited = wait_for_quiet(meter, 10.0, sleep=meter.sleep, waiting=told.append)  # type: ignore[attr-defined]
    assert waited == pytest.approx(2.0)  # three busy windows of 0.5 s, then a quiet one
    assert len(told) == 3 and all(load.busy() for load in told)
    other = tmp_path / "always"
    other.mkdir()
    always = busy_meter(other, Clock(), busy_windows=100)
    assert wait_for_quiet(always, 1.5, sleep=always.sleep) == pytest.approx(1.5)  # type: ignore[attr-defined]
    assert wait_for_quiet(always, 0.0) == 0.0  # off: no sample at all


def test_quiet_wait_option_follows_the_precedence_of_every_option() -> None:
    assert resolve({}, {}, {}).quiet_wait == 0.0
    assert resolve({}, {"quiet-wait": "30"}, {}).quiet_wait == 30.0
    assert resolve({}, {"quiet-wait": "30"}, {"ENCPERF_QUIET_WAIT": "20s"}).quiet_wait == 20.0
    cli = resolve({"quiet-wait": "5"}, {"quiet-wait": "30"}, {"ENCPERF_QUIET_WAIT": "20s"})
    assert cli.quiet_wait == 5.0 and cli.sources["quiet-wait"] == "--encperf-quiet-wait"
    assert resolve({"quiet-wait": "off"}, {}, {}).quiet_wait == 0.0
    with pytest.raises(ValueError, match="--encperf-quiet-wait"):
        resolve({"quiet-wait": "soon"}, {}, {})


def test_busy_threshold_option_takes_cores_or_off_and_follows_the_precedence() -> None:
    assert resolve({}, {}, {}).busy_threshold == BUSY_SHARE == 0.25
    assert resolve({}, {"busy-threshold": "0.5"}, {}).busy_threshold == 0.5
    env = resolve({}, {"busy-threshold": "0.5"}, {"ENCPERF_BUSY_THRESHOLD": "off"})
    assert env.busy_threshold is None and env.sources["busy-threshold"] == "ENCPERF_BUSY_THRESHOLD"
    cli = resolve({"busy-threshold": "1"}, {}, {"ENCPERF_BUSY_THRESHOLD": "off"})
    assert cli.busy_threshold == 1.0 and cli.sources["busy-threshold"] == "--encperf-busy-threshold"
    # 0 is off, as for every budget and threshold: no CPU at all would flag every round
    assert resolve({"busy-threshold": "0"}, {}, {}).busy_threshold is None
    assert resolve({"busy-threshold": "0.0"}, {}, {}).busy_threshold is None
    for bad in ("-1", "quarter", "25%", "8193"):
        with pytest.raises(ValueError, match=r"--encperf-busy-threshold: bad busy threshold .*expected off"):
            resolve({"busy-threshold": bad}, {}, {})


def test_a_quiet_wait_with_the_threshold_off_is_a_usage_error_naming_both_sources() -> None:
    with pytest.raises(ValueError) as refused:
        resolve({"quiet-wait": "30"}, {}, {"ENCPERF_BUSY_THRESHOLD": "off"})
    assert str(refused.value) == (
        "--encperf-quiet-wait waits until processes outside the run use less than "
        "--encperf-busy-threshold (from ENCPERF_BUSY_THRESHOLD), which is off: "
        "give a threshold, or no quiet wait"
    )
    with pytest.raises(ValueError, match=r"^--encperf-quiet-wait \(from encperf_quiet_wait\)"):
        resolve({"busy-threshold": "0"}, {"quiet-wait": "30"}, {})
    assert resolve({"busy-threshold": "off"}, {}, {}).quiet_wait == 0.0  # no wait asked: fine


def test_with_the_threshold_off_no_round_is_busy_and_nothing_waits(tmp_path: Path) -> None:
    assert Load(1.0, 1.9, 0.1, None).busy(None) is False
    assert Load(1.0, 0.6, 0.0, None).busy(0.5) and not Load(1.0, 0.6, 0.0, None).busy(1.0)
    off = busy_meter(tmp_path, Clock(), busy_windows=100)
    off.threshold = None
    before = off.sample()
    off.sleep(1.0)  # type: ignore[attr-defined]
    assert off.between(before, off.sample()).others_cpu_s == pytest.approx(1.0)  # still measured
    assert wait_for_quiet(off, 60.0, sleep=off.sleep) == 0.0  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- rounds


def measured(mb: float = 100.0) -> Measurement:
    return Measurement("scripted", "1", int(mb * 1e6), 1.0, 100, 1.0, 2.0, 3.0, 0.1, "direct")


class ScriptedMeter:
    """Stands in for LoadMeter: each round gets the next of ``shares`` (cores others took)."""

    threshold = BUSY_SHARE

    def __init__(self, shares: list[float]) -> None:
        self.shares = shares
        self.rounds = 0
        self.daemons: list[tuple[int, ...]] = []

    def sample(self) -> Sample:
        return Sample(float(self.rounds), {}, None, None)

    def between(self, before: Sample, after: Sample, daemons: tuple[int, ...] = ()) -> Load:
        share = self.shares[self.rounds % len(self.shares)]
        self.rounds += 1
        self.daemons.append(tuple(daemons))
        return Load(1.0, share, 0.0, share / 2)


def test_each_round_carries_what_others_took_and_the_json_keeps_it() -> None:
    meter = ScriptedMeter([0.0, 0.9, 0.0, 0.0])  # the volume's round of the first pair was busy
    pairs = PairedRounds(
        lambda runtime: measured(), lambda runtime: measured(50), meter=RoundMeter(meter, (300,))
    )  # type: ignore[arg-type]
    result = measure_rounds(Result("gocryptfs", CDM[0]), pairs, runtime=1.0, rounds=2)
    assert [m.busy for m in result.baseline_rounds] == [False, False]
    assert [m.busy for m in result.rounds] == [True, False]
    assert result.rounds[0].others_cpu_s == 0.9 and result.rounds[0].cpu_pressure_s == 0.45
    assert result.rounds[0].steal_s == 0.0 and meter.daemons == [(300,)] * 4
    assert result.busy_rounds == 1 and result.busy_share == pytest.approx(0.9, rel=0.01)
    entry = json.loads(json.dumps(benchmark_entry(result)))
    assert entry["extra_info"]["busy_rounds"] == 1
    saved = entry["extra_info"]["encperf"]["rounds"][0]
    assert {key: saved[key] for key in ("others_cpu_s", "steal_s", "cpu_pressure_s", "busy")} == {
        "others_cpu_s": 0.9, "steal_s": 0.0, "cpu_pressure_s": 0.45, "busy": True,
    }  # fmt: skip
    again = Result.from_dict(entry["extra_info"]["encperf"])
    assert again.busy_rounds == 1 and again.rounds[0].others_cpu_s == 0.9
    # the threshold off: the same rounds keep what others took, and none is busy
    meter = ScriptedMeter([0.0, 0.9])
    meter.threshold = None  # type: ignore[assignment]
    off_meter = RoundMeter(meter)  # type: ignore[arg-type]
    pairs = PairedRounds(lambda runtime: measured(), lambda runtime: measured(50), meter=off_meter)
    off = measure_rounds(Result("gocryptfs", CDM[0]), pairs, runtime=1.0, rounds=2)
    assert sorted(m.others_cpu_s or 0.0 for m in off.baseline_rounds + off.rounds) == [0.0, 0.0, 0.9, 0.9]
    assert off.busy_rounds == 0 and benchmark_entry(off)["extra_info"]["busy_rounds"] == 0
    # without a meter (older saved runs, other callers) a round says nothing about the machine
    plain = PairedRounds(lambda runtime: measured(), lambda runtime: measured())
    alone = measure_rounds(Result("x", CDM[0]), plain, runtime=1.0, rounds=1)
    assert alone.rounds[0].others_cpu_s is None and not alone.rounds[0].busy


# ----------------------------------------------------------------------------- waiting lines


def test_the_status_line_names_whom_the_run_waits_for() -> None:
    me = process_text(os.getpid())
    command = " ".join(psutil.Process().cmdline())
    assert me == f"pid {os.getpid()} ({command if len(command) <= 60 else command[:57] + '...'})"
    assert process_text(2**22 + 7) == f"pid {2**22 + 7}"  # gone: the pid alone
    text = lock_wait_text([os.getpid()], 75)
    assert text.startswith(f"encperf: waiting for another measurement to finish: pid {os.getpid()} (")
    assert text.endswith("75 s so far")
    assert "another encperf process" in lock_wait_text([], 3)
    assert quiet_wait_text(Load(0.5, 0.6, 0.0, None), 0.25, 60) == (
        "encperf: waiting for quiet: processes outside this run use 1.20 of a core (busy above 0.25), "
        "waiting up to 60 s"
    )


def test_the_plan_says_who_holds_the_machine_and_counts_the_quiet_wait() -> None:
    tests = [("fscrypt", w.name) for w in CDM[:2]]
    plan = Plan(tests, rounds=3, runtime=1.0, warmup=0, quiet_wait=30.0, lock_holders="pid 7 (pytest)")
    # 30 s of waiting per test, and its busy blocks measured again: 4 rounds of 1 s on two sides
    assert plan.extra_seconds() == 2 * (30.0 + 8.0)
    first, second = plan.lines()
    assert "up to 76 s more for waiting for quiet and measuring busy rounds again" in first
    assert second == (
        "encperf plan: another measurement holds the machine now (pid 7 (pytest)): this run waits for it "
        "before its first round"
    )
    assert Plan(tests, rounds=3, runtime=1.0, warmup=0).lines() == [Plan(tests, 3, 1.0, 0).line()]


def test_a_lock_wait_is_told_with_the_holders_while_it_lasts(tmp_path: Path) -> None:
    path = tmp_path / "measure.lock"
    path.touch(mode=0o600)
    holder = os.open(path, os.O_RDWR)
    waiter = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        told: list[tuple[list[int], float]] = []
        with pytest.raises(host.LockTimeout):
            host.wait_for_lock(waiter, "lock", 2.5, waiting=lambda pids, waited: told.append((pids, waited)))
        assert len(told) >= 2 and told[0][1] >= 1.0
        assert told[0][0] == []  # the holder is this process itself, which is never named
        assert host.measurement_lock_holders(tmp_path) == []  # idem
    finally:
        os.close(waiter)
        os.close(holder)


def test_a_span_of_a_few_ticks_is_judged_as_half_a_second() -> None:
    # one 10 ms tick of one process in a 20 ms round is half a core, but says nothing
    assert Load(0.02, 0.01, 0.0, None).share == 0.5
    assert not Load(0.02, 0.01, 0.0, None).busy()
    assert Load(0.02, 0.13, 0.0, None).busy()  # more than a quarter of a core over half a second
