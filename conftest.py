"""The repository's own test configuration (not part of the published plugin)."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="integration test: needs root (loop devices, mount)")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)
