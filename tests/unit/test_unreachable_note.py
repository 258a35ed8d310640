"""The header notes that make the between-run model's consequence visible: checks that cannot
pass an unchanged run at their threshold (under --encperf-strict every run then fails, and the
verdict says so once, with what to change), and a history pooled with the built-in prior."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_encperf import verdict as verdict_model
from pytest_encperf.gate import FAIL, PASS, SAVED, UNDECIDED, Check, judge, parse_rules
from pytest_encperf.gate.judge import unreachable_note
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.report.verdict import verdict_messages
from pytest_encperf.workloads import CDM, MiB
from tests.helpers.priors import quiet_prior, table  # noqa: F401 (autouse: a quiet machine's between-run prior)

SEQ_READ = CDM[0]
SETTINGS = {"size": str(256 * MiB), "runtime": "1.5", "target": "container", "engine": "auto"}


def spread(center: float, n: int, step: float = 0.001) -> list[float]:
    offsets = [0.0] + [sign * step * k for k in range(1, n) for sign in (1, -1)]
    return [center * (1 + o) for o in offsets[:n]]


def run(label: str, volume: list[float]) -> RunData:
    def measured(mb_per_s: float) -> Measurement:
        moved = int(mb_per_s * 1e6)
        return Measurement("fio", "1", moved, 1.0, moved // MiB, 10.0, 1e4 / mb_per_s, 200.0, 0.1, "direct")

    plain = [measured(100.0) for _ in volume]
    return RunData(label, [Result("fscrypt", SEQ_READ, [measured(v) for v in volume], plain)], dict(SETTINGS))


def check(status: str, tightest: float, detectable: float = 90.0, threshold: float = 10.0) -> Check:
    """A decided gated check; only what the note reads matters."""
    return Check(
        SAVED, "gocryptfs", "seq-read", "throughput", "MB/s", "paired", 1.0, 1.0, 0.0, 0.0, (1.0, 1.0),
        0.5, (4, 10), threshold, "10%", status, "", gated=True, tightest=tightest, detectable=detectable,
    )  # fmt: skip


def test_strict_says_once_that_every_run_fails_when_checks_cannot_pass_an_unchanged_run() -> None:
    checks = [check(UNDECIDED, 64.0, 82.0), check(UNDECIDED, 94.0, 95.0), check(UNDECIDED, 70.0, 88.0)]
    checks += [check(PASS, 5.0), check(UNDECIDED, 8.0), check(FAIL, 30.0)]  # passable, or decided
    checks.append(dataclasses.replace(check(UNDECIDED, 80.0), gated=False))  # gates nothing anyway
    (note,) = unreachable_note(checks, strict=True)
    expected = "3 checks cannot pass an unchanged run at 10% here (tightest 64-94%)"
    assert note.startswith(f"--encperf-strict: {expected}: every run fails;")
    assert "raise the threshold" in note and "--encperf-volumes" in note and "--encperf-noise" in note
    (plain_note,) = unreachable_note(checks, strict=False)
    assert plain_note.startswith(expected)
    assert "never pass and FAIL only a change beyond 82-95%" in plain_note
    assert unreachable_note(checks[3:], strict=True) == []


def test_the_verdict_of_a_too_noisy_rule_carries_the_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verdict_model, "PRIOR", table(sd=0.25))  # a machine whose runs differ by 25%
    reference, now = run("ref", spread(50, 10)), run("now", spread(48, 3))
    strict = judge(now, reference, parse_rules("10%"), strict=True)
    stuck = [c for c in strict.checks if c.gated and c.status == UNDECIDED]  # fscrypt's ratio, plain's MB/s
    assert strict.failed and len(stuck) == 2 and all(c.tightest > 10 for c in stuck)
    low, high = sorted(round(c.tightest) for c in stuck)
    tightest = f"{low}%" if low == high else f"{low}-{high}%"
    expected = f"--encperf-strict: 2 checks cannot pass an unchanged run at 10% here (tightest {tightest})"
    assert sum(note.startswith(expected) for note in strict.notes) == 1
    lenient = judge(now, reference, parse_rules("10%"))
    assert any(note.startswith("2 checks cannot pass an unchanged run at 10%") for note in lenient.notes)
    roomy = f"{max(c.tightest for c in stuck) + 20:.0f}%"
    assert not [n for n in judge(now, reference, parse_rules(roomy), strict=True).notes if "cannot pass" in n]


def test_a_history_pooled_with_the_built_in_prior_is_named_under_the_header() -> None:
    history = [run(f"h{i}", spread(50 * f, 10)) for i, f in enumerate((1.0, 1.01, 0.99, 1.005))]
    decided = judge(run("now", spread(50, 4)), history[0], parse_rules("10%"), history=history)
    assert all(c.history_runs == 4 for c in decided.checks if c.gated)
    lines = [text for _, text in verdict_messages(decided)]
    assert verdict_model.prior_note(history_runs=4) in lines
    assert "a history of 4 saved one-volume runs is pooled with it, not put in its place" in " ".join(lines)
