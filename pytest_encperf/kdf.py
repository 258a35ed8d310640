"""The ``kdf`` profile: what opening a volume costs with the backend's own key derivation.

Benchmark volumes use a fast key derivation (``kdf=fast``, see backends.KDF_PARAM) so that
tests open them at once; that hides the cost a real user pays at every mount. For each backend
this makes one volume with each setting it has (fast, then default), mounts it, unmounts it
and times the mounts that follow (the unlock a user waits for: key derivation, then the mount
itself; the faster of ``TIMED_OPENS``) and the create (format, with its own key derivation), then
destroys the volume. No I/O workload runs. A backend without a key derivation gives a row saying
so, not a gap.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import trust
from .backends import BackendBase, BackendSpec, make_backend
from .host import signals_deferred
from .targets import Target
from .workloads import KDF_PROFILE

__all__ = ["KDF_PROFILE", "KdfSetting", "KdfTiming", "KdfUnavailable", "measure"]

# Opens timed per setting, the faster counts: one open slowed by other work on the machine does not
# (gocryptfs's default scrypt adds about 0.15 s to a 0.3 s open: one slowed open hid it in a suite
# run with 5 workers on 2 cores).
TIMED_OPENS = 2


class KdfUnavailable(RuntimeError):
    """The backend cannot run here: the message lists the reasons (a skip)."""


@dataclass
class KdfSetting:
    """One key derivation setting of a backend, timed."""

    label: str  # what it is ("scrypt N=2^10 (benchmark only)")
    create: float  # seconds: format with this key derivation
    mount: float  # seconds: opening the existing volume (unlock and mount), the fastest of TIMED_OPENS


@dataclass
class KdfTiming:
    """A backend's row of the kdf table: each setting it has, or why it has none."""

    spec: str
    settings: dict[str, KdfSetting] = field(default_factory=dict)  # "fast" / "default" -> timing
    note: str = ""  # no key derivation, or no fast setting

    @property
    def ratio(self) -> float | None:
        """Mount time with the default setting over that with the fast one."""
        fast, default = self.settings.get("fast"), self.settings.get("default")
        if fast is None or default is None:
            return None
        return default.mount / fast.mount if fast.mount else math.inf

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KdfTiming:
        settings = {name: KdfSetting(**value) for name, value in data.get("settings", {}).items()}
        return cls(data["spec"], settings, data.get("note", ""))


def setting_spec(spec: BackendSpec, setting: str, settings: tuple[str, ...]) -> BackendSpec:
    """``spec`` with ``kdf=setting`` when the backend has both settings (a parameter), else as is."""
    if len(settings) < 2:
        return spec
    params = {**spec.param_dict, "kdf": setting}
    return BackendSpec(spec.name, tuple(params.items()))


def measure(spec: BackendSpec, target: Target, workdir: Path) -> KdfTiming:
    """Time create and the mount of an existing volume with each key derivation setting of the
    backend of ``spec``. KdfUnavailable when it cannot run here; a spec that sets the cost
    itself (``kdf=``, ``pim=``, ``scryptn=``) is timed as given, as its one setting."""
    spec_text = str(spec)
    backend = make_backend(spec)
    settings = backend.kdf_settings
    if not settings:
        return KdfTiming(spec_text, note=backend.no_kdf)
    given = {"kdf", "pim", "scryptn"} & set(spec.param_dict)
    if given:
        settings = (backend.kdf,)
    timing = KdfTiming(spec_text)
    if settings == ("default",) and not given:
        timing.note = "no fast setting: benchmark volumes already use its own"
    workdir.parent.mkdir(parents=True, exist_ok=True)  # a session's run directory: there already
    trust.make_private_dir(workdir)  # 0700 whatever the umask: dead-run cleanup checks it
    for setting in settings:
        variant = make_backend(setting_spec(spec, setting, settings if not given else ()))
        problems = variant.unavailable_reasons(target)
        if problems:
            raise KdfUnavailable("; ".join(problems))
        timing.settings[setting] = time_open(variant, target, workdir / setting)
    return timing


def time_open(backend: BackendBase, target: Target, workdir: Path) -> KdfSetting:
    """Create, mount, then ``TIMED_OPENS`` times unmount and mount again (timed: an existing
    volume opened), then destroy. The seconds of create and of the fastest of those mounts (the
    base's step timings)."""
    trust.make_private_dir(workdir)
    started = time.perf_counter()
    volume = backend.create(target, workdir)
    created = time.perf_counter() - started
    try:
        backend.mount(volume)
        # the base times its steps without the availability checks; an override is timed whole
        created = volume.timings.get("create", created)
        opens = []
        for _ in range(TIMED_OPENS):
            backend.unmount(volume)
            volume.timings.pop("mount", None)
            started = time.perf_counter()
            backend.mount(volume)
            opens.append(volume.timings.get("mount", time.perf_counter() - started))
        return KdfSetting(backend.kdf_label(volume), created, min(opens))
    finally:
        with signals_deferred():
            backend.destroy(volume)
