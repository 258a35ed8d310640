"""Backends: how an encrypted (or plain) volume is made, mounted and removed.

A backend is one module plus one line in ``REGISTRY``. Modules are imported on first use, so
one backend's missing dependency never breaks the others (fsspec's registry does the same).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..host import HostError
from ..resources import Cleanup
from ..targets import Target

# name -> "module:Class" (relative to this package) or a class registered by a hook
REGISTRY: dict[str, str | type[BackendBase]] = {
    "plain": "plain:PlainBackend",
    "fscrypt": "fscrypt:FscryptBackend",
    "luks2": "dmcrypt:LuksBackend",
    "luks": "dmcrypt:LuksBackend",
    "luks1": "dmcrypt:LuksBackend",
    "dm-plain": "dmcrypt:PlainDmcryptBackend",
    "tcrypt": "dmcrypt:TcryptBackend",
    "bitlk": "dmcrypt:BitlkBackend",
    "veracrypt": "veracrypt:VeracryptBackend",
    "gocryptfs": "fuse:GocryptfsBackend",
    "encfs": "fuse:EncfsBackend",
    "cryfs": "fuse:CryfsBackend",
    "securefs": "fuse:SecurefsBackend",
    "qemu-luks": "qemu:QemuLuksBackend",
    "bitlocker": "bitlocker:BitlockerBackend",
}

# Names users will try that are planned but not built yet: a usage error says so.
# (Every backend DESIGN.md names is built now; the mechanism stays for the next ones.)
PLANNED: tuple[str, ...] = ()

BASELINE = "plain"

# Left out of ``auto``: aliases (luks = luks2) and backends that open a volume someone else
# made, which need its image or device and password file as parameters.
NOT_IN_AUTO: tuple[str, ...] = ("luks", "tcrypt", "bitlk", "bitlocker")

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
        name, _, rest = text.partition(":")
        if not _NAME.match(name):
            raise ValueError(f"bad backend spec {text!r}: expected name[:key=value,...], e.g. fscrypt")
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


@dataclass
class Volume:
    """A volume and every resource it holds, so teardown can always find them."""

    backend: Backend
    target: Target
    workdir: Path  # private to this volume: container file, mount point, key files
    data_dir: Path | None = None  # where workloads put their files, once mounted
    created: Cleanup = field(default_factory=Cleanup)  # released by destroy()
    mounted: Cleanup = field(default_factory=Cleanup)  # released by unmount()
    state: dict[str, Any] = field(default_factory=dict)  # backend-private (device paths, key ids)


class Backend(Protocol):
    """What every backend implements. unmount() and destroy() are idempotent and must succeed
    after a partial create()."""

    spec: BackendSpec

    @property
    def name(self) -> str: ...

    def problems(self, target: Target) -> list[str]:
        """Why this backend cannot run on ``target`` here; empty when it can."""
        ...

    def create(self, target: Target, workdir: Path) -> Volume: ...

    def mount(self, volume: Volume) -> Path: ...

    def unmount(self, volume: Volume) -> None: ...

    def destroy(self, volume: Volume) -> None: ...

    def describe(self, volume: Volume) -> dict[str, Any]: ...


class BackendBase:
    """Shared plumbing: parameter checking and the idempotent unmount/destroy."""

    accepted_params: dict[str, str] = {}  # name -> help
    # True when the volume keeps its data in a file (or device) that a user-space daemon reads
    # through the page cache below it (FUSE stores, dislocker, qemu). Dropping the test file's
    # pages between passes does not reach that cache, so buffered read rounds read at most one
    # pass (after the whole cache was dropped) instead of re-reading the store from memory.
    store_below = False

    def __init__(self, spec: BackendSpec) -> None:
        unknown = [key for key, _ in spec.params if key not in self.accepted_params]
        if unknown:
            accepted = ", ".join(sorted(self.accepted_params)) or "none"
            raise ValueError(f"backend {spec.name!r} has no parameter {unknown[0]!r} (accepted: {accepted})")
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    def partition_refusal(self, target: Target) -> str | None:
        """Why this backend's volume would not live on the partition target's device, or None
        when it does (it formats that device, as the plain baseline does). A volume whose data
        lives elsewhere would be compared with plain measured on another disk. A backend that
        formats the target's device overrides this."""
        return "it does not say that its volume lives on the partition (a backend must format the device)"

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
        if spec.name in PLANNED:
            raise ValueError(f"backend {spec.name!r} is not implemented yet (available: {known})")
        raise ValueError(f"unknown backend {spec.name!r} (available: {known})")
    return backend_class(spec.name)(spec)


def parse_backend_list(text: str) -> list[BackendSpec]:
    """Parse ``--encperf-backends``: comma-separated specs; ``auto`` = every registered one.

    Commas also separate a spec's parameters, so an item with ``=`` and no ``:`` continues
    the previous spec (``luks2:cipher=x,key-size=512,fscrypt``).
    """
    if not text.strip():
        raise ValueError("empty backend list: expected e.g. fscrypt or auto")
    items: list[str] = []
    for part in text.split(","):
        part = part.strip()
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
        spec = BackendSpec.parse(item)
        make_backend(spec)  # validates name and parameters now, as a usage error
        specs.append(spec)
    unique: list[BackendSpec] = []
    for spec in specs:
        if spec not in unique:
            unique.append(spec)
    return unique
