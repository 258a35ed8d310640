"""EncperfSession: the run-wide state of one pytest session, kept in ``config.stash``.

It owns the settings, the engine, the run directory and every volume opened in it, collects
the Results, and prints the summary. Modelled on pytest's junitxml: one plugin object,
registered with the plugin manager in ``pytest_configure``, unregistered at the end.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import re
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from . import (
    backends,
    gatescope,
    host,
    inplace,
    journal,
    kdf,
    ladder,
    layer,
    machine,
    outputs,
    realwork,
    resources,
    secretdirs,
    storage,
    sweep,
)
from . import html as html_report
from .backends import BASELINE, BackendSpec, make_backend, placement_problems
from .ceiling import Ceiling, counterpart, kernel_xts_driver, measure_ciphers
from .compare import EXIT_REGRESSION, Gate, Verdict, expected_family_size, judge_machines
from .engines import Engine, select_engine
from .inplace import InplaceTiming
from .kdf import KdfTiming
from .load import Load, LoadMeter
from .model import MachineRun, Measurement, Result, RunData
from .progress import Plan, ProgressLine, lock_wait_text, process_text, quiet_wait_text
from .report import (
    INTERVAL_MEANING,
    MACHINES_NOTE,
    cpu_line,
    detail_table,
    inplace_table,
    kdf_table,
    ladder_lines,
    lifecycle_table,
    machines_table,
    markdown_report,
    summary_table,
    sweep_report,
    task_steps_table,
    verdict_report,
)
from .rounds import ConfirmBudget, whole_blocks
from .runner import (
    MountedVolume,
    Runner,
    Unavailable,
    close_volume,
    measure_all,
    open_volume,
    slug,
)
from .settings import Settings
from .targets import DeviceClaim, Target, container_size
from .workloads import PROFILES, MiB, Workload, profile_workloads

# Fixtures that create volumes: a session collecting none of them needs no room on the target.
VOLUME_FIXTURES = ("encperf_volume", "encperf_baseline", "encperf", "encperf_kdf", "encperf_inplace")
# After Ctrl-C / SIGTERM / SIGHUP the teardown waits at most this long in all for other runs'
# measurement locks, then releases anyway: the user asked to stop, now.
INTERRUPTED_LOCK_WAIT = 3.0


class EncperfSession:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        try:
            self.engine: Engine = select_engine(settings.engine)
        except ValueError as exc:
            raise pytest.UsageError(f"--encperf-engine: {exc}") from None
        self.is_worker = hasattr(config, "workerinput")  # an xdist worker: the controller decides
        if not self.is_worker:
            self.check_outputs()  # before any volume: finding out at the end would waste the run
        room = settings.size + self.task_room  # the test file, and what a real-work task puts there
        size = container_size(room) if settings.target == "container" else settings.size
        self.target = Target(
            settings.target, settings.dir, size, device=settings.device, force=settings.force
        )
        self.results: list[Result] = []
        self.skipped: dict[str, str] = {}  # backend spec -> reason
        self.lifecycle: dict[str, dict[str, list[float]]] = {}  # backend spec -> step -> s per cycle
        self.kdf: dict[str, dict[str, Any]] = {}  # backend spec -> the kdf profile's row (KdfTiming)
        self.inplace: dict[str, dict[str, Any]] = {}  # backend spec -> in-place figure (InplaceTiming)
        self._rankings: dict[str, list[sweep.FamilyRanking]] = {}  # machine id -> sweep rankings
        self.errors: dict[str, str] = {}  # backend spec -> why its volume failed
        self._open: list[MountedVolume] = []
        self._run_dir: Path | None = None
        self._counter = itertools.count(1)
        self._previous_sigterm: signal.Handlers | None = None
        self.verdict: Verdict | None = None  # the verdict of a run on one machine
        self.verdicts: dict[str, Verdict] = {}  # every machine's (one family: compare.judge_machines)
        self._worker_runs: list[MachineRun] = []  # under xdist, on the controller: what workers sent
        self._worker_order: list[int] = []  # their workers' numbers (gw0 -> 0)
        self._no_room = ""  # on an xdist worker: why the target has no room (check_room)
        self.lost_workers: list[str] = []  # on the controller: workers whose results never came
        self._previous_handlers: dict[int, object] = {}
        self.journal = journal.Journal(settings.dir)
        self.cleaned: list[str] = []  # what the start-up cleanup released of dead runs
        self.cleanup_problems: list[str] = []  # what it refused or failed to release, and why
        self.teardown_errors: list[str] = []  # what could not be released at the end
        self._run_cleanup: resources.Cleanup | None = None
        # partition target: baseline rounds measured before each encrypted volume, by spec
        self._measured_baseline: dict[str, dict[str, list[Measurement]]] = {}
        self._ceilings: dict[str, Ceiling] = {}
        self._machine: tuple[dict[str, Any], str] | None = None
        self._reference: Reference | None = None
        self._gate: Gate | None = None
        self._confirm_budget: ConfirmBudget | None = None
        # partition target: the device held exclusively between volumes, or why it cannot be
        self._claim: DeviceClaim | None = None
        self._device_refused = ""
        self._device_lost = ""
        self._progress: ProgressLine | bool | None = None  # False: no terminal to show it on
        # what others take of the machine in each round (load.py)
        self.meter = LoadMeter(threshold=settings.busy_threshold)
        self._reference_data: realwork.Reference | None = None  # the real-work tasks' tree
        self._reference_error = ""  # why it could not be made (said again to every later task)
        # --encperf-ladder: the layer rungs (RAM-backed, kept apart from the results) and the
        # ciphers' counterparts (ladder.py)
        self._layers: ladder.LayerRungs = {}
        self._counterparts: dict[str, ladder.Rung] = {}
        # did the run finish (incomplete_reason): the signal or Ctrl-C that stopped it, the tests
        # planned (node ids, this process's or every xdist worker's) and those that ran
        self.interrupted = ""
        self.planned: set[str] = set()
        self.ran: set[str] = set()
        self.interrupt_notes: list[str] = []  # what the teardown did not wait for after the interrupt
        self._interrupted_wait_left = INTERRUPTED_LOCK_WAIT  # seconds (teardown_lock)

    # ------------------------------------------------------------- selection

    def check_outputs(self) -> None:
        """Refuse (a usage error) a saved-run directory or report file that cannot be written."""
        s = self.settings
        asked: list[tuple[str, Path, str]] = []
        if s.save or s.autosave:
            asked.append(("--encperf-storage", s.storage, "directory"))
        reports = (("--encperf-json", s.json), ("--encperf-markdown", s.markdown), ("--encperf-html", s.html))
        asked += [(option, path, "file") for option, path in reports if path is not None]
        problems = outputs.output_problems(asked)
        if problems:
            raise pytest.UsageError(
                "; ".join(problems)
                + " (checked before anything is measured: give a path this user can write)"
            )

    @property
    def backend_specs(self) -> list[str]:
        return [str(spec) for spec in self.settings.backends]

    @property
    def workloads(self) -> list[Workload]:
        settings = self.settings
        return profile_workloads(settings.profile, settings.size, settings.tree_size, settings.tree_seed)

    @property
    def task_room(self) -> int:
        """Room a real-work task needs on a volume (0 without one among the workloads)."""
        if not any(w.kind == "task" for w in self.workloads):
            return 0
        return realwork.volume_room(self.settings.tree_size)

    def reference_data(self) -> realwork.Reference:
        """The real-work tasks' reference tree and source archive, made on first use in this run's
        private directory (0700, removed with it at the end)."""
        if self._reference_error:
            raise host.HostError(self._reference_error)
        if self._reference_data is None:
            try:
                directory = self.run_dir() / "realwork"
                directory.mkdir(mode=0o700)
                self._reference_data = realwork.prepare_reference(
                    directory, self.settings.tree_size, self.settings.tree_seed
                )
            except (host.HostError, OSError) as exc:
                self._reference_error = f"the real-work reference tree could not be made: {exc}"
                raise host.HostError(self._reference_error) from exc
        return self._reference_data

    # ------------------------------------------------------------- volumes

    def run_dir(self) -> Path:
        """This run's private directory, made on first use (a method, not a property: pytest
        inspects plugin attributes, and must not create directories by doing so)."""
        if self._run_dir is None:
            # under the directory's real path, where the journal holds a dead run's paths to be
            # journaled before it is made: a killed run's directory is always found
            self._run_cleanup = resources.Cleanup(self.journal)
            self._run_dir = secretdirs.private_directory(self._run_cleanup, self.journal.directory)
        return self._run_dir

    def check_room(self) -> None:
        """Refuse (before anything is created) a target without room for the baseline and one
        backend volume at a time."""
        # each worker has its own baseline, and its own reference data when tasks run (the tree,
        # the source archive and a copy out of a volume: about a volume's task room)
        need = (2 * self.target.size + self.task_room) * self.workers_here()
        try:
            free = shutil.disk_usage(self.settings.dir).free
        except OSError as exc:
            raise pytest.UsageError(f"--encperf-dir {self.settings.dir}: {exc.strerror}") from None
        if free < need:
            raise pytest.UsageError(
                f"--encperf-dir {self.settings.dir}: {free // MiB} MiB free, "
                f"this run needs {need // MiB} MiB "
                f"(the baseline and one backend volume of {self.target.size // MiB} MiB each"
                + (f", for each of {self.workers_here()} xdist workers" if self.workers_here() > 1 else "")
                + "); "
                "free some space, pass --encperf-dir on a larger disk or a smaller --encperf-size"
            )

    @property
    def sequential(self) -> bool:
        """One volume at a time: a partition cannot hold the baseline and an encrypted volume."""
        return self.target.kind == "partition"

    def measure_baseline(self) -> dict[str, list[Measurement]]:
        """Partition target: plain ext4 on the partition, every workload's rounds, then removed."""
        mounted = self.open(BASELINE)
        try:
            s = self.settings
            with host.measurement_lock(self.lock_disks(mounted), waiting=self.lock_waiting()):
                return measure_all(
                    self.engine, mounted, self.workloads, s.size, s.runtime, s.rounds, s.warmup, self.meter
                )
        finally:
            self.close(mounted)

    def hold_device(self) -> str:
        """Partition target: hold the device exclusively (O_EXCL) from before the first write
        (see targets.DeviceClaim). Returns why it cannot be held (every backend is then
        skipped); fails the test when something took it while a volume of ours had it."""
        if self._device_lost:
            pytest.fail(self._device_lost, pytrace=False)
        if self._claim is None and not self._device_refused:
            assert self.target.device is not None
            claim = DeviceClaim(self.target.device)
            try:
                claim.acquire()
            except host.HostError as exc:
                self._device_refused = str(exc)
            else:
                self._claim = claim
        return self._device_refused

    def open(self, spec_text: str) -> MountedVolume:
        """Create and mount a volume; pytest.skip with the reason when the backend can't run here."""
        if self._no_room:
            pytest.fail(self._no_room, pytrace=False)
        if spec_text in self.skipped:
            pytest.skip(f"{spec_text}: {self.skipped[spec_text]}")
        if spec_text in self.errors:
            pytest.fail(self.errors[spec_text], pytrace=False)
        backend = make_backend(BackendSpec.parse(spec_text))
        if self.sequential:
            # checked before anything is measured or written for this backend
            problems = backend.problems(self.target) + placement_problems(backend, self.target)
            refused = "; ".join(problems) or self.hold_device()
            if refused:
                self.skipped[spec_text] = refused
                pytest.skip(f"{spec_text}: {refused}")
            if spec_text != BASELINE and spec_text not in self._measured_baseline:
                self._measured_baseline[spec_text] = self.measure_baseline()  # before
        workdir = self.run_dir() / f"{next(self._counter):02d}-{slug(spec_text)}"
        if self._claim is not None:
            self._claim.release()  # lent to the volume: its mount or mapping holds the device now
        try:
            with self.beside_no_measurement():
                mounted = open_volume(backend, self.target, workdir)
        except Unavailable as exc:
            self.skipped[spec_text] = str(exc)
            self._take_device_back()
            pytest.skip(f"{spec_text}: {exc}")
        except BaseException as exc:
            if isinstance(exc, Exception):
                self.errors[spec_text] = f"{exc}"
            self._take_device_back()
            raise
        self._open.append(mounted)
        return mounted

    def _take_device_back(self) -> None:
        if self._claim is None or self._claim.held:
            return
        try:
            self._claim.acquire()
        except host.HostError as exc:
            self._device_lost = (
                f"{self.target.device} was taken by something else between two volumes of this run; "
                f"stopping: {exc}"
            )
            raise host.HostError(self._device_lost) from None

    def close(self, mounted: MountedVolume) -> None:
        if self.interrupted and mounted not in self._open:
            return  # close_all released it (the fixture's teardown comes after it when interrupted)
        # the lock first, for as long as another worker's rounds take (a signal while waiting
        # leaves the volume to close_all); then the teardown itself, signals deferred
        with self.beside_no_measurement():
            with host.signals_deferred():
                if mounted in self._open:
                    self._open.remove(mounted)
                close_volume(mounted)
                # one set of cycles per backend: on the partition target plain's volume comes
                # back before and after each backend, its first life cycles stand for it
                first = mounted.spec not in self.lifecycle
                if first:
                    self.lifecycle[mounted.spec] = {step: [s] for step, s in mounted.lifecycle.items()}
            try:
                if first and not self.interrupted:  # interrupted: nothing more is measured
                    self.time_more_cycles(mounted.spec)
            finally:
                with host.signals_deferred():
                    self._take_device_back()
        if self.sequential and mounted.spec != BASELINE and not self.interrupted:
            after = self.measure_baseline()  # the partition again, now that the volume is gone
            for result in self.results:
                if result.backend == mounted.spec:
                    result.baseline_rounds.extend(after.get(result.workload.name, []))

    def time_more_cycles(self, spec_text: str) -> None:
        """--encperf-lifecycle-cycles N: after the benchmark volume, N-1 more life cycles of a
        fresh volume of the same backend on the same target (so each cycle times the same
        thing), each step's seconds added to the backend's samples. Interrupted, close_all
        releases the volume open at that moment."""
        backend = make_backend(BackendSpec.parse(spec_text))
        for _ in range(self.settings.lifecycle_cycles - 1):
            workdir = self.run_dir() / f"{next(self._counter):02d}-cycle-{slug(spec_text)}"
            cycle = open_volume(backend, self.target, workdir)
            self._open.append(cycle)
            with host.signals_deferred():
                self._open.remove(cycle)
                close_volume(cycle)
            for step, seconds in cycle.lifecycle.items():
                self.lifecycle[spec_text].setdefault(step, []).append(seconds)

    def _extra_volumes_allowed(self, spec_text: str, what: str) -> None:
        """pytest.fail/skip unless ``what`` may make volumes of its own for ``spec_text``: never on
        the partition target, whose device the benchmark volumes hold (DeviceClaim) and which the
        user named for them alone."""
        if self._no_room:
            pytest.fail(self._no_room, pytrace=False)
        if self.target.kind == "partition":
            pytest.skip(f"{spec_text}: {what} runs on the container target only, not on a partition")
        if spec_text in self.skipped:
            pytest.skip(f"{spec_text}: {self.skipped[spec_text]}")

    def measure_kdf(self, spec_text: str) -> KdfTiming:
        """The kdf profile's row of one backend (pytest_encperf.kdf); pytest.skip with the
        reason when the backend cannot run here."""
        self._extra_volumes_allowed(spec_text, "the kdf profile")
        workdir = self.run_dir() / f"{next(self._counter):02d}-kdf-{slug(spec_text)}"
        try:
            # not beside another worker's measurement: a key derivation is CPU and memory bound
            with self.beside_no_measurement():
                timing = kdf.measure(spec_text, self.target, workdir)
        except kdf.KdfUnavailable as exc:  # its own skip: the backend's benchmark may still run
            pytest.skip(f"{spec_text}: {exc}")
        self.kdf[spec_text] = timing.to_dict()
        return timing

    def measure_inplace(self, spec_text: str) -> InplaceTiming:
        """The in-place encryption figure of one backend (pytest_encperf.inplace) with a file of
        ``--encperf-size``; pytest.skip with the reason when the backend cannot run here."""
        self._extra_volumes_allowed(spec_text, "in-place encryption")
        workdir = self.run_dir() / f"{next(self._counter):02d}-inplace-{slug(spec_text)}"
        try:
            with self.beside_no_measurement():
                timing = inplace.measure(spec_text, self.target, workdir, self.settings.size)
        except inplace.InplaceUnavailable as exc:  # its own skip, as the kdf profile's
            pytest.skip(f"{spec_text}: {exc}")
        self.inplace[spec_text] = timing.to_dict()
        return timing

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
            if self._claim is not None:
                self._claim.release()
        if errors:
            raise host.HostError("; ".join(errors))

    def runner(
        self, volume: MountedVolume, baseline: MountedVolume | None, item: pytest.Item | None = None
    ) -> Runner:
        def record(result: Result) -> None:
            result.machine_id = self.machine()[1]
            self.results.append(result)
            if item is not None:  # junitxml writes these; xdist carries them to the controller
                item.user_properties.extend(user_properties(result))

        return Runner(
            measured_baseline=self._measured_baseline.get(volume.spec, {}),
            engine=self.engine,
            volume=volume,
            baseline=baseline,
            size=self.settings.size,
            runtime=self.settings.runtime,
            rounds=self.settings.rounds,
            record=record,
            verify=self.settings.verify,
            warmup=self.settings.warmup,
            steady_cv=self.settings.steady_cv,
            steady_budget=self.settings.steady_budget,
            precision=self.settings.precision,
            gate=self.gate(),
            confirm_budget=self._confirm_budget,
            on_round=self.round_callback(),
            reference=self.reference_data,
            meter=self.meter,
            quiet_wait=self.settings.quiet_wait,
            on_quiet_wait=self.quiet_waiting(),
            lock=lambda: host.measurement_lock(
                self.lock_disks(volume, baseline), waiting=self.lock_waiting()
            ),
            quiet=lambda: host.measurement_lock(
                self.lock_disks(volume, baseline), shared=True, waiting=self.lock_waiting()
            ),
        )

    def beside_no_measurement(self) -> AbstractContextManager[float]:
        """Making and removing volumes (formatting, key derivation, daemons): beside other such
        work, never beside a measurement on the same disks (the measurement lock, shared). After
        an interrupt, the wait is bounded (teardown_lock)."""
        if self.interrupted:
            return self.teardown_lock(self.lock_disks(), shared=True)
        return host.measurement_lock(self.lock_disks(), shared=True, waiting=self.lock_waiting())

    @contextlib.contextmanager
    def teardown_lock(self, disks: list[str] | None, *, shared: bool) -> Iterator[float]:
        """The measurement lock for a teardown after an interrupt: waited for at most
        INTERRUPTED_LOCK_WAIT s over the whole teardown, then the teardown goes on without it (the
        lock only keeps us from disturbing another run's measurement; interrupted, we accept
        disturbing it), said in ``interrupt_notes``. Yields the seconds waited."""
        hold = contextlib.ExitStack()
        started = time.monotonic()
        try:
            waited = hold.enter_context(
                host.measurement_lock(disks, shared=shared, timeout=self._interrupted_wait_left)
            )
            self._interrupted_wait_left -= waited
        except host.LockTimeout as exc:
            waited = time.monotonic() - started
            self._interrupted_wait_left = 0.0
            holders = " and ".join(f"pid {pid}'s" for pid in exc.holders) or "another run's"
            note = f"interrupted: did not wait for {holders} measurement lock"
            if note not in self.interrupt_notes:
                self.interrupt_notes.append(note)
        with hold:
            yield waited

    def lock_disks(self, *volumes: MountedVolume | None) -> list[str] | None:
        """What a measurement on ``volumes`` must have to itself (host.measurement_lock): the whole
        machine (None), or with --encperf-parallel-devices the physical disks (``MAJOR:MINOR``)
        under the volumes and under the target (--encperf-dir, or the partition); the whole
        machine when none can be found."""
        if not self.settings.parallel_devices:
            return None
        names = [name for mounted in volumes if mounted is not None for name in mounted.devices]
        if self.target.device is not None:
            names.append(Path(os.path.realpath(self.target.device)).name)
        else:
            names += [name for name in [host.block_device_of(self.settings.dir)] if name]
        disks = {host.device_number(disk) for name in names for disk in host.whole_disks(name)}
        return sorted(disk for disk in disks if disk) or None

    def _xdist(self) -> tuple[str, int]:
        """(the controller's --dist, the number of workers) on an xdist worker; ("no", 1) elsewhere."""
        given = getattr(self.config, "workerinput", {})
        return str(given.get("encperf_dist", "load")), int(given.get("workercount", 1))

    def workers_here(self) -> int:
        """xdist workers measuring on this machine at once: 1 without xdist, and with
        ``--dist each``, where each worker is taken for a machine of its own (a fleet)."""
        dist, workers = self._xdist()
        return 1 if not self.is_worker or dist == "each" else workers

    def machines(self) -> int:
        """Machines in this run as a worker can tell before the end: a fleet (``--dist each``)
        has one per worker."""
        dist, workers = self._xdist()
        return workers if self.is_worker and dist == "each" else 1

    def unreliable(self) -> list[str]:
        """Why this configuration cannot measure reliably (several workers on one machine)."""
        workers = self.workers_here()
        if workers <= 1:
            return []
        found = []
        if self.sequential:
            found.append(
                f"--encperf-target=partition with {workers} xdist workers on one machine: the partition "
                "holds one volume at a time and one worker holds it for the whole run; the other workers' "
                "backends are skipped. Run it without -n, or with one worker per machine (--dist each)"
            )
        if self.settings.parallel_devices:
            found.append(
                f"--encperf-parallel-devices with {workers} xdist workers on one machine: rounds on "
                "different disks run at the same time and share the CPUs, memory and buses of the "
                "machine; encryption costs CPU, so such overheads are not those of a machine measuring alone"
            )
        return found

    def ceilings(self) -> dict[str, Ceiling]:
        """The speed of each cipher the measured backends name, measured once per session (a
        method: pytest reads plugin properties while collecting fixtures); none after an
        interrupt (the user asked the run to stop)."""
        wanted = [c for c in dict.fromkeys(r.cipher_ceiling for r in self.results) if c]
        missing = [c for c in wanted if c not in self._ceilings]
        if not self.interrupted:
            self._ceilings.update(measure_ciphers(missing))
        return {c: self._ceilings[c] for c in wanted if c in self._ceilings}

    # ------------------------------------------------------------- hooks

    def start(self) -> None:
        # SIGTERM (CI cancelling a job, `kill`) and SIGHUP (the terminal or ssh session went
        # away) tear down like Ctrl-C instead of leaving mounts and loop devices behind. A
        # signal someone chose to ignore (nohup) stays ignored.
        if threading.current_thread() is threading.main_thread():
            for signum in host.TEARDOWN_SIGNALS[1:]:
                if signal.getsignal(signum) in (signal.SIG_DFL, None):
                    self._previous_handlers[signum] = signal.signal(signum, _raise_keyboard_interrupt)
        # Leftovers of runs killed before they could tear down (SIGKILL, power loss, OOM); the
        # backends' modules register the resource kinds they add first.
        self.cleanup_problems += backends.load_all()
        try:
            for run in journal.release_dead_runs(self.settings.dir):
                self.cleaned += [f"{run.head}: {line}" for line in run.done]
                self.cleanup_problems += run.problem_lines()
        except OSError as exc:
            self.cleanup_problems.append(f"could not check for leftovers of dead runs: {exc}")
        # Every Cleanup created from now on (volumes of every backend) is journaled.
        resources.install_observer(self.journal)

    def stop(self) -> None:
        resources.remove_observer(self.journal)
        self.journal.close()
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous_handlers.clear()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [f"encperf: released leftover of a dead run: {line}" for line in self.cleaned] + [
            f"encperf: cleanup of dead runs: {line}" for line in self.cleanup_problems
        ]

    def pytest_report_collectionfinish(self, config: pytest.Config, items: list[pytest.Item]) -> list[str]:
        """The plan, in one line after pytest's "collected N items"."""
        tests = []
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "encperf_volume" in params and "encperf_workload" in params:
                tests.append((str(params["encperf_volume"]), str(params["encperf_workload"])))
        if not tests or self.is_worker:
            return []
        s = self.settings
        plan = Plan(
            tests, s.rounds, s.runtime, s.warmup, self.sequential, len(self.workloads),
            s.steady_budget if s.steady_cv or (s.precision and not self.sequential) else None,
            s.confirm_budget if (s.fail or s.max_overhead) and not self.sequential else 0.0,
            s.quiet_wait, ", ".join(process_text(pid) for pid in host.measurement_lock_holders()),
        )  # fmt: skip
        return plan.lines()

    def round_callback(self) -> Any:
        """The live status line's round callback, on a terminal (not -q, not an xdist worker)."""
        if self._progress is None:
            self._progress = False
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            quiet = self.config.getoption("verbose") < 0 or os.environ.get("TERM") == "dumb"
            if reporter is not None and bool(reporter.isatty) and not quiet and not self.is_worker:
                self._progress = self._make_progress()
        return self._progress.round_done if self._progress else None

    def lock_waiting(self) -> Any:
        """What host.measurement_lock tells while another measurement holds the machine: the
        status line names the holder (on a terminal only, as the round line)."""
        self.round_callback()
        progress = self._progress
        if not progress:
            return None
        return lambda holders, waited: progress.waiting(lock_wait_text(holders, waited))

    def quiet_waiting(self) -> Any:
        """What --encperf-quiet-wait tells while others keep the machine busy (status line)."""
        self.round_callback()
        progress, s = self._progress, self.settings
        if not progress:
            return None

        def waiting(load: Load) -> None:
            progress.waiting(quiet_wait_text(load, self.meter.threshold, s.quiet_wait))

        return waiting

    def _make_progress(self) -> ProgressLine:
        writer = self.config.get_terminal_writer()
        capture = self.config.pluginmanager.get_plugin("capturemanager")

        def write(text: str) -> None:  # the test's output is captured while it runs: not ours
            with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
                writer.write_raw(text, flush=True)

        s = self.settings
        return ProgressLine(
            write, lambda: writer.width_of_current_line, lambda: writer.fullwidth,
            rounds=s.rounds if self.sequential else whole_blocks(s.rounds), runtime=s.runtime,
            warmup=s.warmup, sides=1 if self.sequential else 2,
        )  # fmt: skip

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self._progress:  # before pytest writes the test's outcome
            self._progress.clear()
        if report.when == "call" or not report.passed:  # a test that ran, or never could
            self.ran.add(report.nodeid)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.planned.update(item.nodeid for item in session.items)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        # Ctrl-C, or SIGTERM / SIGHUP raised as KeyboardInterrupt("signal N ...") (start)
        number = re.match(r"signal (\d+)", str(excinfo.value))
        self.interrupted = f"by {signal.Signals(int(number[1])).name}" if number else "by Ctrl-C"

    def incomplete_reason(self, session: pytest.Session) -> str:
        """Why this run did not finish ("" when it did): see did_not_finish."""
        interrupted = self.interrupted
        if not interrupted and session.exitstatus == pytest.ExitCode.INTERRUPTED:
            interrupted = "by pytest"
        stopped = session.shouldfail or session.shouldstop
        return did_not_finish(
            interrupted,
            str(stopped) if stopped else "",
            len(self.planned),
            len(self.ran & self.planned) if self.planned else len(self.ran),
            len(self.missing_workers()),
        )

    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        if self.config.option.collectonly:
            return
        uses_volumes = any(
            name in VOLUME_FIXTURES for item in items for name in getattr(item, "fixturenames", ())
        )
        if uses_volumes:
            try:
                self.check_room()
                refusal = journal.directory_refusal(self.settings.dir)
                if refusal:
                    raise pytest.UsageError(refusal)
            except pytest.UsageError as exc:
                if not self.is_worker:
                    raise
                self._no_room = str(exc)  # a worker's usage error would be lost: its tests fail with it
            if getattr(self.config, "workerinput", {}).get("workerid", "gw0") == "gw0":  # once per run
                for message in self.unreliable():
                    warnings.warn(EncperfWarning(message), stacklevel=1)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # A teardown failure is reported in the summary and fails the run; raising here would
        # replace pytest's report with an internal-error traceback.
        try:
            try:
                # not after Ctrl-C, -x or --maxfail: the user asked the run to stop
                stopping = bool(session.shouldstop or session.shouldfail)
                if self.settings.ladder and self.results and not stopping:
                    self.measure_ladder()  # in the run directory, before close_all removes it
            except Exception as exc:  # the ladder's own failures are its rungs' reasons: not this
                self.teardown_errors.append(f"--encperf-ladder: {type(exc).__name__}: {exc}")
            finally:
                self.close_all()
        except Exception as exc:
            self.teardown_errors.append(str(exc))
        finally:
            if self.teardown_errors and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            if self.results and not self.interrupted:  # a measurement (CPU only): never beside
                with host.measurement_lock(None):  # another one on this machine
                    self.ceilings()
            if self.is_worker:
                self.config.workeroutput["encperf_machine"] = self.machine_run().to_dict()
            else:
                self.finish(session)

    def measure_ladder(self) -> None:
        """--encperf-ladder: the layer rung of every backend x workload measured (on a RAM-backed
        container) and the counterparts of their ciphers; a teardown failure fails the run."""
        s = self.settings
        cases: dict[str, list[Workload]] = {}
        for result in self.results:
            if result.workload.kind != "task":  # a real-work task has no ladder (ladder.rows)
                cases.setdefault(result.backend, []).append(result.workload)
        settings = layer.LayerSettings(
            self.engine, s.size, s.runtime, s.rounds, s.warmup,
            lock=lambda: host.measurement_lock(None),  # memory and CPU: the whole machine
            quiet=lambda: host.measurement_lock(None, shared=True),
        )  # fmt: skip
        with self.beside_no_measurement():
            base = self.run_dir()
        self._layers, errors = layer.measure_layers(cases.items(), base, settings)
        self.teardown_errors += errors
        with host.measurement_lock(None):
            for cipher in self.ceilings():
                other, why = counterpart(cipher)
                if other is None:
                    self._counterparts[cipher] = ladder.Rung(None, why)
                else:
                    found = measure_ciphers([other])[other]
                    self._counterparts[cipher] = ladder.Rung(found.mb_per_s, found.describe())

    def ladder_rows(self) -> list[dict[str, Any]]:
        """The ladder of this process's results (empty without --encperf-ladder)."""
        if not self.settings.ladder:
            return []
        ciphers = {name: ladder.Rung(c.mb_per_s, c.describe()) for name, c in self.ceilings().items()}
        rows = ladder.rows(self.results, self._layers, ciphers, self._counterparts)
        return [row.to_dict() for row in rows]

    def missing_workers(self) -> list[str]:
        """Workers whose results never came, when this run measures (another worker sent results
        or skips, or a report, save or gate was asked for): a crashed worker in a run of other
        tests is xdist's business alone."""
        if any(part.results or part.skipped for part in self._worker_runs) or self.outputs_asked():
            return self.lost_workers
        return []

    def outputs_asked(self) -> bool:
        """Whether this run saves, compares, gates or writes a report (finish has work to do)."""
        s = self.settings
        return bool(
            s.save or s.autosave or s.compare or s.fail or s.json or s.markdown or s.html or s.max_overhead
        )

    def add_machine_run(self, document: dict[str, Any], worker: str = "") -> None:
        """What a worker (``gw3``) measured, its ``workeroutput``; the controller alone reports it.
        Machines are reported in the order of their workers, whichever finished first."""
        self._worker_runs.append(MachineRun.from_dict(document))
        self._worker_order.append(int("".join(filter(str.isdigit, worker)) or 0))
        order = sorted(range(len(self._worker_runs)), key=self._worker_order.__getitem__)
        self._worker_runs = [self._worker_runs[i] for i in order]
        self._worker_order = [self._worker_order[i] for i in order]

    def machine_run(self) -> MachineRun:
        """What this process measured on this machine, and what its report needs from here."""
        info, machine_id = self.machine()
        return MachineRun(
            machine_id=machine_id,
            machine_info=info,
            settings=self.saved_settings(),
            engine=f"{self.engine.name} {self.engine.version()}",
            results=list(self.results),
            skipped=dict(self.skipped),
            ceilings={cipher: (c.mb_per_s, c.how) for cipher, c in self.ceilings().items()},
            xts_driver=kernel_xts_driver(),
            problems=list(self.teardown_errors),
            lifecycle={
                spec: {k: list(v) for k, v in cycles.items()} for spec, cycles in self.lifecycle.items()
            },
            kdf=dict(self.kdf),
            inplace=dict(self.inplace),
            ladder=self.ladder_rows(),
            notes=[f"released leftover of a dead run: {line}" for line in self.cleaned]
            + [f"cleanup of dead runs: {line}" for line in self.cleanup_problems],
        )

    def machine_runs(self) -> list[MachineRun]:
        """One part per machine: under xdist what the workers sent, merged by machine id (one
        machine may have several workers); otherwise this process's own. Results in the order of
        the selected backends and workloads, whichever worker measured them."""
        hosts: dict[str, set[str]] = {}
        if self._worker_runs:  # the controller's host counts: its hardware elsewhere is another machine
            info, machine_id = self.machine()
            hosts[machine_id] = {str(info.get("node"))}
        for part in self._worker_runs:
            hosts.setdefault(part.machine_id, set()).add(str(part.machine_info.get("node")))
        parts: dict[str, MachineRun] = {}
        for part in self._worker_runs or [self.machine_run()]:
            key = part.machine_id
            if len(hosts.get(key, ())) > 1:  # identical servers of a fleet: one machine each
                key = machine.fleet_member_id(key, part.machine_info)
            if key in parts:
                parts[key].merge(part)
            else:
                parts[key] = MachineRun.from_dict(part.to_dict())
                parts[key].machine_id = key
        for key, merged in parts.items():
            for result in merged.results:
                result.machine_id = key
        specs = {spec: index for index, spec in enumerate(self.backend_specs)}
        names = {w.name: index for index, w in enumerate(self.workloads)}
        for part in parts.values():
            part.results.sort(
                key=lambda r: (specs.get(r.backend, len(specs)), names.get(r.workload.name, len(names)))
            )
        return list(parts.values())

    def sweep_rankings(self, part: MachineRun) -> list[sweep.FamilyRanking]:
        """A ranking for every backend family run in several configurations (a sweep), each with
        the best configuration's set-up commands for the recommendation."""
        if part.machine_id not in self._rankings:  # the summary, the JSON and the Markdown: once
            specs = [spec for spec in self.backend_specs if spec != BASELINE]
            found = sweep.rank(part.results, specs, self.settings.sweep_margin)
            self._rankings[part.machine_id] = backends.recommend(found)
        return self._rankings[part.machine_id]

    # ------------------------------------------------------------- baselines, reports, verdict

    def machine(self) -> tuple[dict[str, Any], str]:
        """This machine's info (after the update hook) and id, read once per session."""
        if self._machine is None:
            info = machine.machine_info(self.settings.dir)
            self.config.hook.pytest_encperf_update_machine_info(config=self.config, machine_info=info)
            self._machine = (info, machine.machine_id(info))
        return self._machine

    def reference(self) -> Reference:
        """The saved run to compare with and its history, loaded once: before this run saves, so
        ``latest`` is never this run itself."""
        if self._reference is None:
            self._reference = self._load_reference(*self.machine())
        return self._reference

    def reference_for(self, part: MachineRun) -> Reference:
        """The reference of one machine of the run (another machine of a fleet: its own)."""
        info, machine_id = self.machine()
        if part.machine_id == machine_id and part.machine_info.get("node") == info.get("node"):
            return self.reference()
        return self._load_reference(part.machine_info, part.machine_id)

    def _load_reference(self, info: dict[str, Any], machine_id: str) -> Reference:
        s = self.settings
        loaded = Reference()
        wanted = s.compare or ("latest" if s.fail else None)  # --encperf-fail alone: vs latest
        if not wanted:
            return loaded
        try:
            run, warning = storage.resolve(s.storage, wanted, machine_id, info)
            loaded.run = storage.load_run(run)
        except storage.NoSavedRun as exc:
            message = (
                f"no baseline to compare with: {exc}; nothing was gated "
                "(save one with --encperf-save=NAME or --encperf-autosave)"
            )
            (loaded.unchecked if s.fail else loaded.notes).append(message)
            return loaded
        except storage.StorageError as exc:
            loaded.errors.append(f"cannot use the baseline: {exc}")
            return loaded
        if warning:
            loaded.notes.append(f"warning: {warning}")
        notes, unchecked = gatescope.other_hardware(
            loaded.run.label, loaded.run.machine_info, info, s.allow_other_hardware, gated=bool(s.fail)
        )
        loaded.notes += notes
        loaded.unchecked += unchecked
        loaded.machine_differences = machine.differences(loaded.run.machine_info, info)
        for saved in storage.history(s.storage, run, wanted, s.history)[1:]:
            try:
                loaded.history.append(storage.load_run(saved))
            except storage.StorageError as exc:
                loaded.notes.append(f"history: left out {exc}")
        loaded.history.insert(0, loaded.run)
        return loaded

    def saved_settings(self) -> dict[str, str]:
        return {name: _setting_text(getattr(self.settings, name)) for name in _SAVED_SETTINGS}

    def gate(self) -> Gate | None:
        """What the runner asks whether a workload's checks are decided (None: no confirmation
        rounds, because nothing is gated, the budget is 0, or on a partition target)."""
        s = self.settings
        if not (s.fail or s.max_overhead) or s.confirm_budget <= 0 or self.sequential:
            return None
        if self._gate is None:
            reference = self.reference()
            rules = s.fail if reference.run else []
            size = expected_family_size(
                self.backend_specs,
                self.workloads,
                rules,
                s.max_overhead,
                reference.run,
                len(reference.history),
                s.lifecycle_cycles,
            )
            size *= self.machines()  # the checks of every machine form one family (judge_machines)
            self._gate = Gate(reference.run, tuple(rules), tuple(s.max_overhead), self.saved_settings(), size)
            self._confirm_budget = ConfirmBudget(s.confirm_budget)
        return self._gate

    def finish(self, session: pytest.Session) -> None:
        """Save, compare, write reports, decide; set the exit status only if the run is otherwise OK
        (like pytest's --max-warnings), so failing tests keep their own status."""
        failed_workers = self.missing_workers() or any(part.problems for part in self._worker_runs)
        if failed_workers and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a worker could not tear down or report
        if not self.outputs_asked():
            return
        try:
            self.verdicts = self._judge(session)
        except Exception as exc:  # never a traceback at the end of a run: say what went wrong
            self.verdicts = {"": Verdict(errors=[f"{type(exc).__name__}: {exc}"])}
        self.verdict = next(iter(self.verdicts.values())) if len(self.verdicts) == 1 else None
        if any(v.failed for v in self.verdicts.values()) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = EXIT_REGRESSION

    def _judge(self, session: pytest.Session) -> dict[str, Verdict]:
        """Each machine against its own reference, loaded before anything is saved; one verdict
        per machine, their gated checks one family (compare.judge_machines)."""
        s = self.settings
        now = dt.datetime.now(dt.UTC)
        parts = self.machine_runs()
        fleet = len(parts) > 1
        references = {part.machine_id: self.reference_for(part) for part in parts}
        commit = storage.commit_info() if (s.save or s.autosave or s.json) else {}
        incomplete = self.incomplete_reason(session)
        saved: dict[str, str | None] = {}
        notes: dict[str, list[str]] = {part.machine_id: [] for part in parts}
        errors: dict[str, list[str]] = {part.machine_id: [] for part in parts}
        for part in parts:  # saved before anything is judged
            mid = part.machine_id
            doc = storage.document(
                part.results, part.machine_info, mid, commit, part.settings, now, incomplete
            )
            doc["encperf"]["lifecycle"] = part.lifecycle
            if part.kdf:
                doc["encperf"]["kdf"] = part.kdf
            if part.inplace:
                doc["encperf"]["inplace"] = part.inplace
                doc["encperf"]["project_size"] = s.project_size
            if part.ladder:  # its own key: the RAM-backed layer rung is never a result to compare with
                doc["encperf"]["ladder"] = part.ladder
            rankings = self.sweep_rankings(part)
            if rankings:
                doc["encperf"]["sweeps"] = [ranking.to_dict() for ranking in rankings]
            if part.results and (s.save or s.autosave):
                name = s.save or storage.autosave_name(commit, now)
                try:
                    saved[mid] = str(storage.save(s.storage, mid, name, doc))
                except (OSError, storage.StorageError) as exc:
                    errors[mid].append(f"could not save the run: {exc}")
                else:
                    if incomplete:
                        notes[mid].append(
                            f"saved as incomplete ({incomplete}): the name {name} and latest will not "
                            f"pick it, {name}{storage.EXPLICIT} will"
                        )
            elif s.save or s.autosave:
                notes[mid].append("nothing measured, nothing saved")
            if s.json:
                path = s.json.with_name(f"{s.json.stem}.{mid}{s.json.suffix}") if fleet else s.json
                storage.write_json(path, doc)
        machines = [
            (
                RunData("this run", tuple(part.results), part.settings, part.machine_info, part.lifecycle),
                references[part.machine_id].run,
                references[part.machine_id].history,
            )
            for part in parts
        ]
        verdicts = judge_machines(machines, s.fail, s.max_overhead, strict=s.strict)
        for part, verdict in zip(parts, verdicts, strict=True):
            reference, mid = references[part.machine_id], part.machine_id
            verdict.saved = saved.get(mid)
            verdict.notes = [*reference.notes, *notes[mid], *verdict.notes]
            verdict.errors = [*reference.errors, *errors[mid], *verdict.errors]
            verdict.unchecked = [*reference.unchecked, *verdict.unchecked]
            verdict.machine_differences = reference.machine_differences
            verdict.machine = part.label if fleet else ""
            if s.fail or s.max_overhead or s.compare:  # a gate: it says what it never checks
                verdict.not_gated = gatescope.ungated_timings({"kdf": part.kdf, "inplace": part.inplace})
        if s.html:
            try:
                self.write_html(parts, references, verdicts)
            except Exception as exc:  # the verdict stands; the report that failed is an error
                verdicts[0].errors.append(
                    f"could not write the HTML report {s.html}: {type(exc).__name__}: {exc}"
                )
        if s.markdown:
            if fleet:
                text = "\n".join(
                    markdown_report(
                        part.results,
                        verdict,
                        f"encperf: machine {part.label}",
                        self.backend_specs,
                        s.profile,
                        sweeps=self.sweep_rankings(part),
                        ladder=part.ladder,
                    )
                    for part, verdict in zip(parts, verdicts, strict=True)
                )
                table = machines_table([(part.label, part.results) for part in parts], tablefmt="github")
                text += f"\n## encperf: across machines\n\n{table}\n\n{MACHINES_NOTE}\n"
            else:
                text = markdown_report(
                    parts[0].results,
                    verdicts[0],
                    backends=self.backend_specs,
                    profiles=s.profile,
                    sweeps=self.sweep_rankings(parts[0]),
                    ladder=parts[0].ladder,
                )
            s.markdown.parent.mkdir(parents=True, exist_ok=True)
            s.markdown.write_text(text, encoding="utf-8")
            summary = os.environ.get("GITHUB_STEP_SUMMARY")
            if summary:
                with open(summary, "a", encoding="utf-8") as file:
                    file.write(text)
        return {part.machine_id: verdict for part, verdict in zip(parts, verdicts, strict=True)}

    def write_html(
        self, parts: list[MachineRun], references: dict[str, Reference], verdicts: list[Verdict]
    ) -> None:
        """The HTML report of this run: a section per machine (a fleet has several), each with
        its saved history before it and its own verdict."""
        assert self.settings.html is not None
        sections, judged, skipped, notes = [], {}, {}, []
        for part, verdict in zip(parts, verdicts, strict=True):
            info = {**part.machine_info, "machine_id": part.machine_id}
            now = RunData("this run", tuple(part.results), part.settings, info)
            sections.append([*reversed(references[part.machine_id].history), now])
            if verdict.baseline or verdict.checks or verdict.errors or verdict.unchecked:
                judged[part.machine_id] = verdict
            skipped.update({spec: why for spec, why in part.skipped.items() if spec not in skipped})
            prefix = f"{part.label}: " if len(parts) > 1 else ""
            notes += [f"{prefix}cipher ceiling: {c.describe()}" for c in ceilings_of(part).values()]
        page = html_report.Page(
            [run for runs in sections for run in runs], None, "encperf report: this run", skipped, notes,
            sections=sections, verdicts=judged,
        )  # fmt: skip
        storage.write_report(self.settings.html, html_report.render(page))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for note in self.interrupt_notes:
            terminalreporter.write_line(f"encperf: {note}", yellow=True)
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
            self._write_verdict(terminalreporter)
        except Exception as exc:  # a summary must never replace pytest's own result line
            terminalreporter.write_line(f"encperf: could not print the summary: {exc}", red=True)

    def _write_summary(self, tr: pytest.TerminalReporter) -> None:
        for lost in self.missing_workers():
            tr.write_line(f"encperf: {lost}", red=True)
        parts = self.machine_runs()
        fleet = len(parts) > 1
        for part in parts:
            if fleet:
                tr.write_sep("=", f"encperf: machine {part.label}")
            if self._worker_runs:  # what the workers' own terminals (not shown) would have said
                for problem in part.problems:
                    tr.write_line(f"encperf: teardown failed on {part.label}: {problem}", red=True)
                for note in part.notes:
                    tr.write_line(f"encperf: {part.label}: {note}", yellow=True)
            self._write_machine_summary(tr, part)
        if fleet:
            tr.write_sep("-", "encperf: across machines")
            table = machines_table([(part.label, part.results) for part in parts])
            if table:
                tr.write_line(table)
                tr.write_line(MACHINES_NOTE)
            if self.config.getoption("dist", "no") != "each":
                tr.write_line(
                    "encperf: the machines ran different tests: use --dist each so that every machine "
                    "runs every benchmark",
                    yellow=True,
                )

    def _write_machine_summary(self, tr: pytest.TerminalReporter, part: MachineRun) -> None:
        shown = self.backend_specs
        if not part.results and not part.skipped and not part.kdf and not part.inplace:
            return
        s = self.settings
        tr.write_sep("-", "encperf: encryption overhead vs plain")
        tr.write_line(
            f"target: {s.target} in {part.settings.get('dir', s.dir)} | engine: {part.engine} | "
            f"file: {s.size // (1024 * 1024)} MiB | "
            f"{s.rounds if self.sequential else whole_blocks(s.rounds)} rounds x {s.runtime:g} s, "
            + (
                "baseline measured before and after each volume"
                if self.sequential
                else "alternating with the baseline"
            )
        )
        tr.write_line(cpu_line(part.machine_info))
        skipped = {k: v for k, v in part.skipped.items() if k != BASELINE}
        until = [f"CV < {s.steady_cv:.0%}"] if s.steady_cv else []
        until += [f"the overhead's 95% interval is within ±{s.precision:g} points"] if s.precision else []
        steady = f"; then whole A B B A blocks until {' and '.join(until)} (at most {s.steady_budget:g} s)"
        steady = steady if until else ""
        tr.write_line(f"each workload: {s.warmup} warm-up round(s) per side discarded{steady}")
        shown_names: set[str] = set()
        for name in s.profile:
            if name not in PROFILES:  # the kdf profile: its own table below
                continue
            profile = PROFILES[name]
            workloads = profile.workloads_for(s.size)
            table = summary_table(
                part.results,
                skipped,
                shown,
                workloads,
                value=profile.value,
                mean_column=profile.mean_column,
            )
            if table:
                tr.write_line(
                    f"{profile.title} [{name}]: {profile.value} of the rounds; under each backend, the "
                    f"{profile.value} of the plain rounds interleaved with its own and the change "
                    "between the two"
                )
                tr.write_line(table)
            steps = task_steps_table(part.results, workloads)
            if steps:
                tr.write_line("each task's timed steps (median seconds; vs plain: the change in speed):")
                tr.write_line(steps)
            shown_names.update(w.name for w in workloads)
        others = [r.workload for r in part.results if r.workload.name not in shown_names]
        if others:
            table = summary_table(part.results, skipped, shown, others)
            if table:
                tr.write_line(
                    "other workloads: median of the rounds; under each backend the median of the plain "
                    "rounds interleaved with its own, and the change between the two"
                )
                tr.write_line(table)
        if BASELINE in part.skipped:
            tr.write_line(f"baseline unavailable: {BASELINE}: {part.skipped[BASELINE]}", yellow=True)
        _titled_table(
            tr,
            "key derivation [kdf]: seconds to create a volume and to open (unlock and mount) it "
            "again, with the fast setting benchmark volumes use (benchmark only: not the real "
            "cost) and with the backend's default (what a real volume costs)",
            kdf_table(part.kdf, shown),
        )
        _titled_table(
            tr,
            "in-place encryption [--encperf-inplace]: MB/s of encrypting existing data (LUKS2: "
            "cryptsetup reencrypt --encrypt of a filled plain volume, over its whole data area) or, "
            "where a backend cannot, of filling a fresh volume through its encryption layer; and "
            "the time the projected size would take at that rate",
            inplace_table(part.inplace, s.project_size, shown),
        )
        if not part.results:
            return
        ceilings = ceilings_of(part)
        details = detail_table(part.results, {cipher: c.mb_per_s for cipher, c in ceilings.items()})
        if details:
            tr.write_line("")
            tr.write_line(details)
            tr.write_line(
                "vs plain: median of per-round ratios to the plain round run just before each "
                "(positive = faster than plain; the gate's vs-plain metric); never computed between "
                f"different I/O modes; {INTERVAL_MEANING}. p50/p99: total latency of each I/O, "
                "submission to completion "
                "(fio's lat, not clat); small files: create + write + fsync of each file. "
                "CV: coefficient of variation of the rounds. CPU s/GiB: system-wide busy CPU "
                "seconds per GiB moved; daemon: the backend's own processes. eff.: median MB/s / "
                "min(plain median MB/s, the speed of the backend's own cipher on this CPU), only "
                "where that cipher was measured and both sides ran in one I/O mode. "
                "device/logical: bytes the volume's block device read (r) or wrote (w) per byte the "
                "workload moved, and the average size of its requests (KiB/req); CACHED = a read "
                "round mostly served by the page cache. caveats: rounds of each side a caveat "
                "applies to."
            )
            for ceiling in ceilings.values():
                tr.write_line(f"cipher ceiling: {ceiling.describe()}")
            if self.interrupted:
                tr.write_line("cipher ceiling: not measured: the run was interrupted (eff. empty)")
            elif not ceilings:
                tr.write_line(
                    "cipher ceiling: no backend here names a cipher this run can measure (eff. empty)"
                )
            tr.write_line(f"kernel xts(aes) driver: {part.xts_driver}")
        _titled_table(
            tr,
            "volume life cycle, seconds (median of the cycles; benchmark volumes use a fast key "
            "derivation, not the backend's default):",
            lifecycle_table(part.lifecycle, shown),
        )
        lines = ladder_lines(part.ladder)
        if lines:
            tr.write_line("")
            tr.write_line(lines[0], bold=True)
            for line in lines[1:]:
                tr.write_line(line)
        for ranking in self.sweep_rankings(part):
            tr.write_line("")
            title, *rest = sweep_report(ranking)
            tr.write_line(title, bold=True)
            for line in rest:
                tr.write_line(line)

    def _write_verdict(self, tr: pytest.TerminalReporter) -> None:
        for verdict in self.verdicts.values():
            for kind, colour, line in verdict_report(verdict):
                if kind == "section":
                    tr.write_sep("-", line)
                else:
                    tr.write_line(line, **dict.fromkeys(colour.split(), True))


@dataclass
class Reference:
    """The saved run this session compares with, its history, and what went wrong finding it."""

    run: RunData | None = None
    history: list[RunData] = field(default_factory=list)  # the reference first, newest first
    machine_differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # --encperf-fail could not be checked
    errors: list[str] = field(default_factory=list)


_SAVED_SETTINGS = (
    "backends", "target", "dir", "size", "runtime", "rounds", "warmup", "engine", "profile",
    "lifecycle_cycles", "tree_size", "busy_threshold",
)  # fmt: skip


def _titled_table(tr: pytest.TerminalReporter, title: str, table: str) -> None:
    """A table of the summary after a blank line and its title; nothing when it is empty."""
    if table:
        tr.write_line("")
        tr.write_line(title)
        tr.write_line(table)


def _setting_text(value: object) -> str:
    if value is None:  # an option that is off (--encperf-busy-threshold=off)
        return "off"
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def user_properties(result: Result) -> list[tuple[str, object]]:
    """Per-test properties for junitxml (``record_property`` style): the medians and the overhead."""
    prefix = f"encperf.{result.backend}.{result.workload.name}"
    if not result.rounds:
        return []
    change = result.change_percent
    return [
        (f"{prefix}.mb_per_s", round(result.median("mb_per_s"), 3)),
        (f"{prefix}.iops", round(result.median("iops"), 1)),
        (f"{prefix}.lat_p50_us", round(result.median("lat_p50_us"), 1)),
        (f"{prefix}.lat_p99_us", round(result.median("lat_p99_us"), 1)),
        (f"{prefix}.cpu_s_per_gib", round(result.median("cpu_s_per_gib"), 4)),
        (f"{prefix}.vs_plain_percent", None if change is None else round(change, 2)),
    ]


def ceilings_of(part: MachineRun) -> dict[str, Ceiling]:
    """The cipher ceilings a machine measured, as sent over the wire (MB/s, how) made whole again."""
    return {cipher: Ceiling(cipher, mb_per_s, how) for cipher, (mb_per_s, how) in part.ceilings.items()}


def did_not_finish(interrupted: str, stopped: str, planned: int, ran: int, lost_workers: int) -> str:
    """Why a run did not finish, for its saved file ("" when it did): it was interrupted (Ctrl-C,
    SIGTERM, SIGHUP), or stopped early (-x, --maxfail), or some of the tests it collected never
    ran, or xdist workers' results are missing. A test that ran and failed or skipped is part of
    a finished run (its result is missing for a reason the summary gives, not cut short)."""
    count = f"{ran} of {planned} tests ran" if planned else f"{ran} tests ran"
    if interrupted:
        return f"interrupted {interrupted}; {count}"
    if stopped and ran < planned:
        return f"stopped early ({stopped}); {count}"
    if ran < planned:
        return f"{planned - ran} of {planned} tests did not run"
    if lost_workers:
        return f"the results of {lost_workers} xdist worker(s) are missing"
    return ""


class EncperfWarning(pytest.PytestWarning):
    """A configuration that cannot measure reliably (shown only when benchmarks are collected)."""


class XdistResults:
    """Registered on the xdist controller only (hook names unknown without xdist)."""

    def __init__(self, session: EncperfSession) -> None:
        self.session = session

    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self.session.planned.update(ids)  # what the run planned (every worker collects its own)

    def pytest_configure_node(self, node: Any) -> None:
        # a worker's own --dist is always "no": tell it the run's (a fleet is --dist each)
        node.workerinput["encperf_dist"] = self.session.config.getoption("dist", "no")

    def pytest_testnodedown(self, node: object, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        worker = getattr(getattr(node, "gateway", None), "id", "")
        if "encperf_machine" in output:
            self.session.add_machine_run(output["encperf_machine"], str(worker))
        if error or "encperf_machine" not in output:
            why = f"it went down: {error}" if error else "it ended without sending them"
            self.session.lost_workers.append(
                f"the results of worker {worker or '?'} are missing from this report, the saved run and "
                f"the gate: {why}"
            )


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
