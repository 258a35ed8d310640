"""Backends: how an encrypted (or plain) volume is made, mounted and removed.

A backend is one module plus one line in ``REGISTRY``. Modules are imported on first use, so
one backend's missing dependency never breaks the others (fsspec's registry does the same).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

from .. import host, mounting, sweep
from ..host import HostError
from ..model import BASELINE
from ..parsing import parse_choice, parse_text
from ..resources import Cleanup
from ..targets import Target, create_container, wipe_own_signature

# name -> "module:Class" (relative to this package) or a class registered by a hook
REGISTRY: dict[str, str | type[BackendBase]] = {
    "plain": "plain:PlainBackend",
    "fscrypt": "fscrypt:FscryptBackend",
    "ecryptfs": "ecryptfs:EcryptfsBackend",
    "luks2": "dmcrypt:LuksBackend",
    "luks": "dmcrypt:LuksBackend",
    "luks1": "dmcrypt:LuksBackend",
    "dm-plain": "dmcrypt:PlainDmcryptBackend",
    "tcrypt": "existingvolumes:TcryptBackend",
    "bitlk": "existingvolumes:BitlkBackend",
    "veracrypt": "veracrypt:VeracryptBackend",
    "gocryptfs": "fuse:GocryptfsBackend",
    "encfs": "fuse:EncfsBackend",
    "cryfs": "fuse:CryfsBackend",
    "securefs": "fuse:SecurefsBackend",
    "qemu-luks": "qemu:QemuLuksBackend",
    "bitlocker": "bitlocker:BitlockerBackend",
}


# Left out of ``auto``: aliases (luks = luks2) and backends that open a volume someone else
# made, which need its image or device and password file as parameters.
NOT_IN_AUTO: tuple[str, ...] = ("luks", "tcrypt", "bitlk", "bitlocker")

# VeraCrypt's largest PIM for a volume that is not a system disk: spec parameters give every
# number an upper limit (parsing.parse_int), so a huge one is a usage error, not a tool's failure.
MAX_PIM = 2147468

_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_KEY = re.compile(r"^[a-z][a-z0-9-]*$")


class BackendError(RuntimeError):
    """Creating, mounting or removing a volume failed; the message names backend and cause."""


@dataclass(frozen=True)
class BackendSpec:
    """``name[:key=value,...]``; the spec string is the identity of a backend's results."""

    name: str
    params: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> BackendSpec:
        text = text.strip()
        name, colon, rest = text.partition(":")
        if not _NAME.match(name):
            raise ValueError(f"bad backend spec {text!r}: expected name[:key=value,...], e.g. fscrypt")
        if colon and not rest.strip():
            raise ValueError(
                f"bad backend spec {text!r}: a ':' with no parameters after it: "
                f"write {name} alone, or {name}:key=value"
            )
        params: dict[str, str] = {}
        if rest:
            for item in rest.split(","):
                key, eq, value = item.partition("=")
                key, value = key.strip(), value.strip()
                if not eq or not _KEY.match(key) or not value:
                    raise ValueError(f"bad parameter {item!r} in backend spec {text!r}: expected key=value")
                if key in params:
                    raise ValueError(f"parameter {key!r} given twice in backend spec {text!r}")
                params[key] = value
        return cls(name, tuple(params.items()))

    @property
    def param_dict(self) -> dict[str, str]:
        return dict(self.params)

    def __str__(self) -> str:
        if not self.params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in self.params)


# The plain baseline's spec, as the fixtures and the partition's plain rounds open it.
BASELINE_SPEC = BackendSpec(BASELINE)


@dataclass
class Volume:
    """A volume and every resource it holds, so teardown can always find them."""

    backend: BackendBase
    target: Target
    workdir: Path  # private to this volume: container file, mount point, key files
    data_dir: Path | None = None  # where workloads put their files, once mounted
    created: Cleanup = field(default_factory=Cleanup)  # released by destroy()
    mounted: Cleanup = field(default_factory=Cleanup)  # released by unmount()
    # the block device the volume's data reaches (its loop device, the partition), whose counters
    # the runner reads; None on a directory target or until the backend has one
    device: Path | None = None
    # whether the loop device under the volume has direct I/O (None: no loop device of ours)
    loop_direct_io: bool | None = None
    state: dict[str, Any] = field(default_factory=dict)  # backend-private (key ids, secrets, paths)
    # daemons serving this volume that another program started (VeraCrypt forks its FUSE
    # process): their CPU counts as the volume's, like that of the daemons on ``mounted``
    foreign_daemons: list[int] = field(default_factory=list)
    # seconds of the base's create() and mount() steps alone (build, open), without the checks
    # before them: the volume's life cycle timings
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Param:
    """One parameter of a backend's spec: its key, the parser of its text (a function of
    ``pytest_encperf.parsing``: ValueError names the accepted forms), the value it has when the
    spec leaves it out (None: not given, the tool's own default), and what it does (one line,
    for whoever reads the table; docs/reference/backends.md is generated from it)."""

    name: str
    parse: Callable[[str], Any] = parse_text
    default: Any = None
    help: str = ""


KDF_SETTINGS = ("fast", "default")
# The ``kdf`` parameter of every backend whose key derivation has a cost setting: benchmark volumes
# use the fast one (quick to open, not fit for real secrets); ``default`` is what the tool does
# for a real volume. The kdf profile (pytest_encperf.kdf) times opening with each.
KDF_PARAM = Param(
    "kdf",
    parse_choice(KDF_SETTINGS),
    "fast",
    "key derivation: fast (benchmark only, not for real secrets) or default (the tool's own)",
)


class BackendUnavailable(BackendError):
    """create() or mount() of a backend that cannot run here: the message lists the reasons."""


BLOCK_KINDS = ("container", "partition")  # targets that give a block device (loop or partition)


class BackendBase:
    """The common work of a backend; a new backend is one subclass in one module plus one line
    in ``REGISTRY``.

    What a subclass declares:

    - ``params``: its parameter table, a tuple of ``Param(name, parser, default, help)``; the
      parsed values are in ``self.options[name]`` (the default when the spec leaves it out). An
      unknown key or a bad value is a ValueError naming the backend, the key and the accepted
      forms. Checks that span parameters go in ``__init__`` after ``super().__init__(spec)``.
    - ``requirements(target)``: what it needs of this machine (tools, kernel features, files
      its spec names), each a skip reason starting with its name. ``problems(target)`` is the
      target's own rules (``target_problems``, override only to relax them) plus these.
    - ``build(volume)``: the steps of create() after the Volume exists (default: ext4 on the
      target's block device, nothing on a directory). ``open(volume) -> Path``: the steps of
      mount(), returning the root under which the data directory (``data_dir_name``) lives
      (default: mount that ext4, or the volume's directory). ``describe(volume)``.
    - optionally ``partition_refusal(target)`` (None when the volume lives on the partition)
      and ``store_below``.

    What the base does around those steps: create() and mount() refuse with
    ``BackendUnavailable`` when the backend cannot run (create: ``unavailable_reasons``, which is
    ``problems`` and the placement rules, the one answer the run's skips and ``encperf backends``
    give too; mount: ``requirements``, since a created volume has changed its target); every
    resource a step registers on ``volume.created`` / ``volume.mounted`` is released when the
    step fails (``undo_on_failure``: destroy after a failed create, unmount after a failed
    mount), and a tool or system error becomes a BackendError naming the spec and the step;
    unmount() and destroy() release those cleanups, idempotently.

    Helpers for the steps: ``target_device`` (the loop device over a fresh container, or the
    partition), ``ext4_on_target`` (that device with ext4 on it), ``mount_target`` (it mounted,
    or the directory), ``stack_root`` (that, mounted for the volume's life, with the directories
    of a stacked layer in it), ``ext4_requirements`` and ``describe_target``.
    """

    params: tuple[Param, ...] = ()
    data_dir_name = "data"
    create_step = "create"  # what errors of build() call the step ("open" for a volume someone else made)
    # True when the volume keeps its data in a file (or device) that a user-space daemon reads
    # through the page cache below it (FUSE stores, dislocker, qemu). Dropping the test file's
    # pages between passes does not reach that cache, so buffered read rounds read at most one
    # pass (after the whole cache was dropped) instead of re-reading the store from memory.
    store_below = False
    # The key derivation settings the kdf profile times: ("fast", "default") with a ``kdf``
    # parameter (KDF_PARAM); ("default",) when the tool has no cheaper setting, so benchmark
    # volumes already pay its own; () when there is none to time, ``no_kdf`` says why.
    kdf_settings: tuple[str, ...] = ()
    no_kdf = "no key derivation"

    def __init__(self, spec: BackendSpec) -> None:
        table = {param.name: param for param in self.param_table()}
        unknown = [key for key, _ in spec.params if key not in table]
        if unknown:
            accepted = ", ".join(sorted(table)) or "none"
            raise ValueError(f"backend {spec.name!r} has no parameter {unknown[0]!r} (accepted: {accepted})")
        self.spec = spec
        given = spec.param_dict
        self.options: dict[str, Any] = {}
        for name, param in table.items():
            if name not in given:
                self.options[name] = param.default
                continue
            try:
                self.options[name] = param.parse(given[name])
            except ValueError as exc:
                raise ValueError(f"{spec.name}: {name}: {exc}") from None

    @classmethod
    def param_table(cls) -> tuple[Param, ...]:
        """The backend's parameters (``params``)."""
        return cls.params

    @property
    def name(self) -> str:
        return self.spec.name

    # ------------------------------------------------------------ availability
    def unavailable_reasons(self, target: Target) -> list[str]:
        """Why this backend cannot run on ``target`` here, empty when it can: the one decision,
        asked by the volumes (a skip), create(), the kdf and in-place measurements and
        ``encperf backends``. Its own ``problems`` and the placement rules every backend is held
        to (``placement_problems``)."""
        return self.problems(target) + placement_problems(self, target)

    def problems(self, target: Target) -> list[str]:
        """What this backend needs of ``target`` and the machine and does not have (the target's
        rules and ``requirements``); see ``unavailable_reasons`` for the whole decision."""
        return self.target_problems(target) + self.requirements(target)

    def target_problems(self, target: Target) -> list[str]:
        """The target's own rules (free space, root, loop devices, the partition's checks)."""
        return target.problems()

    def requirements(self, target: Target) -> list[str]:
        """What this backend needs of the machine beyond the target (default: mkfs.ext4 on a
        block target, for the default ``build``)."""
        return self.ext4_requirements(target)

    def ext4_requirements(self, target: Target) -> list[str]:
        if target.kind not in BLOCK_KINDS:
            return []
        return [f"{self.name}: needs {tool} (e2fsprogs)" for tool in host.missing_tools("mkfs.ext4")]

    @property
    def kdf(self) -> str:
        """The key derivation setting of this spec: fast or default."""
        return str(self.options.get("kdf", "default"))

    def kdf_label(self, volume: Volume | None = None) -> str:
        """What this spec's key derivation is (of ``volume`` when the tool that made it decides),
        for the reports; the fast one says "benchmark only"."""
        return ""

    def kdf_conflict(self, *cost_params: str) -> None:
        """Refuse ``kdf=`` given together with a parameter that sets the same cost."""
        given = [name for name in cost_params if name in self.spec.param_dict]
        if given and "kdf" in self.spec.param_dict:
            raise ValueError(
                f"{self.name}: kdf and {given[0]} both set the key derivation's cost: give one of them"
            )

    def in_place_method(self) -> str:
        """How this backend encrypts an existing volume in place (the ``encrypt_in_place``
        command), or "" when it cannot: then the in-place measurement fills a fresh volume
        through the encryption layer instead."""
        return ""

    def encrypt_in_place(
        self, target: Target, workdir: Path, fill: Callable[[Path], object]
    ) -> tuple[Volume, int, float]:
        """A plain file system filled by ``fill`` (given the data directory), then encrypted
        in place; returns the volume (now this backend's, not mounted: mount() opens it), the
        bytes encrypted and the seconds the encryption took. Only where ``in_place_method``."""
        raise NotImplementedError(f"{self.name}: no in-place encryption")

    def setup_commands(self) -> list[str]:
        """How a user sets up a real volume with this configuration (command lines, crypttab or
        fstab options), for a sweep's recommendation: real key derivation, never the benchmark's
        fast one. Empty when the spec's parameters say it all."""
        return []

    def partition_refusal(self, target: Target) -> str | None:
        """Why this backend's volume would not live on the partition target's device, or None
        when it does (it formats that device, as the plain baseline does). A volume whose data
        lives elsewhere would be compared with plain measured on another disk. A backend that
        formats the target's device overrides this."""
        return "it does not say that its volume lives on the partition (a backend must format the device)"

    def refuse_unless_available(self, reasons: list[str]) -> None:
        if reasons:
            raise BackendUnavailable(f"{self.spec}: cannot run here: " + "; ".join(reasons))

    # ------------------------------------------------------------ life cycle
    def create(self, target: Target, workdir: Path) -> Volume:
        """Check, make the Volume, run ``build`` (undone by destroy() when it fails)."""
        self.refuse_unless_available(self.unavailable_reasons(target))
        volume = Volume(self, target, workdir)
        started = time.perf_counter()
        with self.undo_on_failure(volume, self.create_step, self.destroy):
            self.build(volume)
        volume.timings["create"] = time.perf_counter() - started
        return volume

    def mount(self, volume: Volume) -> Path:
        """Check, run ``open`` (undone by unmount() when it fails), make the data directory."""
        self.refuse_unless_available(self.requirements(volume.target))
        started = time.perf_counter()
        with self.undo_on_failure(volume, "mount", self.unmount):
            data_dir = self.open(volume) / self.data_dir_name
            data_dir.mkdir(exist_ok=True)
        volume.timings["mount"] = time.perf_counter() - started
        volume.data_dir = data_dir
        return data_dir

    def build(self, volume: Volume) -> None:
        """create()'s steps: register each resource on ``volume.created`` as it appears."""
        self.ext4_on_target(volume)

    def open(self, volume: Volume) -> Path:
        """mount()'s steps: register each resource on ``volume.mounted``; return the root."""
        return self.mount_target(volume)

    @contextlib.contextmanager
    def undo_on_failure(self, volume: Volume, step: str, undo: Callable[[Volume], None]) -> Iterator[None]:
        """Run a step of create() or mount(); if it fails, Ctrl-C included, ``undo`` (destroy or
        unmount) releases what exists, and a tool or system error names the backend and step."""
        try:
            yield
        except (HostError, OSError) as exc:
            undo(volume)
            raise BackendError(f"{self.spec}: {step}: {exc}") from exc
        except BaseException:
            undo(volume)
            raise

    def unmount(self, volume: Volume) -> None:
        try:
            volume.mounted.release()
        except Exception as exc:
            raise BackendError(f"{self.spec}: unmount: {exc}") from exc
        volume.data_dir = None

    def destroy(self, volume: Volume) -> None:
        self.unmount(volume)
        try:
            volume.created.release()
        except Exception as exc:
            raise BackendError(f"{self.spec}: destroy: {exc}") from exc

    # ------------------------------------------------------------ the target, once
    def target_device(self, volume: Volume) -> Path | None:
        """The block device the target gives this volume: a loop device over a fresh sparse
        container file (registered on ``volume.created``), the partition itself, or None on a
        directory target. Recorded as ``volume.device`` and ``volume.loop_direct_io``."""
        if volume.target.kind == "partition":
            device = volume.target.node()  # the kernel's node of the device the run started with
        elif volume.target.kind == "container":
            loop = create_container(volume.target, volume.workdir, volume.created)
            volume.loop_direct_io = loop.direct_io
            device = loop.path
        else:
            return None
        volume.device = device
        return device

    def ext4_on_target(self, volume: Volume, *, features: list[str] | None = None) -> Path | None:
        """``target_device`` with a fresh ext4 on it (None on a directory target). On a
        partition the wipe of that ext4 is registered first (an interrupted mkfs may have
        written), and it wipes only the file system with this UUID."""
        from .ext4 import make_ext4

        device = self.target_device(volume)
        if device is None:
            return None
        uuid = None
        if volume.target.kind == "partition":
            uuid = str(uuid4())
            volume.created.push(f"wipe our ext4 on {device}", lambda: wipe_own_signature(device, uuid))
        make_ext4(device, features=features, uuid=uuid)
        return device

    def mount_target(self, volume: Volume, cleanup: Cleanup | None = None) -> Path:
        """The ext4 of ``ext4_on_target`` mounted at ``<workdir>/mnt`` (unmount registered on
        ``cleanup``, default ``volume.mounted``), or the volume's directory on a directory target."""
        from .ext4 import mount_ext4

        if volume.device is None:
            return volume.workdir
        return mount_ext4(volume, volume.device, cleanup=cleanup)

    def stack_root(self, volume: Volume, *names: str) -> Path:
        """For a layer stacked on a directory (a FUSE store, eCryptfs's lower directory): the
        target's ext4 mounted for the volume's whole life (on ``volume.created``), or the volume's
        directory, with the directories ``names`` made in it; recorded as ``state["root"]``."""
        if self.ext4_on_target(volume) is not None:
            (volume.workdir / "mnt").mkdir()
            volume.created.path(volume.workdir / "mnt")
        root = self.mount_target(volume, volume.created)
        volume.state["root"] = str(root)
        for name in names:
            (root / name).mkdir()
            volume.created.path(root / name)
        return root

    def store_devices(self, volume: Volume) -> tuple[Path, ...]:
        """The block devices of ours that hold the store a daemon reads through the page cache
        below the volume (``store_below``): the container's loop device under the ext4 of a
        stacked layer (``stack_root``). Empty elsewhere: a directory target's disk and a
        partition are the user's, an image file (qemu-luks, dislocker) lies on the disk holding
        the run's directory. A random read round limits their read-ahead (engines/readahead.py)."""
        stacked = "root" in volume.state and volume.target.kind == "container"
        if not self.store_below or not stacked or volume.device is None:
            return ()
        return (volume.device,)

    def describe(self, volume: Volume) -> dict[str, Any]:
        """What the volume is, for the saved run (tool versions, cipher, file system): every
        backend says it (``describe_target`` gives the file system part)."""
        raise NotImplementedError(f"{self.name}: describe")

    def describe_target(self, volume: Volume, *, under: str = "") -> dict[str, Any]:
        """The file system the volume's data (or ``under`` it, its store) lives on."""
        from .ext4 import e2fsprogs_version

        if volume.target.kind in BLOCK_KINDS:
            info: dict[str, Any] = {"filesystem": "ext4" + under, "e2fsprogs": e2fsprogs_version()}
            if volume.target.kind == "partition":
                info["device"] = str(volume.target.device)
            else:
                info["loop_direct_io"] = volume.loop_direct_io
            return info
        return {"filesystem": mounting.filesystem_type(volume.workdir) + under}


def named_device_problems(name: str, param: str, device: Path, target: Target, use: str) -> list[str]:
    """The rule for a block device that a spec names (``device=``): the run may use it only as
    the partition target's own device, which the user named twice on the command line
    (``--encperf-device`` and ``--encperf-allow-destroy``, never from the environment or an ini
    file) and which passed the partition rules. ``use`` says what the backend does to it."""
    if target.kind == "partition" and target.device is not None and str(target.device) == str(device):
        return []
    return [
        f"{name}: {param}={device} {use}: name it with --encperf-target=partition "
        f"--encperf-device={device} --encperf-allow-destroy={device}"
    ]


def is_block_device(text: str) -> bool:
    """Whether ``text`` names a block device (through symbolic links too)."""
    try:
        return stat.S_ISBLK(os.stat(text).st_mode)
    except (OSError, ValueError):
        return False


def placement_problems(backend: BackendBase, target: Target) -> list[str]:
    """The target's rules for every backend, its own or a plugin's: a spec parameter that names
    a block device must name the partition target's device (see named_device_problems), and on
    the partition target the volume lives on the partition."""
    found = [
        problem
        for key, value in backend.spec.params
        if is_block_device(value)
        for problem in named_device_problems(backend.name, key, Path(value), target, "is a block device")
    ]
    if target.kind != "partition":
        return found
    reason = backend.partition_refusal(target)
    return found if reason is None else [*found, f"{backend.name}: refused on the partition target: {reason}"]


def register(name: str, backend: str | type[BackendBase]) -> None:
    """Add a backend (from the ``pytest_encperf_register_backends`` hook)."""
    if not _NAME.match(name):
        raise ValueError(f"bad backend name {name!r}: lower-case letters, digits and dashes")
    if name in REGISTRY:
        raise ValueError(f"backend name {name!r} is already taken")
    REGISTRY[name] = backend


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def known_names() -> list[str]:
    return sorted(REGISTRY)


def backend_class(name: str) -> type[BackendBase]:
    entry = REGISTRY[name]
    if not isinstance(entry, str):
        return entry
    module_name, _, class_name = entry.partition(":")
    module = importlib.import_module(f"{__name__}.{module_name}")
    return getattr(module, class_name)


def load_all() -> list[str]:
    """Import every registered backend's module, so that each registers the resource kinds it
    adds (a dead run's journal may name them). Returns the modules that failed to import."""
    failed = []
    for name, entry in REGISTRY.items():
        if isinstance(entry, str):
            try:
                backend_class(name)
            except Exception as exc:  # one broken backend must not stop the others' cleanup
                failed.append(f"backend {name}: {exc}")
    return failed


def make_backend(spec: BackendSpec) -> BackendBase:
    """Instantiate a backend; ValueError (with the accepted forms) for unknown names/params."""
    if spec.name not in REGISTRY:
        known = ", ".join(known_names())
        raise ValueError(f"unknown backend {spec.name!r} (available: {known})")
    return backend_class(spec.name)(spec)


def recommend(rankings: list[sweep.FamilyRanking]) -> list[sweep.FamilyRanking]:
    """Each ranking with its best configuration's set-up commands (BackendBase.setup_commands)."""
    found = []
    for ranking in rankings:
        commands: list[str] = []
        if ranking.best is not None:
            with contextlib.suppress(ValueError):  # a saved run's spec this version refuses
                commands = make_backend(BackendSpec.parse(ranking.best.spec)).setup_commands()
        found.append(dataclasses.replace(ranking, recommendation=tuple(commands)))
    return found


def parse_backend_list(text: str) -> list[BackendSpec]:
    """Parse ``--encperf-backends``: comma-separated specs; ``auto`` = every registered one.

    Commas also separate a spec's parameters, so an item with ``=`` and no ``:`` continues
    the previous spec (``luks2:cipher=x,key-size=512,fscrypt``). A value listing alternatives
    (``luks2:sector-size=512|4096,no-workqueue=0|1``) is a sweep: the cross product of specs.
    """
    if not text.strip():
        raise ValueError("empty backend list: expected e.g. fscrypt or auto")
    items: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError(
                f"bad backend list {text!r}: an empty item (two commas in a row, or one at an end): "
                "expected specs name[:key=value,...] separated by single commas"
            )
        if "=" in part and ":" not in part and items:
            items[-1] += "," + part
        else:
            items.append(part)
    specs: list[BackendSpec] = []
    for item in items:
        if item == "auto":
            specs += [
                BackendSpec(name) for name in known_names() if name != BASELINE and name not in NOT_IN_AUTO
            ]
            continue
        for configuration in sweep.expand(item):
            spec = BackendSpec.parse(configuration)
            make_backend(spec)  # validates name and parameters now, as a usage error
            specs.append(spec)
    unique: list[BackendSpec] = []
    for spec in specs:
        if spec not in unique:
            unique.append(spec)
    return unique
