"""MkDocs hook: fills each ``<!-- generated: NAME -->`` line of a page with the Markdown that
``pytest_encperf.docgen`` generates from the code, so the reference cannot go stale."""

from __future__ import annotations

from typing import Any

from pytest_encperf.docgen import expand


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)
