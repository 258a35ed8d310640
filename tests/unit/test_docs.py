"""The manual in docs/: the site builds in strict mode (a broken link or anchor fails), every page
is in its navigation, and the reference pages generated from the code list every option, backend
and parameter there is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_encperf.backends import REGISTRY, backend_class
from pytest_encperf.docgen import GENERATORS, MARKER, expand
from pytest_encperf.settings import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONFIG = ROOT / "mkdocs.yml"


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[test]')")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(config_file=str(CONFIG), strict=True, site_dir=str(tmp_path / "site"))
    build(config)  # strict: any warning (a missing page, link or anchor) raises Abort
    options = (tmp_path / "site" / "reference" / "options" / "index.html").read_text()
    assert "--encperf-backends=SPECS" in options  # the hook filled the generated table
    assert "<!-- generated" not in options


def test_every_page_is_in_the_navigation() -> None:
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", CONFIG.read_text(), re.MULTILINE))
    assert {page.relative_to(DOCS).as_posix() for page in pages()} == listed


def test_every_generated_section_is_known_and_used() -> None:
    asked = [name for page in pages() for name in MARKER.findall(page.read_text())]
    assert sorted(set(asked)) == sorted(GENERATORS)
    assert len(asked) == len(set(asked))


def test_an_unknown_generated_section_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown generated section 'nope'"):
        expand("text\n<!-- generated: nope -->\n")


def test_the_options_reference_lists_every_option_with_its_twins() -> None:
    text = expand((DOCS / "reference" / "options.md").read_text())
    for option in OPTIONS:
        form = f"`{option.flag}" + ("`" if option.form == "flag" else "")
        assert form in text, option.flag
        if not option.command_line_only:
            assert f"`{option.ini}`" in text and f"`{option.env}`" in text
    consent = [option for option in OPTIONS if option.command_line_only]
    rows = [line for line in text.splitlines() if "command line only" in line and line.startswith("| `")]
    assert len(rows) == len(consent) == 2


def test_the_backends_reference_lists_every_backend_and_parameter() -> None:
    text = expand((DOCS / "reference" / "backends.md").read_text())
    generated = text.partition("## Parameters")[2]
    for name in REGISTRY:
        assert f"`{name}`" in generated, name
        for param in backend_class(name).param_table():
            assert f"| `{param.name}` |" in generated, (name, param.name)


def test_every_shipped_backend_is_an_example_of_the_contract() -> None:
    """docs/how-to/write-a-backend.md: every backend shipped is a subclass of BackendBase."""
    from pytest_encperf.backends import BackendBase

    assert all(issubclass(backend_class(name), BackendBase) for name in REGISTRY)


def test_the_cli_reference_shows_every_command() -> None:
    from pytest_encperf.cli import COMMANDS

    text = expand((DOCS / "reference" / "cli.md").read_text())
    assert all(f"usage: encperf {name}" in text for name in COMMANDS)


def test_the_hooks_reference_shows_every_hook() -> None:
    from pytest_encperf import hookspec

    text = expand((DOCS / "reference" / "hooks.md").read_text())
    hooks = [name for name in vars(hookspec) if name.startswith("pytest_encperf_")]
    assert hooks and all(f"### `{name}`" in text for name in hooks)


def test_the_tutorial_runs_the_readme_main_command() -> None:
    readme = (ROOT / "README.md").read_text()
    main = re.search(r"<!-- main-command -->\s*(```sh\n.+?\n```)", readme, re.S)
    assert main is not None
    assert main.group(1) in (DOCS / "tutorial" / "first-run.md").read_text()
