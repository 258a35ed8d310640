"""The README's two commands are what the project runs: CI takes the test command from it. The rest
of the manual is in docs/ (tests/unit/test_docs.py)."""

from __future__ import annotations

import re
import subprocess

from tests.unit.test_readme import ROOT, command_after


def test_ci_runs_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    extract = re.search(r"command=\$\((.+)\)\n", script).group(1)
    shown = subprocess.run(["bash", "-c", extract], cwd=ROOT, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == command_after("<!-- test-command -->")
    # the unit lane first, and the rest only when it passed (CI stops on its failure)
    unit, rest = shown.stdout.strip().split(" && ")[-2:]
    assert unit.endswith("pytest -q -n auto tests/unit")
    assert rest.endswith("pytest -n auto --dist worksteal tests/functional tests/integration")
