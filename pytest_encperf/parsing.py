"""Value parsers shared by the option table (options.py) and the backends' parameter tables.

Each takes the text a user typed and returns the value, or raises ValueError whose message
has one form: ``bad <what> '<text>': expected <the accepted forms>``. A caller that knows the
option or parameter puts its name in front (``luks2: sector-size: bad value '3000': ...``).
This module imports nothing of the package, so backends and settings can both use it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def parse_bool(text: str) -> bool:
    """A switch: 1/true/yes/on or 0/false/no/off (any case); the bare command-line flag gives 1."""
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"bad switch value {text!r}: expected 1/true/yes/on or 0/false/no/off")


def parse_choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    """One of ``choices``, exactly as written."""

    def parse(text: str) -> str:
        value = str(text).strip()
        if value not in choices:
            raise ValueError(f"bad value {text!r}: expected one of {', '.join(choices)}")
        return value

    parse.__doc__ = " | ".join(choices)
    return parse


def whole_number(text: str, max_digits: int) -> int | None:
    """``text`` as a whole number of ASCII digits (leading zeros aside, at most ``max_digits``
    of them), else None: int() never sees a huge string (Python refuses over 4300 digits, slowly
    before that) and "+5", "1_000" or "٣" are not numbers a user means."""
    value = str(text).strip()
    if not (value.isascii() and value.isdigit()) or len(value.lstrip("0")) > max_digits:
        return None
    return int(value)


def parse_int(low: int, high: int, *, multiple_of: int = 1) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``, a multiple of ``multiple_of``. Every number has an
    upper limit: a 400-digit one must be refused here, not overflow in a tool or a C call."""
    accepted = f"a whole number from {low} to {high}"
    if multiple_of != 1:
        accepted += f", a multiple of {multiple_of}"

    def parse(text: str) -> int:
        number = whole_number(text, len(str(high)))
        if number is None or number < low or number > high or number % multiple_of:
            raise ValueError(f"bad value {text!r}: expected {accepted}")
        return number

    parse.__doc__ = accepted
    return parse


def parse_int_choice(choices: tuple[int, ...]) -> Callable[[str], int]:
    """One of the whole numbers ``choices``."""
    accepted = ", ".join(str(choice) for choice in choices)

    def parse(text: str) -> int:
        number = whole_number(text, max(len(str(choice)) for choice in choices))
        if number is None or number not in choices:
            raise ValueError(f"bad value {text!r}: expected one of {accepted}")
        return number

    parse.__doc__ = " | ".join(str(choice) for choice in choices)
    return parse


def parse_text(text: str) -> str:
    """Any text, stripped (a backend spec never carries an empty value: BackendSpec.parse refuses it)."""
    return str(text).strip()


def parse_path(text: str) -> Path:
    """A file or directory path (created when written; ``~`` is expanded)."""
    if not str(text).strip():
        raise ValueError("bad path '': expected a file or directory name")
    return Path(str(text).strip()).expanduser()
