"""The run-level model of one check (pytest_encperf/verdict.py) on constructed samples."""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_encperf import verdict
from pytest_encperf.settings import resolve
from pytest_encperf.verdict import FAIL, PASS, UNDECIDED, Prior

PRIOR = Prior(0.05, 24.0, "test prior")


def test_one_reference_adds_twice_the_between_run_variance() -> None:
    now, ref = [0.0, 0.1, -0.1], [0.5, 0.6, 0.4, 0.5]
    found = verdict.estimate(now, [ref], PRIOR)
    assert found is not None
    within = (sum((x - 0.0) ** 2 for x in now) + sum((x - 0.5) ** 2 for x in ref)) / (2 + 3)
    assert found.change == pytest.approx(-0.5)
    assert found.se == pytest.approx(math.sqrt(within / 3 + within / 4 + 2 * 0.05**2))
    assert found.runs == 1 and "test prior" in found.between


def test_a_history_measures_the_between_run_spread_with_the_prior_and_never_widens_the_interval() -> None:
    now = [0.0, 0.1, -0.1]
    saved = [[0.5 + d + e for e in (0.05, -0.05, 0.0, 0.02)] for d in (0.0, 0.03, -0.03, 0.01)]
    one = verdict.estimate(now, saved[:1], PRIOR)
    four = verdict.estimate(now, saved, PRIOR)
    assert one is not None and four is not None
    means = [statistics.fmean(g) for g in saved]
    assert four.change == pytest.approx(statistics.fmean(now) - statistics.fmean(means))
    assert four.runs == 4 and "4 saved runs, with test prior" in four.between
    assert four.se < one.se and four.df >= one.df  # history adds power, never removes it
    # two saved runs are not a history: the reference alone
    two = verdict.estimate(now, saved[:2], PRIOR)
    assert two is not None and two.runs == 1


def test_without_a_prior_only_a_history_gives_a_between_run_variance() -> None:
    assert verdict.estimate([1.0, 1.1], [[1.0, 1.2]], None) is None
    found = verdict.estimate([1.0, 1.1], [[1.0, 1.2], [1.1, 1.0], [0.9, 1.0]], None)
    assert (
        found is not None and found.between.startswith("between-run sd") and "3 saved runs)" in found.between
    )


def test_single_rounds_give_no_within_run_variance() -> None:
    assert verdict.estimate([1.0], [[1.0]], PRIOR) is None


@pytest.mark.parametrize(
    ("worse_percent", "expected"), [(40.0, FAIL), (0.0, PASS), (10.0, UNDECIDED), (-30.0, PASS)]
)
def test_three_outcomes_against_a_tolerance(worse_percent: float, expected: str) -> None:
    tau = verdict.boundary(10.0, higher_is_better=True)
    worse = -math.log(1 - worse_percent / 100)
    se, df = 0.03, 30
    p_fail, p_pass = verdict.p_fail(worse, tau, se, df), verdict.p_pass(worse, tau, se, df)
    assert verdict.outcome(p_fail, p_pass) == expected


@pytest.mark.parametrize("df", [3, 4, 40])
def test_the_detectable_change_is_failed_in_ninety_percent_of_runs(df: int) -> None:
    """Drawn as a check sees it: the estimate normal around the true change, its standard error
    estimated on ``df`` degrees of freedom; FAIL when worse - tau > t(1 - level) x the estimated
    se. 20,000 runs: the share's binomial sd is 0.2 points. The sum of two t quantiles it replaced
    was caught in 75% of runs on 4 df (a reference of 5 volume blocks), 71% on 3."""
    tau, se, level = verdict.boundary(10.0, True), 0.04, 0.01 / 24
    detect = verdict.detectable_percent(tau, se, df, level, True)
    true_worse = -math.log(1 - detect / 100)
    critical = verdict.stats.t_ppf(1 - level, df)
    rng, runs = random.Random(3), 20_000
    caught = 0
    for _ in range(runs):
        worse = rng.gauss(true_worse, se)
        estimated = se * math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(df)) / df)
        caught += worse - tau > critical * estimated
    assert caught / runs == pytest.approx(0.90, abs=0.01)
    assert verdict.smallest_threshold_percent(se, df, True) < detect


def noise_prior(table: dict[tuple[str, str], tuple[float, float]]) -> verdict.NoisePrior:
    return verdict.NoisePrior(table, "t.json", "t.json (2 runs, --encperf-noise)", measured_here=True)


def test_the_prior_of_an_unmeasured_backend_or_workload_is_the_largest_nearest() -> None:
    table = {("gocryptfs", "A"): (0.2, 24.0), ("fscrypt", "A"): (0.1, 24.0), ("gocryptfs", "B"): (0.3, 24.0)}
    noise = noise_prior(table | {("plain", "A"): (0.15, 24.0)})
    assert verdict.prior_for("fscrypt:contents=aes", "A", noise).sd == 0.1  # its own, options aside
    assert verdict.prior_for("luks2", "A", noise).sd == 0.2  # the workload's largest
    assert verdict.prior_for("fscrypt", "B", noise).sd == 0.3  # no fscrypt B: the workload's largest
    assert verdict.prior_for("luks2", "C", noise).sd == 0.3  # nothing of C: any encrypted backend's
    assert verdict.prior_for("plain", "C", noise).sd == 0.15  # plain: only plain's own
    assert verdict.prior_for("plain", "A", noise_prior({})) is None


def test_fit_prior_takes_the_larger_of_the_cell_and_its_backend_pooled() -> None:
    def cell(sd: float) -> dict[str, float]:
        return {"runs": 4, "df_between": 3, "sd_between_percent": sd}

    doc = {
        "estimates": {"x|A": cell(0.0), "x|B": cell(30.0), "x|C": {**cell(0.0), "sd_between_percent": None}}
    }
    fit = verdict.fit_prior([doc])
    pooled = math.sqrt((3 * 0.3**2) / 6)
    assert fit == {("x", "A"): (round(pooled, 4), 6), ("x", "B"): (0.3, 6)}


# ----------------------------------------------------------------------------- the user's prior

NOISE_DOC = {
    "estimates": {
        "gocryptfs|SEQ1M-Q8T1-read": {"runs": 10, "df_between": 9, "sd_between_percent": 3.0},
        "gocryptfs|RND4K-Q1T1-read": {"runs": 10, "df_between": 9, "sd_between_percent": 1.0},
        "plain|SEQ1M-Q8T1-read": {"runs": 10, "df_between": 9, "sd_between_percent": None},
    }
}


def test_a_noise_file_is_fitted_as_the_built_in_prior_is() -> None:
    found = verdict.read_noise_prior(json.dumps(NOISE_DOC), "noise-runner.json")
    assert found.measured_here and found.source == "noise-runner.json"
    assert found.origin == "noise-runner.json (10 runs, --encperf-noise)"
    pooled = round(math.sqrt((9 * 0.03**2 + 9 * 0.01**2) / 18), 4)
    assert dict(found.table) == {
        ("gocryptfs", "RND4K-Q1T1-read"): (pooled, 18.0),
        ("gocryptfs", "SEQ1M-Q8T1-read"): (0.03, 18.0),
    }
    shipped = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "noise-2026-12-01.json"
    assert dict(verdict.read_noise_prior(shipped.read_text(), shipped.name).table) == verdict.PRIOR


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not JSON"),
        ("[]", "no 'estimates'"),
        ('{"estimates": {"gocryptfs": {}}}', "bad estimate 'gocryptfs'"),
        (
            '{"estimates": {"a|b": {"sd_between_percent": "3", "runs": 4, "df_between": 3}}}',
            "must be numbers",
        ),
        ('{"estimates": {"a|b": {"sd_between_percent": -1, "runs": 4, "df_between": 3}}}', "0 <= sd"),
        ('{"estimates": {"a|b": {"sd_between_percent": null}}}', "no cell has a between-run estimate"),
    ],
)
def test_a_bad_noise_file_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(verdict.NoiseFileError, match=re.escape(says)):
        verdict.read_noise_prior(text, "f.json")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
CELLS = st.dictionaries(
    st.sampled_from(["gocryptfs|A", "plain|A", "x|B", "bad", "a|b|c", "|A"]),
    st.fixed_dictionaries({"sd_between_percent": JSON_VALUES, "runs": JSON_VALUES, "df_between": JSON_VALUES})
    | JSON_VALUES,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON_VALUES, st.fixed_dictionaries({"estimates": CELLS})))
def test_the_noise_file_parser_gives_a_prior_or_a_noise_file_error(doc: object) -> None:
    try:
        text = json.dumps(doc)
    except ValueError:
        return
    try:
        found = verdict.read_noise_prior(text, "f.json")
    except verdict.NoiseFileError as exc:
        assert str(exc).startswith("f.json: ")
        return
    assert found.table and all(0 <= sd < 10 and df > 0 for sd, df in found.table.values())


@given(st.binary(max_size=200))
def test_the_noise_file_parser_survives_any_text(data: bytes) -> None:
    with contextlib.suppress(verdict.NoiseFileError):
        verdict.read_noise_prior(data.decode("utf-8", "replace"), "f.json")


def test_the_prior_in_use_is_the_users_and_stays_beside_a_history() -> None:
    assert not verdict.builtin_prior().measured_here and "development machine" in verdict.prior_note()
    # the built-in prior stays beside a history of one-volume runs (it decided the reference
    # alone), and gives way to a reference's own volume blocks (tests/unit/test_volume_blocks.py)
    assert verdict.history_prior("gocryptfs", "SEQ1M-Q8T1-read") == verdict.prior_for(
        "gocryptfs", "SEQ1M-Q8T1-read"
    )
    assert verdict.history_prior("gocryptfs", "SEQ1M-Q8T1-read", volume_blocks=True) is None
    users = verdict.read_noise_prior(json.dumps(NOISE_DOC), "noise-runner.json")
    prior = verdict.prior_for("gocryptfs", "SEQ1M-Q8T1-read", users)
    assert prior is not None and prior.sd == 0.03 and "noise-runner.json" in prior.source
    assert verdict.prior_note(users) == "between-run prior: noise-runner.json (10 runs, --encperf-noise)"
    assert verdict.history_prior("gocryptfs", "SEQ1M-Q8T1-read", noise=users) == prior  # the user's stays
    assert verdict.history_prior(None, "SEQ1M-Q8T1-read", noise=users) is None  # latency: no prior of its own
    # given to one call, it is nobody else's: the next call without it uses the built-in prior
    assert "built-in" in verdict.prior_for("gocryptfs", "SEQ1M-Q8T1-read").source
    assert "development machine" in verdict.prior_note()


def test_the_prior_note_says_a_history_of_one_volume_runs_does_not_replace_the_built_in_prior() -> None:
    alone = verdict.prior_note()
    pooled = verdict.prior_note(history_runs=verdict.MIN_HISTORY)
    assert pooled.startswith(f"between-run prior: {verdict.PRIOR_ORIGIN}; a history of 3 saved one-volume")
    assert "not put in its place" in pooled and "30% of checking runs were loaded" in pooled
    assert "statistics.md" in pooled and "--encperf-noise=FILE" in pooled and pooled != alone
    assert verdict.prior_note(history_runs=verdict.MIN_HISTORY - 1) == alone  # no history yet
    users = verdict.read_noise_prior(json.dumps(NOISE_DOC), "noise-runner.json")
    assert verdict.prior_note(users, 5) == verdict.prior_note(users)  # the user's: measured here


def test_the_noise_option_follows_the_precedence_and_names_itself_for_a_bad_file(tmp_path: Path) -> None:
    files = {}
    for name, sd in (("cli", 1.0), ("env", 2.0), ("ini", 3.0)):
        doc = {"estimates": {"gocryptfs|A": {"runs": 5, "df_between": 4, "sd_between_percent": sd}}}
        files[name] = tmp_path / f"noise-{name}.json"
        files[name].write_text(json.dumps(doc))
    assert resolve({}, {}, environ={}).noise is None  # the built-in prior
    ini = {"noise": str(files["ini"])}
    env = {"ENCPERF_NOISE": str(files["env"])}
    from_ini = resolve({}, ini, environ={})
    assert from_ini.noise is not None and from_ini.noise.table[("gocryptfs", "A")] == (0.03, 4.0)
    from_env = resolve({}, ini, environ=env)
    assert from_env.noise is not None and from_env.noise.source == "noise-env.json"
    typed = resolve({"noise": str(files["cli"])}, ini, environ=env)
    assert typed.noise is not None and typed.noise.source == "noise-cli.json"
    assert typed.sources["noise"] == "--encperf-noise"
    (tmp_path / "bad.json").write_text('{"runs": {}}')
    with pytest.raises(ValueError, match=r"^--encperf-noise: bad noise file .*bad.json.*no 'estimates'"):
        resolve({"noise": str(tmp_path / "bad.json")}, {}, environ={})
    with pytest.raises(
        ValueError, match=r"^--encperf-noise \(from ENCPERF_NOISE\): bad noise file .*missing"
    ):
        resolve({}, {}, environ={"ENCPERF_NOISE": str(tmp_path / "missing.json")})
