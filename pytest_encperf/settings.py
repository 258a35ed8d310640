"""The run's settings: the precedence of each option's sources and the typed ``Settings``.

Every option (the table is options.py, the value parsers optionparsers.py) has an ini twin
``encperf_x`` and an environment twin ``ENCPERF_X``. Precedence, highest first:

1. the command line;
2. the environment variable;
3. the ini file (pytest.ini, pyproject.toml, tox.ini, setup.cfg);
4. the option's default.

The consent to erase a device (``--encperf-allow-destroy``, ``--encperf-force``) is taken from the
command line typed for this run only: a value in the environment, an ini file, ``addopts``
(``PYTEST_ADDOPTS``) or an ``@file`` argument file is a usage error, so a forgotten setting never
erases a disk.

Parsers raise ValueError whose message lists the accepted forms; ``resolve`` adds the option and
where its value came from, the plugin turns it into ``pytest.UsageError``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import verdict
from .backends import BackendSpec, parse_backend_list
from .gate import Rule, unknown_name_message, unmatched_names
from .load import BUSY_SHARE
from .options import OPTIONS, Option
from .roundplan import RoundPlan
from .sweep import DEFAULT_MARGIN, sweep_specs
from .workloads import MiB, Workload, profile_workloads


@dataclass(frozen=True)
class Settings:
    backends: list[BackendSpec] = field(default_factory=list)
    sweep: list[str] = field(default_factory=list)
    sweep_margin: float = DEFAULT_MARGIN
    target: str = "container"
    device: Path | None = None
    allow_destroy: str = ""
    force: bool = False
    dir: Path = Path("/var/tmp")
    size: int = 256 * MiB
    tree_size: int = 64 * MiB
    tree_seed: int = 1
    runtime: float = 1.5
    rounds: int = 4
    save_rounds: int = 10
    volumes: int = 1
    warmup: int = 1
    steady_cv: float | None = None
    precision: float | None = None
    steady_budget: float = 60.0
    busy_threshold: float | None = BUSY_SHARE
    quiet_wait: float = 0.0
    engine: str = "auto"
    profile: list[str] = field(default_factory=lambda: ["cdm"])
    save: str | None = None
    autosave: bool = False
    storage: Path = Path(".encperf")
    compare: str | None = None
    fail: list[Rule] = field(default_factory=list)
    confirm_budget: float = 60.0
    history: int = 5
    strict: bool = False
    allow_other_hardware: bool = False
    noise: verdict.NoisePrior | None = None
    max_overhead: list[Rule] = field(default_factory=list)
    json: Path | None = None
    markdown: Path | None = None
    html: Path | None = None
    verify: bool = False
    parallel_devices: bool = False
    inplace: bool = False
    project_size: int = 1000**4
    ladder: bool = False
    lifecycle_cycles: int = 1
    fio_job: list[Workload] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # option -> where its value came from

    @property
    def backend_specs(self) -> list[str]:
        """The selected backends' spec texts (``luks2:cipher=aes-xts-plain64``): the identity of their
        results (``Result.backend``), for the reports and the merge. The volumes are made from
        ``backends``, the specs themselves."""
        return [str(spec) for spec in self.backends]

    @property
    def round_plan(self) -> RoundPlan:
        """The round settings (test file size, round runtime, counted and warm-up rounds) as one value."""
        return RoundPlan(self.size, self.runtime, self.rounds, self.warmup)

    @property
    def workloads(self) -> list[Workload]:
        """The workloads of the selected profiles, at this run's sizes, and the user's fio jobs
        (those alone when no profile was given)."""
        profiles = [] if self.fio_job and self.sources.get("profile") == "default" else self.profile
        return [*profile_workloads(profiles, self.size, self.tree_size, self.tree_seed), *self.fio_job]

    @property
    def one_volume_at_a_time(self) -> bool:
        """One volume at a time: a partition cannot hold the baseline and an encrypted volume."""
        return self.target == "partition"

    @property
    def outputs_asked(self) -> bool:
        """Whether this run saves, compares, gates or writes a report (the outcome has work to do)."""
        return bool(
            self.save
            or self.autosave
            or self.compare
            or self.fail
            or self.json
            or self.markdown
            or self.html
            or self.max_overhead
        )

    def rule_flag(self, name: str) -> str:
        """``--encperf-fail``, or with the place its value came from when not the command line."""
        flag = f"--encperf-{name}"
        source = self.sources.get(name, flag)
        return flag if source == flag else f"{flag} (from {source})"

    def unknown_rule_names(self, names: Iterable[str], where: str) -> list[str]:
        """The usage errors of the gate rules' WORKLOAD parts that name no built-in workload, no job
        of --encperf-fio-job and none of ``names`` (tests or timed functions ``where``: "collected",
        "measured by this run"; a test's name selects its parametrizations), one per part."""
        jobs = [workload.name for workload in self.fio_job]
        known = list(names)
        return [
            unknown_name_message(self.rule_flag(name), token, jobs, known, where)
            for name in ("fail", "max-overhead")
            for token in unmatched_names(getattr(self, name.replace("-", "_")), jobs, known)
        ]

    def saved_text(self) -> dict[str, str]:
        """The settings a saved run keeps, as text (what makes two runs comparable)."""
        return {name: _setting_text(getattr(self, name)) for name in SAVED_SETTINGS}


SAVED_SETTINGS = (
    "backends", "target", "dir", "size", "runtime", "rounds", "warmup", "engine", "profile",
    "lifecycle_cycles", "tree_size", "busy_threshold", "volumes",
)  # fmt: skip


def _setting_text(value: object) -> str:
    if value is None:  # an option that is off (--encperf-busy-threshold=off)
        return "off"
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def resolve(
    cli: dict[str, str | None],
    ini: dict[str, str | None],
    environ: dict[str, str] | None = None,
    typed: Sequence[str] | None = None,
) -> Settings:
    """Apply the precedence (CLI, environment, ini, default) and parse every option.

    ``typed``: the arguments given on this run's command line (pytest's invocation arguments,
    without ``addopts``), when known: a consent option in ``cli`` but not in ``typed`` came from
    ``addopts`` or ``PYTEST_ADDOPTS``. Raises ValueError naming the option, where its value
    came from and the accepted forms.
    """
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        if option.command_line_only:
            check_consent_source(option, cli, ini, environ, typed)
        candidates = (
            (option.flag, cli.get(option.name)),
            (option.env, environ.get(option.env)),
            (option.ini, ini.get(option.name)),
            ("default", option.default_text()),
        )
        check_not_empty(option, candidates)
        given = [(src, val) for src, val in candidates if val not in (None, "")]
        source, raw = given[0] if given else ("default", "")  # "" = an optional option left off
        try:
            values[option.name.replace("-", "_")] = option.parse(str(raw))
        except ValueError as exc:
            where = option.flag if source == option.flag else f"{option.flag} (from {source})"
            raise ValueError(f"{where}: {exc}") from None
        sources[option.name] = source
    check_partition_options(values)
    check_volumes(values, sources)
    check_quiet_wait(values, sources)
    if values["sweep"]:
        swept = parse_backend_list(",".join(sweep_specs(values["sweep"])))
        given = [] if sources["backends"] == "default" else values["backends"]
        values["backends"] = list(dict.fromkeys([*given, *swept]))
        if sources["backends"] == "default":
            sources["backends"] = f"{sources['sweep']} (the sweep's configurations)"
    if (values["save"] or values["autosave"]) and sources["rounds"] == "default":
        values["rounds"] = values["save_rounds"]  # a reference run: more rounds, see --encperf-save-rounds
        sources["rounds"] = "--encperf-save-rounds (saving a reference run)"
    return Settings(**values, sources=sources)


def check_not_empty(option: Option, candidates: tuple[tuple[str, str | None], ...]) -> None:
    """An empty value typed on the command line (``--encperf-target=``, ``--encperf-device=``) is
    a mistake, never a silent default: a usage error with the accepted forms. In the ini file
    an empty value is refused where it is not a value of the option (``encperf_target =``) and
    means off where off is one (``encperf_json =``). An empty environment variable counts as
    unset, as shells and CI templates make them."""
    for source, value in candidates:
        if source in (option.flag, option.ini) and value is not None and not str(value).strip():
            where = option.flag if source == option.flag else f"{option.flag} (from {source})"
            try:
                option.parse("")
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            if source == option.ini:
                continue
            raise ValueError(
                f"{where}: empty value: give one ({option.metavar}) or leave the option out "
                f"(default: {option.default_display()})"
            )


def check_consent_source(
    option: Option,
    cli: dict[str, str | None],
    ini: dict[str, str | None],
    environ: dict[str, str],
    typed: Sequence[str] | None,
) -> None:
    """Consent to erase a device counts only when typed on this run's command line."""
    elsewhere = []
    if environ.get(option.env) not in (None, ""):
        elsewhere.append(f"the environment ({option.env})")
    if ini.get(option.name) not in (None, ""):
        elsewhere.append(f"the ini file ({option.ini})")
    given = cli.get(option.name) not in (None, "")
    typed_here = typed is None or any(_names(option.flag, a) for a in typed)
    if given and not typed_here:
        files = argument_files_naming(option.flag, typed or [])
        if files:
            elsewhere.append(f"the argument file {' or '.join(files)}")
        elif any(arg.startswith("@") for arg in typed or []):
            elsewhere.append("addopts, PYTEST_ADDOPTS or an argument file (@file)")
        else:
            elsewhere.append("addopts or PYTEST_ADDOPTS")
    if elsewhere:
        raise ValueError(
            f"{option.flag}: consent to erase a device is taken from this run's command line only, "
            f"not from {' or '.join(elsewhere)}: remove it there and type {option.flag}=... with the command"
        )


def _names(flag: str, argument: str) -> bool:
    return argument == flag or argument.startswith(f"{flag}=")


def argument_files_naming(flag: str, typed: Sequence[str], depth: int = 0) -> list[str]:
    """The ``@file`` arguments among ``typed`` that give ``flag``: pytest (argparse) reads an
    argument file one argument a line, and one may name another."""
    found = []
    for argument in typed:
        if not argument.startswith("@") or depth > 8:
            continue
        try:
            lines = Path(argument[1:]).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        if any(_names(flag, line) for line in lines) or argument_files_naming(flag, lines, depth + 1):
            found.append(argument)
    return found


def check_quiet_wait(values: dict[str, Any], sources: dict[str, str]) -> None:
    """--encperf-quiet-wait waits for the others' CPU to fall below the busy threshold: with the
    threshold off there is nothing to wait for, and a wait asked for must not quietly do nothing."""
    if values["quiet_wait"] > 0 and values["busy_threshold"] is None:

        def given(name: str) -> str:
            flag = f"--encperf-{name}"
            return flag if sources[name] == flag else f"{flag} (from {sources[name]})"

        raise ValueError(
            f"{given('quiet-wait')} waits until processes outside the run use less than "
            f"{given('busy-threshold')}, which is off: give a threshold, or no quiet wait"
        )


def check_volumes(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Several volume pairs at a time need room beside each other: a partition holds one volume."""
    if values["volumes"] > 1 and values.get("target") == "partition":
        flag = "--encperf-volumes"
        where = flag if sources["volumes"] == flag else f"{flag} (from {sources['volumes']})"
        raise ValueError(
            f"{where}: the partition target holds one volume at a time, so its rounds cannot be spread "
            "over fresh volumes: use the container target, or --encperf-volumes=1"
        )


def check_partition_options(values: dict[str, Any]) -> None:
    """The partition target's consent rule: --encperf-allow-destroy repeats the device exactly."""
    device, allowed = values.get("device"), values.get("allow_destroy", "")
    if values.get("target") != "partition":
        if device is not None or allowed:
            raise ValueError("--encperf-device and --encperf-allow-destroy need --encperf-target=partition")
        return
    if device is None:
        raise ValueError(
            "--encperf-target=partition needs --encperf-device=/dev/X (the partition to overwrite)"
        )
    if allowed != str(device):
        raise ValueError(
            f"--encperf-target=partition erases {device}: pass --encperf-allow-destroy={device} "
            f"(the exact same path){f', not {allowed!r}' if allowed else ''}"
        )
