"""docs/explanation/architecture.md names every module of the package, and only those."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_encperf"
DOC = ROOT / "docs" / "explanation" / "architecture.md"


def _modules() -> set[str]:
    top = {path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    return top | {f"{path.name}/" for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}


def test_every_module_of_the_package_is_on_the_map() -> None:
    named = set(re.findall(r"`([a-z_]+\.py|[a-z_]+/)`", DOC.read_text()))
    missing = sorted(_modules() - named)
    assert missing == [], f"add them to {DOC.relative_to(ROOT)}"


def test_the_map_names_no_module_that_is_gone() -> None:
    named = set(re.findall(r"^\| `([^|]+)` \|", DOC.read_text(), re.MULTILINE))
    cells = {name.strip("`") for row in named for name in row.split("`, `")}
    subpackage_files = {
        f"{path.parent.name}/{path.name}" for path in PACKAGE.glob("*/*.py") if path.name != "__init__.py"
    }
    gone = sorted(c for c in cells if c not in _modules() and c not in subpackage_files)
    assert gone == []
