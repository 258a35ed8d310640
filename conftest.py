"""The repository's own test configuration (not part of the published plugin)."""

from __future__ import annotations

import os

# pytester's in-process runs remove from sys.modules what was first imported during them, and
# cryptography's OpenSSL bindings do not survive a second import (AES-XTS then reports itself
# "not supported"): import it here, before any run, so it stays.
import cryptography.hazmat.primitives.ciphers  # noqa: F401
import pytest

pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="integration test: needs root (loop devices, mount)")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)
