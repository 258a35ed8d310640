"""The measuring loop of one workload (no volumes, no pytest): paired rounds of plain and the
backend in whole A B B A blocks, what each round took of the machine, and when to stop: the
counted rounds, steady state (--encperf-steady-cv), precision (--encperf-precision) and the gate's
confirmation rounds."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from . import load
from .model import Measurement, Result

# At most this many pairs are added to one workload to confirm a check, whatever the budget.
MAX_CONFIRM_PAIRS = 12
# Pairs of one A B B A block: plain first, then the backend first. Counted, steady-state,
# precision and confirmation rounds all come in whole blocks.
BLOCK_PAIRS = 2
# A round that moved nothing (Measurement.moved_nothing) is run again, up to this many runs in all.
# Such a round says nothing of the storage's speed: a store that is merely slow, even one stalled for
# the whole window, completes the I/Os started in it late, and both engines wait for them and count
# them (a gocryptfs daemon stopped for 2.5 s of a 1.5 s fio round: 895 writes counted). Seen once on a
# busy machine (fio 3.33, RND4K Q32T1 randwrite on gocryptfs), not reproduced.
EMPTY_ROUND_ATTEMPTS = 3
# --encperf-precision stops no earlier than this many pairs: two blocks, an interval on 3 df (on
# fewer, one lucky pair of close ratios would look precise)
PRECISION_MIN_PAIRS = 4


class Confirmer(Protocol):
    """What the runner asks after a workload's rounds (gate.Gate implements it)."""

    def pending(self, result: Result, extra_possible: int) -> tuple[bool, str]:
        """(True, why) while more paired rounds would help decide a check of ``result``;
        (False, "") when all are decided; (False, why) when ``extra_possible`` more pairs could
        not decide it either."""
        ...


@dataclass
class ConfirmBudget:
    """Seconds of extra paired rounds the gate may spend in this run, shared by every workload."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    spent: float = 0.0

    @property
    def left(self) -> float:
        return self.seconds - self.spent


Side = Callable[[float], Measurement]  # measures one round of the given runtime on one side


@dataclass
class QuietAgain:
    """--encperf-quiet-wait after the counted rounds: a block with a busy round is dropped and
    measured again once others' CPU has fallen, while the workload's quiet-wait time lasts.
    ``wait(limit)`` waits up to ``limit`` seconds for quiet and returns the seconds waited (the
    limit itself when it was not quiet in time: load.wait_for_quiet)."""

    wait: Callable[[float], float]
    limit: float  # seconds of waiting for quiet one workload may take, its first wait included


@dataclass
class RoundMeter:
    """Times a round (``started``, ``ended``) and, with a ``meter``, records what others took of
    the machine meanwhile (load.py): the round's others_cpu_s, steal_s, cpu_pressure_s, busy.
    ``daemons``: the backends' daemons of both sides, which are this run's, not others.
    ``timed_function``: the rounds are a user's timed function's (Workload.is_timed_function),
    which move no bytes of their own and are never measured again as empty."""

    meter: load.LoadMeter | None = None
    daemons: tuple[int, ...] = ()
    timed_function: bool = False

    def measure(
        self, round_: Callable[[], Measurement], clock: Callable[[], float] = time.time
    ) -> Measurement:
        """One round; a round that moved nothing is run again (EMPTY_ROUND_ATTEMPTS in all): the
        round kept says so (caveat ``measured-again``, its ``attempts``), or when every attempt
        moved nothing, is the last of them with caveat ``moved-nothing``."""
        attempt, measured = 1, self._measure_once(round_, clock)
        while self._empty(measured) and attempt < EMPTY_ROUND_ATTEMPTS:
            attempt, measured = attempt + 1, self._measure_once(round_, clock)
        caveat = "moved-nothing" if self._empty(measured) else "measured-again" if attempt > 1 else ""
        if not caveat:
            return measured
        return dataclasses.replace(measured, attempts=attempt, caveats=(*measured.caveats, caveat))

    def _empty(self, measured: Measurement) -> bool:
        return measured.moved_nothing and not self.timed_function

    def _measure_once(self, round_: Callable[[], Measurement], clock: Callable[[], float]) -> Measurement:
        before = self.meter.sample() if self.meter is not None else None
        started = clock()
        measured = round_()
        ended = clock()
        if self.meter is None or before is None:
            return dataclasses.replace(measured, started=started, ended=ended)
        taken = self.meter.between(before, self.meter.sample(), self.daemons)
        return dataclasses.replace(
            measured,
            started=started,
            ended=ended,
            others_cpu_s=taken.others_cpu_s,
            steal_s=taken.steal_s,
            cpu_pressure_s=taken.cpu_pressure_s,
            busy=taken.busy(self.meter.threshold),
        )


class PairedRounds:
    """Rounds of a workload on the baseline and the volume, in A B B A order: pair 1 runs plain
    then the volume, pair 2 the volume then plain, and so on. A linear drift of the machine then
    favours each side equally often and cancels over the pairs instead of biasing every ratio."""

    def __init__(
        self,
        baseline: Side,
        volume: Side,
        clock: Callable[[], float] = time.time,
        meter: RoundMeter | None = None,
    ) -> None:
        self.baseline, self.volume, self.clock = baseline, volume, clock
        self.meter = meter or RoundMeter()

    def measure(self, side: Side, runtime: float) -> Measurement:
        return self.meter.measure(lambda: side(runtime), self.clock)

    def pair(self, index: int, runtime: float) -> tuple[Measurement, Measurement]:
        """(baseline, volume) of the pair at ``index``, each with its ``pair_position``; even
        pairs start with the baseline."""
        if index % 2 == 0:
            base = self.measure(self.baseline, runtime)
            vol = self.measure(self.volume, runtime)
            return dataclasses.replace(base, pair_position=1), dataclasses.replace(vol, pair_position=2)
        vol = self.measure(self.volume, runtime)
        base = self.measure(self.baseline, runtime)
        return dataclasses.replace(base, pair_position=2), dataclasses.replace(vol, pair_position=1)

    def add(self, result: Result, runtime: float) -> None:
        base, vol = self.pair(len(result.rounds), runtime)
        result.baseline_rounds.append(base)
        result.rounds.append(vol)

    def add_block(self, result: Result, runtime: float) -> int:
        """Pairs up to the end of the next whole A B B A block; returns how many were added."""
        added = 0
        while not added or len(result.rounds) % BLOCK_PAIRS:
            self.add(result, runtime)
            added += 1
        return added

    def measure_block_again(self, result: Result, first: int, runtime: float) -> None:
        """Drop the whole A B B A block whose first pair is ``first`` and measure a new one: it
        comes after the others (the rounds stay in the order they ran) and keeps A B B A order."""
        if first % BLOCK_PAIRS or not 0 <= first <= len(result.rounds) - BLOCK_PAIRS:
            raise ValueError(f"pair {first} does not start a whole block of {len(result.rounds)} pairs")
        del result.rounds[first : first + BLOCK_PAIRS]
        del result.baseline_rounds[first : first + BLOCK_PAIRS]
        self.add_block(result, runtime)


def whole_blocks(pairs: int) -> int:
    """``pairs`` rounded up to whole A B B A blocks (3 -> 4): only over whole blocks does the side
    that runs second in a pair (a drifting machine, a warm cache) favour plain and the backend
    equally often."""
    return -(-pairs // BLOCK_PAIRS) * BLOCK_PAIRS


def measure_rounds(
    result: Result,
    pairs: PairedRounds,
    *,
    runtime: float,
    rounds: int,
    warmup: int = 0,
    warmup_runtime: float | None = None,
    steady_cv: float | None = None,
    steady_budget: float = 60.0,
    gate: Confirmer | None = None,
    budget: ConfirmBudget | None = None,
    precision: float | None = None,
    steady_clock: Callable[[], float] = time.monotonic,
    quiet_again: QuietAgain | None = None,
) -> Result:
    """The measuring loop: warm-up pairs (discarded), the counted pairs rounded up to whole
    A B B A blocks, then more blocks while the steady state or the precision asked is not reached
    (within ``steady_budget``), then confirmation: while the gate cannot decide a check of this
    workload, more blocks, as long as the run's confirmation budget lasts."""
    for index in range(warmup):
        pairs.pair(index, runtime if warmup_runtime is None else warmup_runtime)
    counted = whole_blocks(rounds)
    for _ in range(counted):
        pairs.add(result, runtime)
    rounded = f" ({rounds} rounded up to whole A B B A blocks)" if counted != rounds else ""
    result.stop_reason = f"{counted} rounds{rounded}"
    if quiet_again is not None:
        result.stop_reason += _measure_busy_blocks_again(result, pairs, runtime, quiet_again, counted)
    if steady_cv is not None or precision is not None:
        result.stop_reason = _steady_state(
            result, pairs, runtime, steady_cv, precision, steady_budget, steady_clock
        )
    if gate is not None and budget is not None:
        result.stop_reason = confirm(result, pairs, runtime, gate, budget)
    return result


def _busy_block(result: Result) -> int | None:
    """Index of the first pair of the first whole A B B A block with a busy round, or None."""
    whole = len(result.rounds) - len(result.rounds) % BLOCK_PAIRS
    for first in range(0, whole, BLOCK_PAIRS):
        block = slice(first, first + BLOCK_PAIRS)
        if any(m.busy for m in (*result.rounds[block], *result.baseline_rounds[block])):
            return first
    return None


def _measure_busy_blocks_again(
    result: Result, pairs: PairedRounds, runtime: float, quiet: QuietAgain, counted: int
) -> str:
    """Drop each block with a busy round and measure a new one after waiting for quiet, at most as
    many blocks as were counted (a machine that stays busy cannot double a workload's time twice),
    while the quiet-wait time lasts; the blocks stay whole, so A B B A order still holds. Returns
    what it did for the stop reason ("" when nothing was busy)."""
    again = 0
    stopped = ""
    while (first := _busy_block(result)) is not None:
        if again * BLOCK_PAIRS >= counted:
            stopped = "as many as were counted"
            break
        left = quiet.limit - result.quiet_wait
        waited = quiet.wait(left) if left > 0 else 0.0
        result.quiet_wait += waited
        if left <= 0 or waited >= left:
            stopped = f"not quiet within {quiet.limit:g} s"
            break
        pairs.measure_block_again(result, first, runtime)
        again += 1
    result.busy_remeasured += again * BLOCK_PAIRS
    if not again:
        return f", busy pairs kept ({stopped})" if stopped else ""
    done = f", {again * BLOCK_PAIRS} busy pairs measured again after quiet"
    return f"{done} ({stopped})" if stopped else done


def is_precise(result: Result, precision: float) -> bool:
    """--encperf-precision: the 95% interval of the overhead is within ±``precision`` points,
    over at least PRECISION_MIN_PAIRS pairs."""
    interval = result.overhead_interval
    return interval is not None and interval.pairs >= PRECISION_MIN_PAIRS and interval.half_width <= precision


def _steady_state(
    result: Result,
    pairs: PairedRounds,
    runtime: float,
    target: float | None,
    precision: float | None,
    budget: float,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Add blocks until the coefficient of variation of both sides is below ``target`` and the
    overhead's interval is within ±``precision`` points (each when asked), or ``budget`` seconds
    were spent."""
    deadline = clock() + budget

    def steady() -> bool:
        cvs = (result.cv(), result.cv(baseline=True))
        return target is None or all(cv is not None and cv < target for cv in cvs)

    def precise() -> bool:
        return precision is None or is_precise(result, precision)

    while not (steady() and precise()):
        if clock() >= deadline:
            missed = [] if steady() else ["CV target"]
            missed += [] if precise() else [f"precision ±{precision:g}{_reached(result)}"]
            return f"{len(result.rounds)} rounds, {' and '.join(missed)} not reached in {budget:g} s"
        pairs.add_block(result, runtime)
    reached = [f"CV < {target:.0%}"] if target is not None else []
    reached += [f"within ±{precision:g}{_reached(result)}"] if precision is not None else []
    return f"{len(result.rounds)} rounds, {' and '.join(reached)}"


def _reached(result: Result) -> str:
    """`` (±3.1)``: the half-width the overhead's interval has now ("" when it has none)."""
    interval = result.overhead_interval
    return f" (±{interval.half_width:.1f})" if interval is not None else ""


def confirm(
    result: Result, pairs: PairedRounds, runtime: float, gate: Confirmer, budget: ConfirmBudget
) -> str:
    """More pairs (whole A B B A blocks, measured by ``pairs``) while a check of this workload is
    undecided; says how the rounds were decided (``result.stop_reason`` and what was added)."""
    measured = result.stop_reason
    while True:
        added = result.confirm_rounds
        more, why = gate.pending(result, MAX_CONFIRM_PAIRS - added)
        confirmed = f" + {added} to confirm" if added else ""
        if not more and why:
            return f"{measured}{confirmed}, not decidable by more rounds ({why})"
        if not more:
            return f"{measured}{confirmed}, decided" if added else measured
        if added >= MAX_CONFIRM_PAIRS:
            return f"{measured}{confirmed}, the most for one workload ({why})"
        if budget.left <= 0:
            return f"{measured}{confirmed}, confirmation budget spent ({why})"
        started = budget.clock()
        result.confirm_rounds += pairs.add_block(result, runtime)
        budget.spent += budget.clock() - started
