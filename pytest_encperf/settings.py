"""Options: one table shared by the pytest plugin and the ``encperf`` CLI, parsers, precedence.

Each ``--encperf-x`` has an ini twin ``encperf_x`` and an environment twin ``ENCPERF_X``.
Precedence, highest first:

1. the command line;
2. the environment variable;
3. the ini file (pytest.ini, pyproject.toml, tox.ini, setup.cfg);
4. the default below.

The consent to erase a device (``--encperf-allow-destroy``, ``--encperf-force``) is taken from the
command line typed for this run only: a value in the environment, an ini file, ``addopts``
(``PYTEST_ADDOPTS``) or an ``@file`` argument file is a usage error, so a forgotten setting never
erases a disk.

Parsers raise ValueError whose message lists the accepted forms; the plugin turns it into
``pytest.UsageError``.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import storage, verdict
from .backends import BackendSpec, known_names, parse_backend_list
from .engines import ENGINES
from .gate import LIFECYCLE_METRIC, MIN_HISTORY, MIN_LIFECYCLE_CYCLES, Rule, parse_rules
from .load import BUSY_SHARE
from .parsing import parse_bool, parse_choice, parse_path, whole_number
from .report.drawing import matplotlib_problem
from .roundplan import RoundPlan
from .sweep import DEFAULT_MARGIN, SWEEPS, sweep_specs
from .targets import KINDS
from .workloads import KDF_PROFILE, PROFILE_NAMES, GiB, KiB, MiB, Workload, profile_workloads

_UNITS = {
    "": 1, "b": 1,
    "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "t": 1024 * GiB, "tib": 1024 * GiB, "tb": 1000**4,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
# Upper limits: every number a user types has one, so a 400-digit value is a usage error that
# names the range, never an OverflowError (or a run that never ends) later.
MAX_SIZE = 1024**5  # 1 PiB: a workload file or tree far beyond any disk this measures
MAX_PROJECT_SIZE = 1000**6  # 1 EB
MAX_SECONDS = 86400.0  # a day: one round, or one budget of extra rounds
MAX_ROUNDS = 10000
MAX_CYCLES = 1000
MAX_HISTORY = 1000
MAX_SEED = 2**63 - 1
MAX_RUN_NUMBER = 999_999_999  # saved runs are numbered 0001, 0002, ... per machine
MAX_CORES = 8192  # Linux's most CPUs (NR_CPUS): a busy threshold above it could never be reached


def _amount(text: str) -> float | None:
    """The bytes ``text`` names (``256MiB``, ``1TB``, a byte count), None when it names none."""
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        return None
    return float(match.group(1)) * _UNITS[unit]  # inf for a 400-digit number: refused by range


def parse_size(text: str) -> int:
    """``256MiB``, ``1GiB``, ``512M`` (binary), ``300MB`` (decimal) or bytes; a whole number of MiB
    from 1MiB to 1PiB."""
    amount = _amount(text)
    if amount is None:
        raise ValueError(f"bad size {text!r}: expected e.g. 256MiB, 1GiB, 512M or a byte count")
    if not MiB <= amount <= MAX_SIZE or amount % MiB:
        raise ValueError(f"bad size {text!r}: must be a whole number of MiB, at least 1MiB and at most 1PiB")
    return int(amount)


def parse_project_size(text: str) -> int:
    """A size to project a throughput to: ``1TB``, ``500GB`` (decimal), ``2TiB``, ``512GiB`` or bytes,
    up to 1EB."""
    amount = _amount(text)
    if amount is None or not 1 <= amount <= MAX_PROJECT_SIZE:
        raise ValueError(
            f"bad size {text!r}: expected e.g. 1TB, 500GB, 2TiB or a byte count, from 1 byte to 1EB"
        )
    return int(amount)


def parse_duration(text: str) -> float:
    """Seconds: ``2``, ``2s``, ``1.5s``, ``500ms``; more than zero, at most a day."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$", str(text))
    if not match:
        raise ValueError(f"bad duration {text!r}: expected seconds such as 2, 1.5s or 500ms")
    seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
    if not 0 < seconds <= MAX_SECONDS or not math.isfinite(seconds):
        raise ValueError(
            f"bad duration {text!r}: must be more than zero and at most {MAX_SECONDS:.0f}s (a day)"
        )
    return seconds


def parse_whole(what: str, low: int, high: int) -> Callable[[str], int]:
    """A whole number of ``what`` from ``low`` to ``high``."""

    def parse(text: str) -> int:
        number = whole_number(text, len(str(high)))
        if number is None or not low <= number <= high:
            raise ValueError(f"bad {what} {text!r}: expected a whole number from {low} to {high}")
        return number

    parse.__doc__ = f"a whole number of {what}, {low} to {high}"
    return parse


parse_rounds = parse_whole("rounds", 1, MAX_ROUNDS)
parse_warmup = parse_whole("warm-up rounds", 0, MAX_ROUNDS)
parse_cycles = parse_whole("cycles", 1, MAX_CYCLES)  # at least the benchmark volume's own
parse_history = parse_whole("saved runs", 0, MAX_HISTORY)
parse_seed = parse_whole("seed", 0, MAX_SEED)


def parse_budget(text: str) -> float:
    """Seconds, as parse_duration, or 0 / off for none."""
    if str(text).strip().lower() in ("0", "off", "no", "none"):
        return 0.0
    return parse_duration(text)


MAX_PRECISION = 100.0  # points: an interval of ±100 is no bound on a change that cannot pass -100%


def parse_precision(text: str) -> float | None:
    """``off``, or the half-width in percentage points (``2%`` or ``2``) the overhead's 95% interval
    must reach, more than 0 and at most 100."""
    value = str(text).strip().lower()
    if value in ("off", "no", "0", "none"):
        return None
    match = re.match(r"^(\d{1,4}(?:\.\d{1,6})?)\s*%?$", value)
    number = float(match.group(1)) if match else 0.0
    if not 0 < number <= MAX_PRECISION:
        raise ValueError(
            f"bad precision {text!r}: expected off, or percentage points more than 0 and at most "
            f"{MAX_PRECISION:g} such as 2%"
        )
    return number


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


def parse_busy_threshold(text: str) -> float | None:
    """The cores others may use before a round is busy (``0.25``, ``1``), or off (``0`` too, as
    for every threshold and budget here: a threshold of no CPU at all would flag every round)."""
    value = str(text).strip().lower()
    if value in ("off", "no", "none"):
        return None
    match = re.match(r"^(\d+(?:\.\d+)?)$", value)
    cores = float(match.group(1)) if match else -1.0
    if cores == 0:
        return None
    if not 0 < cores <= MAX_CORES:
        raise ValueError(
            f"bad busy threshold {text!r}: expected off, or the cores that processes outside the run may "
            f"use before a round is busy, such as 0.25; more than zero and at most {MAX_CORES}"
        )
    return cores


def comma_items(what: str, text: str) -> list[str]:
    """The items of a comma list, stripped; "" gives none. An empty item (``a,,b``, ``a,``) is
    refused: a typo must not quietly drop what was meant there."""
    if not str(text).strip():
        return []
    items = [item.strip() for item in str(text).split(",")]
    if "" in items:
        raise ValueError(f"bad {what} list {text!r}: an empty item (two commas in a row, or one at an end)")
    return items


def parse_profiles(text: str) -> list[str]:
    names = [name.strip() for name in str(text).split(",") if name.strip()]
    unknown = [name for name in names if name not in PROFILE_NAMES]
    if not names or unknown or "" in [name.strip() for name in str(text).split(",")]:
        raise ValueError(f"bad profile {text!r}: expected a comma list of {', '.join(PROFILE_NAMES)}")
    return names


def parse_margin(text: str) -> float:
    """A relative difference such as ``10%`` or ``0.1`` (0 <= margin < 1)."""
    value = str(text).strip()
    match = re.match(r"^(\d+(?:\.\d+)?)\s*(%?)$", value)
    number = float(match.group(1)) / (100 if match.group(2) else 1) if match else -1.0
    if not 0 <= number < 1:
        raise ValueError(f"bad margin {text!r}: expected a relative difference such as 10% or 0.1")
    return number


def parse_sweeps(text: str) -> list[str]:
    """Ready-made sweeps: "" = none."""
    names = comma_items("sweep", text)
    unknown = [name for name in names if name not in SWEEPS]
    if unknown:
        raise ValueError(f"bad sweep {unknown[0]!r}: expected a comma list of {', '.join(SWEEPS)}")
    return list(dict.fromkeys(names))


def parse_directory(text: str) -> Path:
    path = Path(str(text)).expanduser()
    if not path.is_dir():
        raise ValueError(f"bad directory {text!r}: it does not exist or is not a directory")
    return path.resolve()


def optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An option that is off when empty: "" gives None, anything else goes to ``parse``."""

    def parse_optional(text: str) -> Any:
        return None if str(text).strip() == "" else parse(text)

    parse_optional.__doc__ = parse.__doc__
    return parse_optional


def parse_noise(text: str) -> verdict.NoisePrior:
    """A noise prior file: the JSON benchmarks/noise.py writes (benchmarks/data/noise-*.json)."""
    path = Path(str(text)).expanduser()
    try:
        with path.open("rb") as handle:  # read only: a file named by the user, never changed
            data = handle.read(verdict.MAX_NOISE_FILE + 1)
    except OSError as exc:
        raise ValueError(f"bad noise file {text!r}: {exc.strerror or exc}") from None
    if len(data) > verdict.MAX_NOISE_FILE:
        raise ValueError(f"bad noise file {text!r}: larger than {verdict.MAX_NOISE_FILE // MiB} MiB")
    try:
        return verdict.read_noise_prior(data.decode("utf-8"), path.name)
    except (UnicodeDecodeError, verdict.NoiseFileError) as exc:
        raise ValueError(f"bad noise file {text!r}: {exc}") from None


def parse_html_path(text: str) -> Path:
    """A path for the HTML report, which draws its charts with matplotlib (the ``html`` extra)."""
    problem = matplotlib_problem()
    if problem:
        raise ValueError(problem)
    return parse_path(text)


def parse_compare(text: str) -> str:
    """``latest`` (the bare flag), a run number (``3``), a run name (``main``),
    ``<machine-id>/<number or name>``, or a saved file's path."""
    value = str(text).strip()
    if not re.match(r"^[A-Za-z0-9._+/~-]+!?$", value):
        raise ValueError(
            f"bad baseline {text!r}: expected latest, a run number (3), a run name (main), "
            "<machine-id>/<number or name> or a .json path"
        )
    number = value.removesuffix("!").rpartition("/")[2]
    if (
        not value.endswith(".json")
        and number.isdigit()
        and len(number.lstrip("0")) > len(str(MAX_RUN_NUMBER))
    ):
        raise ValueError(f"bad baseline {text!r}: a run number is a whole number from 1 to {MAX_RUN_NUMBER}")
    return value


def rule_backend_names() -> list[str]:
    """Names a BACKEND prefix of --encperf-fail may use (the registered backends)."""
    return known_names()


def parse_fail_rules(text: str) -> list[Rule]:
    comma_items("expression", text)
    return parse_rules(text, rule_backend_names())


def parse_overhead_rules(text: str) -> list[Rule]:
    """--encperf-max-overhead: as --encperf-fail, but a life cycle has no plain side in the run
    to be compared with (its checks are against saved runs)."""
    rules = parse_fail_rules(text)
    for rule in rules:
        if rule.metric == LIFECYCLE_METRIC:
            raise ValueError(
                f"{rule.text}: a life-cycle rule compares with saved runs, not with plain in this run: "
                "give it to --encperf-fail"
            )
    return rules


def parse_device(text: str) -> Path | None:
    """A block device path such as /dev/sdb1 (checked by the partition target's rules)."""
    value = str(text).strip()
    if not value:
        return None
    if not value.startswith("/dev/"):
        raise ValueError(f"bad device {text!r}: expected a block device path such as /dev/sdb1")
    return Path(value)


def parse_text(text: str) -> str:
    return str(text).strip()


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
    # "value": --x=VALUE; "flag": bare --x means "1" (store_const); "optional": --x or --x=VALUE,
    # the bare form meaning ``const``. Each keeps the command-line default None, so precedence holds.
    form: str = "value"
    const: str | None = None
    # consent to destroy data: accepted from the command line of this run only
    command_line_only: bool = False

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

    def default_display(self) -> str:
        return self.default_text() or "off"


OPTIONS: tuple[Option, ...] = (
    Option("backends", "SPECS",
           "backends to compare with the plain baseline: comma list of name[:key=value,...], or auto",
           parse_backend_list, "fscrypt"),
    Option("sweep", "NAMES",
           f"ready-made configuration sweeps, comma list of {', '.join(SWEEPS)}: their configurations are "
           "added to the backends (replace them when --encperf-backends is left at its default)",
           parse_sweeps, ""),
    Option("sweep-margin", "PERCENT",
           "a sweep calls a configuration slower than the best only when it is significantly slower and "
           "by more than this", parse_margin, "10%"),
    Option("target", "KIND", f"where volumes live: {' | '.join(KINDS)}", parse_choice(KINDS), "container"),
    Option("device", "DEV", "partition target: the block device to overwrite (e.g. /dev/sdb1)",
           parse_device, ""),
    Option("allow-destroy", "DEV", "partition target: repeat --encperf-device exactly to allow erasing it",
           parse_text, "", command_line_only=True),
    Option("force", "0|1",
           "partition target: overwrite a device that carries a signature (1); overrides that rule "
           "('no signature') only, never 'not mounted', 'no swap', 'not in use' or 'not the root disk'",
           parse_bool, "0", command_line_only=True),
    Option("dir", "DIR", "directory (on the disk to measure) for containers and volumes",
           parse_directory, default_directory),
    Option("size", "SIZE", "size of each workload file (CrystalDiskMark's default is 1GiB)",
           parse_size, "256MiB"),
    Option("tree-size", "SIZE", "realwork profile: size of the generated reference tree of mixed file "
           "sizes that archive and copy use (untar and metadata use a source tree a quarter of it)",
           parse_size, "64MiB"),
    Option("tree-seed", "N", "realwork profile: the seed the reference tree is generated from (the same "
           "seed and size give a byte-identical tree)", parse_seed, "1"),
    Option("runtime", "SECONDS", "duration of one measured round", parse_duration, "1.5s"),
    Option("rounds", "N",
           "measured rounds per workload, alternating with the baseline in whole A B B A blocks (an odd N "
           "is rounded up)", parse_rounds, "4"),
    Option("save-rounds", "N",
           "measured rounds per workload in a run that saves a baseline (--encperf-save, --encperf-autosave) "
           "when --encperf-rounds is not given: a reference with more rounds lets each checking run decide "
           "with fewer", parse_rounds, "10"),
    Option("warmup", "N", "warm-up rounds per workload, measured on both sides and discarded",
           parse_warmup, "1"),
    Option("steady-cv", "CV",
           "steady state: after the counted rounds, add rounds until the coefficient of variation "
           "of both sides is below CV (a fraction such as 0.05), or off", parse_steady_cv, "off"),
    Option("precision", "P%",
           "after the counted rounds, add whole A B B A blocks until the 95% interval of the overhead vs "
           "plain is within ±P percentage points (4 pairs at least), or off", parse_precision, "off"),
    Option("steady-budget", "SECONDS",
           "most time the steady-state and precision rounds of one workload may take", parse_duration, "60s"),
    Option("busy-threshold", "CORES",
           "a round is busy when processes outside this run (and steal) used more than this many cores "
           "over it: busy rounds are flagged in every report and not gated; off (or 0): none is busy, "
           "what others used is still recorded", parse_busy_threshold, f"{BUSY_SHARE:g}"),
    Option("quiet-wait", "SECONDS",
           "before each workload's rounds, wait up to this long for processes outside this run to use less "
           "than --encperf-busy-threshold; 0 = off", parse_budget, "0"),
    Option("engine", "ENGINE",
           f"I/O engine: {' | '.join((*ENGINES, 'auto'))} (auto: fio when installed, else native)",
           parse_choice((*ENGINES, "auto")), "auto"),
    Option("profile", "NAMES", f"workload profiles, comma list of {', '.join(PROFILE_NAMES)} "
           f"({KDF_PROFILE}: open/mount time with the fast and the default key derivation, no I/O)",
           parse_profiles, "cdm"),
    Option("save", "NAME", "save this run's results as <storage>/<machine-id>/NNNN_NAME.json",
           optional(storage.parse_name), ""),
    Option("autosave", "BOOL", "save this run under <commit id>_<UTC time> (bare flag = yes)",
           parse_bool, "no", form="flag", const="1"),
    Option("storage", "DIR", "directory of saved runs", parse_path, ".encperf"),
    Option("compare", "RUN", "compare with a saved run: latest (the bare flag), a number, a name, "
           "MACHINE-ID/RUN or a .json path; another machine's run is allowed with a warning; a name "
           "or latest never picks a run that did not finish, NAME! or latest! may",
           optional(parse_compare), "", form="optional", const="latest"),
    Option("fail", "EXPR", "fail when worse than the compared run by more than EXPR and significant: "
           "[BACKEND:][WORKLOAD:][METRIC:]PERCENT%, comma list, e.g. 10%,seq-read:5%,latency-p99:20%",
           parse_fail_rules, ""),
    Option("confirm-budget", "SECONDS",
           "most time per run (per process) spent on extra paired rounds of workloads whose check is "
           "not decided yet (worse than its threshold but not significant, or significant but close); "
           "0 = off", parse_budget, "60s"),
    Option("history", "N",
           "judge absolute numbers (plain's throughput, latency, CPU) against the run-to-run spread of "
           f"up to N comparable saved runs (at least {MIN_HISTORY} are needed; 0 = off)",
           parse_history, "5"),
    Option("strict", "BOOL",
           "fail the gate (exit 7) when it cannot check what it was asked to: no usable baseline, a "
           "backend x workload of the baseline missing now, settings that differ, a baseline from other "
           "hardware (bare flag = yes)",
           parse_bool, "no", form="flag", const="1"),
    Option("allow-other-hardware", "BOOL",
           "accept a baseline measured on other hardware (CPU model, cores, crypto flags, disk model): a "
           "note instead of a check not made, which strict mode fails (bare flag = yes)",
           parse_bool, "no", form="flag", const="1"),
    Option("noise", "FILE",
           "the between-run noise of this runner, as benchmarks/noise.py writes it (noise-DATE.json): the "
           "gate's prior instead of the built-in one (the development machine's)",
           optional(parse_noise), ""),
    Option("max-overhead", "EXPR", "fail when a backend is slower than plain in this run by more than "
           "EXPR and significant, e.g. fscrypt:seq-read:15% (same grammar as --encperf-fail)",
           parse_overhead_rules, ""),
    Option("json", "PATH", "write the full results (the saved-run format) to PATH", optional(parse_path), ""),
    Option("markdown", "PATH", "write a GitHub-flavoured Markdown report to PATH (and append it to "
           "$GITHUB_STEP_SUMMARY when set)", optional(parse_path), ""),
    Option("html", "PATH", "write a self-contained HTML report with charts to PATH (needs matplotlib: "
           "pip install 'pytest-encperf[html]')", optional(parse_html_path), ""),
    Option("verify", "yes|no",
           "after each write workload, check that the data reads back intact after unmount + mount",
           parse_bool, "no"),
    Option("inplace", "BOOL",
           "in-place encryption throughput: LUKS2 by cryptsetup reencrypt --encrypt of a filled plain "
           "volume, the others by filling a volume through the encryption layer (bare flag = yes)",
           parse_bool, "no", form="flag", const="1"),
    Option("lifecycle-cycles", "N",
           "life cycles (create, mount, first write, unmount, destroy) timed per backend: the benchmark "
           "volume's, then N-1 more of a fresh volume of the same size after it; the table shows the "
           f"median, the gate (a lifecycle rule in --encperf-fail) needs {MIN_LIFECYCLE_CYCLES} or more",
           parse_cycles, "1"),
    Option("project-size", "SIZE", "size the in-place throughput is projected to (e.g. 1TB, 500GB, 2TiB)",
           parse_project_size, "1TB"),
    Option("parallel-devices", "BOOL",
           "let rounds on different physical disks run at the same time (xdist workers, other sessions); "
           "rounds on one disk never overlap; without it one measurement at a time per machine "
           "(bare flag = yes)", parse_bool, "no", form="flag", const="1"),
    Option("ladder", "BOOL",
           "where the overhead comes from: also measure each backend's cipher alone and each backend and "
           "workload on a RAM-backed container (tmpfs + loop, never a baseline), and name the rung that "
           "limits it (bare flag = yes)", parse_bool, "no", form="flag", const="1"),
)  # fmt: skip


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
        """The workloads of the selected profiles, at this run's sizes."""
        return profile_workloads(self.profile, self.size, self.tree_size, self.tree_seed)

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

    def saved_text(self) -> dict[str, str]:
        """The settings a saved run keeps, as text (what makes two runs comparable)."""
        return {name: _setting_text(getattr(self, name)) for name in SAVED_SETTINGS}


SAVED_SETTINGS = (
    "backends", "target", "dir", "size", "runtime", "rounds", "warmup", "engine", "profile",
    "lifecycle_cycles", "tree_size", "busy_threshold",
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
    check_quiet_wait(values, sources)
    if values["sweep"]:
        swept = parse_backend_list(",".join(sweep_specs(values["sweep"])))
        given = [] if sources["backends"] == "default" else values["backends"]
        values["backends"] = list(dict.fromkeys([*given, *swept]))
        if sources["backends"] == "default":
            sources["backends"] = f"{sources['sweep']} (the sweep's configurations)"
    if (values["save"] or values["autosave"]) and sources["rounds"] == "default":
        values["rounds"] = values["save_rounds"]  # a baseline: more rounds, see --encperf-save-rounds
        sources["rounds"] = "--encperf-save-rounds (saving a baseline)"
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
