"""The run's volumes: making, holding, remounting and closing them, and the partition's claim.

``Volumes`` is built from plain values (the settings, the target, the engine, the journal) and
knows nothing of pytest: what cannot run here is a ``VolumeSkip``, what went wrong a
``VolumeFailure``, a target without room ``NoRoom``; the fixtures turn them into a skip, a
failure, a usage error. Every volume is made and removed beside no measurement on the same
disks (the measurement lock, shared); after an interrupt that wait is bounded.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from . import host, inplace, journal, kdf, realwork, resources, secretdirs
from .backends import BASELINE, BASELINE_SPEC, BackendSpec, make_backend
from .blockstack import device_number
from .engines import Engine
from .inplace import InplaceTiming
from .kdf import KdfTiming
from .load import LoadMeter
from .model import Measurement
from .mountedvolume import MountedVolume, Unavailable, close_volume, open_volume, slug
from .runner import measure_all
from .settings import Settings
from .targets import DeviceClaim, Target, container_size
from .workloads import MiB, Workload

# After Ctrl-C / SIGTERM / SIGHUP the teardown waits at most this long in all for other runs'
# measurement locks, then releases anyway: the user asked to stop, now.
INTERRUPTED_LOCK_WAIT = 3.0


class VolumeSkip(Exception):
    """The backend cannot run here (the test is skipped with this reason)."""


class VolumeFailure(Exception):
    """The volume cannot be used, for a reason said before (the test fails with it, no traceback)."""


class NoRoom(Exception):
    """The target cannot hold what this run makes (a usage error, or on an xdist worker the
    failure of every test that needs a volume)."""


def task_room(settings: Settings) -> int:
    """Room a real-work task needs on a volume (0 without one among the workloads)."""
    if not any(w.kind == "task" for w in settings.workloads):
        return 0
    return realwork.volume_room(settings.tree_size)


class Volumes:
    """The run's volumes on its target (--encperf-target, --encperf-dir or --encperf-device)."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        run_journal: journal.Journal,
        meter: LoadMeter,
        lock_waiting: Callable[[], Any],
    ) -> None:
        self.settings = settings
        room = settings.size + task_room(settings)  # the test file, and what a real-work task puts there
        size = container_size(room) if settings.target == "container" else settings.size
        s = settings
        # the device the path names now, at the start: a path that names another later is refused
        number = device_number(s.device) if s.device is not None else None
        self.target = Target(s.target, s.dir, size, device=s.device, force=s.force, device_number=number)
        self.engine = engine
        self.journal = run_journal
        self.meter = meter
        self.lock_waiting = lock_waiting  # what the lock says while it waits (the status line)
        self.skipped: dict[str, str] = {}  # backend spec -> reason
        self.errors: dict[str, str] = {}  # backend spec -> why its volume failed
        self.lifecycle: dict[str, dict[str, list[float]]] = {}  # backend spec -> step -> s per cycle
        # on an xdist worker: why it makes no volume (the target has no room, or the journal
        # directory is refused); its tests fail with it, as the controller stopped with a usage error
        self.refused = ""
        self.interrupted = False  # nothing more is measured; the teardown waits at most a while
        self.interrupt_notes: list[str] = []  # what the teardown did not wait for after the interrupt
        self._interrupted_wait_left = INTERRUPTED_LOCK_WAIT  # seconds (teardown_lock)
        self._open: list[MountedVolume] = []
        self._run_dir: Path | None = None
        self._run_cleanup: resources.Cleanup | None = None
        self._counter = itertools.count(1)
        # partition target: baseline rounds measured before each encrypted volume, by spec
        self.measured_baseline: dict[str, dict[str, list[Measurement]]] = {}
        # partition target: the workloads the baseline measures, those of the collected tests
        # (workloads.baseline_workloads); None: every workload of the profiles
        self.baseline_workloads: list[Workload] | None = None
        # partition target: the device held exclusively between volumes, or why it cannot be
        self._claim: DeviceClaim | None = None
        self._device_refused = ""
        self._device_lost = ""
        self._reference_tree: realwork.ReferenceTree | None = None  # the real-work tasks' tree
        self._reference_tree_error = ""  # why it could not be made (said again to every later task)
        # --encperf-volumes: (side, spec text, block) -> its fresh volume; side "plain" or "volume"
        self._fresh: dict[tuple[str, str, int], MountedVolume] = {}

    def run_dir(self) -> Path:
        """This run's private directory, made on first use."""
        if self._run_dir is None:
            # under the directory's real path, where the journal holds a dead run's paths to be
            # journaled before it is made: a killed run's directory is always found
            self._run_cleanup = resources.Cleanup(self.journal)
            self._run_dir = secretdirs.private_directory(self._run_cleanup, self.journal.directory)
        return self._run_dir

    def reference_tree(self) -> realwork.ReferenceTree:
        """The real-work tasks' reference tree and source archive, made on first use in this run's
        private directory (0700, removed with it at the end)."""
        if self._reference_tree_error:
            raise host.HostError(self._reference_tree_error)
        if self._reference_tree is None:
            try:
                directory = self.run_dir() / "realwork"
                directory.mkdir(mode=0o700)
                self._reference_tree = realwork.prepare_reference_tree(
                    directory, self.settings.tree_size, self.settings.tree_seed
                )
            except (host.HostError, OSError) as exc:
                self._reference_tree_error = f"the real-work reference tree could not be made: {exc}"
                raise host.HostError(self._reference_tree_error) from exc
        return self._reference_tree

    def check_room(self, workers: int) -> None:
        """Raise NoRoom (before anything is created) for a target without room for the baseline
        and one backend volume at a time, for each of ``workers`` measuring here."""
        # each worker has its own baseline, and its own reference data when tasks run (the tree,
        # the source archive and a copy out of a volume: about a volume's task room)
        directory = self.settings.dir
        pairs = self.settings.volumes  # --encperf-volumes: that many pairs are held at once
        need = (2 * self.target.size * pairs + task_room(self.settings)) * workers
        try:
            free = shutil.disk_usage(directory).free
        except OSError as exc:
            raise NoRoom(f"--encperf-dir {directory}: {exc.strerror}") from None
        if free < need:
            raise NoRoom(
                f"--encperf-dir {directory}: {free // MiB} MiB free, "
                f"this run needs {need // MiB} MiB "
                f"(the baseline and one backend volume of {self.target.size // MiB} MiB each"
                + (f", {pairs} such pairs for --encperf-volumes" if pairs > 1 else "")
                + (f", for each of {workers} xdist workers" if workers > 1 else "")
                + "); "
                "free some space, pass --encperf-dir on a larger disk or a smaller --encperf-size"
            )

    def measure_baseline(self) -> dict[str, list[Measurement]]:
        """Partition target: plain ext4 on the partition, the rounds of each workload the collected
        tests measure (``baseline_workloads``), then removed."""
        mounted = self.open(BASELINE_SPEC)
        try:
            s = self.settings
            workloads = s.workloads if self.baseline_workloads is None else self.baseline_workloads
            with host.measurement_lock(self.lock_disks(mounted), waiting=self.lock_waiting()):
                return measure_all(self.engine, mounted, workloads, s.round_plan, self.meter)
        finally:
            self.close(mounted)

    def hold_device(self) -> str:
        """Partition target: hold the device exclusively (O_EXCL) from before the first write
        (see targets.DeviceClaim). Returns why it cannot be held (every backend is then
        skipped); VolumeFailure when something took it while a volume of ours had it."""
        if self._device_lost:
            raise VolumeFailure(self._device_lost)
        if self._claim is None and not self._device_refused:
            assert self.target.device is not None
            claim = DeviceClaim(self.target.device, pinned=self.target.device_number)
            try:
                claim.acquire()
            except host.HostError as exc:
                self._device_refused = str(exc)
            else:
                self._claim = claim
        return self._device_refused

    def open(self, spec: BackendSpec) -> MountedVolume:
        """Create and mount a volume; VolumeSkip with the reason when the backend can't run here."""
        spec_text = str(spec)  # the key of its skip, error, life cycle and results
        if self.refused:
            raise VolumeFailure(self.refused)
        if spec_text in self.skipped:
            raise VolumeSkip(f"{spec_text}: {self.skipped[spec_text]}")
        if spec_text in self.errors:
            raise VolumeFailure(self.errors[spec_text])
        backend = make_backend(spec)
        if self.settings.one_volume_at_a_time:
            # checked before anything is measured or written for this backend
            refused = "; ".join(backend.unavailable_reasons(self.target)) or self.hold_device()
            if refused:
                self.skipped[spec_text] = refused
                raise VolumeSkip(f"{spec_text}: {refused}")
            if spec_text != BASELINE and spec_text not in self.measured_baseline:
                self.measured_baseline[spec_text] = self.measure_baseline()  # before
        workdir = self.run_dir() / f"{next(self._counter):02d}-{slug(spec_text)}"
        if self._claim is not None:
            self._claim.release()  # lent to the volume: its mount or mapping holds the device now
        try:
            with self.between_measurements():
                mounted = open_volume(backend, self.target, workdir)
        except Unavailable as exc:
            self.skipped[spec_text] = str(exc)
            self._take_device_back()
            raise VolumeSkip(f"{spec_text}: {exc}") from None
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

    def close(self, mounted: MountedVolume) -> dict[str, list[Measurement]]:
        """Unmount and remove a volume. Returns, on the partition target after an encrypted
        volume, the baseline's rounds measured again now that the volume is gone (else {})."""
        if self.interrupted and mounted not in self._open:
            return {}  # close_all released it (the fixture's teardown comes after it when interrupted)
        # the lock first, for as long as another worker's rounds take (a signal while waiting
        # leaves the volume to close_all); then the teardown itself, signals deferred
        with self.between_measurements():
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
                    self.time_more_cycles(mounted.backend.spec)
            finally:
                with host.signals_deferred():
                    self._take_device_back()
        if self.settings.one_volume_at_a_time and mounted.spec != BASELINE and not self.interrupted:
            return self.measure_baseline()  # the partition again, now that the volume is gone
        return {}

    def fresh_pair(self, spec: BackendSpec, block: int) -> tuple[MountedVolume, MountedVolume]:
        """--encperf-volumes: the ``block``-th extra (plain, backend) pair, made on first use and
        kept until the backend's own volume closes (plain's, shared by every backend: until the
        baseline's closes), so each workload of the backend measures the same fresh volumes."""
        sides = (("plain", BASELINE_SPEC), ("volume", spec))
        for side, side_spec in sides:
            key = (side, str(side_spec), block)
            if key not in self._fresh:
                self._fresh[key] = self.open(side_spec)
        return self._fresh[("plain", BASELINE, block)], self._fresh[("volume", str(spec), block)]

    def close_fresh(self, spec_text: str) -> None:
        """Unmount and remove the fresh volumes of ``spec_text`` (fresh_pair; plain's: of both
        sides, made again should another backend still need them), whose life cycles are not
        timed: the benchmark volume's and --encperf-lifecycle-cycles' are."""
        for key in [key for key in self._fresh if key[1] == spec_text]:
            mounted = self._fresh.pop(key)
            if mounted not in self._open:  # close_all released it (interrupted)
                continue
            with self.between_measurements(), host.signals_deferred():
                self._open.remove(mounted)
                close_volume(mounted)

    def time_more_cycles(self, spec: BackendSpec) -> None:
        """--encperf-lifecycle-cycles N: after the benchmark volume, N-1 more life cycles of a
        fresh volume of the same backend on the same target (so each cycle times the same
        thing), each step's seconds added to the backend's samples. Interrupted, close_all
        releases the volume open at that moment."""
        spec_text = str(spec)
        backend = make_backend(spec)
        for _ in range(self.settings.lifecycle_cycles - 1):
            workdir = self.run_dir() / f"{next(self._counter):02d}-cycle-{slug(spec_text)}"
            cycle = open_volume(backend, self.target, workdir)
            self._open.append(cycle)
            with host.signals_deferred():
                self._open.remove(cycle)
                close_volume(cycle)
            for step, seconds in cycle.lifecycle.items():
                self.lifecycle[spec_text].setdefault(step, []).append(seconds)

    def _extra_volumes_allowed(self, spec: BackendSpec, what: str) -> None:
        """VolumeFailure/VolumeSkip unless ``what`` may make volumes of its own for ``spec``:
        never on the partition target, whose device the benchmark volumes hold (DeviceClaim) and
        which the user named for them alone."""
        spec_text = str(spec)
        if self.refused:
            raise VolumeFailure(self.refused)
        if self.target.kind == "partition":
            raise VolumeSkip(f"{spec_text}: {what} runs on the container target only, not on a partition")
        if spec_text in self.skipped:
            raise VolumeSkip(f"{spec_text}: {self.skipped[spec_text]}")

    def measure_kdf(self, spec: BackendSpec) -> KdfTiming:
        """The kdf profile's row of one backend (pytest_encperf.kdf); VolumeSkip with the reason
        when the backend cannot run here."""
        self._extra_volumes_allowed(spec, "the kdf profile")
        workdir = self.run_dir() / f"{next(self._counter):02d}-kdf-{slug(str(spec))}"
        try:
            # not beside another worker's measurement: a key derivation is CPU and memory bound
            with self.between_measurements():
                return kdf.measure(spec, self.target, workdir)
        except kdf.KdfUnavailable as exc:  # its own skip: the backend's benchmark may still run
            raise VolumeSkip(f"{spec}: {exc}") from None

    def measure_inplace(self, spec: BackendSpec) -> InplaceTiming:
        """The in-place encryption figure of one backend (pytest_encperf.inplace) with a file of
        ``--encperf-size``; VolumeSkip with the reason when the backend cannot run here."""
        self._extra_volumes_allowed(spec, "in-place encryption")
        workdir = self.run_dir() / f"{next(self._counter):02d}-inplace-{slug(str(spec))}"
        try:
            with self.between_measurements():
                return inplace.measure(spec, self.target, workdir, self.settings.size)
        except inplace.InplaceUnavailable as exc:  # its own skip, as the kdf profile's
            raise VolumeSkip(f"{spec}: {exc}") from None

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

    # ------------------------------------------------------------- the measurement lock

    def measuring(self, *volumes: MountedVolume | None) -> AbstractContextManager[float]:
        """The measurement lock for rounds on ``volumes`` (exclusive)."""
        return host.measurement_lock(self.lock_disks(*volumes), waiting=self.lock_waiting())

    def beside_measuring(self, *volumes: MountedVolume | None) -> AbstractContextManager[float]:
        """The measurement lock shared, for what may run beside others' work on ``volumes``."""
        return host.measurement_lock(self.lock_disks(*volumes), shared=True, waiting=self.lock_waiting())

    def between_measurements(self) -> AbstractContextManager[float]:
        """Making and removing volumes (formatting, key derivation, daemons): beside other such
        work, never beside a measurement on the same disks (the measurement lock, shared). After
        an interrupt, the wait is bounded (teardown_lock)."""
        if self.interrupted:
            return self.teardown_lock(self.lock_disks(), shared=True)
        return self.beside_measuring()

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
