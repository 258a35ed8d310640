"""tests/helpers/support.guest_engine: the UML lane's sessions measure with the native engine, and
an engine a test asks for wins over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import support, uml


class RecordingPytester:
    """What tiny_session hands to pytester: the module it writes and the command line."""

    def __init__(self) -> None:
        self.args: tuple[str, ...] = ()

    def makepyfile(self, **files: str) -> None:
        assert set(files) == {"test_bench"}

    def runpytest(self, *args: str) -> str:
        self.args = args
        return "ran"


def engine_options(args: tuple[str, ...]) -> list[str]:
    return [arg for arg in args if arg.startswith("--encperf-engine")]


def test_outside_the_guest_a_session_keeps_the_default_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(uml.IN_GUEST_ENV, raising=False)
    assert support.guest_engine() == []
    recorder = RecordingPytester()
    support.tiny_session(recorder, Path("/nowhere"), "--encperf-backends=plain")  # type: ignore[arg-type]
    assert engine_options(recorder.args) == []


def test_in_the_guest_a_session_measures_natively_unless_a_test_asks_for_fio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(uml.IN_GUEST_ENV, "1")
    assert support.guest_engine() == ["--encperf-engine=native"]
    recorder = RecordingPytester()
    support.tiny_session(recorder, Path("/nowhere"), "--encperf-backends=plain")  # type: ignore[arg-type]
    assert engine_options(recorder.args) == ["--encperf-engine=native"]
    support.tiny_session(recorder, Path("/nowhere"), "--encperf-engine=fio")  # type: ignore[arg-type]
    # the last one given is the one a pytest option parser keeps
    assert engine_options(recorder.args)[-1] == "--encperf-engine=fio"
