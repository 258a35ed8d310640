"""EncperfSession: the run-wide state of one pytest session, kept in ``config.stash``.

It owns the settings, the engine, the run directory and every volume opened in it, collects
the Results, and prints the summary. Modelled on pytest's junitxml: one plugin object,
registered with the plugin manager in ``pytest_configure``, unregistered at the end.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType

import pytest

from . import host
from .backends import BASELINE, BackendSpec, make_backend
from .ceiling import CipherCeiling, measure_ceiling
from .engines import Engine, select_engine
from .model import Result
from .report import detail_table, summary_table
from .runner import MountedVolume, Runner, Unavailable, close_volume, open_volume, slug
from .settings import Settings
from .targets import Target, container_size
from .workloads import PROFILES, Workload, profile_workloads


class EncperfSession:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        try:
            self.engine: Engine = select_engine(settings.engine)
        except ValueError as exc:
            raise pytest.UsageError(f"--encperf-engine: {exc}") from None
        size = container_size(settings.size) if settings.target == "container" else settings.size
        self.target = Target(settings.target, settings.dir, size)
        self.results: list[Result] = []
        self.skipped: dict[str, str] = {}  # backend spec -> reason
        self.errors: dict[str, str] = {}  # backend spec -> why its volume failed
        self._open: list[MountedVolume] = []
        self._run_dir: Path | None = None
        self._counter = itertools.count(1)
        self._previous_sigterm: signal.Handlers | None = None
        self._ceiling: CipherCeiling | None = None

    # ------------------------------------------------------------- selection

    @property
    def backend_specs(self) -> list[str]:
        return [str(spec) for spec in self.settings.backends]

    @property
    def workloads(self) -> list[Workload]:
        return profile_workloads(self.settings.profile)

    # ------------------------------------------------------------- volumes

    @property
    def run_dir(self) -> Path:
        if self._run_dir is None:
            self._run_dir = Path(tempfile.mkdtemp(prefix=f"encperf-{os.getpid()}-", dir=self.settings.dir))
        return self._run_dir

    def open(self, spec_text: str) -> MountedVolume:
        """Create and mount a volume; pytest.skip with the reason when the backend can't run here."""
        if spec_text in self.skipped:
            pytest.skip(f"{spec_text}: {self.skipped[spec_text]}")
        if spec_text in self.errors:
            pytest.fail(self.errors[spec_text], pytrace=False)
        backend = make_backend(BackendSpec.parse(spec_text))
        workdir = self.run_dir / f"{next(self._counter):02d}-{slug(spec_text)}"
        try:
            mounted = open_volume(backend, self.target, workdir)
        except Unavailable as exc:
            self.skipped[spec_text] = str(exc)
            pytest.skip(f"{spec_text}: {exc}")
        except Exception as exc:
            self.errors[spec_text] = f"{exc}"
            raise
        self._open.append(mounted)
        return mounted

    def close(self, mounted: MountedVolume) -> None:
        if mounted in self._open:
            self._open.remove(mounted)
        close_volume(mounted)

    def close_all(self) -> None:
        """Safety net at session end: release whatever a fixture did not (newest first)."""
        errors = []
        while self._open:
            mounted = self._open.pop()
            try:
                close_volume(mounted)
            except Exception as exc:
                errors.append(str(exc))
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=not errors)
            self._run_dir = None
        if errors:
            raise host.HostError("; ".join(errors))

    def runner(self, volume: MountedVolume, baseline: MountedVolume) -> Runner:
        return Runner(
            engine=self.engine,
            volume=volume,
            baseline=baseline,
            size=self.settings.size,
            runtime=self.settings.runtime,
            rounds=self.settings.rounds,
            record=self.results.append,
            warmup=self.settings.warmup,
            steady_cv=self.settings.steady_cv,
            steady_budget=self.settings.steady_budget,
        )

    @property
    def ceiling(self) -> CipherCeiling:
        """The CPU's AES-256-XTS speed and the kernel's driver, measured once per session."""
        if self._ceiling is None:
            self._ceiling = measure_ceiling()
        return self._ceiling

    # ------------------------------------------------------------- hooks

    def start(self) -> None:
        # SIGTERM (CI cancelling a job, `kill`) tears down like Ctrl-C instead of leaving
        # mounts and loop devices behind.
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)

    def stop(self) -> None:
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.close_all()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        try:
            self._write_summary(terminalreporter)
        except Exception as exc:  # a summary must never replace pytest's own result line
            terminalreporter.write_line(f"encperf: could not print the summary: {exc}", red=True)

    def _write_summary(self, tr: pytest.TerminalReporter) -> None:
        shown = self.backend_specs
        if not self.results and not self.skipped:
            return
        s = self.settings
        tr.write_sep("-", "encperf: encryption overhead vs plain")
        tr.write_line(
            f"target: {s.target} in {s.dir} | engine: {self.engine.name} {self.engine.version()} | "
            f"file: {s.size // (1024 * 1024)} MiB | {s.rounds} rounds x {s.runtime:g} s, "
            f"alternating with the baseline"
        )
        skipped = {k: v for k, v in self.skipped.items() if k != BASELINE}
        steady = (
            f"; then steady state until CV < {s.steady_cv:.0%} (at most {s.steady_budget:g} s)"
            if s.steady_cv
            else ""
        )
        tr.write_line(f"each workload: {s.warmup} warm-up round(s) per side discarded{steady}")
        shown_names: set[str] = set()
        for name in s.profile:
            profile = PROFILES[name]
            table = summary_table(
                self.results,
                skipped,
                shown,
                list(profile.workloads),
                value=profile.value,
                mean_column=profile.mean_column,
            )
            if table:
                tr.write_line(f"{profile.title} [{name}]: {profile.value} of the rounds, change vs plain")
                tr.write_line(table)
            shown_names.update(w.name for w in profile.workloads)
        others = [r.workload for r in self.results if r.workload.name not in shown_names]
        if others:
            table = summary_table(self.results, skipped, shown, others)
            if table:
                tr.write_line("other workloads: median of the rounds, change vs plain")
                tr.write_line(table)
        if BASELINE in self.skipped:
            tr.write_line(f"baseline unavailable: {BASELINE}: {self.skipped[BASELINE]}", yellow=True)
        if not self.results:
            return
        ceiling = self.ceiling
        details = detail_table(self.results, ceiling.mb_per_s)
        if details:
            tr.write_line("")
            tr.write_line(details)
            tr.write_line(
                "vs plain: median of per-round ratios (positive = faster than plain); never computed "
                "between different I/O modes. CV: coefficient of variation of the rounds. "
                "CPU s/GiB: system-wide busy CPU seconds per GiB moved; daemon: the backend's own "
                "processes. eff.: throughput / min(plain, cipher ceiling). device/logical: bytes "
                "the volume's block device read (r) or wrote (w) per byte the workload moved; "
                "CACHED = a read round mostly served by the page cache."
            )
            tr.write_line(f"cipher ceiling: {ceiling.describe()}")


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
