"""Options: one table shared by the pytest plugin and the ``encperf`` CLI, parsers, precedence.

Each ``--encperf-x`` has an ini twin ``encperf_x`` and an environment twin ``ENCPERF_X``.
Precedence, highest first:

1. the command line;
2. the environment variable;
3. the ini file (pytest.ini, pyproject.toml, tox.ini, setup.cfg);
4. the default below.

Parsers raise ValueError whose message lists the accepted forms; the plugin turns it into
``pytest.UsageError``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backends import BackendSpec, parse_backend_list
from .engines import ENGINES
from .targets import KINDS
from .workloads import PROFILES, GiB, KiB, MiB

_UNITS = {
    "": 1, "b": 1,
    "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """``256MiB``, ``1GiB``, ``512M`` (binary), ``300MB`` (decimal) or bytes; a whole number of MiB."""
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"bad size {text!r}: expected e.g. 256MiB, 1GiB, 512M or a byte count")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value < MiB or value % MiB:
        raise ValueError(f"bad size {text!r}: must be a whole number of MiB, at least 1MiB")
    return value


def parse_duration(text: str) -> float:
    """Seconds: ``2``, ``2s``, ``1.5s``, ``500ms``; more than zero."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$", str(text))
    if not match:
        raise ValueError(f"bad duration {text!r}: expected seconds such as 2, 1.5s or 500ms")
    seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
    if seconds <= 0:
        raise ValueError(f"bad duration {text!r}: must be more than zero")
    return seconds


def parse_rounds(text: str) -> int:
    """A whole number of rounds, at least 1."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"bad rounds {text!r}: expected a whole number >= 1")
    return value


def parse_warmup(text: str) -> int:
    """A whole number of discarded warm-up rounds, 0 or more."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"bad warm-up rounds {text!r}: expected a whole number >= 0")
    return value


def parse_steady_cv(text: str) -> float | None:
    """``off``, or a coefficient-of-variation target such as ``5%`` or ``0.05`` (0 < cv < 1)."""
    value = str(text).strip().lower()
    if value in ("off", "no", "0", "none"):
        return None
    match = re.match(r"^(\d+(?:\.\d+)?)\s*(%?)$", value)
    number = float(match.group(1)) / (100 if match.group(2) else 1) if match else 0.0
    if not 0 < number < 1:
        raise ValueError(f"bad steady-state target {text!r}: expected off, or a CV such as 5% or 0.05")
    return number


def parse_choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = str(text).strip()
        if value not in choices:
            raise ValueError(f"bad value {text!r}: expected one of {', '.join(choices)}")
        return value

    parse.__doc__ = " | ".join(choices)
    return parse


def parse_profiles(text: str) -> list[str]:
    names = [name.strip() for name in str(text).split(",") if name.strip()]
    unknown = [name for name in names if name not in PROFILES]
    if not names or unknown:
        raise ValueError(f"bad profile {text!r}: expected a comma list of {', '.join(PROFILES)}")
    return names


def parse_directory(text: str) -> Path:
    path = Path(str(text)).expanduser()
    if not path.is_dir():
        raise ValueError(f"bad directory {text!r}: it does not exist or is not a directory")
    return path.resolve()


def default_directory() -> str:
    # /var/tmp is on disk by convention; /tmp is often tmpfs, which would measure RAM.
    return "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()


@dataclass(frozen=True)
class Option:
    name: str  # "backends" -> --encperf-backends, encperf_backends, ENCPERF_BACKENDS
    metavar: str
    help: str
    parse: Callable[[str], Any]
    default: str | Callable[[], str]

    @property
    def flag(self) -> str:
        return f"--encperf-{self.name}"

    @property
    def ini(self) -> str:
        return "encperf_" + self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "ENCPERF_" + self.name.replace("-", "_").upper()

    def default_text(self) -> str:
        return self.default() if callable(self.default) else self.default


OPTIONS: tuple[Option, ...] = (
    Option("backends", "SPECS",
           "backends to compare with the plain baseline: comma list of name[:key=value,...], or auto",
           parse_backend_list, "fscrypt"),
    Option("target", "KIND", f"where volumes live: {' | '.join(KINDS)}", parse_choice(KINDS), "container"),
    Option("dir", "DIR", "directory (on the disk to measure) for containers and volumes",
           parse_directory, default_directory),
    Option("size", "SIZE", "size of each workload file (CrystalDiskMark's default is 1GiB)",
           parse_size, "256MiB"),
    Option("runtime", "SECONDS", "duration of one measured round", parse_duration, "2s"),
    Option("rounds", "N", "measured rounds per workload, alternating with the baseline", parse_rounds, "3"),
    Option("warmup", "N", "warm-up rounds per workload, measured on both sides and discarded",
           parse_warmup, "1"),
    Option("steady-cv", "CV",
           "steady state: after the counted rounds, add rounds until the coefficient of variation "
           "of both sides is below CV (a fraction such as 0.05), or off", parse_steady_cv, "off"),
    Option("steady-budget", "SECONDS", "most time the steady-state rounds of one workload may take",
           parse_duration, "60s"),
    Option("engine", "ENGINE",
           f"I/O engine: {' | '.join((*ENGINES, 'auto'))} (auto: fio when installed, else native)",
           parse_choice((*ENGINES, "auto")), "auto"),
    Option("profile", "NAMES", f"workload profiles, comma list of {', '.join(PROFILES)}",
           parse_profiles, "cdm"),
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    backends: list[BackendSpec] = field(default_factory=list)
    target: str = "container"
    dir: Path = Path("/var/tmp")
    size: int = 256 * MiB
    runtime: float = 2.0
    rounds: int = 3
    warmup: int = 1
    steady_cv: float | None = None
    steady_budget: float = 60.0
    engine: str = "auto"
    profile: list[str] = field(default_factory=lambda: ["cdm"])
    sources: dict[str, str] = field(default_factory=dict)  # option -> where its value came from


def resolve(
    cli: dict[str, str | None], ini: dict[str, str | None], environ: dict[str, str] | None = None
) -> Settings:
    """Apply the precedence (CLI, environment, ini, default) and parse every option.

    Raises ValueError naming the option, where its value came from and the accepted forms.
    """
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        candidates = (
            (option.flag, cli.get(option.name)),
            (option.env, environ.get(option.env)),
            (option.ini, ini.get(option.name)),
            ("default", option.default_text()),
        )
        source, raw = next((src, val) for src, val in candidates if val not in (None, ""))
        try:
            values[option.name.replace("-", "_")] = option.parse(str(raw))
        except ValueError as exc:
            where = option.flag if source == option.flag else f"{option.flag} (from {source})"
            raise ValueError(f"{where}: {exc}") from None
        sources[option.name] = source
    return Settings(**values, sources=sources)
