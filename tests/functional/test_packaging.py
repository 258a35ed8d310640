"""The habits of a maintained package: the package type-checks, ships its type hints, writes its
version in one place and keeps a changelog (the build itself: test_packaging_integration.py)."""

from __future__ import annotations

import configparser
import datetime as dt
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import pytest_encperf
from pytest_encperf import machine, storage


@pytest.fixture
def root(request: pytest.FixtureRequest) -> Path:
    return Path(request.config.rootpath)


def pyproject(root: Path) -> dict[str, Any]:
    return tomllib.loads((root / "pyproject.toml").read_text())


def test_the_package_type_checks(
    root: Path, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """mypy at the settings pyproject.toml gives ([tool.mypy]) finds no error in the package, nor in
    the benchmark scripts that call it (a renamed argument broke benchmarks/busy_bars.py once)."""
    mypy_api = pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[test]')")
    # pytest's cache keeps mypy's warm (about a second after the first run); cold under -p no:cacheprovider
    pytest_cache = getattr(request.config, "cache", None)
    cache = pytest_cache.mkdir("mypy") if pytest_cache is not None else tmp_path_factory.mktemp("mypy")
    config = root / "pyproject.toml"
    out, err, status = mypy_api.run(
        [
            "--config-file",
            str(config),
            "--cache-dir",
            str(cache),
            str(root / "pytest_encperf"),
            str(root / "benchmarks"),
        ]
    )
    assert status == 0, out + err


def test_mypy_runs_in_the_lint_environment(root: Path) -> None:
    """tox's lint environment runs mypy beside ruff (the suite runs it in CI: the test above)."""
    tox = configparser.ConfigParser()
    tox.read(root / "tox.ini")
    commands = tox["testenv:lint"]["commands"].split()
    assert "mypy" in commands and "ruff" in commands
    assert "test" in tox["testenv:lint"]["extras"]  # mypy, stubs and the package's own dependencies


def test_the_test_extra_holds_the_tools_of_these_checks() -> None:
    extra = pyproject(Path(pytest_encperf.__file__).parents[1])["project"]["optional-dependencies"]["test"]
    names = {re.split(r"[<>=\[ ]", requirement)[0] for requirement in extra}
    assert {"mypy", "types-psutil", "types-tabulate", "build", "twine"} <= names


def test_type_hints_ship_with_the_package(root: Path) -> None:
    """PEP 561's marker is in the package and declared as its data (the wheel's content: the
    integration test)."""
    assert (Path(pytest_encperf.__file__).parent / "py.typed").is_file()
    assert "py.typed" in pyproject(root)["tool"]["setuptools"]["package-data"]["pytest_encperf"]


def test_the_version_is_written_once(root: Path) -> None:
    """pyproject.toml reads the version from the package; nothing else in it writes the number."""
    project = pyproject(root)
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pytest_encperf.__version__"}
    version = pytest_encperf.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+([a-z]+\d+)?", version)
    package = Path(pytest_encperf.__file__).parent
    written = [
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if re.search(rf"""["']{re.escape(version)}["']""", path.read_text())
    ]
    assert written == ["__init__.py"]


def test_saved_runs_record_that_version(tmp_path: Path) -> None:
    """The saved JSON's plugin version (pytest-benchmark's ``version`` field) and the machine's
    ``encperf_version`` are the package's."""
    assert machine.machine_info(tmp_path)["encperf_version"] == pytest_encperf.__version__
    doc = storage.document([], {}, "m1", {}, {}, dt.datetime(2026, 1, 2, tzinfo=dt.UTC))
    assert doc["version"] == pytest_encperf.__version__


def test_a_changelog_in_keep_a_changelog_style(root: Path) -> None:
    text = (root / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "keepachangelog.com" in text
    assert "\n## [Unreleased]\n" in text
    headings = re.findall(r"^### (.+)$", text, flags=re.MULTILINE)
    assert headings and set(headings) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
