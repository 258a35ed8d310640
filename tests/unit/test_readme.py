"""The README's two commands are what the project runs: CI takes the test command from it. The rest
of the manual is in docs/ (tests/unit/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def command_after(marker: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(re.escape(marker) + r"\s*```sh\n(.+?)\n```", text, re.S)
    assert match, f"README.md has no command after {marker}"
    return match.group(1)


def test_main_command_runs_the_benchmarks_on_the_default() -> None:
    command = command_after("<!-- main-command -->")
    assert command.endswith("pytest benchmarks/")
    assert "--encperf" not in command  # the embedded default, no extra options


def test_every_option_is_documented() -> None:
    """The options reference (docs/reference/options.md, its table generated from the code)."""
    from pytest_encperf.docgen import expand
    from pytest_encperf.settings import OPTIONS

    text = expand((ROOT / "docs" / "reference" / "options.md").read_text())
    documented = [f"`{option.flag}" + ("`" if option.form == "flag" else "") for option in OPTIONS]
    assert [form for form in documented if form not in text] == []


def test_the_readme_stays_short_and_points_to_the_manual() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "](docs/report.png)" in text  # the screenshot
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert "docs/index.md" in links
    assert [link for link in links if not (ROOT / link).exists()] == []
