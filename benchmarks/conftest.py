"""``pytest benchmarks/`` (the README's main job) measures the profiles; the examples in
benchmarks/examples run when named: ``pytest benchmarks/examples``."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent / "examples"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path != EXAMPLES:
        return None
    named = (Path(arg.split("::")[0]).resolve() for arg in config.args)
    return not any(path == EXAMPLES or path.is_relative_to(EXAMPLES) for path in named) or None
