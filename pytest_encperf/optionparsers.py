"""The parsers of the options' values (``--encperf-size=256MiB``, ``--encperf-fail=10%``, ...),
each with the range it accepts: every number a user types has an upper limit. A parser raises
ValueError whose message lists the accepted forms; the option table (options.py) names each
option's parser, the plugin turns the error into ``pytest.UsageError``."""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import verdict
from .backends import known_names
from .gate import LIFECYCLE_METRIC, Rule, parse_rules
from .parsing import parse_path, whole_number
from .report.drawing import matplotlib_problem
from .sweep import SWEEPS
from .workloads import PROFILE_NAMES, GiB, KiB, MiB

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
MAX_VOLUMES = 20  # volume pairs of one run: each holds a test file of --encperf-size on both sides
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
parse_volumes = parse_whole("volumes", 1, MAX_VOLUMES)
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
            f"bad reference run {text!r}: expected latest, a run number (3), a run name (main), "
            "<machine-id>/<number or name> or a .json path"
        )
    number = value.removesuffix("!").rpartition("/")[2]
    if (
        not value.endswith(".json")
        and number.isdigit()
        and len(number.lstrip("0")) > len(str(MAX_RUN_NUMBER))
    ):
        raise ValueError(
            f"bad reference run {text!r}: a run number is a whole number from 1 to {MAX_RUN_NUMBER}"
        )
    return value


def rule_backend_names() -> list[str]:
    """Names a BACKEND prefix of --encperf-fail may use (the registered backends)."""
    return known_names()


def parse_fail_rules(text: str) -> list[Rule]:
    """--encperf-fail. A WORKLOAD may name a fio job's section: the jobs are not known here, so
    such a part is checked once they are (settings.check_rule_jobs, the CLI's saved runs)."""
    comma_items("expression", text)
    return parse_rules(text, rule_backend_names(), job_names=None)


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
