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

from . import host, journal
from .backends import BASELINE, BackendSpec, make_backend
from .engines import Engine, select_engine
from .model import Result
from .report import detail_table, summary_table
from .runner import MountedVolume, Runner, Unavailable, close_volume, open_volume, slug
from .settings import Settings
from .targets import Target, container_size
from .workloads import MiB, Workload, profile_workloads

# Fixtures that create volumes: a session collecting none of them needs no room on the target.
VOLUME_FIXTURES = ("encperf_volume", "encperf_baseline", "encperf")


class EncperfSession:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.engine: Engine = select_engine(settings.engine)
        size = container_size(settings.size) if settings.target == "container" else settings.size
        self.target = Target(settings.target, settings.dir, size)
        self.results: list[Result] = []
        self.skipped: dict[str, str] = {}  # backend spec -> reason
        self.errors: dict[str, str] = {}  # backend spec -> why its volume failed
        self._open: list[MountedVolume] = []
        self._run_dir: Path | None = None
        self._counter = itertools.count(1)
        self._previous_handlers: dict[int, object] = {}
        self.journal = journal.Journal(settings.dir)
        self.cleaned: list[str] = []  # what the start-up cleanup released of dead runs
        self.teardown_errors: list[str] = []  # what could not be released at the end
        self._run_cleanup: host.Cleanup | None = None

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
            self._run_cleanup = host.Cleanup(self.journal)
            self._run_cleanup.path(self._run_dir)  # journaled: a killed run's directory is found
        return self._run_dir

    def check_room(self) -> None:
        """Refuse (before anything is created) a target without room for the baseline and one
        backend volume at a time."""
        need = 2 * self.target.size
        try:
            free = shutil.disk_usage(self.settings.dir).free
        except OSError as exc:
            raise pytest.UsageError(f"--encperf-dir {self.settings.dir}: {exc.strerror}") from None
        if free < need:
            raise pytest.UsageError(
                f"--encperf-dir {self.settings.dir}: {free // MiB} MiB free, "
                f"this run needs {need // MiB} MiB "
                f"(the baseline and one backend volume of {self.target.size // MiB} MiB each); "
                "free some space, pass --encperf-dir on a larger disk or a smaller --encperf-size"
            )

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
        with host.signals_deferred():
            if mounted in self._open:
                self._open.remove(mounted)
            close_volume(mounted)

    def close_all(self) -> None:
        """Safety net at session end: release whatever a fixture did not (newest first)."""
        errors = []
        with host.signals_deferred():
            while self._open:
                mounted = self._open.pop()
                try:
                    close_volume(mounted)
                except Exception as exc:
                    errors.append(str(exc))
            # Whatever a backend registered and then lost (an exception half-way through create)
            # is still in the journal: release it before the run directory goes.
            errors += self.journal.release_leftovers()
            if self._run_cleanup is not None:
                try:
                    self._run_cleanup.release()  # refuses to delete through a mount left behind
                except Exception as exc:
                    errors.append(str(exc))
                self._run_cleanup = None
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
            verify=self.settings.verify,
        )

    # ------------------------------------------------------------- hooks

    def start(self) -> None:
        # SIGTERM (CI cancelling a job, `kill`) and SIGHUP (the terminal or ssh session went
        # away) tear down like Ctrl-C instead of leaving mounts and loop devices behind. A
        # signal someone chose to ignore (nohup) stays ignored.
        if threading.current_thread() is threading.main_thread():
            for signum in host.TEARDOWN_SIGNALS[1:]:
                if signal.getsignal(signum) in (signal.SIG_DFL, None):
                    self._previous_handlers[signum] = signal.signal(signum, _raise_keyboard_interrupt)
        # Leftovers of runs killed before they could tear down (SIGKILL, power loss, OOM).
        try:
            for run in journal.release_dead_runs(self.settings.dir):
                self.cleaned += run.lines()
        except OSError as exc:
            self.cleaned.append(f"could not check for leftovers of dead runs: {exc}")
        # Every Cleanup created from now on (volumes of every backend) is journaled.
        host.install_observer(self.journal)

    def stop(self) -> None:
        host.remove_observer(self.journal)
        self.journal.close()
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous_handlers.clear()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [f"encperf: released leftover of a dead run: {line}" for line in self.cleaned]

    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        if self.config.option.collectonly:
            return
        uses_volumes = any(
            name in VOLUME_FIXTURES for item in items for name in getattr(item, "fixturenames", ())
        )
        if uses_volumes:
            self.check_room()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # A teardown failure is reported in the summary and fails the run; raising here would
        # replace pytest's report with an internal-error traceback.
        try:
            self.close_all()
        except Exception as exc:
            self.teardown_errors.append(str(exc))
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for error in self.teardown_errors:
            terminalreporter.write_line(f"encperf: teardown failed: {error}", red=True)
        if self.journal.write_error:  # the run itself was torn down; only the safety net was off
            terminalreporter.write_line(f"encperf: warning: {self.journal.write_error}", yellow=True)
        if self.teardown_errors:
            terminalreporter.write_line(
                f"encperf: run `encperf cleanup --dir {self.settings.dir}` once this process has exited",
                red=True,
            )
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
        table = summary_table(self.results, skipped, shown, self.workloads)
        if table:
            tr.write_line(table)
        if BASELINE in self.skipped:
            tr.write_line(f"baseline unavailable: {BASELINE}: {self.skipped[BASELINE]}", yellow=True)
        details = detail_table(self.results)
        if details:
            tr.write_line("")
            tr.write_line(details)
            tr.write_line(
                "vs plain: median of per-round ratios (positive = faster than plain). "
                "CPU s/GiB: system-wide busy CPU seconds per GiB moved."
            )


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
