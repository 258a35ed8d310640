"""The ``encperf`` command: offline tools around the pytest plugin.

One ``add_<command>_parser(subparsers)`` and one ``cmd_<command>(args) -> int`` per subcommand,
so commands can be added side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from . import journal
from .settings import OPTIONS, parse_directory


def _default_dir() -> str:
    """Same precedence as the plugin's --encperf-dir, minus the ini file: ENCPERF_DIR, default."""
    option = next(option for option in OPTIONS if option.name == "dir")
    return os.environ.get(option.env) or option.default_text()


def add_cleanup_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "cleanup",
        help="release what killed runs left behind (mounts, daemons, dm targets, loop devices, files)",
        description=(
            "Find the journals of runs whose process is dead under DIR/.encperf-runs and release "
            "their resources: unmount, stop daemons, close dm targets, detach loop devices, remove "
            "files. Live runs and anything not in a journal are never touched."
        ),
    )
    parser.add_argument(
        "--dir",
        type=_directory,
        default=None,
        help=(
            "the --encperf-dir of the runs (default: $ENCPERF_DIR or /var/tmp, and every directory "
            "where this user's runs kept a journal)"
        ),
    )
    parser.add_argument("--dry-run", action="store_true", help="only print what would be released")
    parser.set_defaults(func=cmd_cleanup)


def cmd_cleanup(args: argparse.Namespace) -> int:
    if args.dir is not None:
        directories = [args.dir]
    else:  # the default directory and every directory this user's runs journaled in
        directories = [_directory(_default_dir())]
        directories += [d for d in journal.known_directories() if d not in directories]
    runs = [run for d in directories for run in journal.release_dead_runs(d, dry_run=args.dry_run)]
    if not runs:
        where = ", ".join(map(str, directories))
        print(f"encperf cleanup: nothing left behind by dead runs in {where}")
        return 0
    for run in runs:
        for line in run.lines():
            print(line)
    failed = sum(len(run.failed) for run in runs)
    if failed:
        print(f"encperf cleanup: {failed} resource(s) could not be released", file=sys.stderr)
        return 1
    return 0


def _directory(text: str) -> Path:
    try:
        return parse_directory(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="encperf", description="pytest-encperf tools")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_cleanup_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
