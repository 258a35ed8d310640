"""host.py: what secrets look like wherever pytest or a report may print them, and the
measurement lock (no root needed: the locks live in a directory the test names).

(host.run's timeouts, process groups and redaction are tested in test_journal.py.)
"""

from __future__ import annotations

import pytest

PLAIN_BYTES_CALLER = """
from pytest_encperf import host

def test_open():
    tool = ["sh", "-c", "cat >/dev/null; echo 'No key available' >&2; exit 2"]
    host.run(tool, input=b"hunter2-plain-bytes")
"""


def test_host_run_keeps_its_arguments_and_locals_out_of_tracebacks(pytester: pytest.Pytester) -> None:
    """A caller that hands host.run plain bytes (a plugin's backend): host.run's own frame, whose
    arguments and locals hold stdin, is hidden from pytest's traceback (``__tracebackhide__``)."""
    pytester.makepyfile(test_leak=PLAIN_BYTES_CALLER)
    result = pytester.runpytest("--tb=long", "-l", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*HostError: sh -c * exit 2: No key available"])
    # the caller's own line shows its literal; host.run's frame (input = ..., hidden = ...) is gone
    assert "input = b'hunter2" not in result.stdout.str() and "hidden" not in result.stdout.str()
    # --full-trace shows hidden frames too (as docs/explanation/safety.md says): only a Secret is safe there
    result = pytester.runpytest("--tb=long", "-l", "--full-trace", "-p", "no:cacheprovider")
    assert "input = b'hunter2" in result.stdout.str()
