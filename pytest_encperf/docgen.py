"""The reference pages that are generated from the code, so they cannot go stale: the options
(``settings.OPTIONS``), the backends' parameter tables (each backend's ``Param`` table), the
``encperf`` command line (its argparse parsers), the hooks (``hookspec.py``) and the backend
contract (``BackendBase``'s docstring).

A page of ``docs/`` asks for one with a line ``<!-- generated: NAME -->``; the MkDocs hook
``docs/hooks.py`` puts the Markdown there when the site is built. ``python -m
pytest_encperf.docgen NAME`` prints one."""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable

from . import hookspec
from .backends import REGISTRY, BackendBase, backend_class
from .cli import COMMANDS, make_parser, parameter_rows
from .settings import OPTIONS, Option

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
HELP_WIDTH = 100  # argparse wraps to the terminal otherwise: the page must not depend on it


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    """``text`` as a code span inside a table cell (a ``|`` in it would end the cell)."""
    return f"`{_cell(text)}`"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _option_form(option: Option) -> str:
    if option.form == "flag":
        return option.flag
    if option.form == "optional":
        return f"{option.flag}[={option.metavar}]"
    return f"{option.flag}={option.metavar}"


def options_markdown() -> str:
    rows = [
        "| option | default | ini / environment | meaning |",
        "|---|---|---|---|",
    ]
    for option in OPTIONS:
        twins = f"{_code(option.ini)}, {_code(option.env)}"
        if option.command_line_only:
            twins = "command line only"
        rows.append(
            _row(_code(_option_form(option)), _code(option.default_display()), twins, _cell(option.help))
        )
    return "\n".join(rows) + "\n"


def _backend_groups() -> list[tuple[list[str], type[BackendBase]]]:
    """The registered backends in the registry's order, aliases (one class) together."""
    groups: list[tuple[list[str], type[BackendBase]]] = []
    for name in REGISTRY:
        cls = backend_class(name)
        for names, known in groups:
            if known is cls:
                names.append(name)
                break
        else:
            groups.append(([name], cls))
    return groups


def backends_markdown() -> str:
    parts = []
    for names, _cls in _backend_groups():
        parts.append("### " + ", ".join(f"`{name}`" for name in names) + "\n")
        rows = parameter_rows(names[0])
        if not rows:
            parts.append("No parameters.\n")
            continue
        table = ["| parameter | accepts | default | meaning |", "|---|---|---|---|"]
        table += [
            _row(_code(name), _cell(accepts), _code(default), _cell(text))
            for name, accepts, default, text in rows
        ]
        parts.append("\n".join(table) + "\n")
    return "\n".join(parts)


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=HELP_WIDTH)


def cli_markdown() -> str:
    top = make_parser()
    top.formatter_class = _formatter
    parts = ["```text\n" + top.format_help().rstrip() + "\n```\n"]
    for name, command in COMMANDS.items():
        sub = argparse.ArgumentParser(
            prog=f"encperf {name}", description=command.help, formatter_class=_formatter
        )
        command.add_arguments(sub)
        parts.append(f"### `encperf {name}`\n\n```text\n" + sub.format_help().rstrip() + "\n```\n")
    return "\n".join(parts)


def hooks_markdown() -> str:
    parts = []
    for name, function in inspect.getmembers(hookspec, inspect.isfunction):
        if not name.startswith("pytest_encperf_"):
            continue
        signature = f"def {name}{inspect.signature(function)}: ..."
        parts.append(f"### `{name}`\n\n```python\n{signature}\n```\n\n{inspect.getdoc(function) or ''}\n")
    return "\n".join(parts)


def backend_contract_markdown() -> str:
    return (inspect.getdoc(BackendBase) or "") + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "options": options_markdown,
    "backend-parameters": backends_markdown,
    "cli": cli_markdown,
    "hooks": hooks_markdown,
    "backend-contract": backend_contract_markdown,
}


def expand(markdown: str) -> str:
    """``markdown`` with every ``<!-- generated: NAME -->`` line replaced by what NAME generates;
    an unknown NAME is a ValueError (the build fails rather than show a hole)."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated section {name!r} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]().rstrip("\n")

    return MARKER.sub(generated, markdown)


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    unknown = [name for name in names if name not in GENERATORS]
    if not names or unknown:
        print(f"usage: python -m pytest_encperf.docgen NAME... ({', '.join(GENERATORS)})", file=sys.stderr)
        return 2
    for name in names:
        print(GENERATORS[name]())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
