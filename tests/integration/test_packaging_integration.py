"""The package as a user gets it: ``python -m build`` makes the sdist and the wheel (the wheel
from the unpacked sdist, so the sdist is complete), ``twine check`` passes them, and the wheel
installed with its dependencies into a fresh virtual environment runs ``encperf backends``.

Marked integration for its cost, not for root: two isolated build environments and the wheel's
dependencies come from the package index (about a minute on the project's 2-core machine)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import pytest_encperf
from pytest_encperf.backends import REGISTRY

pytestmark = pytest.mark.integration

# a copy of the source tree to build from: the build writes its egg-info and build/ beside the
# sources, and must not into the working tree (nor see a venv, caches or saved runs)
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".tox", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".encperf", ".benchmarks",
)  # fmt: skip
UNREACHABLE = ("Could not fetch URL", "NewConnectionError", "Temporary failure in name resolution")
TIMEOUT = 900


def run(argv: list[str | os.PathLike[str]], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL, check=False, cwd=cwd
    )


def checked(proc: subprocess.CompletedProcess[str]) -> str:
    """The output of a finished step; a step that needed the package index and could not reach
    it skips the test (naming the index), any other failure fails it."""
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and any(sign in output for sign in UNREACHABLE):
        pytest.skip(f"the package index is not reachable: {output[-2000:]}")
    assert proc.returncode == 0, output
    return proc.stdout


def test_the_wheel_builds_passes_twine_check_and_runs_from_a_fresh_environment(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    pytest.importorskip("build", reason="build is not installed (pip install -e '.[test]')")
    pytest.importorskip("twine", reason="twine is not installed (pip install -e '.[test]')")
    sources = tmp_path / "src"
    shutil.copytree(Path(request.config.rootpath), sources, ignore=NOT_SOURCES)
    dist = tmp_path / "dist"
    checked(run([sys.executable, "-m", "build", "--outdir", dist, sources]))
    version = pytest_encperf.__version__
    sdist = dist / f"pytest_encperf-{version}.tar.gz"
    wheel = dist / f"pytest_encperf-{version}-py3-none-any.whl"
    assert sorted(dist.iterdir()) == [wheel, sdist]
    with tarfile.open(sdist) as archive:
        in_sdist = {name.partition("/")[2] for name in archive.getnames()}
    assert {"CHANGELOG.md", "LICENSE", "README.md", "pyproject.toml", "pytest_encperf/py.typed"} <= in_sdist
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "pytest_encperf/py.typed" in names
    assert f"pytest_encperf-{version}.dist-info/licenses/LICENSE" in names  # the MIT text pyproject names
    assert f"pytest_encperf-{version}.dist-info/entry_points.txt" in names

    checked(run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel]))

    venv = tmp_path / "venv"
    checked(run([sys.executable, "-m", "venv", venv]))
    checked(run([venv / "bin" / "python", "-m", "pip", "install", "--no-input", wheel]))
    asked = "import importlib.metadata as m; print(m.version('pytest-encperf'))"
    installed = checked(run([venv / "bin" / "python", "-c", asked]))
    assert installed.strip() == version
    # from a directory of its own: the fresh environment, not the working tree, provides the package
    listing = checked(run([venv / "bin" / "encperf", "backends"], cwd=tmp_path))
    rows = {line.split()[0] for line in listing.splitlines() if line.strip()}
    assert set(REGISTRY) <= rows, listing
