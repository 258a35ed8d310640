"""The --encperf-fail grammar, rule selection and single checks (pure code)."""

from __future__ import annotations

import pytest

from pytest_encperf.compare import (
    FAIL,
    GRAMMAR,
    INFO,
    NOT_SIGNIFICANT,
    PASS,
    TOO_FEW_ROUNDS,
    Rule,
    compare_runs,
    evaluate,
    overhead_checks,
    parse_rules,
    select_rule,
)
from pytest_encperf.model import Measurement, Result
from pytest_encperf.workloads import CDM, MiB

SEQ_READ, SEQ_WRITE, _, _, _, _, RND4K_Q1T1_READ, RND4K_Q1T1_WRITE = CDM
BACKENDS = ["plain", "fscrypt", "luks2"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10%", [Rule(10.0, text="10%")]),
        ("seq-read:5%", [Rule(5.0, workload="seq-read", text="seq-read:5%")]),
        ("rnd4k-q1t1-write:15%", [Rule(15.0, workload="rnd4k-q1t1-write", text="rnd4k-q1t1-write:15%")]),
        ("latency-p99:20%", [Rule(20.0, metric="latency-p99", text="latency-p99:20%")]),
        ("cpu-per-gib:25%", [Rule(25.0, metric="cpu-per-gib", text="cpu-per-gib:25%")]),
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


def samples(center: float, spread: float = 0.001, n: int = 3) -> list[float]:
    offsets = [0.0, spread, -spread, 2 * spread, -2 * spread, 3 * spread][:n]
    return [center * (1 + o) for o in offsets]


def test_check_fails_only_when_worse_and_significant() -> None:
    rule = Rule(10.0, text="10%")
    regression = evaluate("baseline", "fscrypt", SEQ_READ, "throughput", samples(80), samples(100), rule)
    assert regression.status == FAIL
    assert regression.worse_percent == pytest.approx(20.0)
    assert regression.p_value == pytest.approx(0.05)
    assert regression.interval[1] < 1.0
    improvement = evaluate("baseline", "fscrypt", SEQ_READ, "throughput", samples(150), samples(100), rule)
    assert improvement.status == PASS
    assert improvement.reason == "not worse"


@pytest.mark.parametrize(("current", "status"), [(90.0, PASS), (89.99, FAIL), (90.01, PASS)])
def test_threshold_boundary(current: float, status: str) -> None:
    rule = Rule(10.0, text="10%")
    check = evaluate("baseline", "plain", SEQ_READ, "throughput", samples(current), samples(100), rule)
    assert check.status == status


def test_lower_is_better_metrics() -> None:
    rule = Rule(20.0, metric="latency-p99", text="latency-p99:20%")
    slower = evaluate("baseline", "plain", SEQ_READ, "latency-p99", samples(130), samples(100), rule)
    assert slower.status == FAIL
    assert slower.worse_percent == pytest.approx(30.0)
    faster = evaluate("baseline", "plain", SEQ_READ, "latency-p99", samples(50), samples(100), rule)
    assert faster.status == PASS


def test_noise_and_too_few_rounds_are_reported_not_failed() -> None:
    rule = Rule(5.0, text="5%")
    noisy = evaluate(
        "baseline", "plain", SEQ_READ, "throughput", samples(94, 0.2, 6), samples(100, 0.2, 6), rule
    )
    assert noisy.status == NOT_SIGNIFICANT
    assert "not significant: p=" in noisy.reason
    few = evaluate("baseline", "plain", SEQ_READ, "throughput", samples(50, n=2), samples(100, n=2), rule)
    assert few.status == TOO_FEW_ROUNDS
    assert "at least 3 rounds on each side" in few.reason


def measurement(mb_per_s: float, block: int = MiB) -> Measurement:
    moved = int(mb_per_s * 1e6)
    return Measurement("t", "1", moved, 1.0, moved // block, 10.0, 100.0 / mb_per_s, 200.0, 0.1, "direct")


def result(backend: str, workload, values: list[float], base: list[float] | None = None) -> Result:
    block = workload.block_size
    return Result(
        backend,
        workload,
        [measurement(v, block) for v in values],
        [measurement(v, block) for v in (base or values)],
    )


def test_compare_runs_pairs_backend_and_workload_and_lists_the_rest() -> None:
    reference = [result("fscrypt", SEQ_READ, samples(100)), result("fscrypt", SEQ_WRITE, samples(100))]
    current = [result("fscrypt", SEQ_READ, samples(70)), result("fscrypt", RND4K_Q1T1_READ, samples(100))]
    comparison = compare_runs(reference, current, parse_rules("10%,latency-p99:50%"))
    assert [(c.workload, c.metric, c.status) for c in comparison.checks] == [
        ("SEQ1M-Q8T1-read", "throughput", FAIL),
        ("SEQ1M-Q8T1-read", "latency-p99", PASS),
    ]
    assert comparison.only_in_reference == ["fscrypt SEQ1M-Q8T1-write"]
    assert comparison.only_in_current == ["fscrypt RND4K-Q1T1-read"]
    assert compare_runs(reference, current, []).checks[0].status == INFO  # shown, never failing


def test_random_4k_rows_are_judged_by_iops() -> None:
    reference = [result("plain", RND4K_Q1T1_READ, samples(40))]
    current = [result("plain", RND4K_Q1T1_READ, samples(30))]
    (check,) = compare_runs(reference, current, parse_rules("10%")).checks
    assert check.unit == "IOPS"
    assert check.reference == pytest.approx(40e6 / 4096, rel=0.01)


def test_vs_plain_metric_cancels_machine_drift() -> None:
    # the whole machine got 20% slower: absolute throughput fails, the paired ratio to plain does not
    reference = [result("fscrypt", SEQ_READ, samples(50), samples(100))]
    drifted = [result("fscrypt", SEQ_READ, samples(40), samples(80))]
    checks = compare_runs(reference, drifted, parse_rules("10%,vs-plain:10%")).checks
    assert [(c.metric, c.status) for c in checks] == [("throughput", FAIL), ("vs-plain", PASS)]
    # the backend alone got 20% slower: the ratio catches it (throughput has no rule here: shown only)
    slower = [result("fscrypt", SEQ_READ, samples(40), samples(100))]
    checks = compare_runs(reference, slower, parse_rules("vs-plain:10%")).checks
    assert [(c.metric, c.status, c.unit) for c in checks] == [
        ("throughput", INFO, "MB/s"),
        ("vs-plain", FAIL, "x plain"),
    ]
    assert checks[1].current == pytest.approx(0.4)


def test_overhead_checks_against_plain_in_the_same_run() -> None:
    results = [
        result("fscrypt", SEQ_READ, samples(80), samples(100)),
        result("fscrypt", SEQ_WRITE, samples(80), samples(100)),
    ]
    checks = overhead_checks(results, parse_rules("fscrypt:seq-read:15%", BACKENDS))
    assert [(c.workload, c.status, c.kind) for c in checks] == [("SEQ1M-Q8T1-read", FAIL, "overhead")]
    assert [c.status for c in overhead_checks(results, parse_rules("25%"))] == [PASS, PASS]
