"""A mounted volume and its handling: open (check, create, mount, time the first write), close
(unmount, destroy, timing each), remount, and the check that data reads back intact after a
remount (--encperf-verify). No measuring: the runner (runner.py) measures on what this makes."""

from __future__ import annotations

import hashlib
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import children, host, trust
from .backends import BackendBase, BackendError, Volume
from .engines.observe import Observe
from .host import HostError, signals_deferred
from .targets import Target


class Unavailable(Exception):
    """The backend cannot run here; the message is the skip reason."""


class IntegrityError(RuntimeError):
    """Data written through a backend did not read back intact after unmount + mount."""


VERIFY_FILE = "encperf-verify.bin"
VERIFY_BYTES = 4 * 1024 * 1024


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text)[:60]


@dataclass
class MountedVolume:
    """A created and mounted volume, as fixtures hand it to tests."""

    backend: BackendBase
    volume: Volume
    data_dir: Path
    description: dict[str, Any] = field(default_factory=dict)
    lifecycle: dict[str, float] = field(default_factory=dict)  # LIFECYCLE_STEPS -> seconds

    @property
    def spec(self) -> str:
        return str(self.backend.spec)

    @property
    def devices(self) -> tuple[str, ...]:
        """Block devices whose counters tell what reached the storage: the volume's own device
        (``Volume.device``, e.g. its loop device) or the one holding its data directory, then the
        devices below it."""
        device = self.volume.device
        name = device.name if device else host.block_device_of(self.data_dir)
        return (name, *host.devices_below(name)) if name else ()

    @property
    def daemon_pids(self) -> tuple[int, ...]:
        """The backend's own processes (FUSE daemons): those its cleanups registered, and those
        another program started for it (``Volume.foreign_daemons``)."""
        resources = [*self.volume.created.resources, *self.volume.mounted.resources]
        ours = [int(r.ident) for r in resources if r.kind == "process" and r.ident.isdigit()]
        # a daemon registered before it started is known by its mark (and so is what it forked)
        ours += [
            m.process.pid for r in resources if r.kind == "daemon" for m in children.marked_processes(r.ident)
        ]
        return tuple(ours + [pid for pid in self.volume.foreign_daemons if pid not in ours])

    @property
    def caveats(self) -> tuple[str, ...]:
        """What holds for every round on this volume (model.CAVEATS): a loop device among its
        devices whose direct I/O is off (the container's attach asked for it; the kernel or the
        file below can refuse, as a FUSE export does)."""
        loops = [name for name in self.devices if (Path("/sys/block") / name / "loop").is_dir()]
        off = [name for name in loops if not host.loop_direct_io(Path("/dev") / name)]
        return ("loop-dio-off",) if off else ()

    def observe(self) -> Observe:
        return Observe(
            devices=self.devices,
            daemon_pids=self.daemon_pids,
            store_below=self.backend.store_below,
            store_devices=tuple(device.name for device in self.backend.store_devices(self.volume)),
            caveats=self.caveats,
        )


FIRST_WRITE_FILE = ".encperf-first-write"
FIRST_WRITE_BYTES = 4096


def open_volume(backend: BackendBase, target: Target, workdir: Path) -> MountedVolume:
    """Check, create and mount; on any failure everything made so far is torn down."""
    problems = backend.unavailable_reasons(target)
    if problems:
        raise Unavailable("; ".join(problems))
    workdir.parent.mkdir(parents=True, exist_ok=True)  # a session's run directory: there already
    trust.make_private_dir(workdir)  # 0700 whatever the umask: dead-run cleanup checks it
    volume: Volume | None = None
    try:
        started = time.perf_counter()
        volume = backend.create(target, workdir)
        created = time.perf_counter()
        data_dir = backend.mount(volume)
        mounted = time.perf_counter()
        # the base times its steps without the availability checks; a backend that overrides
        # create() or mount() is timed whole
        lifecycle = {
            "create": volume.timings.get("create", created - started),
            "mount": volume.timings.get("mount", mounted - created),
            "first write": first_write_seconds(data_dir),
        }
        return MountedVolume(backend, volume, data_dir, backend.describe(volume), lifecycle)
    except (BackendError, HostError, OSError) as exc:
        if volume is not None:
            backend.destroy(volume)
        message = str(exc)
        if not message.startswith(f"{backend.spec}:"):  # backends' own errors name it already
            message = f"{backend.spec}: {message}"
        raise BackendError(message) from exc
    except BaseException:  # Ctrl-C / SIGTERM: a second one must not cut the teardown in half
        if volume is not None:
            with signals_deferred():
                backend.destroy(volume)
        raise


def first_write_seconds(data_dir: Path) -> float:
    """How long the first durable write on a freshly mounted volume takes: one FIRST_WRITE_BYTES
    file created, written and fsynced (what a FUSE daemon or a key derivation left for the first
    I/O shows here), then removed."""
    path = data_dir / FIRST_WRITE_FILE
    data = os.urandom(FIRST_WRITE_BYTES)
    started = time.perf_counter()
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    seconds = time.perf_counter() - started
    path.unlink()
    return seconds


def close_volume(mounted: MountedVolume) -> None:
    """Unmount, then destroy: each step's time joins the volume's life cycle."""
    started = time.perf_counter()
    mounted.backend.unmount(mounted.volume)
    unmounted = time.perf_counter()
    mounted.backend.destroy(mounted.volume)
    mounted.lifecycle.update(unmount=unmounted - started, destroy=time.perf_counter() - unmounted)


def remount_volume(mounted: MountedVolume) -> None:
    """Unmount and mount again (both through the backend), so reads come from the disk."""
    mounted.backend.unmount(mounted.volume)
    mounted.data_dir = mounted.backend.mount(mounted.volume)


def _sha256(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return "missing"


def verify_after_remount(mounted: MountedVolume, names: list[str]) -> None:
    """Checksum ``names`` (files in the data directory) and a known pattern file, remount the
    volume, checksum again: any difference raises IntegrityError naming the file."""
    size = VERIFY_BYTES
    pattern = random.Random(f"encperf-verify {mounted.spec}").randbytes(size)
    with (mounted.data_dir / VERIFY_FILE).open("wb") as handle:
        handle.write(pattern)
        handle.flush()
        os.fsync(handle.fileno())
    expected = {VERIFY_FILE: hashlib.sha256(pattern).hexdigest()}
    expected.update({name: _sha256(mounted.data_dir / name) for name in names})
    remount_volume(mounted)
    got = {name: _sha256(mounted.data_dir / name) for name in expected}
    bad = [
        f"{name}: sha256 {expected[name][:16]}... written, {got[name][:16]}... read back"
        for name in expected
        if got[name] != expected[name]
    ]
    if bad:
        raise IntegrityError(
            f"{mounted.spec}: data did not read back intact after unmount + mount: {'; '.join(bad)}"
        )
