"""A --encperf-dir whose name holds every character the kernel escapes in its mount tables (space,
tab, newline, backslash) and non-ASCII: a run there leaves nothing behind, and ``encperf cleanup``
releases what a SIGKILLed run left there (root: real loop devices and mounts)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pytest_encperf import host, mounttable
from tests.helpers.support import mounts_and_loops_left, problems_here, scratch_dir, tiny_session
from tests.integration.test_reliability_integration import (
    encperf_cleanup,
    journaled,
    leftovers,
    runnable,
    start_paused,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop devices, mounts)"),
]

ODD = "encperf-odd a\tb\nc\\d-é日-"


def ours_in_the_tables(directory: Path) -> list[str]:
    """Mount-table lines and loop devices that name ``directory`` in any form (escaped or not)."""
    escaped = mounttable.escape(str(directory)).encode()
    found = [
        line.decode(errors="replace")
        for line in Path("/proc/self/mountinfo").read_bytes().split(b"\n")
        if escaped in line or os.fsencode(directory) in line
    ]
    found += [str(device) for device in host.loops_backed_by(directory)]
    return found


def test_a_session_in_a_directory_named_with_escaped_characters_leaves_nothing(
    pytester: pytest.Pytester,
) -> None:
    with scratch_dir(ODD) as directory:
        backends = ",".join(name for name in ("gocryptfs", "fscrypt") if not problems_here(name, directory))
        result = tiny_session(
            pytester, directory, f"--encperf-backends={backends or 'plain'}", "--encperf-engine=native"
        )
        assert result.ret == 0, result.stdout.str()
        assert ours_in_the_tables(directory) == []
        assert mounts_and_loops_left(directory) == []
        if not host.missing_tools("fio"):  # fio's JSON report names the file unescaped
            result = tiny_session(pytester, directory, "--encperf-backends=plain", "--encperf-engine=fio")
            assert result.ret == 1 and "fio's JSON report does not parse" in result.stdout.str()
            assert ours_in_the_tables(directory) == []


def test_encperf_cleanup_releases_a_killed_run_s_leftovers_there(pytester: pytest.Pytester) -> None:
    with scratch_dir(ODD) as directory:
        spec = runnable("fscrypt", directory)
        proc = start_paused(pytester, directory, spec, "round")
        assert proc is not None, "the session never reached its round"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        recorded = journaled(directory)
        before = leftovers(directory, recorded, pid=proc.pid)
        assert [line for line in before if line.startswith(("mount", "loop device"))], before
        cleanup = encperf_cleanup(directory)
        assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
        assert leftovers(directory, recorded, pid=proc.pid) == []
        assert ours_in_the_tables(directory) == []
