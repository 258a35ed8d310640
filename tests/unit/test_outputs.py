"""Outputs (saved runs, reports) that cannot be written are found at start-up, with nothing left
behind by the check."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from pytest_encperf.outputs import directory_problem, file_problem, output_problems


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_writable_directory_and_a_creatable_one_pass_and_leave_nothing(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    before = listing(tmp_path)
    assert directory_problem(tmp_path / "runs") is None
    assert directory_problem(tmp_path / "not" / "yet" / "made") is None
    assert file_problem(tmp_path / "runs" / "report.json") is None
    assert file_problem(tmp_path / "new" / "report.md") is None
    assert listing(tmp_path) == before  # no probe, no directory made


def test_an_existing_regular_file_may_be_replaced(tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text("old")
    assert file_problem(tmp_path / "report.html") is None
    assert (tmp_path / "report.html").read_text() == "old"


def test_a_file_on_the_way_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("")
    assert directory_problem(tmp_path / "notes") == f"{tmp_path / 'notes'} is a regular file, not a directory"
    assert file_problem(tmp_path / "notes" / "deeper" / "r.json") == (
        f"{tmp_path / 'notes'} is a regular file, not a directory"
    )


def test_what_is_not_a_regular_file_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    listener = socket.socket(socket.AF_UNIX)
    directory_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listener.bind(f"/proc/self/fd/{directory_fd}/sock")  # the socket path limit is 108 bytes
    finally:
        os.close(directory_fd)
    try:
        for name, kind in [
            ("dir", "a directory"),
            ("fifo", "a named pipe (FIFO)"),
            ("link", "a symbolic link"),
            ("sock", "a socket"),
        ]:
            assert (
                file_problem(tmp_path / name) == f"{tmp_path / name} is {kind}, not a regular file to replace"
            )
    finally:
        listener.close()
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux)")
def test_a_file_system_that_refuses_new_files_is_asked_not_guessed() -> None:
    """access(2) says yes to root on /proc; the probe asks the file system itself."""
    problem = file_problem(Path("/proc/encperf-report.json"))
    assert problem is not None and problem.startswith("/proc: a file cannot be created there (")
    problem = directory_problem(Path("/proc/encperf-runs"))
    assert problem is not None and problem.startswith("/proc: a directory (for /proc/encperf-runs) cannot be")


def test_each_problem_names_the_option_and_the_path(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    problems = output_problems(
        [
            ("--encperf-storage", tmp_path / "f", "directory"),
            ("--encperf-json", tmp_path / "f" / "r.json", "file"),
            ("--encperf-markdown", tmp_path / "ok.md", "file"),
        ]
    )
    assert problems == [
        f"--encperf-storage {tmp_path / 'f'}: cannot be written: "
        f"{tmp_path / 'f'} is a regular file, not a directory",
        f"--encperf-json {tmp_path / 'f' / 'r.json'}: cannot be written: "
        f"{tmp_path / 'f'} is a regular file, not a directory",
    ]
