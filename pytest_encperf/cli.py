"""The ``encperf`` command: saved runs without pytest (list, compare, show, report), what can run
here (backends), and release of what killed runs left behind (cleanup).

Each subcommand is a ``Command`` (its arguments and its function) in ``COMMANDS``; adding one
is one function pair and one line. Options share their parsers with the pytest plugin
(options.py), so ``--fail`` accepts exactly what ``--encperf-fail`` accepts.

Exit status: 0 ok, 1 error (missing or unreadable run), 2 usage error (argparse),
``gate.EXIT_REGRESSION`` (7) when ``encperf compare --fail`` finds a regression.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from . import __version__, backends, deadruns, gatescope, journal, machine, storage, sweep
from .backends import BASELINE, BackendSpec, backend_class, known_names, make_backend, recommend
from .gate import EXIT_REGRESSION, Verdict, judge, unknown_name_message, unmatched_names
from .model import RunData
from .optionparsers import default_directory, parse_directory, parse_html_path
from .options import OPTIONS
from .outcome import load_reference
from .parsing import parse_bool, parse_choice, parse_path, parse_text
from .parsing import parse_path as parse_path_param
from .report import (
    cpu_line,
    detail_table,
    html,
    markdown_report,
    sweep_report,
    verdict_header,
    verdict_report,
)
from .targets import Target, container_size
from .workloads import MiB


def argument_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A settings parser as an argparse ``type``: its message (the accepted forms) becomes the error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _option(name: str) -> Any:
    return next(option for option in OPTIONS if option.name == name)


# ----------------------------------------------------------------------------- list


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--machine", metavar="ID", help="only this machine id's runs")


def run_list(args: argparse.Namespace) -> int:
    runs = storage.list_runs(args.storage, args.machine)
    if not runs:
        print(f"no saved runs in {args.storage}")
        return 0
    machine = None
    for run in runs:
        if run.machine_id != machine:
            machine = run.machine_id
            print(f"{machine}:")
        try:
            doc, results = storage.load(run.path)
        except storage.StorageError as exc:
            print(f"  {run.path.name}  unreadable: {exc}")
            continue
        commit = doc.get("commit_info", {})
        backends = sorted({r.backend for r in results})
        incomplete = storage.incomplete_reason(doc)
        print(
            f"  {run.path.name}  {doc.get('datetime', '?')}  commit {str(commit.get('id', '?'))[:12]}"
            f"{' (dirty)' if commit.get('dirty') else ''}  {len(results)} results  {', '.join(backends)}"
            + (f"  INCOMPLETE: {incomplete}" if incomplete else "")
        )
    return 0


# ----------------------------------------------------------------------------- compare


def add_shared_option(parser: argparse.ArgumentParser, name: str, flag: str, also: str = "") -> None:
    """An option of the plugin's table (settings.OPTIONS) under a shorter CLI flag: same parser,
    same accepted forms, same default."""
    option = _option(name)
    parser.add_argument(
        flag,
        type=argument_type(option.parse),
        default=option.parse(option.default_text()),
        metavar=option.metavar,
        help=f"{option.help}{also} (default: {option.default_display()})".replace("%", "%%"),
    )


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "reference",
        help=(
            "the reference run: number, name, MACHINE-ID/RUN, latest or .json path; a name or latest "
            "picks a complete run, NAME! or latest! an incomplete one too"
        ),
    )
    parser.add_argument("current", help="the run to judge (same forms)")
    add_shared_option(parser, "fail", "--fail", " (same grammar as --encperf-fail)")
    add_shared_option(parser, "max-overhead", "--max-overhead", " (in the current run)")
    add_shared_option(parser, "history", "--history")
    add_shared_option(parser, "noise", "--noise")
    parser.add_argument("--strict", action="store_true", help=_option("strict").help)
    parser.add_argument(
        "--allow-other-hardware", action="store_true", help=_option("allow-other-hardware").help
    )
    parser.add_argument(
        "--markdown", type=argument_type(parse_path), metavar="PATH", help="also write Markdown"
    )


def check_rule_names(args: argparse.Namespace, *runs: RunData) -> None:
    """A --fail or --max-overhead WORKLOAD that is no built-in selector names a fio job or a timed
    function of the runs (a test's name selects its parametrizations); exit 2 naming the jobs and
    functions there are otherwise."""
    results = [result for run in runs for result in run.results]
    jobs = list(dict.fromkeys(r.workload.name for r in results if r.workload.kind == "job"))
    names = list(dict.fromkeys(r.workload.name for r in results if r.workload.kind in ("job", "task")))
    functions = dict.fromkeys(r.workload.name for r in results if r.workload.is_timed_function)
    timed = [name for name in functions if name not in jobs]
    for flag, rules in (("--fail", args.fail), ("--max-overhead", args.max_overhead)):
        unknown = unmatched_names(rules, jobs, names)
        if unknown:
            message = unknown_name_message(flag, unknown[0], jobs, timed, "in the runs")
            print(f"encperf: error: {message}", file=sys.stderr)
            raise SystemExit(2)


def saved_verdict(
    args: argparse.Namespace, ref: str, base_run: storage.SavedRun, current_run: storage.SavedRun
) -> tuple[Verdict, RunData]:
    """The gate's verdict on ``current_run`` against ``base_run`` (named ``ref``), with the
    history of saved runs before it, as the pytest run would judge it; and the current run."""
    current = storage.load_run(current_run)
    reference = load_reference(
        args.storage, base_run, ref, args.history, current.machine_info,
        allow_other_hardware=args.allow_other_hardware, gated=bool(args.fail),
        flag="--allow-other-hardware", leave_out=current_run.path, unreadable_history=False,
    )  # fmt: skip
    reference_run = reference.run
    assert reference_run is not None
    check_rule_names(args, reference_run, current)
    verdict = judge(
        current,
        reference_run,
        args.fail,
        args.max_overhead,
        reference.history,
        strict=args.strict,
        noise=args.noise,
    )
    if machine.same_hardware(reference_run.machine_info, current.machine_info):
        verdict.machine_differences = reference.machine_differences
    else:
        verdict.notes.append(
            f"warning: the runs come from different machines ({base_run.machine_id}, "
            f"{current_run.machine_id}): differences may be the machines', not the code's"
        )
    verdict.notes += reference.notes
    verdict.unchecked += reference.unchecked
    verdict.not_gated = gatescope.ungated_in_document(storage.load(current_run.path)[0])
    return verdict, current


def run_compare(args: argparse.Namespace) -> int:
    base_run, base_warning = storage.resolve(args.storage, args.reference, None)
    current_run, current_warning = storage.resolve(args.storage, args.current, None)
    verdict, current = saved_verdict(args, args.reference, base_run, current_run)
    verdict.notes[:0] = [f"warning: {text}" for text in (base_warning, current_warning) if text]
    print(f"{base_run.label} -> {current_run.label}")
    for kind, _, line in verdict_report(verdict):
        print(line if kind == "line" else f"---- {line} ----")
    if args.markdown:
        args.markdown.write_text(
            markdown_report(list(current.results), verdict, f"encperf: {current_run.label}")
        )
    return EXIT_REGRESSION if verdict.failed else 0


# ----------------------------------------------------------------------------- report


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "One self-contained HTML page (charts inlined as SVG, no network needed to view it) of "
        "saved runs: the newest in full (tiles, overhead, latency, CPU, ATTO and grid profiles, "
        "context) with the history of the others, judged against the run before it like "
        "`encperf compare` (exit 7 when that gate fails). Needs pytest-encperf[html]."
    )
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="saved runs: number, name, MACHINE-ID/RUN, latest or .json path",
    )
    parser.add_argument(
        "-o", "--output", required=True, type=argument_type(parse_html_path), metavar="PATH",
        help="the HTML file to write",
    )  # fmt: skip
    add_shared_option(parser, "fail", "--fail", " (the newest run against the one before it)")
    add_shared_option(parser, "max-overhead", "--max-overhead", " (in the newest run)")
    add_shared_option(parser, "history", "--history")
    add_shared_option(parser, "noise", "--noise")
    parser.add_argument("--strict", action="store_true", help=_option("strict").help)
    parser.add_argument(
        "--allow-other-hardware", action="store_true", help=_option("allow-other-hardware").help
    )


def run_report(args: argparse.Namespace) -> int:
    found = [storage.resolve(args.storage, ref, None)[0] for ref in args.runs]
    refs = {run.path: ref for run, ref in zip(found, args.runs, strict=True)}
    saved = sorted(dict.fromkeys(found), key=lambda run: (run.datetime_key, run.number))  # oldest first
    runs = [storage.load_run(run) for run in saved]
    verdict: Verdict | None
    if len(saved) > 1:
        verdict, runs[-1] = saved_verdict(args, refs[saved[-2].path], saved[-2], saved[-1])
    else:  # one run: judged only against its own plain rounds, when asked
        verdict = (
            judge(runs[-1], None, [], args.max_overhead, strict=args.strict, noise=args.noise)
            if args.max_overhead
            else None
        )
    text = html.render(html.Page(runs, verdict, f"encperf report: {saved[-1].label}"))
    storage.write_report(args.output, text)
    print(f"encperf report: wrote {args.output} ({len(text.encode()):,} bytes; {len(runs)} run(s))")
    if verdict is not None:
        print(verdict_header(verdict))
    return EXIT_REGRESSION if verdict is not None and verdict.failed else 0


# ----------------------------------------------------------------------------- show


def add_show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="number, name, MACHINE-ID/RUN, latest or .json path")


def run_show(args: argparse.Namespace) -> int:
    run, _ = storage.resolve(args.storage, args.run, None)
    doc, results = storage.load(run.path)
    info, commit = doc.get("machine_info", {}), doc.get("commit_info", {})
    print(f"{run.label}  {doc.get('datetime', '?')}  commit {commit.get('id', '?')}")
    if storage.incomplete_reason(doc):
        print(f"INCOMPLETE: {storage.incomplete_reason(doc)}")
    print(
        f"machine: {info.get('cpu_model', '?')}, {info.get('cpu_count', '?')} CPUs, "
        f"flags {' '.join(info.get('cpu_flags', []))}, kernel {info.get('kernel', '?')}, "
        f"xts(aes) {info.get('xts_aes_driver', '?')}, {info.get('filesystem', '?')} on "
        f"{info.get('device_model', '?')}"
    )
    print(cpu_line(info))
    settings = doc.get("encperf", {}).get("settings", {})
    if settings:
        print("settings: " + ", ".join(f"{key}={value}" for key, value in settings.items()))
    print(detail_table(results) or "no results")
    saved = doc.get("encperf", {}).get("sweeps")
    try:  # as the run ranked them (its skipped configurations included)
        rankings = [sweep.ranking_from_dict(data) for data in saved] if saved else []
    except (KeyError, TypeError, IndexError):
        rankings = []
    if not rankings:  # a run saved before sweeps were: rank what it measured
        specs = list(dict.fromkeys(r.backend for r in results if r.backend != BASELINE))
        rankings = recommend(sweep.rank(results, specs))
    for ranking in rankings:
        print()
        print("\n".join(sweep_report(ranking)))
    return 0


# ----------------------------------------------------------------------------- backends (doctor)


def add_backends_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", nargs="?", help="one backend: also list its parameters (what a spec or a sweep may set)"
    )
    parser.add_argument(
        "--target",
        type=argument_type(parse_choice(("container", "directory"))),
        default="container",
        help="where volumes would live: container | directory",
    )
    parser.add_argument(
        "--dir", type=argument_type(parse_directory), default=default_directory(), help=_option("dir").help
    )


def parameter_rows(name: str) -> list[list[str]]:
    """A backend's parameter table: name, accepted values, default, what it does."""
    plain_forms: dict[Callable[[str], Any], str] = {
        parse_bool: "0 | 1",
        parse_text: "text",
        parse_path_param: "a path",
    }
    rows = []
    for param in backend_class(name).param_table():
        accepted = plain_forms.get(param.parse) or (param.parse.__doc__ or "").strip().partition("\n")[0]
        default = param.default
        if isinstance(default, bool):
            default = int(default)
        rows.append([param.name, accepted, "-" if default is None else str(default), param.help])
    return rows


def run_backends(args: argparse.Namespace) -> int:
    target = Target(args.target, args.dir, container_size(256 * MiB))
    if args.name is not None and args.name not in known_names():
        print(
            f"encperf: error: unknown backend {args.name!r} (available: {', '.join(known_names())})",
            file=sys.stderr,
        )
        return 2
    rows = []
    for name in [args.name] if args.name else known_names():
        try:
            problems = make_backend(BackendSpec(name)).unavailable_reasons(target)
        except ValueError as exc:  # opens an existing volume: usable once its parameters are given
            rows.append([name, "with parameters", str(exc)])
            continue
        rows.append([name, "usable" if not problems else "no", "; ".join(problems)])
    print(f"target: {args.target} in {args.dir}")
    print(tabulate(rows, headers=["backend", "usable here", "why not"], tablefmt="simple"))
    if args.name:
        params = parameter_rows(args.name)
        print()
        if params:
            print(tabulate(params, headers=["parameter", "accepts", "default", "meaning"], tablefmt="simple"))
            print(
                f"a spec: {args.name}:key=value,...; a sweep lists alternatives: {args.name}:key=a|b (quoted)"
            )
        else:
            print(f"{args.name} has no parameters")
    return 0


# ----------------------------------------------------------------------------- cleanup


def _default_dir() -> str:
    """Same precedence as the plugin's --encperf-dir, minus the ini file: ENCPERF_DIR, default."""
    option = _option("dir")
    return os.environ.get(option.env) or option.default_text()


def add_cleanup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Find the journals of runs whose process is dead under DIR/.encperf-runs and release "
        "their resources: unmount, stop daemons, close dm targets, detach loop devices, remove "
        "files. Live runs and anything not in a journal are never touched; a journal that is not "
        "this user's (owner, mode, symbolic link), or an entry outside its run's own directories "
        "or naming a process the run did not start, is refused and reported."
    )
    parser.add_argument(
        "--dir",
        type=argument_type(parse_directory),
        default=None,
        help=(
            "the --encperf-dir of the runs (default: $ENCPERF_DIR or /var/tmp, and every directory "
            "where this user's runs kept a journal)"
        ),
    )
    parser.add_argument("--dry-run", action="store_true", help="only print what would be released")


def run_cleanup(args: argparse.Namespace) -> int:
    if args.dir is not None:
        directories = [args.dir]
    else:  # the default directory and every directory this user's runs journaled in
        directories = [parse_directory(_default_dir())]
        directories += [d for d in journal.known_directories() if d not in directories]
    for problem in backends.load_all():  # each backend registers the resource kinds it adds
        print(f"encperf cleanup: {problem}", file=sys.stderr)
    runs = [run for d in directories for run in deadruns.release_dead_runs(d, dry_run=args.dry_run)]
    if not runs:
        where = ", ".join(map(str, directories))
        print(f"encperf cleanup: nothing left behind by dead runs in {where}")
        return 0
    for run in runs:
        for line in run.lines():
            print(line)
    failed = sum(len(run.failed) for run in runs)
    kept = sum(len(run.kept) for run in runs)
    refused = sum(len(run.refused) for run in runs)
    if failed:
        print(f"encperf cleanup: could not release {failed} resource(s) or journal(s)", file=sys.stderr)
    if kept:
        print(
            f"encperf cleanup: kept {kept} resource(s) they may rest on in the journal: run "
            "`encperf cleanup` again once the failures are fixed",
            file=sys.stderr,
        )
    if refused:
        print(f"encperf cleanup: refused {refused} journal(s) or resource(s) (not released)", file=sys.stderr)
    return 1 if failed or refused else 0


# ----------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {
    "list": Command("saved runs, per machine", add_list_arguments, run_list),
    "compare": Command(
        "compare two saved runs (exit 7 on a regression with --fail)", add_compare_arguments, run_compare
    ),
    "show": Command("the results of one saved run", add_show_arguments, run_show),
    "report": Command(
        "a self-contained HTML report of saved runs (needs pytest-encperf[html])",
        add_report_arguments,
        run_report,
    ),
    "backends": Command(
        "list backends and whether they can run here (doctor)", add_backends_arguments, run_backends
    ),
    "cleanup": Command(
        "release what killed runs left behind (mounts, daemons, dm targets, loop devices, files)",
        add_cleanup_arguments,
        run_cleanup,
    ),
}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="encperf", description="pytest-encperf's saved runs")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--storage",
        type=argument_type(parse_path),
        default=Path(_option("storage").default_text()),
        metavar="DIR",
        help=f"directory of saved runs (default: {_option('storage').default_text()})",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub = commands.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.handler(args)
    except storage.StorageError as exc:
        print(f"encperf: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
