"""EncperfSession: the run-wide state of one pytest session, kept in ``config.stash``.

It only wires: its pytest hooks hand over to the objects that do the work, each built from plain
values (the settings, the target, the engine) and none knowing another or the session:
``Volumes`` (volumes.py), the run's ``RunRecord`` (record.py), the xdist ``Topology`` and
``WorkerRuns`` with their ``merge`` (workers.py), the ``Outcome`` (outcome.py: reference run, gate,
saved runs and reports) and the terminal summary (report/terminal.py). Modelled on pytest's junitxml:
one plugin object, registered with the plugin manager in ``pytest_configure``, unregistered at
the end.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from . import backends, deadruns, host, journal, machine, resources
from .backends import BackendSpec
from .engines import Engine, select_engine
from .gate import EXIT_REGRESSION
from .inplace import InplaceTiming
from .kdf import KdfTiming
from .load import LoadMeter
from .model import MachineRun, Result
from .mountedvolume import MountedVolume
from .outcome import Outcome, did_not_finish
from .record import RunRecord
from .report import terminal
from .runner import Runner
from .settings import Settings
from .statusline import StatusLine
from .stopsignals import StopSignals, stopped_by
from .sweep import FamilyRanking
from .volumes import NoRoom, Volumes
from .workers import Topology, WorkerRuns, merge
from .workloads import baseline_workloads

# Fixtures that create volumes: a session collecting none of them needs no room on the target.
VOLUME_FIXTURES = ("encperf_volume", "encperf_baseline", "encperf", "encperf_kdf", "encperf_inplace")


class EncperfSession:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        try:
            self.engine: Engine = select_engine(settings.engine)
        except ValueError as exc:
            raise pytest.UsageError(f"--encperf-engine: {exc}") from None
        self.topology = Topology.of(getattr(config, "workerinput", None))
        self.is_worker = self.topology.is_worker  # an xdist worker: the controller decides
        self.outcome = Outcome(settings)
        problems = [] if self.is_worker else self.outcome.unwritable()  # the controller writes them
        if problems:  # before any volume: finding out at the end would waste the run
            raise pytest.UsageError(
                "; ".join(problems)
                + " (checked before anything is measured: give a path this user can write)"
            )
        self.meter = LoadMeter(threshold=settings.busy_threshold)  # what others take in each round
        self.status = StatusLine(config, settings, self.meter, self.is_worker)
        self.journal = journal.Journal(settings.dir)
        self.volumes = Volumes(settings, self.engine, self.journal, self.meter, self.status.lock_waiting)
        self.record = RunRecord()
        self.workers = WorkerRuns()  # under xdist, on the controller: what workers sent
        self.dead_runs = deadruns.StartCleanup()  # what the start released of dead runs' leftovers
        self.teardown_errors: list[str] = []  # what could not be released at the end
        self._machine: tuple[dict[str, Any], str] | None = None
        self.stop_signals = StopSignals()
        # did the run finish (incomplete_reason): the signal or Ctrl-C that stopped it, the tests
        # planned (node ids, this process's or every xdist worker's) and those that ran
        self.interrupted = ""
        self.planned: set[str] = set()
        self.ran: set[str] = set()

    # ------------------------------------------------------------- what the fixtures ask

    def close(self, mounted: MountedVolume) -> None:
        try:
            self.volumes.close_fresh(mounted.spec)  # --encperf-volumes: its fresh volumes first
        finally:
            self.record.add_baseline_rounds(mounted.spec, self.volumes.close(mounted))

    def measure_kdf(self, spec: BackendSpec) -> KdfTiming:
        timing = self.volumes.measure_kdf(spec)
        self.record.kdf[str(spec)] = timing.to_dict()
        return timing

    def measure_inplace(self, spec: BackendSpec) -> InplaceTiming:
        timing = self.volumes.measure_inplace(spec)
        self.record.inplace[str(spec)] = timing.to_dict()
        return timing

    def runner(
        self, volume: MountedVolume, baseline: MountedVolume | None, item: pytest.Item | None = None
    ) -> Runner:
        def record(result: Result) -> None:
            properties = self.record.add(result, volume.backend.spec, self.machine_info_and_id()[1])
            if item is not None:  # junitxml writes these; xdist carries them to the controller
                item.user_properties.extend(properties)

        s, volumes = self.settings, self.volumes
        return Runner(
            measured_baseline=volumes.measured_baseline.get(volume.spec, {}), engine=self.engine,
            volume=volume, baseline=baseline, plan=s.round_plan,
            record=record, verify=s.verify, steady_cv=s.steady_cv,
            steady_budget=s.steady_budget, precision=s.precision,
            gate=self.outcome.gate(self.machine_info_and_id, self.topology.machine_count()),
            confirm_budget=self.outcome.confirm_budget, on_round=self.status.round_callback(),
            reference_tree=volumes.reference_tree, meter=self.meter, quiet_wait=s.quiet_wait,
            on_quiet_wait=self.status.quiet_waiting(),
            lock=lambda: volumes.measuring(volume, baseline),
            between_measurements=lambda: volumes.beside_measuring(volume, baseline),
            volumes=s.volumes, fresh_pair=lambda block: volumes.fresh_pair(volume.backend.spec, block),
        )  # fmt: skip

    def machine_info_and_id(self) -> tuple[dict[str, Any], str]:
        """This machine's info (after the update hook) and id, read once per session."""
        if self._machine is None:
            info = machine.machine_info(self.settings.dir)
            self.config.hook.pytest_encperf_update_machine_info(config=self.config, machine_info=info)
            self._machine = (info, machine.machine_id(info))
        return self._machine

    # ------------------------------------------------------------- hooks

    def start(self) -> None:
        # Ctrl-C, SIGTERM and SIGHUP tear down (SIGINT too when the shell started us with it ignored)
        self.stop_signals.install()
        # the backends' modules register the resource kinds they add before dead runs are released
        loading_problems = backends.load_all()
        self.dead_runs = deadruns.release_at_start(self.settings.dir, loading_problems)
        # Every Cleanup created from now on (volumes of every backend) is journaled.
        resources.install_observer(self.journal)

    def stop(self) -> None:
        resources.remove_observer(self.journal)
        self.journal.close()
        self.stop_signals.restore()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [f"encperf: {line}" for line in self.dead_runs.lines()]

    def pytest_report_collectionfinish(self, config: pytest.Config, items: list[pytest.Item]) -> list[str]:
        return self.status.plan(items, len(baseline_workloads(items, self.settings.workloads)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.status.clear()  # before pytest writes the test's outcome
        if report.when == "call" or not report.passed:  # a test that ran, or never could
            self.ran.add(report.nodeid)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.planned.update(item.nodeid for item in session.items)
        # after -k and -m: the partition's baseline measures what the selected tests measure
        self.volumes.baseline_workloads = baseline_workloads(session.items, self.settings.workloads)
        refusals = self.outcome.expect(session.items, checks_rule_names=not self.is_worker)
        if refusals:  # a rule naming what no collected test can measure
            raise pytest.UsageError(refusals[0])

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.interrupted = stopped_by(excinfo.value)
        self.volumes.interrupted = True

    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        if self.config.option.collectonly:
            return
        if any(name in VOLUME_FIXTURES for item in items for name in getattr(item, "fixturenames", ())):
            try:
                self.volumes.check_room(self.topology.workers_here())
                refusal = journal.directory_refusal(self.settings.dir)
                if refusal:
                    raise NoRoom(refusal)
            except NoRoom as exc:
                if not self.is_worker:
                    raise pytest.UsageError(str(exc)) from None
                # a worker's usage error would be lost: its tests fail with it
                self.volumes.refused = str(exc)
            s = self.settings
            if self.topology.worker_id == "gw0":  # once per run
                for message in self.topology.unreliable(s.one_volume_at_a_time, s.parallel_devices):
                    warnings.warn(EncperfWarning(message), stacklevel=1)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # A teardown failure is reported in the summary and fails the run; raising here would
        # replace pytest's report with an internal-error traceback.
        s, measure = self.settings, not self.interrupted
        try:
            try:
                # not after Ctrl-C, -x or --maxfail: the user asked the run to stop
                if s.ladder and self.record.results and not (session.shouldstop or session.shouldfail):
                    with self.volumes.between_measurements():  # in the run directory, before close_all
                        base = self.volumes.run_dir()
                    errors = self.record.measure_ladder(self.engine, s.round_plan, base, measure)
                    self.teardown_errors += errors
            except Exception as exc:  # the ladder's own failures are its rungs' reasons: not this
                self.teardown_errors.append(f"--encperf-ladder: {type(exc).__name__}: {exc}")
            finally:
                self.volumes.close_all()
        except Exception as exc:
            self.teardown_errors.append(str(exc))
        finally:
            if self.teardown_errors and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            if self.record.results and not self.interrupted:  # a measurement (CPU only): never beside
                with host.measurement_lock(None):  # another one on this machine
                    self.record.measure_cipher_ceilings()
            if self.is_worker:
                output = self.config.workeroutput  # type: ignore[attr-defined]  # xdist's, on a worker
                output["encperf_machine"] = self.own_machine_run().to_dict()
            else:
                self.finish(session)

    def finish(self, session: pytest.Session) -> None:
        """Save, compare, write reports, decide; set the exit status only if the run is otherwise OK
        (like pytest's --max-warnings), so failing tests keep their own status."""
        failed_workers = self.missing_workers() or any(run.problems for run in self.workers.runs)
        if failed_workers and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a worker could not tear down or report
        if not self.settings.outputs_asked:
            return
        incomplete = self.incomplete_reason(session)
        failed = self.outcome.finish(
            self.merged_machine_runs, self.machine_info_and_id, self.sweep_rankings, incomplete
        )
        if failed and session.exitstatus == pytest.ExitCode.OK:
            usage = self.outcome.unknown_rule_names  # a rule that named nothing measured
            session.exitstatus = pytest.ExitCode.USAGE_ERROR if usage else EXIT_REGRESSION

    def incomplete_reason(self, session: pytest.Session) -> str:
        """Why this run did not finish ("" when it did): see outcome.did_not_finish."""
        interrupted = self.interrupted
        if not interrupted and session.exitstatus == pytest.ExitCode.INTERRUPTED:
            interrupted = "by pytest"
        stopped = session.shouldfail or session.shouldstop
        ran = len(self.ran & self.planned) if self.planned else len(self.ran)
        lost = len(self.missing_workers())
        return did_not_finish(interrupted, str(stopped) if stopped else "", len(self.planned), ran, lost)

    def missing_workers(self) -> list[str]:
        return self.workers.missing(self.settings.outputs_asked)

    def own_machine_run(self) -> MachineRun:
        """What this process measured on this machine, and what its report needs from here."""
        s, volumes = self.settings, self.volumes
        return self.record.as_machine_run(
            self.machine_info_and_id(), s.saved_text(), f"{self.engine.name} {self.engine.version()}",
            volumes.skipped, volumes.lifecycle, problems=self.teardown_errors,
            notes=self.dead_runs.lines(),
            ladder=s.ladder, measure=not self.interrupted,
        )  # fmt: skip

    def merged_machine_runs(self) -> list[MachineRun]:
        """One MachineRun per machine: what the xdist workers sent (workers.merge), or this process's own."""
        runs = self.workers.runs
        controller = self.machine_info_and_id() if runs else None
        names = [w.name for w in self.settings.workloads]
        return merge(runs or [self.own_machine_run()], controller, self.settings.backend_specs, names)

    def sweep_rankings(self, machine_run: MachineRun) -> list[FamilyRanking]:
        return self.record.sweep_rankings(
            machine_run, self.settings.backend_specs, self.settings.sweep_margin
        )

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr, volumes = terminalreporter, self.volumes
        notes = terminal.run_notes(volumes.interrupt_notes, self.teardown_errors, self.journal.write_error,
                                   self.settings.dir)  # fmt: skip
        terminal.write(tr, notes)
        try:
            terminal.write(tr, (("line", "red", f"encperf: {lost}") for lost in self.missing_workers()))
            terminal.write(tr, terminal.summary(
                self.merged_machine_runs(), self.settings, self.sweep_rankings,
                from_workers=bool(self.workers.runs), interrupted=bool(self.interrupted),
                dist=self.config.getoption("dist", "no"),
            ))  # fmt: skip
            terminal.write(tr, terminal.verdicts(self.outcome.verdicts.values()))
        except Exception as exc:  # a summary must never replace pytest's own result line
            tr.write_line(f"encperf: could not print the summary: {exc}", red=True)


class EncperfWarning(pytest.PytestWarning):
    """A configuration that cannot measure reliably (shown only when benchmarks are collected)."""
