"""Chaos matrices by cost: the default lane runs a covering subset, ENCPERF_TEST_EXHAUSTIVE=1 all.

The reliability and chaos tests cross every backend with every kill point (and signal, and
cleanup time). Each pair is a session started, stopped and cleaned up: the whole cross product is
about 190 sessions here, most of the suite's time. The default lane gives each backend a few
consecutive points, the next backend starting where the last stopped, so that every backend is
stopped more than once and every point is met by several backends; the backends that need no
device-mapper come first in the rotation, so that the points are all met on a machine without
it (this project's CI). The pairs left out are still collected and skip, saying how to run
them: set ``ENCPERF_TEST_EXHAUSTIVE=1`` (before a release, after a change to the journal, the
cleanup or a backend's create/mount/destroy).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pytest

EXHAUSTIVE_ENV = "ENCPERF_TEST_EXHAUSTIVE"

# Run on a kernel without device-mapper (this project's CI); the rotation starts with them.
WITHOUT_DEVICE_MAPPER = (
    "plain", "fscrypt", "gocryptfs", "encfs", "cryfs", "securefs", "qemu-luks", "veracrypt-cli",
)  # fmt: skip


def exhaustive() -> bool:
    return os.environ.get(EXHAUSTIVE_ENV, "") not in ("", "0")


def rotation_order(names: Sequence[str]) -> list[str]:
    """``names`` with those that run without device-mapper first, each group in its given order."""
    return [n for n in names if n in WITHOUT_DEVICE_MAPPER] + [
        n for n in names if n not in WITHOUT_DEVICE_MAPPER
    ]


def covering(names: Sequence[str], cases: Sequence[Any], per_name: int) -> set[tuple[str, Any]]:
    """The (name, case) pairs of the default lane: name i gets cases i*per_name ... i*per_name +
    per_name - 1 (mod the number of cases), names taken in :func:`rotation_order`."""
    chosen: set[tuple[str, Any]] = set()
    for index, name in enumerate(rotation_order(names)):
        for offset in range(per_name):
            chosen.add((name, cases[(index * per_name + offset) % len(cases)]))
    return chosen


@dataclass(frozen=True)
class Matrix:
    """A chaos matrix: ``names`` (backends) x ``cases`` (kill points, signals, ...), ``per_name``
    consecutive cases for each name in the default lane."""

    names: Sequence[str]
    cases: Sequence[Any]
    case_ids: Sequence[str]
    per_name: int

    @cached_property
    def default_lane(self) -> set[tuple[str, Any]]:
        """The (name, case) pairs the default lane runs (:func:`covering`), computed once: ``runs`` is
        asked for every pair of the matrix at collection."""
        return covering(self.names, self.cases, self.per_name)

    def runs(self, name: str, case: Any) -> bool:
        return exhaustive() or (name, case) in self.default_lane

    def params(self) -> list[Any]:
        """``pytest.param(name, *case)`` for the whole cross product, with the ids that stacked
        ``parametrize`` decorators would give (``name-caseid``); a pair the default lane leaves
        out skips, saying how to run it."""
        skip = pytest.mark.skip(
            reason=f"outside the default lane's covering subset: {EXHAUSTIVE_ENV}=1 runs the whole matrix"
        )
        result = []
        for name in self.names:
            for case, case_id in zip(self.cases, self.case_ids, strict=True):
                values = case if isinstance(case, tuple) else (case,)
                marks = () if self.runs(name, case) else (skip,)
                result.append(pytest.param(name, *values, id=f"{name}-{case_id}", marks=marks))
        return result

    def ids_run(self, name: str) -> list[str]:
        """The ids of ``name``'s cases that run (tests/integration/test_uml_lane.py names them)."""
        return [
            f"{name}-{case_id}"
            for case, case_id in zip(self.cases, self.case_ids, strict=True)
            if self.runs(name, case)
        ]


def exhaustive_only() -> pytest.MarkDecorator:
    """For a single costly case the default lane leaves out (its cheaper siblings run)."""
    return pytest.mark.skipif(
        not exhaustive(), reason=f"left out of the default lane (costly): {EXHAUSTIVE_ENV}=1 runs it"
    )
