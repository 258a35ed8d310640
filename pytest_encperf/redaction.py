"""Secrets in memory (a key, a password): values that never show themselves, and text with
every secret in it replaced by <secret> (a tool's error message).

Key files live in secretdirs.py's directories; a passphrase is never put on a command line,
in a log, a report or on the measured disk.
"""

from __future__ import annotations

from collections.abc import Sequence

REDACTED = "<secret>"


class Secret(bytes):
    """Secret bytes (a key, a password read from a file): ``repr`` and ``str`` show <secret>.

    pytest prints the arguments of every function in a traceback (``--tb=long``) and every
    local variable with ``-l``, into the terminal and the JUnit XML, and a Volume's repr shows
    its ``state``: a secret held as a Secret shows as <secret> in all of them. Operations on
    it give plain bytes, so wrap what is derived from it (``Secret(password + b"\\n")``).
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__


class SecretText(str):
    """A secret as text (an argument a tool takes only in argv, with the user's consent):
    ``repr`` shows <secret>, as for :class:`Secret`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return REDACTED


def redact(text: str, secrets: Sequence[bytes | str]) -> str:
    """``text`` with every secret (and its stripped form) replaced by <secret>."""
    for secret in secrets:
        value = secret.decode(errors="replace") if isinstance(secret, bytes) else secret
        for form in {value, value.strip()}:
            if len(form) >= 4:  # a newline or a short word is no secret, and is everywhere
                text = text.replace(form, REDACTED)
    return text
