"""The plan printed before a run, and the live status line of a long workload (no pytest).

The plan is one line: backends x workloads x rounds and an estimate of the time the rounds take.
The status line is for a person at a terminal: the session gives ProgressLine a function that
writes raw text to the terminal (pytest's terminal writer), only when the output is a terminal
and not ``-q``; in CI logs nothing of it is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .load import Load
from .model import Measurement
from .roundplan import WARMUP_SECONDS
from .rounds import whole_blocks
from .workloads import Workload

LIVE_AFTER = 10.0  # seconds: a workload estimated to take at least this long gets a status line


def workload_seconds(rounds: int, runtime: float, warmup: int, sides: int = 2) -> float:
    """What the rounds of one workload take: counted and warm-up rounds on each side."""
    return sides * (rounds * runtime + warmup * min(runtime, WARMUP_SECONDS))


def process_text(pid: int, proc: Path = Path("/proc"), width: int = 60) -> str:
    """``pid 1234 (pytest benchmarks/ -n 2)``: a pid and its command line, shortened."""
    try:
        command = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        command = ""
    command = command.strip()
    if len(command) > width:
        command = command[: width - 3] + "..."
    return f"pid {pid} ({command})" if command else f"pid {pid}"


def lock_wait_text(holders: Sequence[int], waited: float, proc: Path = Path("/proc")) -> str:
    """What the status line says while another measurement holds the machine (its lock)."""
    whom = ", ".join(process_text(pid, proc) for pid in holders) or "another encperf process"
    return f"encperf: waiting for another measurement to finish: {whom}, {format_duration(waited)} so far"


def quiet_wait_text(load: Load, threshold: float, limit: float) -> str:
    """What the status line says while --encperf-quiet-wait waits for others' CPU to fall."""
    return (
        f"encperf: waiting for quiet: processes outside this run use {load.share:.2f} of a core "
        f"(busy above {threshold:g}), waiting up to {format_duration(limit)}"
    )


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``1 h 05 min``."""
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


@dataclass(frozen=True)
class Plan:
    """What a session is about to measure: one (backend, workload) per collected benchmark test."""

    tests: Sequence[tuple[str, str]]
    rounds: int
    runtime: float
    warmup: int
    one_volume_at_a_time: bool = False  # partition target: plain measured before and after each volume
    workloads_per_volume: int = 0  # partition target: workloads of each plain measurement (those collected)
    steady_budget: float | None = None  # --encperf-steady-cv/-precision: most extra seconds per workload
    confirm_budget: float = 0.0  # most extra seconds of confirmation rounds in the run
    quiet_wait: float = 0.0  # --encperf-quiet-wait: most seconds waited for quiet per workload
    lock_holders: str = ""  # who holds the measurement lock as the run starts (process_text)

    @property
    def counted_rounds(self) -> int:
        """The rounds each workload gets: whole A B B A blocks beside plain (3 asked: 4)."""
        return self.rounds if self.one_volume_at_a_time else whole_blocks(self.rounds)

    def seconds(self) -> float:
        """The rounds alone (warm-up included); making volumes and test files is extra."""
        sides = 1 if self.one_volume_at_a_time else 2
        total = len(self.tests) * workload_seconds(self.counted_rounds, self.runtime, self.warmup, sides)
        if self.one_volume_at_a_time:  # plain, each collected workload, before and after each volume
            volumes = len({backend for backend, _ in self.tests})
            total += volumes * 2 * self.workloads_per_volume * (self.rounds + self.warmup) * self.runtime
        return total

    def extra_seconds(self) -> float:
        """At most this much more: steady-state and confirmation rounds, and the quiet wait."""
        return self._more_rounds_seconds() + self._quiet_seconds()

    def _more_rounds_seconds(self) -> float:
        steady = len(self.tests) * self.steady_budget if self.steady_budget else 0.0
        return steady + self.confirm_budget

    def _quiet_seconds(self) -> float:
        """--encperf-quiet-wait: its waits, and the busy blocks measured again (at most as many as
        were counted, rounds.QuietAgain)."""
        if not self.quiet_wait or self.one_volume_at_a_time:  # a partition's rounds are not paired
            return len(self.tests) * self.quiet_wait
        return len(self.tests) * (self.quiet_wait + self.counted_rounds * 2 * self.runtime)

    def line(self) -> str:
        backends = list(dict.fromkeys(backend for backend, _ in self.tests))
        workloads = list(dict.fromkeys(workload for _, workload in self.tests))
        warmup = f" + {self.warmup} warm-up" if self.warmup else ""
        against = (
            "plain before and after each volume" if self.one_volume_at_a_time else "alternating with plain"
        )
        extra = self.extra_seconds()
        kinds = ["steady-state and confirmation rounds"] if self._more_rounds_seconds() else []
        again = "" if self.one_volume_at_a_time else " and measuring busy rounds again"
        kinds += [f"waiting for quiet{again}"] if self.quiet_wait else []
        more = f", up to {format_duration(extra)} more for {' and '.join(kinds)}" if extra else ""
        rounds = f"{self.counted_rounds} rounds"
        if self.counted_rounds != self.rounds:
            rounds += f" ({self.rounds} rounded up to whole A B B A blocks)"
        return (
            f"encperf plan: {len(backends)} backend{'s' * (len(backends) != 1)} ({', '.join(backends)}) x "
            f"{len(workloads)} workload{'s' * (len(workloads) != 1)} x {rounds}{warmup} of "
            f"{self.runtime:g} s, {against}: {len(self.tests)} tests, about "
            f"{format_duration(self.seconds())} of rounds{more} (making volumes and test files comes on top)"
        )

    def lines(self) -> list[str]:
        """The plan line, and who holds the machine now if another measurement does."""
        if not self.lock_holders:
            return [self.line()]
        waits = (
            f"encperf plan: another measurement holds the machine now ({self.lock_holders}): this run waits"
        )
        return [self.line(), f"{waits} for it before its first round"]


class ProgressLine:
    """A status line under pytest's output while a long workload runs: its round, the last
    round's MB/s and the time its remaining planned rounds take. ``write`` puts raw text on the
    terminal; the line is written below the current one and, when cleared, the cursor goes back
    to where pytest left it (``column``), so pytest's own output continues undisturbed."""

    def __init__(
        self,
        write: Callable[[str], None],
        column: Callable[[], int],
        width: Callable[[], int],
        *,
        rounds: int,
        runtime: float,
        warmup: int,
        sides: int = 2,
    ) -> None:
        self.write, self.column, self.width = write, column, width
        self.rounds, self.runtime, self.warmup, self.sides = rounds, runtime, warmup, sides
        self.key: tuple[str, str] | None = None
        self.done = 0
        self.shown = False
        self.back_to = 0

    @property
    def planned(self) -> int:
        return self.sides * (self.rounds + self.warmup)

    @property
    def live(self) -> bool:
        return workload_seconds(self.rounds, self.runtime, self.warmup, self.sides) >= LIVE_AFTER

    def round_done(self, workload: Workload, volume: str, side: str, measurement: Measurement) -> None:
        key = (volume, workload.name)
        if key != self.key:
            self.clear()
            self.key, self.done = key, 0
        self.done += 1
        if self.live:
            self.show(self.text(workload, volume, side, measurement))

    def text(self, workload: Workload, volume: str, side: str, measurement: Measurement) -> str:
        kind = "warm-up" if self.done <= self.sides * self.warmup else side
        if self.done <= self.planned:
            warmups_left = max(0, self.sides * self.warmup - self.done)
            counted_left = self.planned - self.done - warmups_left
            left = warmups_left * min(self.runtime, WARMUP_SECONDS) + counted_left * self.runtime
            where = f"round {self.done} of {self.planned} ({kind})"
            rest = f"about {format_duration(left)} left" if self.done < self.planned else "done"
        else:
            where = f"round {self.done} ({kind}, extra: steady state or confirmation)"
            rest = "until decided"
        if workload.kind == "task":  # a task runs once per round: its time, not the round time
            rest = "done" if rest == "done" else "until done"
            return f"encperf: {volume} {workload.name}: {where}, {measurement.seconds:.2f} s, {rest}"
        return f"encperf: {volume} {workload.name}: {where}, {measurement.mb_per_s:.1f} MB/s, {rest}"

    def waiting(self, text: str) -> None:
        """A wait before the rounds (the machine's lock, quiet): shown whether or not the
        workload is long; the next round's line replaces it."""
        self.show(text)

    def show(self, text: str) -> None:
        text = text[: max(20, self.width() - 1)]  # a wrapped line could not be rewritten
        if not self.shown:
            self.back_to = self.column()
            self.write("\n")
            self.shown = True
        self.write(f"\r{text}\x1b[K")

    def clear(self) -> None:
        """Erase the status line and put the cursor back at the end of pytest's line."""
        if self.shown:
            forward = f"\x1b[{self.back_to}C" if self.back_to else ""
            self.write(f"\r\x1b[K\x1b[A{forward}")
            self.shown = False
