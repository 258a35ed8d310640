"""The suite's layout: every test file sits in a lane (tests/unit, tests/functional,
tests/integration), and the unit lane stays cheap: none of its files uses pytester or starts a
process (subprocess), so ``pytest tests/unit`` runs first and fast. The suite shares no state with the
machine it runs on, and its configuration applies to the tests alone (tests/conftest.py)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from pytest_encperf import host, journal
from tests.helpers.support import disk_dir

TESTS = Path(__file__).resolve().parents[1]
LANES = ("unit", "functional", "integration")
COSTLY = {"pytester", "testdir", "subprocess"}  # a fixture that runs pytest, a module that spawns


def test_no_test_file_sits_directly_in_tests() -> None:
    allowed = ("__init__.py", "conftest.py")
    loose = sorted(path.name for path in TESTS.glob("*.py") if path.name not in allowed)
    assert loose == [], f"move them into one of tests/{{{','.join(LANES)}}}/ (or tests/helpers/)"


def test_every_test_file_is_in_a_lane() -> None:
    found = {path.relative_to(TESTS).parts[0] for path in TESTS.rglob("test_*.py")}
    assert found <= {*LANES, "helpers"} and not list((TESTS / "helpers").glob("test_*.py"))


def _costly_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            used |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            used.add(node.module.split(".")[0])
        elif isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.arg):
            used.add(node.arg)
    return used & COSTLY


def test_unit_tests_use_no_pytester_and_start_no_process() -> None:
    costly = {
        path.name: sorted(names)
        for path in sorted((TESTS / "unit").glob("*.py"))
        if (names := _costly_names(path))
    }
    assert costly == {}, "these belong in tests/functional (or tests/integration)"


def test_each_lane_marks_its_tests(request: pytest.FixtureRequest) -> None:
    """The lane's conftest marks what it collects, so ``-m unit`` and the directory agree."""
    for lane in LANES:
        assert f"pytest.mark.{lane}" in (TESTS / lane / "conftest.py").read_text()
    assert request.node.get_closest_marker("unit") is not None


def test_the_suite_s_configuration_stays_out_of_benchmarks() -> None:
    """At the repository's root, conftest.py applied to ``pytest benchmarks/`` too: the README's
    main job then measured under the suite's private locks, with no busy threshold."""
    assert not (TESTS.parent / "conftest.py").exists()
    assert (TESTS / "conftest.py").is_file()
    assert not (TESTS.parent / "benchmarks" / "conftest.py").exists() or "ENCPERF_BUSY_THRESHOLD" not in (
        TESTS.parent / "benchmarks" / "conftest.py"
    ).read_text(encoding="utf-8")


def test_the_suite_shares_no_directory_with_the_machine() -> None:
    """Locks, run directories (and their journals), disk scratch space and the list of run
    directories ``encperf cleanup`` visits are the suite's own (tests/conftest.py), so a benchmark
    beside it neither waits for it nor cleans up after it."""
    locks = host.lock_directory()
    assert locks != Path("/run/encperf") and host.is_private_directory(str(locks))
    runs = Path(os.environ["ENCPERF_DIR"])
    assert runs != Path("/var/tmp") and host.is_private_directory(str(runs))
    assert Path(disk_dir()) != Path("/var/tmp") and host.is_private_directory(str(disk_dir()))
    state = journal.state_file()
    assert Path(os.environ["XDG_STATE_HOME"]) in state.parents and ".local" not in state.parts
