"""``git clone`` and ``git checkout`` of a generated repository on each backend against plain:
many small files written, objects unpacked, a working tree replaced.

    pytest benchmarks/examples/test_git.py --encperf-backends=fscrypt,gocryptfs

The repository is generated once per module outside the volumes (deterministic: the same files and
history every run); the clone goes through git's pack protocol (``--no-local``), as from a server.
ENCPERF_EXAMPLE_SCALE (default 1) scales the number of files (the project's own tests run it at 0.05).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_encperf.runner import Runner

SCALE = float(os.environ.get("ENCPERF_EXAMPLE_SCALE", "1"))
FILES = max(20, int(2000 * SCALE))
COMMITS = 3
IDENTITY = [
    "-c",
    "user.name=encperf",
    "-c",
    "user.email=encperf@example.invalid",
    "-c",
    "commit.gpgsign=false",
]

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None, reason="git is not installed (apt-get install git)"
)


def git(*args: str | Path) -> None:
    subprocess.run(["git", *IDENTITY, *map(str, args)], check=True, capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository of FILES source-like files in 40 directories, COMMITS commits, the first tagged v1."""
    source = tmp_path_factory.mktemp("git-source")
    git("init", "--quiet", "--initial-branch=main", source)
    generator = random.Random(27)
    words = [f"name{n}" for n in range(500)]
    for commit in range(COMMITS):
        for number in range(FILES):
            if commit and number % 4:  # each later commit changes a quarter of the files
                continue
            path = source / f"dir{number % 40:02d}" / f"file{number:05d}.py"
            path.parent.mkdir(exist_ok=True)
            lines = [" ".join(generator.choices(words, k=8)) for _ in range(generator.randint(5, 120))]
            path.write_text(f"# commit {commit}\n" + "\n".join(lines) + "\n")
        git("-C", source, "add", "--all")
        git("-C", source, "commit", "--quiet", "-m", f"commit {commit}")
        if commit == 0:
            git("-C", source, "tag", "v1")
    return source


def test_git_clone_and_checkout(encperf: Runner, repository: Path) -> None:
    def clone_and_checkout(path: Path) -> None:
        git("clone", "--quiet", "--no-local", repository, path / "repo")
        git("-C", path / "repo", "checkout", "--quiet", "v1")

    result = encperf.time(clone_and_checkout)
    assert result.rounds
