"""Every resource a run holds, and the one way each kind of resource is released.

A run registers each resource (file or directory, loop device, mount, daemon, dm mapping, and
the kinds backends add: fscrypt keys, VeraCrypt volumes) on a :class:`Cleanup` the moment it
exists, or, for what a tool makes for itself, just before the tool runs. The same release
function frees it whether the run releases it at teardown (``Cleanup.release``) or a later
process does after the run was killed (``deadruns.release_dead_runs``): same order (newest
first), same tools, same test of whether it is still there.

Backends register the kinds they add with :func:`register_kind`; this module imports no
backend. A kind also says how a dead run's entry is held to that run's own directories and
names (trust.RunScope), and what it rests on (its footprint), so that a failed release keeps
only what may rest on it. Which process a pid names is processes.py's job; the rules for
trusting a path are trust.py's; key-file directories are secretdirs.py's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import shutil
import subprocess
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from . import children, devicemapper, host, mounting, mounttable
from .footprints import Failed, Footprint, Holdback, Kept, Released
from .host import HostError
from .processes import ProcessStart, executable, foreign_process, is_alive, process_start
from .trust import Gone, Reused, RunScope, unsafe_ancestor

PROCESS_EXIT_WAIT = 10.0  # seconds a process gets after SIGTERM (and after SIGKILL)


@dataclass(frozen=True)
class Resource:
    """What a release frees, in a form a later process can act on (journal, dead-run cleanup).

    kind: "path" (file or directory), "mount" (mount point), "loop" (device, detail = backing
    file), "dm" (device-mapper name), "process" (pid, detail = executable, started = its
    ProcessStart, or the wall-clock start time an older journal recorded, wait = seconds it may
    take to exit by itself first), "daemon" (a daemon registered before it started: ident = the
    mark it carries, see children.py, detail = executable, wait as for a process), a kind a
    backend registered, or "other" (an in-memory action only this process can do; never
    journaled).
    """

    kind: str
    ident: str
    detail: str = ""
    started: ProcessStart | float | None = None
    wait: float = 0.0


@dataclass(frozen=True)
class Kind:
    """How resources of one kind are released, and what a dead run's journal may say of them.

    ``release`` returns what it did (a line for the user); it is a no-op with a message when the
    resource is gone already. ``check`` says why a dead run's entry cannot be trusted (None when
    it can) given the run's scope; it may raise Gone.
    """

    release: Callable[[Resource], str]
    check: Callable[[Resource, RunScope], str | None]
    footprint: Callable[[Resource], Footprint] | None = None


KINDS: dict[str, Kind] = {}


def _check_ident_path(resource: Resource, scope: RunScope) -> str | None:
    return scope.unsafe(resource.ident)


def register_kind(
    name: str,
    release: Callable[[Resource], str],
    *,
    check: Callable[[Resource, RunScope], str | None] = _check_ident_path,
    footprint: Callable[[Resource], Footprint] | None = None,
) -> None:
    """Add (or replace, on re-import) the release function of a resource kind; ``check`` holds
    a dead run's entry to the run's scope (default: ``ident`` is a path it acts on);
    ``footprint`` says what a resource is and rests on, so that when one release fails, what
    does not rest on it (nor it on that) is still released (default: not known, nothing is)."""
    KINDS[name] = Kind(release, check, footprint)


def footprint(resource: Resource) -> Footprint:
    """What ``resource`` is and rests on, now (see Footprint); None when its kind cannot say."""
    kind = KINDS.get(resource.kind)
    if kind is None or kind.footprint is None:
        return None
    try:
        return kind.footprint(resource)
    except Exception:  # a footprint that cannot be read holds everything: never a reason to force
        return None


def release(resource: Resource) -> str:
    """Release ``resource`` with its kind's function; HostError for a kind nobody registered."""
    kind = KINDS.get(resource.kind)
    if kind is None:
        raise HostError(f"no way to release a {resource.kind!r} resource (its backend is not loaded)")
    return kind.release(resource)


def release_unless_held(holdback: Holdback, name: str, resource: Resource) -> Kept | Failed | Released[str]:
    """Release ``resource`` with its kind's function unless what ``holdback`` holds may rest on
    it (footprints.Holdback: journaled resources, released by this run or a later one)."""
    return holdback.release(
        name, functools.partial(release, resource), functools.partial(footprint, resource)
    )


def process_resource(pid: int, *, wait: float = 0.0) -> Resource:
    """A process as a resource: pid, start and executable, which together identify it."""
    return Resource("process", str(pid), executable(pid), process_start(pid), wait)


def _release_process(resource: Resource) -> str:
    what = f"{os.path.basename(resource.detail) or 'process'} (pid {resource.ident})"
    foreign = foreign_process(int(resource.ident), resource.started, resource.detail)
    if foreign:
        return f"{what}: {foreign}: left alone"
    if not is_alive(int(resource.ident), resource.started):
        return f"{what}: not running any more"
    try:
        process = psutil.Process(int(resource.ident))
        if resource.wait:  # a FUSE daemon exits by itself once its mount is gone
            with contextlib.suppress(psutil.TimeoutExpired):
                process.wait(timeout=resource.wait)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return f"stopped {what}"
    host.stop_process(process, PROCESS_EXIT_WAIT)
    return f"stopped {what}"


def _check_process(resource: Resource, scope: RunScope) -> str | None:
    if not resource.ident.isdigit():
        return f"process {resource.ident!r} is not a pid"
    if resource.started is None or not resource.detail:
        return f"process {resource.ident}: no start time and executable recorded, cannot tell it is the run's"
    return foreign_process(int(resource.ident), resource.started, resource.detail)


def _release_daemon(resource: Resource) -> str:
    """A daemon started with call mark ``ident`` (children.py), and whatever it forked: given
    ``wait`` s to exit by itself, then SIGTERM, then SIGKILL."""
    what = f"{os.path.basename(resource.detail) or 'daemon'} ({resource.ident})"
    running = [marked.process for marked in children.marked_processes(resource.ident)]
    if not running:
        return f"{what}: not running any more"
    deadline = time.monotonic() + resource.wait
    for process in running:
        with contextlib.suppress(psutil.Error):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in running:
        host.stop_process(process, PROCESS_EXIT_WAIT)
    return f"stopped {what}"


def _check_daemon(resource: Resource, scope: RunScope) -> str | None:
    if not re.fullmatch(rf"encperf-{scope.pid}-[0-9a-f]+/[0-9a-f]+", resource.ident):
        return f"daemon {resource.ident!r} is not one of this run's (encperf-{scope.pid}-*/*)"
    return None


# ---------------------------------------------------------------- mounts, loop devices, dm, files


def _redirectable(path: Path, action: str) -> None:
    """HostError when another user could have redirected ``path`` (a symbolic link or a
    directory of theirs on the way to it): releases act by name, and a name others can change
    may now lead anywhere. The run's own teardown is held to this as well as a dead run's."""
    problem = unsafe_ancestor(path.parent)
    if problem:
        raise HostError(f"not {action} {path}: {problem} (another user could redirect it)")


def _release_mount(resource: Resource) -> str:
    mountpoint = Path(resource.ident)
    if not mounting.is_mounted(mountpoint):
        return f"{mountpoint}: not mounted any more"
    _redirectable(mountpoint, "unmounting")
    # a loop device over a file of this mount (a FUSE export) would keep it busy, and once the
    # mount is lazily gone the loop device names "/" as its file: nothing could find it again
    _detach_loops_in(mountpoint)
    return _unmount(mountpoint)


def _unmount(mountpoint: Path) -> str:
    if mounting.unmount(mountpoint):
        warnings.warn(f"{mountpoint} was still busy: unmounted lazily", RuntimeWarning, stacklevel=2)
        return f"unmounted {mountpoint} (lazily: it was still busy)"
    return f"unmounted {mountpoint}"


def _mounts_of(device: Path) -> list[Path]:
    """Where loop device ``device`` is mounted, deepest first."""
    table = mounttable.lines(mounttable.MOUNTS)
    found = [Path(fields[1]) for fields in table if len(fields) > 1 and fields[0] == str(device)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _detach_loop_and_unmount_it(device: Path, backing_file: Path | None = None) -> bool:
    """Unmount what is mounted from loop device ``device`` (ours: its backing file is), then
    detach it; False when it was not attached (to ``backing_file``) any more."""
    attached = host.loop_backing_file(device)
    if attached is None:
        return False
    attached = attached.removesuffix(host.DELETED)
    if backing_file is not None and attached != str(backing_file):
        return False
    for mountpoint in _mounts_of(device):
        _unmount(mountpoint)
    # still that file when detached: checked again on the device's descriptor (host.detach_loop)
    return host.detach_loop(device, backing_file or Path(attached))


def _detach_loops_in(path: Path) -> None:
    """Detach the loop devices backed by ``path`` or by a file under it, unmounting first what
    is mounted from them."""
    for device in [*host.loops_backed_by(path), *_loops_backed_by_file(path)]:
        _detach_loop_and_unmount_it(device)


def _release_loop(resource: Resource) -> str:
    device = Path(resource.ident)
    if not _detach_loop_and_unmount_it(device, Path(resource.detail) if resource.detail else None):
        return f"{device}: not attached to {resource.detail} any more"
    return f"detached {device}"


def _check_loop(resource: Resource, scope: RunScope) -> str | None:
    """A dead run's loop device is detached only while the kernel names exactly the backing
    file the run recorded (see host.detach_loop), and that file must lie in the run's own
    directories, reached through directories of the run only: a run directory aged out and made
    again (as a link into another run's directory, say) is no longer the run's."""
    if not re.fullmatch(r"/dev/loop[0-9]+", resource.ident):
        return f"{resource.ident} is not a loop device"
    attached = host.loop_backing_file(Path(resource.ident))
    reused = attached is not None and attached.removesuffix(host.DELETED) != resource.detail
    try:
        reason = scope.unsafe(resource.detail)
    except Gone:
        if attached == resource.detail + host.DELETED:
            return None  # its file went with its directory while attached: still the run's
        if reused:
            raise Reused(f"{resource.ident} now belongs to another file ({attached}): left alone") from None
        raise
    if not reason and reused:  # detach_loop would not touch it either: say why, not "not attached"
        raise Reused(f"{resource.ident} now belongs to another file ({attached}): left alone")
    return reason


TOKEN_PATTERN = "[0-9a-f]{16}"
_run_tokens: dict[int, str] = {}


def run_token() -> str:
    """This process's random run token (16 hex digits, one per process, a forked child gets its
    own): a name carrying it and the pid (device-mapper names) is told apart from the names of a
    later process that got the same pid. Its journal records it."""
    return _run_tokens.setdefault(os.getpid(), secrets.token_hex(8))


def dm_name(pid: int, token: str, number: int) -> str:
    """The device-mapper name of a run's ``number``-th mapping: ``encperf-<pid>-<token>-<n>``."""
    return f"encperf-{pid}-{token}-{number}"


def _release_dm(resource: Resource) -> str:
    if not re.fullmatch(rf"encperf-[0-9]+-{TOKEN_PATTERN}-[0-9]+", resource.ident):
        raise HostError(
            f"not closing dm target {resource.ident!r}: not a name a run makes (encperf-<pid>-<token>-N)"
        )
    if not devicemapper.remove_dm(resource.ident):
        return f"dm {resource.ident}: not active any more"
    return f"closed dm target {resource.ident}"


def _check_dm(resource: Resource, scope: RunScope) -> str | None:
    """A dead run's mapping is closed only by a name carrying its pid and its run token: pids are
    reused (pid_max is often 32768), so ``encperf-<pid>-N`` alone may be a live run's mapping."""
    if scope.token is None:
        return (
            f"dm target {resource.ident!r}: cannot tell it is this run's (its journal, of an older "
            "version, records no run token, and the pid may be another run's now)"
        )
    if not re.fullmatch(rf"encperf-{scope.pid}-{re.escape(scope.token)}-[0-9]+", resource.ident):
        return f"dm target {resource.ident!r} is not one of this run's (encperf-{scope.pid}-{scope.token}-N)"
    return None


def _release_path(resource: Resource) -> str:
    path = Path(resource.ident)
    if not path.is_absolute() or path == Path(path.anchor):
        raise HostError(f"not removing {path}: not an absolute path below /")
    # a dead FUSE mount fails lstat (lexists() says it is gone); a symbolic link is never followed
    mounted = not os.path.islink(path) and mounting.is_mounted(path)
    if not mounted and not os.path.lexists(path):
        return f"{path}: already gone"
    _redirectable(path, "removing")
    if mounted or (path.is_dir() and not path.is_symlink()):
        # What a kill between "made" and "registered" can leave in or on a path of ours: mounts
        # (a FUSE export is mounted on a file) and loop devices backed by its files.
        _unmount_everything_under(path)
        inside = mounting.mounts_under(path)
        if inside:  # never delete through (or unlink) a mount that failed to come off
            raise HostError(f"not removing {path}: still mounted at {', '.join(map(str, inside))}")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)  # never follows symbolic links
    else:
        path.unlink()
    return f"removed {path}"


def _loops_backed_by_file(path: Path) -> list[Path]:
    """Loop devices whose backing file is ``path`` itself (the kernel's name: its real path)."""
    real = os.path.realpath(path)
    found = []
    for entry in Path("/sys/block").glob("loop*"):
        backing = host.loop_backing_file(Path("/dev") / entry.name)
        if backing is not None and backing.removesuffix(host.DELETED) == real:
            found.append(Path("/dev") / entry.name)
    return found


def _unmount_everything_under(path: Path) -> None:
    """Unmount the mounts at or under ``path`` and detach the loop devices backed by files
    there: first the mounts no loop device reads from (deepest first: a file system on one of
    those loop devices), then the loop devices (with what is mounted from them elsewhere), then
    the rest (a FUSE export under a loop device)."""
    loops = [*host.loops_backed_by(path), *_loops_backed_by_file(path)]
    backing = {(host.loop_backing_file(device) or "").removesuffix(host.DELETED) for device in loops}

    def under_a_loop(mountpoint: Path) -> bool:
        return any(name == str(mountpoint) or name.startswith(f"{mountpoint}/") for name in backing)

    for mountpoint in _deepest_first([m for m in mounting.mounts_under(path) if not under_a_loop(m)]):
        _unmount(mountpoint)
    for device in loops:
        _detach_loop_and_unmount_it(device)
    for mountpoint in _deepest_first(mounting.mounts_under(path)):
        _unmount(mountpoint)


def _deepest_first(mountpoints: list[Path]) -> list[Path]:
    return sorted(mountpoints, key=lambda p: len(p.parts), reverse=True)


def _ident_footprint(resource: Resource) -> Footprint:
    return (resource.ident,)


def _mount_footprint(resource: Resource) -> Footprint:
    """A mount point and the device mounted there; a FUSE mount rests on a daemon no entry names."""
    for fields in mounttable.lines(mounttable.MOUNTS):
        if len(fields) > 2 and fields[1] == resource.ident:
            if fields[2].startswith("fuse"):
                return None
            return (resource.ident, fields[0]) if fields[0].startswith("/dev/") else (resource.ident,)
    return (resource.ident,)


def _loop_footprint(resource: Resource) -> Footprint:
    return (resource.ident, resource.detail) if resource.detail else (resource.ident,)


def _dm_footprint(resource: Resource) -> Footprint:
    """A mapping's device and the devices it maps (a loop device under dm-crypt)."""
    found = [f"/dev/mapper/{resource.ident}"]
    for entry in Path("/sys/block").glob("dm-*"):
        with contextlib.suppress(OSError):
            if (entry / "dm" / "name").read_text().strip() == resource.ident:
                found.append(f"/dev/{entry.name}")
                found += [f"/dev/{slave.name}" for slave in (entry / "slaves").iterdir()]
    return tuple(found)


register_kind("path", _release_path, footprint=_ident_footprint)
register_kind("mount", _release_mount, footprint=_mount_footprint)
register_kind("loop", _release_loop, check=_check_loop, footprint=_loop_footprint)
register_kind("dm", _release_dm, check=_check_dm, footprint=_dm_footprint)
# a process's or daemon's footprint is not known (what it serves, what it holds open)
register_kind("process", _release_process, check=_check_process)
register_kind("daemon", _release_daemon, check=_check_daemon)


# ---------------------------------------------------------------- holding resources


class ResourceObserver(Protocol):
    """Told about every resource a Cleanup registers and releases (the run's journal)."""

    def registered(self, resource: Resource, label: str) -> object:
        """Record ``resource``; the returned token is handed back to ``released``."""
        ...

    def released(self, token: object) -> None: ...


_observers: list[ResourceObserver] = []
_observers_lock = threading.Lock()


def install_observer(observer: ResourceObserver) -> None:
    """Every Cleanup created from now on reports to ``observer`` (the newest one installed)."""
    with _observers_lock:
        _observers.append(observer)


def remove_observer(observer: ResourceObserver) -> None:
    with _observers_lock:
        if observer in _observers:
            _observers.remove(observer)


def current_observer() -> ResourceObserver | None:
    with _observers_lock:
        return _observers[-1] if _observers else None


class Cleanup:
    """A last-in-first-out stack of release actions, registered the moment a resource exists.

    ``release()`` goes on past a failure with every action that does not rest on what failed,
    empties the stack (so a second call is a no-op) and then raises one HostError naming every
    failure and what it kept. Typed registrations
    (``add`` and the helpers ``path``, ``loop``, ``mount``, ``dm``, ``process``) release through
    their kind's function, the one a later process uses on this run's journal if this process
    dies; each is reported to the observer (the run's journal, installed by the session) when
    the Cleanup is created. ``push`` registers an in-memory action ("other") nobody else can do.
    """

    def __init__(self, observer: ResourceObserver | None = None) -> None:
        self._actions: list[tuple[str, Callable[[], object], Resource, object]] = []
        self._observer = observer if observer is not None else current_observer()

    def push(self, label: str, action: Callable[[], object], resource: Resource | None = None) -> None:
        resource = resource or Resource("other", label)
        token = None
        if self._observer is not None and resource.kind != "other":
            # the journal is a second line of defence: failing to write it (disk full) must
            # never keep the release action from being registered
            with contextlib.suppress(Exception):
                token = self._observer.registered(resource, label)
        self._actions.append((label, action, resource, token))

    def add(self, resource: Resource, label: str | None = None) -> None:
        """Register ``resource``, released by its kind's function."""
        if resource.kind not in KINDS:
            raise HostError(f"no release function for {resource.kind!r} resources (register_kind)")
        self.push(label or f"release {resource.kind} {resource.ident}", lambda: release(resource), resource)

    def path(self, path: Path) -> None:
        self.add(Resource("path", str(path)), f"remove {path}")

    def loop(self, device: Path, backing_file: Path) -> None:
        """A loop device we attached to ``backing_file``; recorded with the kernel's name of the
        file (its real path), which its release compares exactly."""
        attached = host.loop_backing_file(device)
        backing = attached if attached and not attached.endswith(host.DELETED) else str(backing_file)
        self.add(Resource("loop", str(device), backing), f"detach {device}")

    def mount(self, mountpoint: Path) -> None:
        self.add(Resource("mount", str(mountpoint)), f"unmount {mountpoint}")

    def dm(self, name: str) -> None:
        """A device-mapper mapping (dm-crypt, tcrypt, bitlk), closed by name."""
        self.add(Resource("dm", name), f"close dm {name}")

    def process(self, proc: subprocess.Popen[bytes], *, wait: float = 0.0) -> None:
        """Register a daemon we started: SIGTERM (after ``wait`` s to exit by itself), SIGKILL.

        Start daemons with ``stdin=subprocess.DEVNULL`` or a pipe (never a terminal to prompt
        on) and the secret on a pipe or in a SecretDir file, never in argv: the test suite scans
        every process's /proc/<pid>/cmdline and environ while a volume is mounted.
        """
        resource = process_resource(proc.pid, wait=wait)

        def stop() -> None:
            release(resource)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=PROCESS_EXIT_WAIT)  # reap our child

        name = os.path.basename(resource.detail) or os.path.basename(str(proc.args))
        self.push(f"stop {name} (pid {proc.pid})", stop, resource)

    def daemon(self, call: str, program: str, *, wait: float = 0.0) -> list[subprocess.Popen[bytes]]:
        """Register, before it starts, a daemon that will carry call mark ``call``
        (children.new_call) in its environment: found by that mark (with whatever it forks),
        given ``wait`` s to exit by itself, then SIGTERM, SIGKILL. Append its Popen to the list
        returned, so that our teardown reaps it."""
        resource = Resource("daemon", call, program, None, wait)
        started: list[subprocess.Popen[bytes]] = []

        def stop() -> None:
            release(resource)
            for proc in started:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=PROCESS_EXIT_WAIT)  # reap our child

        self.push(f"stop {os.path.basename(program)} ({call})", stop, resource)
        return started

    def drop_last(self, resource: Resource) -> None:
        """Forget the newest registration, ``resource``, without releasing it (it was never made
        by us: the name was taken)."""
        if not self._actions or self._actions[-1][2] != resource:
            raise HostError(f"drop_last: {resource.kind} {resource.ident} is not the newest registration")
        _, _, _, token = self._actions.pop()
        if token is not None and self._observer is not None:
            with contextlib.suppress(Exception):
                self._observer.released(token)

    def __len__(self) -> int:
        return len(self._actions)

    @property
    def labels(self) -> list[str]:
        return [label for label, _, _, _ in self._actions]

    @property
    def resources(self) -> list[Resource]:
        return [resource for _, _, resource, _ in self._actions]

    def release(self) -> None:
        """Release newest first. After a failure, the rule of a dead run's cleanup holds here too
        (journal.release_dead_runs): an older resource that the failed one, or one kept, may rest
        on (footprints.overlaps) is kept, and stays in the journal for ``encperf cleanup``;
        everything else is still released. In-memory actions (``push`` without a resource: forget
        a key) always run: nobody else could do them later."""
        errors: list[str] = []
        kept: list[str] = []
        holdback = Holdback()
        while self._actions:
            label, action, resource, token = self._actions.pop()
            typed = resource.kind != "other"  # an in-memory action rests on nothing
            attempt = holdback.release(
                label, action, functools.partial(footprint, resource) if typed else None
            )
            match attempt:
                case Kept(blocker):
                    kept.append(f"{label} (may rest on {blocker})")
                case Failed(error):  # keep releasing what does not rest on it, report all at the end
                    errors.append(f"{label}: {error}")
                case Released() if token is not None and self._observer is not None:
                    with contextlib.suppress(Exception):  # never let the journal stop a teardown
                        self._observer.released(token)
        if errors:
            also = f"; kept for `encperf cleanup`: {'; '.join(kept)}" if kept else ""
            raise HostError("cleanup failed: " + "; ".join(errors) + also)
