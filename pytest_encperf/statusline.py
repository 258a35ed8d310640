"""The plan and the live status line, wired to pytest's terminal (progress.py has no pytest).

``StatusLine`` is built from the config, the settings and the load meter: the plan after
"collected N items", and on a terminal (not ``-q``, not an xdist worker) the status line the
runner's rounds and the measurement lock's waits are told on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import pytest

from . import host
from .load import Load, LoadMeter
from .progress import Plan, ProgressLine, lock_wait_text, process_text, quiet_wait_text
from .rounds import whole_blocks
from .settings import Settings


class StatusLine:
    def __init__(self, config: pytest.Config, settings: Settings, meter: LoadMeter, is_worker: bool) -> None:
        self.config = config
        self.settings = settings
        self.meter = meter
        self.is_worker = is_worker
        self._progress: ProgressLine | None = None  # None: not asked yet, or no terminal to show it on
        self._asked = False

    def plan(self, items: list[pytest.Item], baseline_workloads: int) -> list[str]:
        """The plan, in one line after pytest's "collected N items"; ``baseline_workloads``: how
        many workloads the partition target's baseline measures (workloads.baseline_workloads)."""
        tests = []
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "encperf_volume" in params and "encperf_workload" in params:
                tests.append((str(params["encperf_volume"]), str(params["encperf_workload"])))
        if not tests or self.is_worker:
            return []
        s = self.settings
        rounds, beside_plain = s.round_plan, not s.one_volume_at_a_time
        plan = Plan(
            tests, rounds=rounds.rounds, runtime=rounds.runtime, warmup=rounds.warmup,
            one_volume_at_a_time=s.one_volume_at_a_time, workloads_per_volume=baseline_workloads,
            steady_budget=s.steady_budget if s.steady_cv or (s.precision and beside_plain) else None,
            confirm_budget=s.confirm_budget if (s.fail or s.max_overhead) and beside_plain else 0.0,
            quiet_wait=s.quiet_wait,
            lock_holders=", ".join(process_text(pid) for pid in host.measurement_lock_holders()),
        )  # fmt: skip
        return plan.lines()

    def round_callback(self) -> Any:
        """The live status line's round callback, on a terminal (not -q, not an xdist worker)."""
        if not self._asked:
            self._asked = True
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            quiet = self.config.getoption("verbose") < 0 or os.environ.get("TERM") == "dumb"
            if reporter is not None and bool(reporter.isatty) and not quiet and not self.is_worker:
                self._progress = self._make_progress()
        return self._progress.round_done if self._progress else None

    def lock_waiting(self) -> Callable[[list[int], float], None] | None:
        """What host.measurement_lock tells while another measurement holds the machine: the
        status line names the holder (on a terminal only, as the round line)."""
        self.round_callback()
        progress = self._progress
        if not progress:
            return None
        return lambda holders, waited: progress.waiting(lock_wait_text(holders, waited))

    def quiet_waiting(self) -> Callable[[Load], None] | None:
        """What --encperf-quiet-wait tells while others keep the machine busy (status line)."""
        self.round_callback()
        progress, s, threshold = self._progress, self.settings, self.meter.threshold
        if not progress or threshold is None:  # no quiet wait without a threshold (check_quiet_wait)
            return None

        def waiting(load: Load) -> None:
            progress.waiting(quiet_wait_text(load, threshold, s.quiet_wait))

        return waiting

    def clear(self) -> None:
        """Before pytest writes a test's outcome."""
        if self._progress:
            self._progress.clear()

    def _make_progress(self) -> ProgressLine:
        writer = self.config.get_terminal_writer()
        capture = self.config.pluginmanager.get_plugin("capturemanager")

        def write(text: str) -> None:  # the test's output is captured while it runs: not ours
            with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
                writer.write_raw(text, flush=True)

        s, plan = self.settings, self.settings.round_plan
        return ProgressLine(
            write, lambda: writer.width_of_current_line, lambda: writer.fullwidth,
            rounds=plan.rounds if s.one_volume_at_a_time else whole_blocks(plan.rounds), runtime=plan.runtime,
            warmup=plan.warmup, sides=1 if s.one_volume_at_a_time else 2,
        )  # fmt: skip
