"""tests/helpers/suite_once.py: a value the suite's workers compute once and share."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.suite_once import RUN_ENV, SHARED_ENV, once_for_the_suite


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "shared"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(SHARED_ENV, str(directory))
    monkeypatch.setenv(RUN_ENV, "0123abcd")
    return directory


def test_the_second_asker_reads_what_the_first_computed(shared: Path) -> None:
    calls: list[int] = []

    def compute() -> dict[tuple[str, int], float]:
        calls.append(1)
        return {("a", 1): 0.5}

    assert once_for_the_suite("value", compute) == {("a", 1): 0.5}
    assert once_for_the_suite("value", compute) == {("a", 1): 0.5}
    assert len(calls) == 1
    assert sorted(p.name for p in shared.iterdir()) == ["0123abcd-value.lock", "0123abcd-value.pickle"]


def test_a_later_run_computes_again(shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert once_for_the_suite("value", lambda: "first run") == "first run"
    monkeypatch.setenv(RUN_ENV, "4567ef")
    assert once_for_the_suite("value", lambda: "second run") == "second run"
    monkeypatch.delenv(RUN_ENV)  # not a worker of pytest-xdist: nothing to share
    assert once_for_the_suite("value", lambda: "alone") == "alone"


def test_an_asker_waits_for_the_one_computing_and_does_not_compute_again(shared: Path) -> None:
    started, calls, found = threading.Event(), [], []

    def slow() -> str:
        calls.append("slow")
        started.set()
        time.sleep(0.3)
        return "first"

    first = threading.Thread(target=lambda: found.append(once_for_the_suite("slow", slow)))
    first.start()
    assert started.wait(5)
    found.append(once_for_the_suite("slow", lambda: calls.append("second") or "second"))  # type: ignore[func-returns-value]
    first.join()
    assert calls == ["slow"] and found == ["first", "first"]


def test_without_a_private_shared_directory_each_asker_computes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.delenv(SHARED_ENV, raising=False)
    assert once_for_the_suite("value", lambda: calls.append(1) or 1) == 1  # type: ignore[func-returns-value]
    open_to_all = tmp_path / "open"
    open_to_all.mkdir(mode=0o777)
    open_to_all.chmod(0o777)
    monkeypatch.setenv(SHARED_ENV, str(open_to_all))
    assert once_for_the_suite("value", lambda: calls.append(1) or 1) == 1  # type: ignore[func-returns-value]
    assert calls == [1, 1] and list(open_to_all.iterdir()) == []


def test_a_value_file_of_another_mode_is_refused_not_read(shared: Path) -> None:
    planted = shared / "0123abcd-value.pickle"
    planted.write_bytes(b"not ours")
    planted.chmod(0o644)
    with pytest.raises(OSError, match="mode 0644"):
        once_for_the_suite("value", lambda: 1)


def test_a_name_that_is_not_plain_is_refused(shared: Path) -> None:
    with pytest.raises(ValueError, match="not a plain name"):
        once_for_the_suite("../elsewhere", lambda: 1)
    assert list(shared.iterdir()) == []
    assert os.environ[SHARED_ENV] == str(shared)
