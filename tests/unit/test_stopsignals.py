"""The signals that stop a run (stopsignals.py): which handlers the run installs, and how its
incomplete reason names what stopped it."""

from __future__ import annotations

import signal
import threading

import pytest

from pytest_encperf.stopsignals import StopSignals, raise_keyboard_interrupt, restores_sigint, stopped_by


@pytest.mark.parametrize(
    ("handler", "main_thread", "restored"),
    [
        (signal.SIG_IGN, True, True),  # a shell without job control started the run: give it back
        (signal.SIG_IGN, False, False),  # only the main thread may set a handler
        (signal.SIG_DFL, True, False),  # default (kills the process): left as it is
        (signal.default_int_handler, True, False),  # Python's own: already KeyboardInterrupt
        (raise_keyboard_interrupt, True, False),  # somebody's handler: theirs
        (None, True, False),  # set from outside Python: left alone
    ],
)
def test_sigint_is_given_back_pythons_handler_only_when_ignored_in_the_main_thread(
    handler: object, main_thread: bool, restored: bool
) -> None:
    assert restores_sigint(handler, main_thread) is restored


def test_an_ignored_sigint_raises_keyboard_interrupt_while_the_run_lasts_and_is_ignored_after() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        stop_signals = StopSignals()
        stop_signals.install()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        stop_signals.restore()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_the_main_thread_nothing_is_installed() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        stop_signals = StopSignals()
        worker = threading.Thread(target=stop_signals.install)
        worker.start()
        worker.join()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        stop_signals.restore()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (f"signal {int(signal.SIGTERM)}", "by SIGTERM"),
        (f"signal {int(signal.SIGHUP)} (deferred until teardown finished)", "by SIGHUP"),
        ("", "by Ctrl-C"),
        ("a test raised it", "by Ctrl-C"),
    ],
)
def test_what_stopped_the_run_is_named(message: str, said: str) -> None:
    assert stopped_by(KeyboardInterrupt(message)) == said
