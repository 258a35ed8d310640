"""The gate's pure code: the --encperf-fail grammar, rule selection, evidence, comparability,
history, the family correction, confirmation and the one verdict builder."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Callable
from typing import Any

import pytest

from pytest_encperf import verdict as verdict_model
from pytest_encperf.gate import (
    CHECK_CONFIRM_PAIRS,
    FAIL,
    GRAMMAR,
    HISTORY,
    IN_RUN,
    INFO,
    INVALID,
    LIFECYCLE_EVIDENCE,
    METRICS,
    MIN_HISTORY,
    MIN_LIFECYCLE_CYCLES,
    NOT_COMPARABLE,
    NOT_GATED,
    PAIRED,
    PAIRED_HISTORY,
    PASS,
    ROUNDS,
    RUN_PRIOR,
    UNDECIDED,
    Check,
    Gate,
    Rule,
    Verdict,
    expected_family_size,
    history_for,
    judge,
    judge_machines,
    lifecycle_checks,
    overhead_checks,
    parse_rules,
    select_rule,
    workload_matches,
)
from pytest_encperf.lifecycledata import LIFECYCLE_STEPS
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.workloads import CDM, ROUND_DEFINITION, MiB, Workload
from tests.helpers.priors import quiet_prior, table  # noqa: F401 (autouse: a quiet machine's between-run prior)

SEQ_READ, SEQ_WRITE, _, _, _, _, RND4K_Q1T1_READ, RND4K_Q1T1_WRITE = CDM
BACKENDS = ["plain", "fscrypt", "luks2"]
SETTINGS = {"size": str(256 * MiB), "runtime": "1.5", "target": "container", "engine": "auto"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10%", [Rule(10.0, text="10%")]),
        ("seq-read:5%", [Rule(5.0, workload="seq-read", text="seq-read:5%")]),
        ("rnd4k-q1t1-write:15%", [Rule(15.0, workload="rnd4k-q1t1-write", text="rnd4k-q1t1-write:15%")]),
        ("latency-p99:20%", [Rule(20.0, metric="latency-p99", text="latency-p99:20%")]),
        ("cpu-per-gib:25%", [Rule(25.0, metric="cpu-per-gib", text="cpu-per-gib:25%")]),
        ("abs-throughput:8%", [Rule(8.0, metric="abs-throughput", text="abs-throughput:8%")]),
        ("vs-plain:7%", [Rule(7.0, text="vs-plain:7%")]),  # the default metric, named
        ("latency-p99:150%", [Rule(150.0, metric="latency-p99", text="latency-p99:150%")]),
        ("luks2:seq-read:15%", [Rule(15.0, backend="luks2", workload="seq-read", text="luks2:seq-read:15%")]),
        (
            "fscrypt:write:latency-p999:2.5%",
            [Rule(2.5, "latency-p999", "fscrypt", "write", text="fscrypt:write:latency-p999:2.5%")],
        ),
        (" 10% , SEQ-Read:5% ", [Rule(10.0, text="10%"), Rule(5.0, workload="seq-read", text="SEQ-Read:5%")]),
        ("", []),
        ("0%", [Rule(0.0, text="0%")]),
    ],
)
def test_parse_rules(text: str, expected: list[Rule]) -> None:
    assert parse_rules(text, BACKENDS) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10", "must end with a percentage"),
        ("ten%", "must end with a percentage"),
        ("-5%", "must end with a percentage"),
        ("seq-reed:5%", "unknown part 'seq-reed'"),
        ("veracrypt:5%", "unknown part 'veracrypt'"),  # not in the known backend names
        ("latency-p99:seq-read:5%", "out of order"),
        ("seq-read:write:5%", "repeated"),
        (",", "bad expression"),
        ("100%", "throughput cannot drop by 100% or more"),
        ("iops:250%", "iops cannot drop by 250% or more"),
    ],
)
def test_bad_expressions_list_the_grammar(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_rules(text, BACKENDS)
    assert GRAMMAR in str(info.value)


def test_most_specific_rule_wins_per_metric() -> None:
    rules = parse_rules("10%,seq:8%,seq-read:5%,seq1m-q8t1-read:3%,fscrypt:12%,latency-p99:20%", BACKENDS)
    assert select_rule(rules, "plain", SEQ_READ, "throughput").text == "seq1m-q8t1-read:3%"
    assert select_rule(rules, "plain", SEQ_WRITE, "throughput").text == "seq:8%"
    assert select_rule(rules, "plain", RND4K_Q1T1_WRITE, "throughput").text == "10%"
    assert select_rule(rules, "fscrypt:contents=adiantum", SEQ_READ, "throughput").text == "fscrypt:12%"
    assert select_rule(rules, "plain", SEQ_READ, "latency-p99").text == "latency-p99:20%"
    assert select_rule(rules, "plain", SEQ_READ, "cpu-per-gib") is None
    assert select_rule(parse_rules("5%,10%"), "plain", SEQ_READ, "throughput").text == "10%"  # last wins
    # vs-plain is the default metric's own name for an encrypted backend: one metric, one check
    assert select_rule(parse_rules("vs-plain:7%"), "fscrypt", SEQ_READ, "throughput").text == "vs-plain:7%"


# ----------------------------------------------------------------------------- building runs


def spread(center: float, n: int, step: float = 0.001) -> list[float]:
    """n values around center, +-step apart in relative terms: the median is exactly center."""
    offsets = [0.0] + [sign * step * k for k in range(1, n) for sign in (1, -1)]
    return [center * (1 + o) for o in offsets[:n]]


def measurement(
    mb_per_s: float,
    block: int = MiB,
    *,
    io_mode: str = "direct",
    engine: str = "fio",
    p99: float | None = None,
) -> Measurement:
    moved = int(mb_per_s * 1e6)
    latency = (1e4 / mb_per_s if mb_per_s else 0.0) if p99 is None else p99
    return Measurement(engine, "1", moved, 1.0, moved // block, 10.0, latency, 200.0, 0.1, io_mode)


def result(
    backend: str, workload, volume: list[float], plain: list[float] | None = None, **kwargs: str
) -> Result:
    block = workload.block_size
    return Result(
        backend,
        workload,
        [measurement(v, block, **kwargs) for v in volume],
        [measurement(v, block, **kwargs) for v in (plain or [100.0] * len(volume))],
    )


def run(label: str, *results: Result, settings: dict[str, str] | None = None) -> RunData:
    return RunData(label, results, dict(SETTINGS if settings is None else settings))


def only(verdict, backend: str = "fscrypt", metric: str = "throughput"):
    (check,) = [c for c in verdict.checks if c.backend == backend and c.metric == metric]
    return check


# ----------------------------------------------------------------------------- paired ratios


def test_encrypted_backend_is_judged_by_its_paired_ratio_to_plain() -> None:
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10), spread(100, 10)))
    # the whole machine got 20% slower: the ratio to plain did not move, the encryption passes
    drifted = run("now", result("fscrypt", SEQ_READ, spread(40, 3), spread(80, 3)))
    check = only(judge(drifted, reference, parse_rules("10%")))
    assert (check.evidence, check.unit, check.status) == (PAIRED, "x plain", PASS)
    assert check.now == pytest.approx(0.5)
    # the backend alone got 20% slower: the ratio catches it
    slower = run("now", result("fscrypt", SEQ_READ, spread(40, 3), spread(100, 3)))
    check = only(judge(slower, reference, parse_rules("10%")))
    assert check.status == FAIL
    assert check.change_percent == pytest.approx(-20, abs=0.2)
    assert check.interval[1] < 0.9  # the whole interval is beyond the threshold
    assert check.rounds == (3, 10)
    assert "between-run sd 2.0% (largest prior measured" in check.between  # fscrypt: no prior of its own
    assert check.detectable < 20 and "detects >= " in check.reason


def test_naming_vs_plain_does_not_check_a_cell_twice() -> None:
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10)))
    now = run("now", result("fscrypt", SEQ_READ, spread(40, 3)))
    verdict = judge(now, reference, parse_rules("10%,vs-plain:12%"))
    paired = [c for c in verdict.checks if c.backend == "fscrypt"]
    assert [(c.metric, c.rule) for c in paired] == [("throughput", "vs-plain:12%")]


def test_on_the_partition_target_each_round_is_divided_by_the_plain_rounds_before_and_after() -> None:
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10)))
    volume = Result(
        "fscrypt",
        SEQ_READ,
        [measurement(v) for v in spread(40, 3)],
        [measurement(v) for v in (90.0, 100.0, 95.0, 110.0, 105.0, 120.0)],  # before, then after
        {"baseline": "before/after"},
    )
    check = only(judge(run("now", volume), reference, parse_rules("10%")))
    assert check.evidence == "ratios to plain before/after"
    assert check.now == pytest.approx(40 / 102.5)  # over the median of all six plain rounds
    assert check.rounds == (3, 10)


def test_absolute_throughput_of_an_encrypted_backend_stays_available_and_is_not_gated_alone() -> None:
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10), spread(100, 10)))
    drifted = run("now", result("fscrypt", SEQ_READ, spread(40, 3), spread(80, 3)))
    verdict = judge(drifted, reference, parse_rules("10%,abs-throughput:10%"))
    absolute = only(verdict, metric="abs-throughput")
    assert absolute.unit == "MB/s" and absolute.change_percent == pytest.approx(-20, abs=0.2)
    assert (absolute.evidence, absolute.status, absolute.gated) == (ROUNDS, NOT_GATED, False)
    assert f"at least {MIN_HISTORY} comparable saved runs (0 here" in absolute.reason
    assert only(verdict).status == PASS  # the encryption did not get slower: the machine did


def test_plain_is_gated_with_one_reference_by_its_prior_and_with_history_by_the_saved_runs() -> None:
    ref = result("fscrypt", SEQ_READ, spread(50, 10), spread(100, 10))
    now = run("now", result("fscrypt", SEQ_READ, spread(40, 3), spread(80, 3)))
    single = judge(now, run("ref", ref), parse_rules("10%"))
    plain = only(single, backend="plain")
    assert (plain.unit, plain.status, plain.evidence, plain.gated) == ("MB/s", FAIL, RUN_PRIOR, True)
    assert "prior of plain SEQ1M-Q8T1-read" in plain.between
    assert "a finding about the machine (disk, kernel, load), not the encryption" in plain.reason
    assert only(single).status == PASS  # the ratio to plain did not move: the encryption passes
    assert single.failed  # a machine that got 20% slower fails the gate
    # four saved runs whose plain values spread by about 1%: a 20% drop is far outside it
    factors = (1.0, 1.01, 0.99, 1.005)
    history = [
        run(f"h{i}", result("fscrypt", SEQ_READ, spread(50 * f, 10), spread(100 * f, 10)))
        for i, f in enumerate(factors)
    ]
    verdict = judge(now, history[0], parse_rules("10%"), history=history)
    plain = only(verdict, backend="plain")
    assert (plain.evidence, plain.history_runs, plain.status) == (HISTORY, 4, FAIL)
    means = [statistics.geometric_mean(spread(100 * f, 10)) for f in factors]
    assert plain.before == pytest.approx(statistics.geometric_mean(means))  # the history's centre
    assert plain.change_percent == pytest.approx((plain.now / plain.before - 1) * 100)
    assert only(verdict).evidence == PAIRED_HISTORY and only(verdict).status == PASS
    # plain 2% down against a 1% threshold: neither shown worse than 1% nor within it
    near = run("now", result("fscrypt", SEQ_READ, spread(49, 3), spread(98, 3)))
    plain = only(judge(near, history[0], parse_rules("1%"), history=history), backend="plain")
    assert plain.status == UNDECIDED


def test_history_measures_the_between_run_spread_per_workload_beside_the_prior() -> None:
    # saved ratios wander by about 15% from run to run: a 12% drop of the ratio is within that
    history = [
        run(f"h{i}", result("fscrypt", SEQ_READ, spread(50 * f, 10), spread(100, 10)))
        for i, f in enumerate((1.0, 1.15, 0.87, 1.1))
    ]
    now = run("now", result("fscrypt", SEQ_READ, spread(44, 6), spread(100, 6)))
    check = only(judge(now, history[0], parse_rules("10%"), history=history))
    assert check.evidence == PAIRED_HISTORY and check.history_runs == 4
    # its own runs, with the prior that decided the reference alone (so they only add to it)
    assert "(4 saved runs, with " in check.between and verdict_model.PRIOR_SOURCE in check.between
    assert check.status == UNDECIDED  # one model: the runs' spread widens the interval, no FAIL
    # two saved runs are not a history: the reference and the prior alone
    check = only(judge(now, history[0], parse_rules("10%"), history=history[:2]))
    assert check.evidence == PAIRED and check.history_runs == 0


def test_improvement_never_fails_and_latency_is_direction_aware() -> None:
    history = [
        run(f"h{i}", result("fscrypt", SEQ_READ, spread(50 * f, 10)))
        for i, f in enumerate((1, 1.01, 0.99, 1.005, 0.995))
    ]
    faster = run("now", result("fscrypt", SEQ_READ, spread(75, 3)))
    assert not judge(faster, history[0], parse_rules("1%,latency-p99:1%"), history=history).failed
    slower = run("now", result("fscrypt", SEQ_READ, spread(40, 3)))  # p99 latency is 1e4 / MB/s: +25%
    verdict = judge(slower, history[0], parse_rules("30%,latency-p99:10%"), history=history)
    latency = only(verdict, metric="latency-p99")
    assert (latency.status, latency.evidence, latency.unit) == (FAIL, HISTORY, "µs")
    assert latency.worse_percent == pytest.approx(25, abs=0.5)
    assert only(verdict).status == PASS  # 20% slower, within the 30% rule


@pytest.mark.parametrize(
    ("current", "status"), [(30.0, FAIL), (50.0, PASS), (45.0, UNDECIDED), (44.0, UNDECIDED)]
)
def test_three_outcomes_against_the_threshold_as_a_tolerance(current: float, status: str) -> None:
    # 40% worse: FAIL; unchanged: PASS (within 10% with 95% confidence); exactly at the threshold,
    # or just beyond it: neither can be shown (the between-run sd is 2%)
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 9, 0.0001)))
    now = run("now", result("fscrypt", SEQ_READ, spread(current, 5, 0.0001)))
    check = only(judge(now, reference, parse_rules("10%")))
    assert check.status == status
    assert (check.p_adjusted <= 0.05) == (status == FAIL) and (check.p_pass <= 0.05) == (status == PASS)


def test_the_estimate_and_its_uncertainty_follow_the_run_level_model() -> None:
    # log means differ by log(0.85); variance = w/5 + w/10 + 2 b with w pooled, b the prior (2%)
    ref_values = [50.0, 51.5, 48.5, 52.0, 48.0, 53.5, 47.0, 50.5, 49.5, 54.0]
    now_values = [42.0, 43.5, 41.0, 44.0, 42.5]
    check = only(
        judge(
            run("now", result("fscrypt", SEQ_READ, now_values)),
            run("ref", result("fscrypt", SEQ_READ, ref_values)),
            parse_rules("10%"),
        )
    )
    logs_now, logs_ref = [math.log(v / 100) for v in now_values], [math.log(v / 100) for v in ref_values]
    change = statistics.fmean(logs_now) - statistics.fmean(logs_ref)
    squares = sum((x - statistics.fmean(g)) ** 2 for g in (logs_now, logs_ref) for x in g)
    within = squares / (4 + 9)
    assert check.change_percent == pytest.approx((math.exp(change) - 1) * 100)
    assert check.se == pytest.approx(math.sqrt(within / 5 + within / 10 + 2 * 0.02**2))


def test_a_rule_tighter_than_the_noise_allows_is_undecided_too_noisy_and_strict_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(verdict_model, "PRIOR", table(sd=0.25))  # a machine whose runs differ by 25%
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10)))
    now = run("now", result("fscrypt", SEQ_READ, spread(48, 3)))
    verdict = judge(now, reference, parse_rules("10%"))
    check = only(verdict)
    assert check.status == UNDECIDED and check.tightest > 10 and check.detectable > 50
    assert check.reason.startswith(f"too noisy for 10%: detects >= {check.detectable:.0f}% here")
    assert not verdict.failed and verdict.incomplete  # not a pass: listed as not checked
    assert judge(now, reference, parse_rules("10%"), strict=True).failed


def test_random_4k_rows_are_judged_by_iops_ratio() -> None:
    reference = run("ref", result("fscrypt", RND4K_Q1T1_READ, spread(40, 10), spread(80, 10)))
    now = run("now", result("fscrypt", RND4K_Q1T1_READ, spread(30, 3), spread(80, 3)))
    verdict = judge(now, reference, parse_rules("10%,abs-throughput:10%"))
    assert only(verdict, metric="abs-throughput").unit == "IOPS"
    assert only(verdict, metric="abs-throughput").before == pytest.approx(40e6 / 4096, rel=0.01)
    assert only(verdict).status == FAIL


# ----------------------------------------------------------------------------- one family


def test_family_of_checks_is_corrected_with_holm() -> None:
    # each check alone is beyond 10% at p < 0.05; sixteen of them: Holm multiplies by up to 16
    workloads = list(CDM)
    reference = run("ref", *[result(b, w, spread(50, 10)) for b in ("fscrypt", "luks2") for w in workloads])
    now = run("now", *[result(b, w, spread(42, 3)) for b in ("fscrypt", "luks2") for w in workloads])
    checks = [c for c in judge(now, reference, parse_rules("10%")).checks if c.gated and c.backend != "plain"]
    assert len(checks) == 16
    (raw,) = {round(c.p_value, 4) for c in checks}
    assert 0.05 / 24 < raw < 0.05  # 24 gated checks with plain's 8
    assert {c.status for c in checks} == {UNDECIDED}
    assert {round(c.p_adjusted, 3) for c in checks} == {round(min(1.0, 24 * raw), 3)}


def test_machines_of_a_fleet_are_judged_each_against_its_own_reference_in_one_family() -> None:
    workloads = list(CDM)[:4]
    # machine a is 20% slower than its reference, machine b unchanged against its own (slower) one
    ref_a = run("a/ref", *[result("fscrypt", w, spread(50, 10)) for w in workloads])
    ref_b = run("b/ref", *[result("fscrypt", w, spread(40, 10)) for w in workloads])
    now_a = run("now", *[result("fscrypt", w, spread(40, 4)) for w in workloads])
    now_b = run("now", *[result("fscrypt", w, spread(40, 4)) for w in workloads])
    rules = parse_rules("10%")
    verdict_a, verdict_b = judge_machines([(now_a, ref_a, []), (now_b, ref_b, [])], rules)
    assert (verdict_a.reference, verdict_b.reference) == ("a/ref", "b/ref")
    assert {c.status for c in verdict_a.checks if c.gated and c.backend == "fscrypt"} == {FAIL}
    assert {c.status for c in verdict_b.checks if c.gated} == {PASS}
    assert verdict_a.failed and not verdict_b.failed
    # one family: Holm over all 16 gated checks (4 encrypted, 4 plain per machine), not 8 per machine
    assert verdict_a.family_size == verdict_b.family_size == 16
    alone = judge(now_a, ref_a, rules)
    assert alone.family_size is None

    def smallest(verdict) -> float:
        return min(c.p_adjusted for c in verdict.checks if c.gated)

    assert smallest(verdict_a) == pytest.approx(2 * smallest(alone))  # Holm's first factor: 16, not 8
    # a single machine is judge() exactly
    (single,) = judge_machines([(now_a, ref_a, [])], rules)
    assert [c.p_adjusted for c in single.checks] == [c.p_adjusted for c in alone.checks]


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"settings": {**SETTINGS, "size": str(1024 * MiB)}}, "size 1024 MiB -> 256 MiB"),
        ({"settings": {**SETTINGS, "runtime": "5.0"}}, "runtime 5.0 s -> 1.5 s"),
        ({"settings": {**SETTINGS, "target": "directory"}}, "target directory -> container"),
        ({"engine": "native"}, "engine native -> fio"),
        ({"io_mode": "buffered"}, "I/O mode buffered -> direct"),
        ({"workload": dataclasses.replace(SEQ_READ, iodepth=4)}, "workload iodepth 4 -> 8"),
    ],
)
def test_runs_measured_differently_are_not_comparable(change: dict, expected: str) -> None:
    workload = change.get("workload", SEQ_READ)
    kwargs = {key: change[key] for key in ("engine", "io_mode") if key in change}
    reference = run(
        "ref",
        result("fscrypt", workload, spread(50, 10), **kwargs),
        settings=change.get("settings", SETTINGS),
    )
    now = run("now", result("fscrypt", SEQ_READ, spread(20, 3)))
    verdict = judge(now, reference, parse_rules("10%"))
    check = only(verdict)
    assert check.status == NOT_COMPARABLE
    assert expected in check.reason
    assert not verdict.failed  # shown, and a failure only under strict
    assert any("not comparable" in item for item in verdict.incomplete)
    assert judge(now, reference, parse_rules("10%"), strict=True).failed


def test_rounds_with_a_caveat_or_another_latency_are_not_comparable() -> None:
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10)))
    flagged = Result(
        "fscrypt",
        SEQ_READ,
        [dataclasses.replace(measurement(v), caveats=("loop-dio-off",)) for v in spread(40, 3)],
        [measurement(v) for v in spread(100, 3)],
    )
    check = only(judge(run("now", flagged), reference, parse_rules("10%")))
    assert (check.status, check.reason) == (NOT_COMPARABLE, "caveats none -> loop-dio-off")
    # fio's older saved runs timed completion latency only; total latency is not compared with it
    total = Result(
        "fscrypt", SEQ_READ, [dataclasses.replace(measurement(v), latency="total") for v in spread(40, 3)]
    )
    verdict = judge(run("now", total), reference, parse_rules("latency-p99:10%"))
    assert "latency completion -> total" in only(verdict, metric="latency-p99").reason


def test_ratios_across_io_modes_are_never_computed() -> None:
    mixed = Result(
        "fscrypt",
        SEQ_READ,
        [measurement(v, io_mode="buffered") for v in spread(40, 3)],
        [measurement(v, io_mode="direct") for v in spread(100, 3)],
    )
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10)))
    check = only(judge(run("now", mixed), reference, parse_rules("10%")))
    assert check.status == NOT_COMPARABLE
    assert "this run: I/O mode buffered vs plain direct" in check.reason
    (overhead,) = overhead_checks([mixed], parse_rules("5%"))
    assert overhead.status == NOT_COMPARABLE


def test_unusable_samples_are_refused_with_backend_and_workload() -> None:
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10)))
    now = run(
        "now", result("fscrypt", SEQ_READ, [40.0, 40.0, 40.0], [100.0, 0.0, 100.0])
    )  # a plain round broke
    check = only(judge(now, reference, parse_rules("10%")))
    assert check.status == INVALID
    assert (
        "fscrypt SEQ1M-Q8T1-read throughput: this run has unusable samples (round 2 is infinite"
        in check.reason
    )
    broken = Result("fscrypt", SEQ_READ, [measurement(40, p99=p) for p in (90.0, math.nan, 91.0)])
    latency = only(judge(run("now", broken), reference, parse_rules("latency-p99:10%")), metric="latency-p99")
    assert latency.status == INVALID
    assert "latency-p99: this run has unusable samples (round 2 is NaN)" in latency.reason


def test_zero_reference_median_cannot_let_anything_pass() -> None:
    reference = run("ref", result("fscrypt", SEQ_READ, [0.0] * 10))
    check = only(judge(run("now", result("fscrypt", SEQ_READ, spread(1, 3))), reference, parse_rules("10%")))
    assert check.status == INVALID and "the reference has unusable samples" in check.reason


def test_vanished_and_new_cells_are_listed_and_strict_fails_on_vanished() -> None:
    reference = run(
        "ref", result("fscrypt", SEQ_READ, spread(50, 10)), result("luks2", SEQ_READ, spread(50, 10))
    )
    now = run("now", result("fscrypt", SEQ_READ, spread(50, 3)), result("fscrypt", SEQ_WRITE, spread(50, 3)))
    verdict = judge(now, reference, parse_rules("10%"))
    assert verdict.only_in_reference == ["luks2 SEQ1M-Q8T1-read"]
    assert verdict.only_in_current == ["fscrypt SEQ1M-Q8T1-write", "plain SEQ1M-Q8T1-write"]
    assert verdict.incomplete == ["luks2 SEQ1M-Q8T1-read: in ref, not in this run"]
    assert not verdict.failed
    assert judge(now, reference, parse_rules("10%"), strict=True).failed


def test_nothing_in_common_is_said_and_fails_under_strict() -> None:
    reference = run("ref", result("luks2", SEQ_WRITE, spread(50, 10)))
    now = run("now", result("fscrypt", SEQ_READ, spread(50, 3)))
    verdict = judge(now, reference, parse_rules("10%"), strict=True)
    assert "ref has no backend x workload in common with this run" in verdict.unchecked
    assert verdict.failed


def test_no_rule_is_shown_never_failing() -> None:
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10)))
    verdict = judge(run("now", result("fscrypt", SEQ_READ, spread(20, 3))), reference, [])
    assert {c.status for c in verdict.checks} == {INFO}
    assert not verdict.failed


# ----------------------------------------------------------------------------- --encperf-max-overhead


def test_overhead_checks_against_plain_in_the_same_run() -> None:
    results = [
        result("fscrypt", SEQ_READ, spread(80, 5), spread(100, 5)),
        result("fscrypt", SEQ_WRITE, spread(80, 5), spread(100, 5)),
    ]
    verdict = judge(run("now", *results), None, [], parse_rules("fscrypt:seq-read:15%", BACKENDS))
    assert [(c.workload, c.status, c.kind, c.evidence) for c in verdict.checks] == [
        ("SEQ1M-Q8T1-read", FAIL, "overhead", IN_RUN)
    ]
    within = judge(run("now", *results), None, [], parse_rules("25%"))
    assert [c.status for c in within.checks] == [PASS, PASS]


# ----------------------------------------------------------------------------- confirmation


def test_gate_asks_for_more_rounds_only_while_a_check_is_undecided() -> None:
    rules = tuple(parse_rules("10%"))
    reference = run("ref", result("fscrypt", SEQ_READ, [50 * (1 + 0.05 * ((i % 3) - 1)) for i in range(10)]))
    gate = Gate(reference, rules, settings=SETTINGS, family_size=16)  # level 0.01 / 16
    assert gate.level == pytest.approx(0.000625)
    within = result("fscrypt", SEQ_READ, spread(50, 3))
    assert gate.pending(within, 12) == (False, "")  # unchanged: a pass
    beyond = result("fscrypt", SEQ_READ, spread(35, 3))
    assert gate.pending(beyond, 12) == (False, "")  # 30% worse: a FAIL at the gate's level
    unsure = result("fscrypt", SEQ_READ, [30.0, 42.0, 36.0])  # 28% worse, noisy: neither yet
    more, why = gate.pending(unsure, 12)
    assert more and why.startswith("throughput worse by 28.3%, threshold 10%, undecided (p=0.000856")
    assert gate.pending(unsure, 0) == (
        False,
        "throughput worse by 28.3%, threshold 10%: no more pairs may be added to this workload",
    )
    close = result("fscrypt", SEQ_READ, [43.0, 46.0, 44.0])  # 11% worse: more pairs cannot settle it
    assert gate.pending(close, 12) == (
        False,
        "throughput worse by 10.8%, threshold 10%, and 6 more pairs could not decide it "
        "(the run-to-run part stays)",
    )
    assert Gate(None, rules).pending(unsure, 12) == (False, "")  # nothing to compare with


def test_each_check_has_its_own_share_of_the_confirmation_budget() -> None:
    rules = tuple(parse_rules("10%"))
    reference = run("ref", result("fscrypt", SEQ_READ, [50 * (1 + 0.05 * ((i % 3) - 1)) for i in range(10)]))
    gate = Gate(reference, rules, settings=SETTINGS, family_size=16)
    unsure = result("fscrypt", SEQ_READ, [30.0, 42.0, 36.0])
    assert gate.pending(unsure, 12)[0]
    unsure.confirm_rounds = CHECK_CONFIRM_PAIRS  # this check added its share already
    more, why = gate.pending(unsure, 12 - CHECK_CONFIRM_PAIRS)
    assert not more
    assert why.endswith(f"its share of the confirmation budget ({CHECK_CONFIRM_PAIRS} pairs) is spent")


def test_expected_family_size_counts_the_gated_checks() -> None:
    rules = parse_rules("10%,latency-p99:20%")
    reference = run("ref", *[result("fscrypt", w, spread(50, 10)) for w in CDM])
    # eight paired throughput checks and plain's eight (its prior); latency (absolute) only with a
    # history, fscrypt's and plain's
    assert expected_family_size(["fscrypt"], CDM, rules, [], reference) == 8 + 8
    assert expected_family_size(["fscrypt"], CDM, rules, [], reference, history_runs=3) == 8 + 8 + 8 + 8
    assert expected_family_size(["fscrypt", "luks2"], CDM, [], parse_rules("seq:20%"), None) == 8


@dataclasses.dataclass
class Judged:
    """A run judged against a reference and its history, and the rules it was judged by."""

    verdict: Verdict
    rules: list[Rule]
    overhead: list[Rule]
    reference: RunData
    history: list[RunData]

    def expected_family(self, backends: list[str], workloads: list[Workload], **more: Any) -> int:
        """The family the run expects before it is measured (expected_family_size), under these rules."""
        return expected_family_size(
            backends, workloads, self.rules, self.overhead, self.reference, len(self.history), **more
        )


def judged_against_saved_runs(
    measured_run: Callable[[str, float], RunData], rules: str, saved: int
) -> Judged:
    """A run at 0.99 of the reference judged against it and ``saved`` saved runs in all (the
    reference, then runs at 1.02 and 0.98) by ``rules`` and fscrypt's 40% max overhead; none of its
    checks is left not comparable or invalid."""
    fail, overhead = parse_rules(rules), parse_rules("fscrypt:40%")
    reference = measured_run("ref", 1.0)
    history = [reference, measured_run("h2", 1.02), measured_run("h3", 0.98)][:saved]
    verdict = judge(measured_run("now", 0.99), reference, fail, overhead, history)
    assert not [c for c in verdict.checks if c.status in (NOT_COMPARABLE, INVALID)]
    return Judged(verdict, fail, overhead, reference, history)


@pytest.mark.parametrize("saved", [1, 3])
@pytest.mark.parametrize("backends", [["fscrypt", "luks2"], ["plain", "fscrypt"]])
def test_the_expected_family_and_the_verdicts_family_are_one_rule(backends: list[str], saved: int) -> None:
    """Before the run, expected_family_size counts the checks confirmation decides at; after it,
    the verdict gates its checks: both ask is_gated, so on runs that measured what they planned
    the counts agree (paired ratios and plain's throughput by their prior, absolute numbers and
    plain's seconds of a task only with a history, max-overhead checks always)."""
    from pytest_encperf.workloads import PROFILES

    archive = PROFILES["realwork"].workloads[0]
    workloads = [SEQ_READ, RND4K_Q1T1_WRITE, archive]

    def measured(workload, values: list[float]) -> list[Measurement]:
        if workload.kind == "task":  # timed: seconds
            return [
                Measurement("tools", "1", 10**8, 100 / v, 100, 0.0, 0.0, 0.0, 0.1, "buffered") for v in values
            ]
        return [measurement(v, workload.block_size) for v in values]

    def measured_run(label: str, factor: float) -> RunData:
        results = [
            Result(b, w, measured(w, spread(50 * factor, 10)), measured(w, spread(100 * factor, 10)))
            for b in backends
            for w in workloads
        ]
        return run(label, *results)

    judged = judged_against_saved_runs(
        measured_run, "10%,latency-p99:20%,luks2:abs-throughput:15%,cpu-per-gib:25%", saved
    )
    gated = sum(check.gated for check in judged.verdict.checks)
    assert gated == judged.expected_family(backends, workloads)
    assert 0 < gated < len(judged.verdict.checks)  # some are reported, not gated


@pytest.mark.parametrize("saved", [1, 3])
def test_the_expected_family_counts_the_timed_functions_the_collected_tests_will_record(saved: int) -> None:
    """encperf.time's results are cells of no selected workload: the family counted before the run
    finds them in the collected tests (usertiming.expected_cells: a test asking for ``encperf``, by
    its name; one parametrized with a Workload, by that workload's), so it is the family the verdict
    gates after it."""
    from types import SimpleNamespace

    from pytest_encperf import usertiming

    backends = ["fscrypt", "luks2"]
    timed = usertiming.user_workload("test_inserts")
    job = dataclasses.replace(RND4K_Q1T1_WRITE, label="db-mixed")  # a test's own Workload (encperf.run)

    def item(name: str, fixtures: tuple[str, ...], **params: object) -> SimpleNamespace:
        return SimpleNamespace(
            name=name, originalname=name.split("[")[0], fixturenames=("encperf", *fixtures),
            callspec=SimpleNamespace(params=params), iter_markers=lambda name: iter(()),
        )  # fmt: skip

    items = [
        *(item(f"test_inserts[{b}]", ("encperf_volume",), encperf_volume=b) for b in backends),
        *(item(f"test_job[{b}]", ("encperf_volume", "job"), encperf_volume=b, job=job) for b in backends),
        item("test_workload[fscrypt-x]", ("encperf_volume", "encperf_workload"), encperf_volume="fscrypt"),
    ]
    cells = usertiming.expected_cells(items)
    assert sorted((b, w.name) for b, w in cells) == sorted(
        (b, name) for b in backends for name in ("test_inserts", job.name)
    )

    def calls(seconds: list[float]) -> list[Measurement]:
        return [Measurement(usertiming.ENGINE, "3", 0, s, 0, 0.0, 0.0, 0.0, 0.1, "buffered") for s in seconds]

    def measured_run(label: str, factor: float) -> RunData:
        results = [
            *(result(b, w, spread(50 * factor, 10)) for b in backends for w in (SEQ_READ, job)),
            *(Result(b, timed, calls(spread(2 * factor, 10)), calls(spread(1, 10))) for b in backends),
        ]
        return run(label, *results)

    judged = judged_against_saved_runs(measured_run, "10%,latency-p99:20%,luks2:abs-throughput:15%", saved)
    assert any(c.gated and c.workload == "test_inserts" for c in judged.verdict.checks)
    gated = sum(check.gated for check in judged.verdict.checks)
    assert gated == judged.expected_family(backends, [SEQ_READ], test_cells=cells)
    assert judged.expected_family(backends, [SEQ_READ]) < gated


def test_history_keeps_each_saved_runs_rounds_per_workload() -> None:
    saved = [
        run(
            f"h{i}",
            *[result("fscrypt", w, spread(50 * f, 10), spread(100, 10)) for w in (SEQ_READ, SEQ_WRITE)],
        )
        for i, f in enumerate((1.0, 1.02, 0.98, 1.01))
    ]
    now = run(
        "now", result("fscrypt", SEQ_READ, spread(50, 3, 0.05)), result("fscrypt", SEQ_WRITE, spread(50, 3))
    )
    history = history_for("fscrypt", METRICS["throughput"], now, saved)
    assert history.runs("SEQ1M-Q8T1-read") == history.runs("SEQ1M-Q8T1-write") == 4
    assert [len(g) for g in history.samples["SEQ1M-Q8T1-read"]] == [10, 10, 10, 10]
    assert history.samples["SEQ1M-Q8T1-read"][1][0] == pytest.approx(math.log(0.51))


def test_rounds_of_another_round_definition_are_not_comparable() -> None:
    # runs saved before workloads.ROUND_DEFINITION measured buffered QnT1 as n stripes with fio
    reference = run("ref", result("fscrypt", SEQ_READ, spread(50, 10)))
    now = Result(
        "fscrypt",
        SEQ_READ,
        [dataclasses.replace(measurement(v), round_definition=ROUND_DEFINITION) for v in spread(50, 3)],
        [dataclasses.replace(measurement(v), round_definition=ROUND_DEFINITION) for v in spread(100, 3)],
    )
    check = only(judge(run("now", now), reference, parse_rules("10%")))
    assert (check.status, check.reason) == (NOT_COMPARABLE, f"round definition 1 -> {ROUND_DEFINITION}")


def test_a_task_is_checked_on_seconds_lower_is_better_and_only_on_what_applies() -> None:
    from pytest_encperf.gate import metric_for
    from pytest_encperf.workloads import PROFILES

    archive = PROFILES["realwork"].workloads[0]
    seconds = metric_for("throughput", archive)
    assert seconds is not None and seconds.name == "seconds" and not seconds.higher_is_better
    assert metric_for("abs-throughput", archive) == METRICS["abs-seconds"]
    assert metric_for("cpu-per-gib", archive) == METRICS["cpu-per-gib"]
    assert metric_for("latency-p99", archive) is None and metric_for("iops", archive) is None
    assert metric_for("seconds", CDM[0]) is None and metric_for("throughput", CDM[0]) == METRICS["throughput"]
    # a default rule and an explicit one on the same metric give one check, with the explicit rule
    from pytest_encperf.gate import Cell, cell_metrics

    rules = parse_rules("10%,archive:seconds:20%")
    chosen = cell_metrics(rules, Cell("fscrypt", archive, ()))
    assert list(chosen) == ["seconds"] and chosen["seconds"][1] == rules[1]
    assert list(cell_metrics(parse_rules("10%"), Cell("fscrypt", archive, ()))) == ["seconds"]
    assert not workload_matches("seq", archive) and workload_matches("archive", archive)  # by name only


# ----------------------------------------------------------------------------- life cycles


def cycles_run(label: str, seconds: dict[str, list[float]], **settings: str) -> RunData:
    """A run with life-cycle timings only: backend -> its mount seconds per cycle, the other
    steps at 1 s per cycle with the same number of cycles."""
    lifecycle = {
        backend: {step: list(mount) if step == "mount" else [1.0] * len(mount) for step in LIFECYCLE_STEPS}
        for backend, mount in seconds.items()
    }
    return RunData(label, (), {"size": "1048576", "target": "container", **settings}, {}, lifecycle)


SPREAD = [1.0, 1.1, 0.9, 1.05, 0.95]


def saved_runs(reference: RunData) -> list[RunData]:
    """The reference and two earlier saved runs a few percent either side of it: MIN_HISTORY
    runs, the spread a life-cycle check is gated against."""

    def moved(label: str, factor: float) -> RunData:
        steps = {
            b: {s: [v * factor for v in c] for s, c in st.items()} for b, st in reference.lifecycle.items()
        }
        return RunData(label, (), reference.settings, {}, steps)

    return [reference, moved("h2", 1.04), moved("h3", 0.96)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lifecycle:50%", Rule(50.0, "lifecycle", text="lifecycle:50%")),
        ("lifecycle-mount:30%", Rule(30.0, "lifecycle", None, "lifecycle-mount", "lifecycle-mount:30%")),
        (
            "gocryptfs:lifecycle-first-write:lifecycle:200%",
            Rule(200.0, "lifecycle", "gocryptfs", "lifecycle-first-write",
                 "gocryptfs:lifecycle-first-write:lifecycle:200%"),
        ),
    ],
)  # fmt: skip
def test_lifecycle_rules_name_every_step_or_one_and_may_exceed_100_percent(text: str, expected: Rule) -> None:
    assert parse_rules(text) == [expected]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lifecycle-mount:latency-p99:20%", "a life-cycle step is timed in seconds only"),
        ("seq-read:lifecycle:20%", "the lifecycle metric takes a step"),
        ("lifecycle-format:20%", "unknown part 'lifecycle-format'"),
    ],
)
def test_lifecycle_rules_refuse_mixing_with_workloads(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_rules(text, backend_names=["plain", "gocryptfs"])
    assert "lifecycle-first-write" in str(info.value)  # the grammar lists the steps


def test_a_lifecycle_rule_gates_nothing_else_and_other_rules_no_lifecycle() -> None:
    lifecycle = cycles_run("x", {"fscrypt": SPREAD}).lifecycle
    current = dataclasses.replace(run("now", result("fscrypt", CDM[0], [90.0] * 3)), lifecycle=lifecycle)
    reference = dataclasses.replace(run("ref", result("fscrypt", CDM[0], [100.0] * 3)), lifecycle=lifecycle)
    only_lifecycle = judge(current, reference, parse_rules("lifecycle:50%"))
    assert {c.metric for c in only_lifecycle.checks} == {"throughput", "lifecycle"}
    assert {c.status for c in only_lifecycle.checks if c.metric == "throughput"} == {INFO}
    without = judge(current, reference, parse_rules("10%"))
    assert {c.metric for c in without.checks} == {"throughput"}  # a bare threshold: workloads only


def test_lifecycle_steps_are_checked_lower_is_better_against_the_reference_cycles() -> None:
    assert MIN_LIFECYCLE_CYCLES == 3  # 3 against 3 cycles: the exact test's smallest p is 0.05
    reference = cycles_run("ref", {"plain": SPREAD, "gocryptfs": SPREAD})
    faster = cycles_run("now", {"plain": SPREAD, "gocryptfs": [v / 2 for v in SPREAD]})
    verdict = judge(faster, reference, parse_rules("lifecycle:50%"), history=saved_runs(reference))
    assert len(verdict.checks) == 2 * len(LIFECYCLE_STEPS)
    assert {c.status for c in verdict.checks} == {PASS}
    assert {(c.evidence, c.unit, c.rounds) for c in verdict.checks} == {(HISTORY, "s", (5, 5))}
    mount = next(c for c in verdict.checks if c.backend == "gocryptfs" and c.workload == "lifecycle-mount")
    assert mount.worse_percent == pytest.approx(-50, abs=1) and mount.gated
    assert not verdict.failed


def test_without_the_spread_of_saved_runs_a_lifecycle_step_is_reported_not_gated() -> None:
    # two runs' cycles share each run's conditions: one run against one is no evidence
    reference = cycles_run("ref", {"gocryptfs": SPREAD})
    slower = cycles_run("now", {"gocryptfs": [v * 2 for v in SPREAD]})
    verdict = judge(slower, reference, parse_rules("lifecycle:40%"), history=saved_runs(reference)[:2])
    assert {c.status for c in verdict.checks} == {NOT_GATED} and not verdict.failed
    mount = next(c for c in verdict.checks if c.workload == "lifecycle-mount")
    assert mount.evidence == LIFECYCLE_EVIDENCE and not mount.gated
    assert f"at least {MIN_HISTORY} comparable saved runs (2 here" in mount.reason


def test_a_slower_mount_fails_the_gate_and_names_the_step() -> None:
    reference = cycles_run("ref", {"plain": SPREAD, "gocryptfs": SPREAD})
    slower = cycles_run("now", {"plain": SPREAD, "gocryptfs": [v * 2 for v in SPREAD]})
    verdict = judge(
        slower, reference, parse_rules("gocryptfs:lifecycle-mount:40%"), history=saved_runs(reference)
    )
    (check,) = verdict.checks
    assert (check.backend, check.workload, check.metric, check.status) == (
        "gocryptfs",
        "lifecycle-mount",
        "lifecycle",
        FAIL,
    )
    assert check.worse_percent == pytest.approx(100, abs=2)
    assert verdict.failed
    # within a looser threshold: a pass
    looser = judge(
        slower, reference, parse_rules("gocryptfs:lifecycle-mount:150%"), history=saved_runs(reference)
    )
    assert looser.checks[0].status == PASS


def test_too_few_cycles_are_reported_not_gated_and_the_gate_says_why_per_backend() -> None:
    reference = cycles_run("ref", {"plain": SPREAD, "fscrypt": SPREAD})
    one_cycle = cycles_run("now", {"plain": [5.0], "fscrypt": [5.0]})
    verdict = judge(one_cycle, reference, parse_rules("lifecycle:10%"))
    assert {c.status for c in verdict.checks} == {NOT_GATED} and not verdict.failed
    assert not any(c.gated for c in verdict.checks)
    why = "life cycle not gated: 1 cycles (this run 1, ref 5; needs 3; --encperf-lifecycle-cycles)"
    assert [note for note in verdict.notes if "life cycle" in note] == [f"plain: {why}", f"fscrypt: {why}"]
    assert verdict.checks[0].reason == why


def test_lifecycles_of_another_size_or_target_are_not_comparable() -> None:
    reference = cycles_run("ref", {"fscrypt": SPREAD})
    for changed, shown in (
        (dict(size="268435456"), "size 1 MiB -> 256 MiB"),
        (dict(target="directory"), "target container -> directory"),
    ):
        verdict = judge(
            cycles_run("now", {"fscrypt": SPREAD}, **changed), reference, parse_rules("lifecycle:50%")
        )
        assert {c.status for c in verdict.checks} == {NOT_COMPARABLE}
        assert {c.reason for c in verdict.checks} == {shown}
        assert verdict.incomplete  # so --encperf-strict fails on it
    # the number of cycles is not a setting that differs: 3 against 5 are compared
    three = judge(
        cycles_run("now", {"fscrypt": SPREAD[:3]}),
        reference,
        parse_rules("lifecycle:50%"),
        history=saved_runs(reference),
    )
    assert {c.status for c in three.checks} == {PASS}


def test_a_lifecycle_rule_with_nothing_to_check_says_so() -> None:
    reference = cycles_run("ref", {"fscrypt": SPREAD})
    verdict = judge(cycles_run("now", {"gocryptfs": SPREAD}), reference, parse_rules("lifecycle:50%"))
    assert verdict.checks == []
    assert any(note.startswith("life cycle: nothing to check") for note in verdict.notes)
    old = RunData("old", (), {}, {}, {})  # a run saved before life cycles were kept
    verdict = judge(cycles_run("now", {"fscrypt": SPREAD}), old, parse_rules("fscrypt:lifecycle:50%"))
    assert any(note.startswith("life cycle: nothing to check") for note in verdict.notes)


def test_lifecycle_checks_join_the_family_of_the_run() -> None:
    reference = cycles_run("ref", {"gocryptfs": SPREAD})
    slower = cycles_run("now", {"gocryptfs": [v * 2 for v in SPREAD]})
    alone, _ = lifecycle_checks(reference, slower, parse_rules("lifecycle-mount:40%"), saved_runs(reference))
    verdict = judge(slower, reference, parse_rules("lifecycle:40%"), history=saved_runs(reference))
    mount = next(c for c in verdict.checks if c.workload == "lifecycle-mount")
    # five gated steps: Holm multiplies the smallest p-value by five
    assert mount.p_adjusted == pytest.approx(alone[0].p_value * 5)


def test_a_noise_figure_given_for_a_lifecycle_step_is_that_steps_prior() -> None:
    # the noise file names a step as the rules and the report do (BACKEND|lifecycle-STEP): its
    # figure joins the saved runs' spread of that step's check, and of no other step's
    reference = cycles_run("ref", {"gocryptfs": SPREAD})
    slower = cycles_run("now", {"gocryptfs": [v * 1.3 for v in SPREAD]})
    rules = parse_rules("gocryptfs:lifecycle:40%")

    def mount_check(cells: list[str]) -> Check:
        estimates = {f"gocryptfs|{c}": {"sd_between_percent": 50, "runs": 10, "df_between": 9} for c in cells}
        noise = (
            verdict_model.read_noise_prior(json.dumps({"estimates": estimates}), "noise.json")
            if cells
            else None
        )
        checks, _ = lifecycle_checks(reference, slower, rules, saved_runs(reference), noise)
        return next(c for c in checks if c.workload == "lifecycle-mount")

    alone, other_step, own = (
        mount_check([]),
        mount_check(["lifecycle-unmount"]),
        mount_check(["lifecycle-mount"]),
    )
    assert other_step.interval == alone.interval and other_step.df == alone.df
    assert own.df > alone.df  # the prior's 9 degrees of freedom join the 3 runs' 2
    assert own.interval[1] / own.interval[0] > 2 * alone.interval[1] / alone.interval[0]  # 50% between runs
    assert "prior of gocryptfs lifecycle-mount, noise.json" in own.between


def test_the_expected_family_counts_the_lifecycle_checks_that_will_be_gated() -> None:
    reference = cycles_run("ref", {"plain": SPREAD, "gocryptfs": SPREAD, "fscrypt": SPREAD[:2]})
    rules = parse_rules("lifecycle:50%")
    # plain and gocryptfs: five steps each; fscrypt's two reference cycles cannot be gated
    assert expected_family_size(["gocryptfs", "fscrypt"], CDM, rules, [], reference, 3, 3) == 10
    mount_only = parse_rules("lifecycle-mount:50%")
    assert expected_family_size(["gocryptfs"], CDM, mount_only, [], reference, 3, 3) == 2
    # one cycle this run (the default), or too few saved runs: nothing of the life cycle is gated
    assert expected_family_size(["gocryptfs", "fscrypt"], CDM, rules, [], reference, 3, 1) == 1
    assert expected_family_size(["gocryptfs", "fscrypt"], CDM, rules, [], reference, 2, 3) == 1


def test_a_tasks_max_overhead_is_a_share_of_plains_time() -> None:
    """--encperf-max-overhead=50% lets a task take up to 1.5x plain's time (-33% in speed)."""
    from pytest_encperf.workloads import PROFILES

    archive = PROFILES["realwork"].workloads[0]

    def timed(seconds: list[float]) -> list[Measurement]:
        return [Measurement("tools", "1", 10**8, s, 100, 0.0, 0.0, 0.0, 0.1, "buffered") for s in seconds]

    def overhead(times: list[float]) -> Check:
        task = Result("fscrypt", archive, timed(times), timed(spread(10.0, 8)))
        (check,) = judge(run("now", task), None, [], parse_rules("50%")).checks
        return check

    within = overhead(spread(14.0, 8))  # 1.4x plain's time: -29% in speed
    assert within.status == PASS and within.worse_percent == pytest.approx(40, abs=1)
    beyond = overhead(spread(16.0, 8))  # 1.6x: -37.5% in speed
    assert beyond.status == FAIL and beyond.worse_percent == pytest.approx(60, abs=1)
