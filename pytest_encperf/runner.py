"""The measuring behind the ``encperf`` fixture (no pytest): ``Runner`` prepares each workload's
test files on a mounted volume and plain's (mountedvolume.py makes them), holds the measurement lock
and hands the paired rounds to rounds.py; on the partition target, the rounds of one side alone."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from . import load, realwork, usertiming
from .engines import Engine
from .engines.observe import Observe
from .host import HostError
from .model import Measurement, Result
from .mountedvolume import MountedVolume, verify_after_remount
from .roundplan import RoundPlan
from .rounds import (
    ConfirmBudget,
    Confirmer,
    PairedRounds,
    QuietAgain,
    RoundMeter,
    Side,
    confirm,
    measure_rounds,
    whole_blocks,
)
from .workloads import Workload

TASK_NEEDS_PLAIN = (
    "real-work tasks need the plain volume beside the volume, which the partition target does not "
    "have; run them on the container or directory target"
)


class RunError(RuntimeError):
    """A workload could not run (disk full, I/O error); the message says where and what to do."""


# What a failing write means for the user, by errno (a full disk under a loop device shows as EIO).
_STORAGE_ERRORS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "I/O error (is the disk under --encperf-dir full?)",
}


def io_mode_policy(engine: Engine, volume_file: Path, baseline_file: Path) -> tuple[bool, str]:
    """Use O_DIRECT only when both sides really get it, so they are compared in one mode.

    Returns (direct, what O_DIRECT gives on the volume).
    """
    on_volume = engine.io_mode(volume_file)
    on_baseline = engine.io_mode(baseline_file)
    return on_volume == "direct" and on_baseline == "direct", on_volume


@dataclass
class Runner:
    """What a benchmark test measures with: ``encperf.run(workload)``."""

    engine: Engine
    volume: MountedVolume
    baseline: MountedVolume | None  # None on a partition: see measured_baseline
    plan: RoundPlan  # the test file's size, each round's runtime, the counted and warm-up rounds
    record: Callable[[Result], None]
    verify: bool = False  # --encperf-verify: checksums across a remount after write workloads
    # Partition target: baseline rounds measured on the partition before this volume existed
    measured_baseline: dict[str, list[Measurement]] = field(default_factory=dict)
    steady_cv: float | None = None  # keep adding rounds until both sides' CV is below this ...
    steady_budget: float = 60.0  # ... or this many seconds have been spent on the extra rounds
    # --encperf-precision: keep adding blocks until the overhead's 95% interval is within ±this
    # many points (or the steady budget is spent); None: off
    precision: float | None = None
    gate: Confirmer | None = None  # asked after the rounds whether the checks are decided ...
    confirm_budget: ConfirmBudget | None = None  # ... and more pairs are run while this lasts
    # Held around all rounds of one workload (warm-up to confirmation), never inside a round;
    # gives the seconds waited for it (host.measurement_lock: one measurement per disk), which
    # with the wait for ``between_measurements`` becomes the result's lock_wait
    lock: Callable[[], AbstractContextManager[float]] = lambda: contextlib.nullcontext(0.0)
    # Held around what fills or remounts the volumes (the test file, --encperf-verify): beside
    # other such work, never beside a measurement (host.measurement_lock, shared)
    between_measurements: Callable[[], AbstractContextManager[float]] = lambda: contextlib.nullcontext(0.0)
    # told after each round (warm-up too): (workload, volume spec, spec of the side measured, round)
    on_round: Callable[[Workload, str, str, Measurement], None] | None = None
    # the real-work tasks' reference tree, made on first use (once per session, outside rounds)
    reference_tree: Callable[[], realwork.ReferenceTree] | None = None
    # what runs one round of a task (workload, the side's data directory, reference tree, observe)
    task: Callable[[Workload, Path, realwork.ReferenceTree, Observe], Measurement] = realwork.run_task
    # what others take of the machine, round by round (load.LoadMeter; None: not recorded)
    meter: load.LoadMeter | None = None
    # --encperf-quiet-wait: before each workload's rounds, wait up to this long for others' CPU
    # to fall below the meter's threshold (saved as the result's quiet_wait)
    quiet_wait: float = 0.0
    # told while the quiet wait goes on: the Load of the last busy window (the progress line)
    on_quiet_wait: Callable[[load.Load], None] | None = None
    # encperf.time's default name for its result: the test's (usertiming.test_name)
    test_name: str = "encperf-time"
    # --encperf-volumes N: a block or files workload's rounds are spread over this volume pair and
    # N-1 fresh ones, ``fresh_pair(k)`` giving the k-th (plain, backend) pair (Volumes.fresh_pair)
    volumes: int = 1
    fresh_pair: Callable[[int], tuple[MountedVolume, MountedVolume]] | None = None

    @property
    def spread_over_volumes(self) -> bool:
        return self.volumes > 1 and self.fresh_pair is not None

    @property
    def volume_plan(self) -> RoundPlan:
        """The round plan of each volume pair: the run's, or with --encperf-volumes its share of
        the counted rounds (rounds_per_volume)."""
        if not self.spread_over_volumes:
            return self.plan
        return dataclasses.replace(self.plan, rounds=rounds_per_volume(self.plan.rounds, self.volumes))

    def _tell(self, workload: Workload, side: str, measurement: Measurement) -> None:
        if self.on_round is not None:
            self.on_round(workload, self.volume.spec, side, measurement)

    def _round_meter(self, workload: Workload, *volumes: MountedVolume | None) -> RoundMeter:
        """Measures each round of ``workload`` (its time and, with a meter, what others took
        meanwhile); the backends' daemons of ``volumes`` count as this run's."""
        daemons = tuple(pid for mounted in volumes if mounted is not None for pid in mounted.daemon_pids)
        return RoundMeter(self.meter, daemons, workload.is_timed_function)

    def _wait_for_quiet(self, result: Result, *volumes: MountedVolume | None) -> None:
        """--encperf-quiet-wait, inside the measurement lock before the first round."""
        if self.meter is None or self.quiet_wait <= 0:
            return
        daemons = self._round_meter(result.workload, *volumes).daemons
        result.quiet_wait = load.wait_for_quiet(
            self.meter, self.quiet_wait, daemons=daemons, waiting=self.on_quiet_wait
        )

    def run(self, workload: Workload) -> Result:
        """Measure ``workload`` on the volume, alternating rounds with the baseline (A B B A)
        so that machine drift cancels in the ratio; the Result is recorded and returned."""
        if workload.kind == "task":
            return self._run_task(workload)
        if self.baseline is None:
            return self._run_against_measured_baseline(workload)
        baseline: MountedVolume = self.baseline
        side = self.volume  # which volume a storage error came from
        try:
            with self.between_measurements() as waited_to_prepare:
                volume_file = self.engine.prepare(self.volume.data_dir, self.plan.size)
                side = baseline
                baseline_file = self.engine.prepare(baseline.data_dir, self.plan.size)
                direct, o_direct = io_mode_policy(self.engine, volume_file, baseline_file)
            if workload.kind == "files":
                direct = False  # small unaligned files: buffered by nature
            volume_observe, baseline_observe = self.volume.observe(), baseline.observe()
            result = Result(
                backend=self.volume.spec,
                workload=workload,
                description={**self.volume.description, "o_direct": o_direct},
                warmup_rounds=self.plan.warmup,
            )

            def on(mounted: MountedVolume, path: Path, observe: Observe) -> Side:
                def measure(runtime: float) -> Measurement:
                    nonlocal side
                    side = mounted
                    measured = self.engine.run(
                        workload, path, runtime=runtime, direct=direct, observe=observe
                    )
                    self._tell(workload, mounted.spec, measured)
                    return measured

                return measure

            with self.lock() as waited:
                result.lock_wait = waited_to_prepare + waited
                self._wait_for_quiet(result, self.volume, baseline)
                self._measure_rounds(
                    result,
                    PairedRounds(
                        on(baseline, baseline_file, baseline_observe),
                        on(self.volume, volume_file, volume_observe),
                        meter=self._round_meter(workload, self.volume, baseline),
                    ),
                    self.volume_plan,
                    with_confirmation=not self.spread_over_volumes,  # fresh volumes: after them all
                )
            if self.spread_over_volumes:
                self._on_fresh_volumes(result, lambda mounted, path: on(mounted, path, mounted.observe()))
        except OSError as exc:
            problem = _STORAGE_ERRORS.get(exc.errno or 0)
            if problem is None:
                raise
            raise RunError(
                f"{workload.name} on {side.spec} ({side.data_dir}): {problem}: {exc.strerror}; "
                "free space under --encperf-dir or pass a smaller --encperf-size"
            ) from exc
        if self.verify and not workload.is_read:
            with self.between_measurements():
                verify_after_remount(self.volume, [volume_file.name])
        self.record(result)
        return result

    def _quiet_again(self, pair: PairedRounds) -> QuietAgain | None:
        """--encperf-quiet-wait: busy blocks measured again once it is quiet (rounds.QuietAgain)."""
        meter = self.meter
        if meter is None or self.quiet_wait <= 0 or meter.threshold is None:
            return None
        daemons = pair.meter.daemons

        def wait(limit: float) -> float:
            return load.wait_for_quiet(meter, limit, daemons=daemons, waiting=self.on_quiet_wait)

        return QuietAgain(wait, self.quiet_wait)

    def _on_fresh_volumes(self, result: Result, on: Callable[[MountedVolume, Path], Side]) -> None:
        """--encperf-volumes N: after this pair's rounds (block 0), each of N-1 fresh volume pairs
        (blocks 1..N-1) measures its share with the same round settings as this pair: its own
        warm-up, the counted rounds in whole A B B A blocks, busy blocks again after quiet, steady
        state and precision on its own rounds (each pair with its own steady budget). Every round
        records its block (Measurement.volume_block), so a saved run carries its own between-volume
        spread (verdict.volume_groups). Confirmation comes last, once, on all blocks' rounds (what
        the gate judges), its blocks on the last pair. The rounds of a block are of one pair."""
        assert self.fresh_pair is not None
        plan = self.volume_plan

        def tagged(rounds: list[Measurement], block: int) -> list[Measurement]:
            return [dataclasses.replace(m, volume_block=block) for m in rounds]

        def of_block(side: Side, block: int) -> Side:
            return lambda runtime: dataclasses.replace(side(runtime), volume_block=block)

        result.rounds[:], result.baseline_rounds[:] = (
            tagged(result.rounds, 0),
            tagged(result.baseline_rounds, 0),
        )
        reasons: list[str] = []
        for block in range(1, self.volumes):
            plain, volume = self.fresh_pair(block)  # made beside no measurement (Volumes.open)
            with self.between_measurements() as waited_to_prepare:
                volume_file = self.engine.prepare(volume.data_dir, plan.size)
                plain_file = self.engine.prepare(plain.data_dir, plan.size)
            measured = Result(backend=result.backend, workload=result.workload)
            with self.lock() as waited:
                pairs = PairedRounds(
                    of_block(on(plain, plain_file), block),
                    of_block(on(volume, volume_file), block),
                    meter=self._round_meter(result.workload, volume, plain),
                )
                self._wait_for_quiet(measured, volume, plain)
                self._measure_rounds(measured, pairs, plan, with_confirmation=False)
                result.rounds += measured.rounds
                result.baseline_rounds += measured.baseline_rounds
                result.quiet_wait += measured.quiet_wait
                result.busy_remeasured += measured.busy_remeasured
                reasons.append(measured.stop_reason)
                if block == self.volumes - 1:
                    result.stop_reason += fresh_volumes_reason(reasons)
                    if self.gate is not None and self.confirm_budget is not None:
                        result.stop_reason = confirm(
                            result, pairs, plan.runtime, self.gate, self.confirm_budget
                        )
            result.lock_wait += waited_to_prepare + waited

    def _measure_rounds(
        self,
        result: Result,
        pair: PairedRounds,
        plan: RoundPlan | None = None,
        *,
        with_confirmation: bool = True,
    ) -> None:
        """The paired rounds of ``result`` with this runner's round settings (block, files and
        task workloads alike); ``plan``: another plan than the run's (a volume pair's share);
        ``with_confirmation``: False leaves the confirmation rounds to the caller (fresh volumes)."""
        plan = plan or self.plan
        measure_rounds(
            result,
            pair,
            runtime=plan.runtime,
            rounds=plan.rounds,
            warmup=plan.warmup,
            warmup_runtime=plan.warmup_runtime,
            steady_cv=self.steady_cv,
            steady_budget=self.steady_budget,
            gate=self.gate if with_confirmation else None,
            budget=self.confirm_budget,
            precision=self.precision,
            quiet_again=self._quiet_again(pair),
        )

    def _run_task(self, workload: Workload) -> Result:
        """A real-work task (realwork.run_task) in paired rounds on the baseline and the volume,
        A B B A as every workload; each round runs the task once, whatever the round time."""
        baseline = self.baseline
        if baseline is None:
            raise RunError(f"{workload.name}: {TASK_NEEDS_PLAIN}")
        if self.reference_tree is None:
            raise RunError(f"{workload.name}: no reference tree was given to the runner")
        with self.between_measurements() as waited_to_prepare:
            reference_tree = self.reference_tree()  # generated on first use, not timed
        result = Result(
            backend=self.volume.spec,
            workload=workload,
            description={
                **self.volume.description,
                "reference_tree": {
                    "size": reference_tree.size,
                    "seed": reference_tree.seed,
                    "bytes": reference_tree.tree_bytes,
                    "files": reference_tree.tree_files,
                    "source_bytes": reference_tree.source_bytes,
                    "source_files": reference_tree.source_files,
                },
            },
            warmup_rounds=self.plan.warmup,
        )
        side = self.volume

        def on(mounted: MountedVolume) -> Side:
            observe = mounted.observe()

            def measure(runtime: float) -> Measurement:
                nonlocal side
                side = mounted
                measured = self.task(workload, mounted.data_dir, reference_tree, observe)
                self._tell(workload, mounted.spec, measured)
                return measured

            return measure

        try:
            with self.lock() as waited:
                result.lock_wait = waited_to_prepare + waited
                self._wait_for_quiet(result, self.volume, baseline)
                pairs = PairedRounds(
                    on(baseline), on(self.volume), meter=self._round_meter(workload, self.volume, baseline)
                )
                self._measure_rounds(result, pairs)
        except (HostError, OSError) as exc:
            raise RunError(
                f"{workload.name} on {side.spec} ({side.data_dir}): {exc}; a task needs room for about "
                "twice --encperf-tree-size on the volume"
            ) from exc
        self.record(result)
        return result

    def time(
        self,
        fn: usertiming.UserFunction,
        *,
        name: str | None = None,
        setup: usertiming.UserFunction | None = None,
        sync: bool = True,
        drop_caches: bool = True,
    ) -> Result:
        """Time ``fn(path)`` on the volume and on plain in paired rounds, as a real-work task
        (usertiming.py: a fresh directory of the side each round, ``setup(path)`` untimed, the page
        cache dropped, ``sync -f`` inside the time); the Result (seconds, lower is better) is
        recorded under ``name`` (default: the test's name) and returned."""
        baseline = self.baseline
        if baseline is None:
            usertiming.skip(usertiming.NEEDS_PLAIN)
        workload = usertiming.user_workload(usertiming.timed_name(name, self.test_name))
        result = Result(
            backend=self.volume.spec,
            workload=workload,
            description=dict(self.volume.description),
            warmup_rounds=self.plan.warmup,
        )

        def on(mounted: MountedVolume, side: str) -> Side:
            observe = mounted.observe()
            rounds = usertiming.SideRounds(
                workload.name, self.volume.spec, side, mounted.data_dir, self.plan.warmup
            )

            def measure(runtime: float) -> Measurement:
                rounds.count += 1
                try:
                    measured = usertiming.time_round(
                        fn, mounted.data_dir, setup=setup, sync=sync, drop_caches=drop_caches, observe=observe
                    )
                except Exception as exc:
                    raise rounds.failed(exc) from exc
                self._tell(workload, mounted.spec, measured)
                return measured

            return measure

        try:
            with self.lock() as waited:
                result.lock_wait = waited
                self._wait_for_quiet(result, self.volume, baseline)
                pairs = PairedRounds(
                    on(baseline, "plain"),
                    on(self.volume, "encrypted"),
                    meter=self._round_meter(workload, self.volume, baseline),
                )
                self._measure_rounds(result, pairs)
        finally:
            with self.between_measurements():
                usertiming.cleanup(self.volume.data_dir, baseline.data_dir)
        self.record(result)
        return result

    def _run_against_measured_baseline(self, workload: Workload) -> Result:
        """One block device holds one volume at a time: the baseline rounds were measured on it
        before the volume was created (and more are added after it is removed). No A B B A order
        and no confirmation rounds here: the baseline cannot be measured beside the volume."""
        with self.between_measurements() as waited_to_prepare:
            alone = SideAlone.prepare(self.engine, self.volume, self.plan.size, self.meter)
        result = Result(
            backend=self.volume.spec,
            workload=workload,
            description={**self.volume.description, "o_direct": alone.o_direct, "baseline": "before/after"},
            warmup_rounds=self.plan.warmup,
        )
        result.baseline_rounds.extend(self.measured_baseline.get(workload.name, []))
        with self.lock() as waited:
            result.lock_wait = waited_to_prepare + waited
            self._wait_for_quiet(result, self.volume)
            told = functools.partial(self._tell, workload, self.volume.spec)
            result.rounds.extend(alone.rounds(workload, self.plan, self.plan.warmup_runtime, told))
        result.stop_reason = f"{self.plan.rounds} rounds (partition: no confirmation rounds)"
        self.record(result)
        return result


def fresh_volumes_reason(reasons: list[str]) -> str:
    """What the stop reason adds for the fresh volume pairs, given each pair's own: one phrase
    when they agree ("; 4 rounds on each of 2 more fresh volume pairs"), else each pair's."""
    if len(set(reasons)) == 1:
        return f"; {reasons[0]} on each of {len(reasons)} more fresh volume pairs"
    return "".join(f"; fresh volume pair {block}: {reason}" for block, reason in enumerate(reasons, 1))


def rounds_per_volume(rounds: int, volumes: int) -> int:
    """The counted rounds on each of ``volumes`` volume pairs: ``rounds`` shared out, rounded up
    to whole A B B A blocks (10 over 5 volumes: 2 each; over 3: 4 each)."""
    return whole_blocks(-(-rounds // volumes))


def measure_all(
    engine: Engine,
    mounted: MountedVolume,
    workloads: list[Workload],
    plan: RoundPlan,
    meter: load.LoadMeter | None = None,
) -> dict[str, list[Measurement]]:
    """Every workload's rounds on one volume (the partition target's baseline); with a ``meter``
    each round records what others took of the machine meanwhile. Its warm-up rounds last a
    whole round's runtime."""
    alone = SideAlone.prepare(engine, mounted, plan.size, meter)
    return {
        workload.name: alone.rounds(workload, plan, plan.runtime)
        for workload in workloads
        if workload.kind != "task"  # needs a volume beside plain: not on a partition
    }


def direct_io(o_direct: str, workload: Workload) -> bool:
    """Whether ``workload``'s rounds bypass the page cache: when the file takes O_DIRECT, for
    every workload but the small-files one (which measures the file system's own path)."""
    return o_direct == "direct" and workload.kind != "files"


@dataclass(frozen=True)
class SideAlone:
    """One volume measured alone: a partition holds one volume at a time, so its plain baseline
    and each volume are measured on their own (before/after, no A B B A). The test file is
    prepared once; each workload's rounds run on it (``rounds``)."""

    engine: Engine
    path: Path  # the test file
    o_direct: str  # what O_DIRECT gives on it (Engine.io_mode)
    observe: Observe
    meter: RoundMeter

    @classmethod
    def prepare(
        cls, engine: Engine, mounted: MountedVolume, size: int, meter: load.LoadMeter | None
    ) -> SideAlone:
        """The test file of ``size`` bytes on ``mounted``; with a ``meter`` each round records
        what others took of the machine (the volume's daemons are this run's)."""
        path = engine.prepare(mounted.data_dir, size)
        return cls(
            engine, path, engine.io_mode(path), mounted.observe(), RoundMeter(meter, mounted.daemon_pids)
        )

    def rounds(
        self,
        workload: Workload,
        plan: RoundPlan,
        warmup_runtime: float,
        told: Callable[[Measurement], None] = lambda measurement: None,
    ) -> list[Measurement]:
        """``plan.warmup`` rounds of ``warmup_runtime`` (discarded), then ``plan.rounds`` metered
        rounds of ``workload``. ``told`` hears of every round, warm-up too."""
        direct = direct_io(self.o_direct, workload)

        def once(seconds: float) -> Measurement:
            return self.engine.run(workload, self.path, runtime=seconds, direct=direct, observe=self.observe)

        for _ in range(plan.warmup):
            told(once(warmup_runtime))
        measured: list[Measurement] = []
        for _ in range(plan.rounds):
            measurement = self.meter.measure(functools.partial(once, plan.runtime))
            told(measurement)
            measured.append(measurement)
        return measured
