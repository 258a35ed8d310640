"""The signals that stop a run: each tears it down as Ctrl-C does, and the run says which one it was.

SIGTERM (CI cancelling a job, ``kill``) and SIGHUP (the terminal or ssh session went away) are
raised as ``KeyboardInterrupt("signal N")``, so pytest tears down instead of leaving mounts and
loop devices behind; a signal someone chose to ignore (nohup) stays ignored. SIGINT is given back
Python's handler when it arrived ignored (``restores_sigint``). ``StopSignals`` installs these at
the session's start and puts back what it replaced at its end; ``stopped_by`` names what stopped
the run for its incomplete reason.
"""

from __future__ import annotations

import re
import signal
import threading
from types import FrameType
from typing import Any

from .host import TEARDOWN_SIGNALS


def restores_sigint(handler: Any, main_thread: bool) -> bool:
    """Whether the run gives SIGINT back Python's default handler (KeyboardInterrupt).

    Only when SIGINT is ignored (SIG_IGN), and only in the main thread (the only one that may set a
    handler). A shell without job control (a script, ``setsid bash -c 'pytest ...' &``, a CI step)
    starts its background jobs with SIGINT ignored, exec keeps that, and Python installs its
    handler only over the default: Ctrl-C or ``kill -INT`` would not stop the run at all, so its
    volumes would stay until SIGTERM. Ignored there, SIGINT is the shell's doing, not a choice of the
    user's as nohup's SIGHUP is.
    """
    return main_thread and handler == signal.SIG_IGN


def raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class StopSignals:
    """The run's handlers of the signals that stop it, and what they replaced (put back at ``restore``)."""

    def __init__(self) -> None:
        self._replaced: dict[int, Any] = {}

    def install(self) -> None:
        main_thread = threading.current_thread() is threading.main_thread()
        if restores_sigint(signal.getsignal(signal.SIGINT), main_thread):  # the shell's doing: see there
            self._replaced[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        if not main_thread:
            return
        for signum in TEARDOWN_SIGNALS[1:]:
            if signal.getsignal(signum) in (signal.SIG_DFL, None):  # ignored (nohup) stays ignored
                self._replaced[signum] = signal.signal(signum, raise_keyboard_interrupt)

    def restore(self) -> None:
        for signum, handler in self._replaced.items():
            signal.signal(signum, handler)
        self._replaced.clear()


def stopped_by(interrupt: BaseException) -> str:
    """What stopped the run, as its incomplete reason says it: ``by SIGTERM`` for a signal raised as
    KeyboardInterrupt("signal N ...") (here or by host.signals_deferred), else ``by Ctrl-C``."""
    number = re.match(r"signal (\d+)", str(interrupt))
    return f"by {signal.Signals(int(number[1])).name}" if number else "by Ctrl-C"
