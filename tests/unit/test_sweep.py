"""Configuration sweeps: expansion (pure), ranking (pure, and by simulation with a stated noise
model), the option, and the report/JSON/Markdown of a plugin run (pytester, scripted engine)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from pytest_encperf import sweep
from pytest_encperf.backends import make_backend, parse_backend_list
from pytest_encperf.backends.dmcrypt import LuksBackend
from pytest_encperf.model import Measurement, Result
from pytest_encperf.report import sweep_recommendation, sweep_report
from pytest_encperf.settings import resolve
from pytest_encperf.workloads import Workload

# ---------------------------------------------------------------- expansion


def test_alternatives_expand_into_the_cross_product_first_key_slowest() -> None:
    assert sweep.expand("luks2:sector-size=512|4096,no-workqueue=0|1") == [
        "luks2:sector-size=512,no-workqueue=0",
        "luks2:sector-size=512,no-workqueue=1",
        "luks2:sector-size=4096,no-workqueue=0",
        "luks2:sector-size=4096,no-workqueue=1",
    ]
    assert sweep.expand("gocryptfs:aessiv=1,openssl=0|1") == [
        "gocryptfs:aessiv=1,openssl=0",
        "gocryptfs:aessiv=1,openssl=1",
    ]
    assert sweep.expand("fscrypt") == ["fscrypt"]
    assert sweep.expand("luks2:key-size=512") == ["luks2:key-size=512"]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("luks2:sector-size=512||4096", "empty alternative"),
        ("luks2:sector-size=512|", "empty alternative"),
        ("luks2:sector-size=512|512", "repeated"),
        ("luks2|luks1", "not in the backend name"),
        ("luks2:sector-size|4096", "expected key=value"),
    ],
)
def test_bad_sweeps_are_refused_with_the_accepted_form(item: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sweep.expand(item)


def test_backend_list_expands_sweeps_and_keeps_other_specs() -> None:
    specs = [
        str(s)
        for s in parse_backend_list(
            "fscrypt,gocryptfs:aessiv=0|1,plaintextnames=1,gocryptfs:aessiv=0,plaintextnames=1"
        )
    ]
    assert specs == ["fscrypt", "gocryptfs:aessiv=0,plaintextnames=1", "gocryptfs:aessiv=1,plaintextnames=1"]


def test_every_configuration_is_validated_like_a_named_spec() -> None:
    with pytest.raises(
        ValueError, match=r"gocryptfs: openssl: bad value 'maybe': expected one of auto, 1, 0"
    ):
        parse_backend_list("gocryptfs:openssl=0|maybe")


def test_ready_made_sweeps_expand_to_valid_backends() -> None:
    luks = [str(s) for s in parse_backend_list(sweep.SWEEPS["luks-tuning"][0])]
    assert len(luks) == 8 and all(spec.startswith("luks2:sector-size=") for spec in luks)
    ciphers = [str(s) for s in parse_backend_list(sweep.SWEEPS["ciphers"][0])]
    assert [spec.partition("=")[2] for spec in ciphers] == [
        "aes-xts-plain64", "serpent-xts-plain64", "twofish-xts-plain64",
        "aes-xts-plain64+twofish-xts-plain64+serpent-xts-plain64",
    ]  # fmt: skip


def test_sweep_option_replaces_the_default_backends_and_adds_to_given_ones() -> None:
    alone = resolve({"sweep": "luks-tuning"}, {}, {})
    assert len(alone.backends) == 8 and "fscrypt" not in [str(s) for s in alone.backends]
    both = resolve({"sweep": "ciphers", "backends": "fscrypt"}, {}, {})
    assert str(both.backends[0]) == "fscrypt" and len(both.backends) == 5
    from_ini = resolve({}, {"sweep": "ciphers"}, {})
    assert len(from_ini.backends) == 4
    with pytest.raises(ValueError, match="--encperf-sweep: bad sweep 'speed'"):
        resolve({"sweep": "speed"}, {}, {})
    with pytest.raises(ValueError, match="bad margin"):
        resolve({"sweep-margin": "150%"}, {}, {})
    assert resolve({"sweep-margin": "5%"}, {}, {}).sweep_margin == pytest.approx(0.05)


# ---------------------------------------------------------------- recommendation commands


def test_luks_recommendation_uses_real_key_derivation_and_crypttab_flags() -> None:
    backend = make_backend(parse_backend_list("luks2:sector-size=4096,no-workqueue=1,key-size=512")[0])
    assert isinstance(backend, LuksBackend)
    lines = backend.setup_commands()
    assert lines[0].startswith(
        "cryptsetup luksFormat --type luks2 --key-size 512 --sector-size 4096 /dev/DEVICE"
    )
    assert "pbkdf" not in lines[0]
    assert "crypttab options: no-read-workqueue,no-write-workqueue" in lines


def test_gocryptfs_recommendation_names_the_crypto_implementation() -> None:
    backend = make_backend(parse_backend_list("gocryptfs:openssl=0")[0])
    assert backend.setup_commands()[1] == "gocryptfs -openssl=false CIPHERDIR MOUNTPOINT"
    assert "scryptn" not in " ".join(backend.setup_commands())


# ---------------------------------------------------------------- ranking

WORKLOADS = [Workload(f"W{i}", rw, 4096) for i in range(4) for rw in ("read", "write")]


def measurement(mb_per_s: float) -> Measurement:
    moved = int(mb_per_s * 1e6)
    return Measurement(
        engine="sim", engine_version="1", bytes=moved, seconds=1.0, ios=moved // 4096,
        lat_p50_us=1.0, lat_p99_us=1.0, lat_p999_us=1.0, cpu_seconds=0.1, io_mode="direct",
    )  # fmt: skip


def result(spec: str, workload: Workload, ratios: list[float]) -> Result:
    return Result(spec, workload, [measurement(100 * r) for r in ratios], [measurement(100) for _ in ratios])


def simulated(
    spec: str, true_ratio: float, rng: random.Random, cv: float, rounds: int = 3, volume_sd: float = 0.0
) -> list[Result]:
    """Noise model: each round's ratio is true_ratio x lognormal(0, cv) (independent rounds), and
    the whole volume's ratios share one lognormal(0, volume_sd) factor (the volume's own state)."""
    offset = rng.gauss(0, volume_sd)
    return [
        result(spec, w, [true_ratio * math.exp(offset + rng.gauss(0, cv)) for _ in range(rounds)])
        for w in WORKLOADS
    ]


def test_ranking_orders_by_geometric_mean_and_lists_what_it_could_not_rank() -> None:
    results = [
        *[result("x:a=1", w, [0.5, 0.5, 0.5]) for w in WORKLOADS],
        *[result("x:a=2", w, [0.8, 0.79, 0.81]) for w in WORKLOADS],
        *[result("x:a=3", w, [0.2, 0.21, 0.19]) for w in WORKLOADS[:2]],  # two workloads only
    ]
    (ranking,) = sweep.rank(results, ["x:a=1", "x:a=2", "x:a=3", "x:a=4", "other"])
    assert [r.spec for r in ranking.ranked] == ["x:a=2", "x:a=1", "x:a=3"]
    assert ranking.workloads == ("W0 read", "W0 write")  # the ones all three measured
    assert len(ranking.left_out) == 6
    assert ranking.unranked == (("x:a=4", "no results (skipped or failed)"),)
    best, second, third = ranking.ranked
    assert best.geomean == pytest.approx(0.8, rel=0.01)
    assert best.low is not None and best.high is not None and best.low < best.geomean < best.high
    assert not second.within_noise and not third.within_noise
    lines = sweep_report(ranking)
    assert lines[0] == "sweep: x, 3 of 4 configurations ranked over 2 workloads"
    assert "recommendation for x: a=2 (-20.0% vs plain)" in lines
    assert "not ranked: no results (skipped or failed)" in lines[1]


def test_no_recommendation_when_only_one_configuration_was_measured() -> None:
    results = [result("x:a=1", w, [0.5, 0.5]) for w in WORKLOADS]
    (ranking,) = sweep.rank(results, ["x:a=1", "x:a=2"])
    assert ranking.unranked == (("x:a=2", "no results (skipped or failed)"),)
    assert sweep_recommendation(ranking) == [
        "no recommendation for x: fewer than two configurations could be ranked"
    ]


def test_one_configuration_of_a_family_is_not_a_sweep() -> None:
    results = [result("x:a=1", w, [0.5, 0.5]) for w in WORKLOADS]
    assert sweep.rank(results, ["x:a=1", "y:a=1"]) == []


def test_close_configurations_are_within_noise_and_the_recommendation_says_so() -> None:
    rng = random.Random(7)
    results = [*simulated("x:a=1", 0.5, rng, 0.05), *simulated("x:a=2", 0.5, rng, 0.05)]
    (ranking,) = sweep.rank(results, ["x:a=1", "x:a=2"])
    assert all(r.within_noise for r in ranking.ranked) and not ranking.decided
    line, best = sweep_recommendation(ranking)
    assert line.startswith("no recommendation for x: no configuration is shown faster than the others by")
    assert best.startswith("  best estimate: a=")


def test_one_round_per_workload_gives_no_interval_and_no_claim() -> None:
    results = [
        *(result("x:a=1", w, [0.5]) for w in WORKLOADS),
        *(result("x:a=2", w, [0.9]) for w in WORKLOADS),
    ]
    (ranking,) = sweep.rank(results, ["x:a=1", "x:a=2"])
    assert ranking.ranked[1].low is None and ranking.ranked[1].p_vs_best is None
    assert ranking.ranked[1].within_noise


# Simulation: 8 workloads x 3 rounds, round noise CV 5% (this machine's CPU-bound FUSE rounds
# show 2-20%), seeded. Bonferroni over the ordered pairs bounds the false "slower" rate by ALPHA.
TRIALS = 400


def test_a_real_difference_is_found() -> None:
    rng = random.Random(99)
    found = 0
    for _ in range(TRIALS // 2):
        results = [*simulated("x:fast=1", 0.6, rng, 0.05), *simulated("x:fast=0", 0.45, rng, 0.05)]
        (ranking,) = sweep.rank(results, ["x:fast=1", "x:fast=0"])
        found += ranking.ranked[0].spec == "x:fast=1" and not ranking.ranked[1].within_noise
    assert found / (TRIALS // 2) >= 0.95  # a 25% shortfall, beyond the 10% margin


# ---------------------------------------------------------------- plugin run


def test_cells_cached_below_are_not_ranked_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        Result, "cached_below", property(lambda r: r.backend == "x:a=2" and r.workload.label == "W0")
    )
    results = [
        *(result("x:a=1", w, [0.5, 0.5, 0.51]) for w in WORKLOADS),
        *(result("x:a=2", w, [0.5, 0.5, 0.51]) for w in WORKLOADS),
    ]
    (ranking,) = sweep.rank(results, ["x:a=1", "x:a=2"])
    assert "W0 read" not in ranking.workloads and "W0 read (cached below)" in ranking.left_out
    assert len(ranking.workloads) == 6


def test_partition_target_rounds_share_one_plain_median_so_no_claim_is_made() -> None:
    def before_after(spec: str, ratio: float) -> list[Result]:
        found = [result(spec, w, [ratio, ratio * 1.01, ratio * 0.99]) for w in WORKLOADS]
        for r in found:
            r.description["baseline"] = "before/after"
        return found

    (ranking,) = sweep.rank([*before_after("x:a=1", 0.9), *before_after("x:a=2", 0.3)], ["x:a=1", "x:a=2"])
    assert [r.spec for r in ranking.ranked] == ["x:a=1", "x:a=2"]
    assert all(r.low is None and r.p_vs_best is None and r.within_noise for r in ranking.ranked)


def test_a_task_ranks_the_configuration_taking_less_time_first() -> None:
    from pytest_encperf.workloads import PROFILES

    archive = PROFILES["realwork"].workloads[0]

    def timed(spec: str, times: list[float]) -> Result:
        def took(seconds: float) -> Measurement:
            return dataclasses.replace(measurement(100), seconds=seconds, io_mode="buffered")

        return Result(spec, archive, [took(t) for t in times], [took(10.0) for _ in times])

    results = [timed("x:a=1", [20.0, 20.2, 19.8]), timed("x:a=2", [12.5, 12.6, 12.4])]
    (ranking,) = sweep.rank(results, ["x:a=1", "x:a=2"])
    assert [r.spec for r in ranking.ranked] == ["x:a=2", "x:a=1"]
    assert ranking.ranked[0].geomean == pytest.approx(0.8, rel=0.01)  # 12.5 s against 10 s: -20%
