"""A reference measured on several fresh volumes (--encperf-volumes): its rounds record their volume
block, the runner spreads them over fresh volume pairs, and the gate takes the between-volume spread
from the blocks instead of the between-run prior."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import statistics
from pathlib import Path

import pytest

from pytest_encperf import storage, verdict
from pytest_encperf.gate import PASS, UNDECIDED, judge, parse_rules
from pytest_encperf.model import Measurement, Result, RunData
from pytest_encperf.mountedvolume import MountedVolume
from pytest_encperf.roundplan import RoundPlan
from pytest_encperf.rounds import ConfirmBudget
from pytest_encperf.runner import Runner, rounds_per_volume
from pytest_encperf.settings import resolve
from pytest_encperf.workloads import CDM, MiB, Workload
from tests.helpers.fakes import FakeEngine, mounted

WORKLOAD = next(w for w in CDM if w.name == "SEQ1M-Q8T1-read")
SAVED = Path(__file__).resolve().parents[1] / "helpers" / "data" / "saved-run-before-plain-entries.json"


def measurement(mb_per_s: float, block: int | None = None) -> Measurement:
    moved = int(mb_per_s * 1e6)
    return Measurement(
        "fake", "1", moved, 1.0, moved // WORKLOAD.block_size, 1.0, 2.0, 3.0, 0.1, "direct",
        volume_block=block,
    )  # fmt: skip


def run(label: str, ratios: list[float], blocks: list[int | None]) -> RunData:
    """gocryptfs at ``ratios`` x plain (plain at 1000 MB/s), each round on its volume block."""
    plain = [measurement(1000.0, b) for b in blocks]
    volume = [measurement(1000.0 * r, b) for r, b in zip(ratios, blocks, strict=True)]
    return RunData(label, (Result("gocryptfs", WORKLOAD, volume, plain),), {"size": "1"})


# ----------------------------------------------------------------------------- the model


def test_a_runs_values_are_grouped_by_volume_block_only_when_every_one_has_a_block() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert verdict.volume_groups(values, [0, 0, 1, 1, 2, 2]) == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert verdict.volume_groups(values, [None] * 6) == [values]  # saved before blocks were recorded
    assert verdict.volume_groups(values, [0] * 6) == [values]  # one volume
    assert verdict.volume_groups(values, [0, 0, 1, 1, None, 2]) == [values]
    assert verdict.volume_groups(values, []) == [values]
    assert verdict.has_blocks([0, 1]) and not verdict.has_blocks([0, 0]) and not verdict.has_blocks([None, 1])


def test_a_reference_of_volume_blocks_measures_its_own_between_volume_spread() -> None:
    now = [0.0, 0.1, -0.1, 0.02]
    reference = [0.50, 0.54, 0.60, 0.58, 0.44, 0.40]
    blocks = [0, 0, 1, 1, 2, 2]
    found = verdict.estimate(now, [reference], None, [blocks])
    assert found is not None and found.groups == 3 and found.runs == 1
    groups = [reference[0:2], reference[2:4], reference[4:6]]
    means = [statistics.fmean(g) for g in groups]
    squares = sum((x - statistics.fmean(g)) ** 2 for g in [now, *groups] for x in g)
    within = squares / (3 + 1 + 1 + 1)
    spread = statistics.variance(means)
    # S2 (1 + 1 / groups) + w x max(0, 1 / n_now - 1 / n_block): blocks of 2 rounds, this run's 4
    assert found.se == pytest.approx(math.sqrt(spread * (1 + 1 / 3)))
    assert found.change == pytest.approx(statistics.fmean(now) - statistics.fmean(means))
    assert found.within_var == pytest.approx(within)  # pooled within this run and each block
    assert found.df == 2  # the spread of 3 blocks: no more degrees of freedom than that
    assert "3 volume blocks of the reference" in found.between
    # the same rounds without their blocks: the reference is one group, decided only by a prior
    assert verdict.estimate(now, [reference], None, [[None] * 6]) is None
    prior = verdict.Prior(0.3, 72.0, "test prior")
    one = verdict.estimate(now, [reference], prior, [[None] * 6])
    assert one is not None and one.groups == 0 and "test prior" in one.between


def test_the_built_in_prior_stays_beside_a_history_and_gives_way_to_volume_blocks() -> None:
    built_in = verdict.prior_for("gocryptfs", WORKLOAD.name)
    assert built_in is not None and verdict.PRIOR_SOURCE in built_in.source
    assert verdict.history_prior("gocryptfs", WORKLOAD.name) == built_in  # a history of one-volume runs
    assert verdict.history_prior("gocryptfs", WORKLOAD.name, volume_blocks=True) is None
    assert verdict.history_prior("gocryptfs", "lifecycle-mount", exact=True) is None  # a step: none
    users = verdict.NoisePrior({("gocryptfs", WORKLOAD.name): (0.02, 9.0)}, "noise.json", "noise.json", True)
    kept = verdict.history_prior("gocryptfs", WORKLOAD.name, noise=users, volume_blocks=True)
    assert kept is not None and kept.sd == 0.02  # the runner's own prior always stays


def test_with_the_built_in_prior_a_history_never_widens_the_interval_of_the_reference_alone() -> None:
    prior = verdict.Prior(0.3, 72.0, "built-in")
    now = [0.0, 0.1, -0.1, 0.05]
    saved = [[0.02 + d + e for e in (0.05, -0.05, 0.0, 0.02)] for d in (0.0, 0.3, -0.25, 0.1, -0.1)]
    one = verdict.estimate(now, saved[:1], prior)
    assert one is not None
    for runs in (3, 5):
        history = verdict.estimate(now, saved[:runs], prior)
        assert history is not None and history.se < one.se and history.df >= one.df


# ----------------------------------------------------------------------------- the gate


def test_the_gate_takes_the_between_run_part_from_the_references_volume_blocks() -> None:
    # no noise=: the built-in prior, 30% between runs here
    ratios = [0.500, 0.505, 0.503, 0.498, 0.495, 0.499]
    now = run("now", [0.501, 0.499, 0.502, 0.498], [None] * 4)
    blocks = judge(now, run("reference", ratios, [0, 0, 1, 1, 2, 2]), parse_rules("10%"))
    old = judge(now, run("reference", ratios, [None] * 6), parse_rules("10%"))
    paired = {c.backend: c for c in blocks.checks}
    assert paired["gocryptfs"].status == PASS and paired["plain"].status == PASS
    assert "3 volume blocks of the reference" in paired["gocryptfs"].between
    assert verdict.PRIOR_SOURCE not in paired["gocryptfs"].between
    # the same reference saved before blocks were recorded (or on one volume): the built-in prior
    before = {c.backend: c for c in old.checks}
    assert before["gocryptfs"].status == UNDECIDED and verdict.PRIOR_SOURCE in before["gocryptfs"].between


def test_a_run_saved_before_volume_blocks_still_loads_and_is_compared() -> None:
    _, results = storage.load(SAVED)
    assert all(m.volume_block is None for r in results for m in (*r.rounds, *r.baseline_rounds))
    reference = RunData("old", tuple(results), {})
    now = RunData("now", tuple(results), {})
    assert judge(now, reference, parse_rules("10%")).checks  # compared, as before


def test_the_volume_block_of_each_round_is_saved_and_loaded(tmp_path: Path) -> None:
    rounds = [measurement(500.0, b) for b in (0, 0, 1, 1)]
    plain = [measurement(1000.0, b) for b in (0, 0, 1, 1)]
    at = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
    doc = storage.document([Result("gocryptfs", WORKLOAD, rounds, plain)], {}, "m1", {}, {"volumes": "2"}, at)
    path = storage.save(tmp_path, "m1", "blocks", doc)
    saved = json.loads(path.read_text())["benchmarks"][0]["extra_info"]["encperf"]
    assert [r["volume_block"] for r in saved["rounds"]] == [0, 0, 1, 1]
    _, loaded = storage.load(path)
    assert [m.volume_block for m in loaded[0].baseline_rounds] == [0, 0, 1, 1]


# ----------------------------------------------------------------------------- the option and the runner


def test_the_volumes_option_follows_the_precedence_and_is_refused_on_a_partition() -> None:
    assert resolve({}, {}, environ={}).volumes == 1
    assert resolve({}, {"volumes": "3"}, environ={}).volumes == 3
    assert resolve({}, {"volumes": "3"}, environ={"ENCPERF_VOLUMES": "4"}).volumes == 4
    typed = resolve({"volumes": "5"}, {"volumes": "3"}, environ={"ENCPERF_VOLUMES": "4"})
    assert typed.volumes == 5 and typed.saved_text()["volumes"] == "5"
    with pytest.raises(ValueError, match=r"^--encperf-volumes: bad volumes '0'"):
        resolve({"volumes": "0"}, {}, environ={})
    partition = {"target": "partition", "device": "/dev/sdz9", "allow-destroy": "/dev/sdz9", "volumes": "2"}
    with pytest.raises(ValueError, match=r"^--encperf-volumes: the partition target holds one volume"):
        resolve(partition, {}, environ={})


@pytest.mark.parametrize(
    ("rounds", "volumes", "each"), [(10, 5, 2), (10, 3, 4), (4, 2, 2), (4, 1, 4), (3, 3, 2)]
)
def test_the_rounds_are_shared_out_over_the_volumes_in_whole_blocks(
    rounds: int, volumes: int, each: int
) -> None:
    assert rounds_per_volume(rounds, volumes) == each


def test_the_runner_spreads_the_rounds_over_fresh_volume_pairs_and_tags_each_round(tmp_path: Path) -> None:
    engine, made = FakeEngine(), itertools.count()
    asked: list[int] = []

    def fresh_pair(block: int) -> tuple[MountedVolume, MountedVolume]:
        asked.append(block)
        return mounted(tmp_path, f"plain{block}"), mounted(tmp_path, f"vol{block}-{next(made)}")

    runner = Runner(
        engine, mounted(tmp_path, "vol"), mounted(tmp_path, "base"), RoundPlan(MiB, 0.01, 10, 1),
        lambda result: None, volumes=3, fresh_pair=fresh_pair,
    )  # fmt: skip
    result = runner.run(WORKLOAD)
    assert asked == [1, 2]
    assert [m.volume_block for m in result.rounds] == [0] * 4 + [1] * 4 + [2] * 4  # 10 over 3: 4 each
    assert [m.volume_block for m in result.baseline_rounds] == [0] * 4 + [1] * 4 + [2] * 4
    # each block: a warm-up pair, then whole A B B A blocks on its own pair of volumes
    assert engine.files[:10] == ["base", "vol"] + ["base", "vol", "vol", "base"] * 2
    assert engine.files[10:20] == ["plain1", "vol1-0"] + ["plain1", "vol1-0", "vol1-0", "plain1"] * 2
    assert set(engine.files[20:]) == {"plain2", "vol2-1"}
    assert result.stop_reason == "4 rounds; 4 rounds on each of 2 more fresh volume pairs"


def test_one_volume_records_no_blocks(tmp_path: Path) -> None:
    runner = Runner(FakeEngine(), mounted(tmp_path, "vol"), mounted(tmp_path, "base"),
                    RoundPlan(MiB, 0.01, 4, 0), lambda result: None)  # fmt: skip
    result = runner.run(WORKLOAD)
    assert [m.volume_block for m in result.rounds] == [None] * 4 and result.stop_reason == "4 rounds"


def test_a_fio_job_is_spread_over_the_volumes_and_a_timed_function_stays_on_one(tmp_path: Path) -> None:
    job = tmp_path / "db.fio"
    job.write_text("[db]\nrw=randread\nbs=8k\n")
    (workload,) = Workload.from_fio_job(job)

    def fresh_pair(block: int) -> tuple[MountedVolume, MountedVolume]:
        return mounted(tmp_path, f"plain{block}"), mounted(tmp_path, f"vol{block}")

    def volumes_runner() -> Runner:
        return Runner(
            FakeEngine(), mounted(tmp_path, "vol"), mounted(tmp_path, "base"), RoundPlan(MiB, 0.01, 4, 0),
            lambda result: None, volumes=2, fresh_pair=fresh_pair,
        )  # fmt: skip

    spread = volumes_runner().run(workload)
    assert [m.volume_block for m in spread.rounds] == [0] * 2 + [1] * 2
    for directory in ("vol", "base"):
        (tmp_path / directory).mkdir()
    timed = volumes_runner().time(lambda path: None, name="noop", sync=False, drop_caches=False)
    assert len(timed.rounds) == 4 and {m.volume_block for m in timed.rounds} == {None}


class AskingGate:
    """Asks for more pairs until the workload has ``wanted`` pairs; remembers each question's blocks."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.asked: list[list[int | None]] = []

    def pending(self, result: Result, extra_possible: int) -> tuple[bool, str]:
        self.asked.append([m.volume_block for m in result.rounds])
        more = len(result.rounds) < self.wanted
        return more, "undecided" if more else ""


def test_each_fresh_volume_pair_gets_the_round_settings_and_confirmation_comes_after_all(
    tmp_path: Path,
) -> None:
    def fresh_pair(block: int) -> tuple[MountedVolume, MountedVolume]:
        return mounted(tmp_path, f"plain{block}"), mounted(tmp_path, f"vol{block}")

    gate = AskingGate(wanted=12 + 4)
    runner = Runner(
        FakeEngine(), mounted(tmp_path, "vol"), mounted(tmp_path, "base"), RoundPlan(MiB, 0.01, 10, 0),
        lambda result: None, volumes=3, fresh_pair=fresh_pair, precision=1.0, gate=gate,
        confirm_budget=ConfirmBudget(60.0),
    )  # fmt: skip
    result = runner.run(WORKLOAD)
    # precision (at least PRECISION_MIN_PAIRS = 4 pairs) held on every pair, not only the session's
    # ... and the gate asked first once every block was measured, about all of them
    assert gate.asked[0] == [0] * 4 + [1] * 4 + [2] * 4
    # confirmation's whole A B B A blocks ran on the last pair, tagged with its block
    assert [m.volume_block for m in result.rounds] == [0] * 4 + [1] * 4 + [2] * 8
    assert [m.pair_position for m in result.baseline_rounds[-4:]] == [1, 2, 1, 2]
    assert result.confirm_rounds == 4
    assert result.stop_reason == (
        "4 rounds, within ±1 (±0.0); 4 rounds, within ±1 (±0.0) on each of 2 more fresh volume pairs"
        " + 4 to confirm, decided"
    )


def test_a_fresh_volume_pair_keeps_adding_blocks_until_its_own_rounds_are_precise(tmp_path: Path) -> None:
    def fresh_pair(block: int) -> tuple[MountedVolume, MountedVolume]:
        return mounted(tmp_path, f"plain{block}"), mounted(tmp_path, f"vol{block}")

    runner = Runner(
        FakeEngine(), mounted(tmp_path, "vol"), mounted(tmp_path, "base"), RoundPlan(MiB, 0.01, 10, 0),
        lambda result: None, volumes=5, fresh_pair=fresh_pair, precision=1.0,
    )  # fmt: skip
    result = runner.run(WORKLOAD)
    # 10 rounds over 5 pairs are 2 each; precision needs 4 pairs on each pair's own rounds
    assert [m.volume_block for m in result.rounds] == [b for b in range(5) for _ in range(4)]
    assert "on each of 4 more fresh volume pairs" in result.stop_reason
