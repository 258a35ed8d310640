"""``-n auto`` starts one worker more than the CPUs (tests/helpers/workers.py), unless
PYTEST_XDIST_AUTO_NUM_WORKERS says otherwise."""

from __future__ import annotations

import os

import pytest

from tests.helpers import workers


def test_auto_is_one_worker_more_than_the_cpus_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3})
    assert workers.suite_workers() == 3


def test_the_environment_variable_is_left_to_pytest_xdist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "7")
    assert workers.suite_workers() is None


def test_the_suites_conftest_answers_xdists_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import conftest

    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert conftest.pytest_xdist_auto_num_workers(config=None) == 5  # type: ignore[arg-type]
