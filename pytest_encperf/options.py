"""The option table shared by the pytest plugin and the ``encperf`` CLI: each option's flag, its
ini and environment twins, its help, its parser (optionparsers.py) and its default. settings.py
applies the precedence and makes the typed ``Settings``; docs/reference/options.md is generated
from this table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import fiojob, storage
from .backends import parse_backend_list
from .engines import ENGINES
from .gate import MIN_HISTORY, MIN_LIFECYCLE_CYCLES
from .load import BUSY_SHARE
from .optionparsers import (
    default_directory,
    optional,
    parse_budget,
    parse_busy_threshold,
    parse_compare,
    parse_cycles,
    parse_device,
    parse_directory,
    parse_duration,
    parse_fail_rules,
    parse_history,
    parse_html_path,
    parse_margin,
    parse_noise,
    parse_overhead_rules,
    parse_precision,
    parse_profiles,
    parse_project_size,
    parse_rounds,
    parse_seed,
    parse_size,
    parse_steady_cv,
    parse_sweeps,
    parse_text,
    parse_volumes,
    parse_warmup,
)
from .parsing import parse_bool, parse_choice, parse_path
from .sweep import SWEEPS
from .targets import KINDS
from .workloads import KDF_PROFILE, PROFILE_NAMES


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
           "('no signature') only, never 'not mounted', 'no swap', 'not in use', 'no overlap' or "
           "'not the root disk'",
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
           "measured rounds per workload in a run that saves a reference run (--encperf-save, "
           "--encperf-autosave) when --encperf-rounds is not given: a reference with more rounds lets each "
           "checking run decide with fewer", parse_rounds, "10"),
    Option("volumes", "N",
           "fresh volume pairs (plain and backend) each workload's rounds are spread over, in whole A B B A "
           "blocks: a reference run saved with N >= 2 carries its own between-volume spread, which the gate "
           "uses instead of the between-run prior (not on the partition target; real-work tasks use one)",
           parse_volumes, "1"),
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
           "fail the gate (exit 7) when it cannot check what it was asked to: no usable reference run, a "
           "backend x workload of the reference run missing now, settings that differ, a reference run "
           "from other hardware (bare flag = yes)",
           parse_bool, "no", form="flag", const="1"),
    Option("allow-other-hardware", "BOOL",
           "accept a reference run measured on other hardware (CPU model, cores, crypto flags, disk "
           "model): a note instead of a check not made, which strict mode fails (bare flag = yes)",
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
    Option("fio-job", "FILE[,FILE...]",
           "fio job files: each job section is a workload named after it, run with fio and the job's own "
           "options on encperf's test file in each volume (alone, unless --encperf-profile is given too)",
           fiojob.parse_fio_job_files, ""),
    Option("ladder", "BOOL",
           "where the overhead comes from: also measure each backend's cipher alone and each backend and "
           "workload on a RAM-backed container (tmpfs + loop, never a baseline), and name the rung that "
           "limits it (bare flag = yes)", parse_bool, "no", form="flag", const="1"),
)  # fmt: skip
