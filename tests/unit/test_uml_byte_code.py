"""The byte code the host hands the UML guest (tests/helpers/uml.py, byte_code_for_guest): each
module's where PYTHONPYCACHEPREFIX looks for it, and only what matches its source as it is now."""

from __future__ import annotations

import importlib.util
import py_compile
import sys
from pathlib import Path

import pytest

from tests.helpers import uml


def test_the_guest_finds_each_imported_module_s_byte_code_where_the_prefix_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert uml.byte_code_for_guest(tmp_path) > 0
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    for module in (pytest, uml):
        origin = module.__spec__.origin
        assert origin is not None
        cached = Path(importlib.util.cache_from_source(origin))  # where the guest's Python looks
        assert cached.is_relative_to(tmp_path) and cached.is_file()
        assert uml.fresh_byte_code(cached, Path(origin))


def test_byte_code_of_another_version_of_the_source_is_not_fresh(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("VALUE = 1\n")
    cached = tmp_path / "module.pyc"
    py_compile.compile(str(source), cfile=str(cached), doraise=True)
    assert uml.fresh_byte_code(cached, source)
    source.write_text("VALUE = 22\n")  # another size
    assert not uml.fresh_byte_code(cached, source)
    assert not uml.fresh_byte_code(tmp_path / "missing.pyc", source)
