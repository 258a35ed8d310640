"""The ``encperf`` command: what can run here, without starting pytest.

encperf backends [--target container|directory] [--dir DIR]   # doctor: usable or why not
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tabulate import tabulate

from .backends import BackendSpec, known_names, make_backend
from .settings import OPTIONS, default_directory, parse_choice, parse_directory
from .targets import KINDS, Target, container_size
from .workloads import MiB


def _type(parse):  # argparse wants ArgumentTypeError for a clean "invalid value" message
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def backends_command(args: argparse.Namespace) -> int:
    target = Target(args.target, args.dir, container_size(256 * MiB))
    rows = []
    for name in known_names():
        problems = make_backend(BackendSpec(name)).problems(target)
        rows.append([name, "usable" if not problems else "no", "; ".join(problems)])
    print(f"target: {args.target} in {args.dir}")
    print(tabulate(rows, headers=["backend", "usable here", "why not"], tablefmt="simple"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="encperf", description="pytest-encperf outside pytest")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser("backends", help="list backends and whether they can run here (doctor)")
    helps = {option.name: option.help for option in OPTIONS}
    doctor.add_argument(
        "--target", type=_type(parse_choice(KINDS)), default="container", help=helps["target"]
    )
    doctor.add_argument("--dir", type=_type(parse_directory), default=default_directory(), help=helps["dir"])
    doctor.set_defaults(handler=backends_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
