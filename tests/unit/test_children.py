"""Child processes die with the run; a dead run's children are found by its mark and ended
before its resources are released (children.py). Real processes, no root."""

from __future__ import annotations

from pytest_encperf import children


def test_a_mark_names_its_run_its_start_and_whether_daemons_stay() -> None:
    assert children.parse_mark("encperf-12-ab") == ("encperf-12-ab", None, False)
    assert children.parse_mark("encperf-12-ab:daemons") == ("encperf-12-ab", None, True)
    assert children.parse_mark("encperf-12-ab/cd:daemons") == ("encperf-12-ab", "encperf-12-ab/cd", True)
    assert children.new_call().startswith(children.run_mark() + "/")


def test_a_daemon_started_from_another_thread_does_not_die_with_that_thread() -> None:
    import threading

    found: dict[str, object] = {}
    worker = threading.Thread(target=lambda: found.update(children.popen_options(daemons=True)))
    worker.start()
    worker.join()
    assert "preexec_fn" not in found and children.MARK_VARIABLE in found["env"]  # type: ignore[operator]
    assert "preexec_fn" in children.popen_options(daemons=True)
    assert "preexec_fn" in children.popen_options()
