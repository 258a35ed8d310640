"""encperf.time (usertiming.py, Runner.time) on plain directories, without processes: the sides in
A B B A order, a fresh directory and an untimed setup each round, the Result of a task under the
test's name, the message of a function that raised, and the skip on a partition target."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_encperf import usertiming
from pytest_encperf.engines.observe import Observe
from pytest_encperf.model import Measurement, Result
from pytest_encperf.roundplan import RoundPlan
from pytest_encperf.runner import Runner
from pytest_encperf.workloads import CDM, REALWORK


@dataclass
class Side:
    """What Runner.time uses of a MountedVolume."""

    spec: str
    data_dir: Path
    description: dict[str, Any] = field(default_factory=dict)
    daemon_pids: tuple[int, ...] = ()

    def observe(self) -> Observe:
        return Observe()


def runner(tmp_path: Path, recorded: list[Result], baseline: bool = True) -> Runner:
    volume, plain = tmp_path / "volume", tmp_path / "plain"
    volume.mkdir()
    plain.mkdir()
    return Runner(
        engine=None,  # type: ignore[arg-type]  # encperf.time runs no engine
        volume=Side("fakecrypt", volume),  # type: ignore[arg-type]
        baseline=Side("plain", plain) if baseline else None,  # type: ignore[arg-type]
        plan=RoundPlan(size=1, runtime=0.01, rounds=2, warmup=1),
        record=recorded.append,
        test_name="test_mine[wal]",
    )


def test_the_function_runs_on_both_sides_abba_in_a_fresh_directory_after_its_setup(tmp_path: Path) -> None:
    recorded: list[Result] = []
    calls: list[str] = []

    def setup(path: Path) -> None:
        assert list(path.iterdir()) == []  # fresh each round
        (path / "input").write_text("x")
        time.sleep(0.25)  # untimed

    def work(path: Path) -> None:
        assert (path / "input").read_text() == "x" and path.name == usertiming.USER_DIR
        (path / "output").write_text("y")
        calls.append(path.parent.name)
        time.sleep(0.01)

    result = runner(tmp_path, recorded).time(work, setup=setup, sync=False, drop_caches=False)
    assert recorded == [result]
    assert result.workload.name == "test_mine[wal]" and result.workload.lower_is_better
    assert result.primary_metric == "seconds"
    # one warm-up pair, then whole A B B A blocks: plain first
    assert calls[:2] == ["plain", "volume"] and calls[2:6] == ["plain", "volume", "volume", "plain"]
    assert len(calls) == 6  # a call moves no bytes of its own: never run again as an empty round
    assert len(result.rounds) == len(result.baseline_rounds) == 2
    assert all(0.01 <= m.seconds < 0.25 for m in result.rounds + result.baseline_rounds)  # setup not timed
    assert all(m.engine == usertiming.ENGINE for m in result.rounds)
    assert not (tmp_path / "volume" / usertiming.USER_DIR).exists()  # removed after the rounds
    assert not (tmp_path / "plain" / usertiming.USER_DIR).exists()


def test_a_name_is_given_or_the_tests_and_fit_for_a_gate_rule(tmp_path: Path) -> None:
    recorded: list[Result] = []
    result = runner(tmp_path, recorded).time(
        lambda path: None, name="my step: 1", sync=False, drop_caches=False
    )
    assert result.workload.name == "my_step_1"

    @dataclass
    class CallSpec:
        params: dict[str, object]

    @dataclass
    class Node:
        originalname: str
        callspec: CallSpec | None = None

    assert usertiming.test_name(Node("test_a")) == "test_a"
    assert usertiming.test_name(Node("test_a", CallSpec({"encperf_volume": "fscrypt", "mode": "wal"}))) == (
        "test_a[wal]"
    )
    with pytest.raises(ValueError, match="nothing a workload's name can carry"):
        usertiming.workload_name(" : ")


@pytest.mark.parametrize(("side", "round_text"), [("plain", "round 1 (warm-up)"), ("encrypted", "round 2")])
def test_an_exception_names_backend_side_and_round(tmp_path: Path, side: str, round_text: str) -> None:
    recorded: list[Result] = []
    seen = {"plain": 0, "volume": 0}
    fail_at = {"plain": ("plain", 1), "encrypted": ("volume", 2)}[side]

    def work(path: Path) -> None:
        seen[path.parent.name] += 1
        if (path.parent.name, seen[path.parent.name]) == fail_at:
            raise OSError(5, "broken")

    with pytest.raises(usertiming.UserFunctionError) as raised:
        runner(tmp_path, recorded).time(work, sync=False, drop_caches=False)
    assert str(raised.value).startswith(
        f"encperf.time(test_mine[wal]) on fakecrypt: the function raised on the {side} side ("
    )
    assert f"in {round_text}: OSError: [Errno 5] broken" in str(raised.value)
    assert isinstance(raised.value.__cause__, OSError)  # the user's traceback is chained
    assert recorded == []
    assert not list(tmp_path.rglob(usertiming.USER_DIR))


def test_on_a_partition_the_test_is_skipped_saying_why(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match="partition target does not have"):
        runner(tmp_path, [], baseline=False).time(lambda path: None)


def timed_result(encrypted: list[float], plain: list[float]) -> Result:
    """A timed function's Result as Runner.time records it: seconds per call, no bytes."""

    def rounds(seconds: list[float]) -> list[Measurement]:
        return [
            Measurement(usertiming.ENGINE, "3.12", 0, s, 0, 0.0, 0.0, 0.0, 0.1, "buffered") for s in seconds
        ]

    workload = usertiming.user_workload("test_inserts")
    return Result("fscrypt", workload, rounds(encrypted), rounds(plain))


def test_the_detail_tables_show_a_timed_functions_seconds_not_mb_per_s() -> None:
    """The terminal's and the Markdown's detail tables: a timed function moves no bytes of its
    own, so its row shows the seconds of a call (median, the fewest, plain's) and the change."""
    from pytest_encperf.report import detail_table, results_markdown

    result = timed_result([1.5, 1.4, 1.6], [1.0, 1.0, 1.0])
    for table in (detail_table([result]), results_markdown([result])):
        row = next(line for line in table.splitlines() if "test_inserts" in line)
        assert "MB/s" not in row and "0.00" not in row
        assert "1.50 s" in row and "1.00 s" in row
        assert "-33.3%" in row  # 1.5 s against 1.0 s: a third slower, as the summary says
    detail_row = next(line for line in detail_table([result]).splitlines() if "test_inserts" in line)
    assert "1.40 s" in detail_row  # best: the fewest seconds


def rate_and_seconds_results() -> list[Result]:
    """A sequential read (MB/s), a real-work task (12.5 s against plain's 10 s) and a timed function."""

    def block(mb_per_s: float) -> Measurement:
        return Measurement("fio", "3", int(mb_per_s * 1e6), 1.0, 100, 10.0, 20.0, 30.0, 0.5, "direct")

    def task(seconds: float) -> Measurement:
        return Measurement("tools", "1", 50_000_000, seconds, 10, 0.0, 0.0, 0.0, 0.5, "buffered")

    return [
        Result("fscrypt", CDM[0], [block(v) for v in (90, 91, 89)], [block(100)] * 3),
        Result("fscrypt", REALWORK[0], [task(s) for s in (12.5, 12.0, 13.0)], [task(10.0)] * 3),
        timed_result([1.5, 1.4, 1.6], [1.0, 1.0, 1.0]),
    ]


def test_tasks_and_timed_functions_have_a_table_of_seconds_whose_header_says_so() -> None:
    """The terminal's detail table and the Markdown: the MB/s header stands above MB/s only; the
    real-work tasks and timed functions are in a table of seconds per round (lower is better)."""
    from pytest_encperf.report import detail_table, results_markdown
    from pytest_encperf.report.tables import TIMED_TITLE

    results = rate_and_seconds_results()
    task = REALWORK[0].name
    for table in (detail_table(results), results_markdown(results)):
        rates, seconds = table.split(TIMED_TITLE[1:])  # the Markdown capitalizes its first letter
        assert "MB/s" in rates.splitlines()[0] and CDM[0].name in rates
        assert task not in rates and "test_inserts" not in rates
        header = next(line for line in seconds.splitlines() if "backend" in line)
        assert "seconds" in header and "plain seconds" in header and "MB/s" not in header
        task_row = next(line for line in seconds.splitlines() if task in line)
        assert "12.5 s" in task_row and "10.0 s" in task_row and "-20.0%" in task_row
        timed_row = next(line for line in seconds.splitlines() if "test_inserts" in line)
        assert "1.50 s" in timed_row and "1.00 s" in timed_row and "-33.3%" in timed_row
    assert "lower is better" in TIMED_TITLE
    terminal_task_row = next(line for line in detail_table(results).splitlines() if task in line)
    assert "12.0 s" in terminal_task_row  # the fewest seconds


def test_the_html_report_has_the_tasks_and_timed_functions_seconds_in_a_table_of_their_own() -> None:
    pytest.importorskip(
        "matplotlib", reason="the HTML report's charts need matplotlib (pytest-encperf[html])"
    )
    from html import escape

    from pytest_encperf.model import RunData
    from pytest_encperf.report import html
    from pytest_encperf.report.tables import TIMED_TITLE

    page = html.render(html.Page([RunData("this run", tuple(rate_and_seconds_results()))]))
    part = page[page.index('data-part="seconds"') :]
    part = part[: part.index("</section>")]
    assert "Seconds per round" in part and escape(TIMED_TITLE[1:]) in part
    assert re.search(r"<th>\s*seconds\s*</th>", part)
    assert "MB/s" not in part and "test_inserts" in part and REALWORK[0].name in part and "12.5 s" in part


def test_the_html_charts_show_a_timed_function_by_its_time_not_by_a_cpu_cost_per_gib() -> None:
    """The HTML report's CPU chart (CPU seconds per GiB) leaves a timed function out, as the detail
    tables show - for it; its overhead bar stays (its time drawn as a speed, as a task's)."""
    from pytest_encperf.report import charts

    result = timed_result([1.5, 1.4, 1.6], [1.0, 1.0, 1.0])
    assert charts.cpu_bars([result]) == []
    (bar,) = charts.overhead_bars([result])
    assert bar.workload == "test_inserts"


def test_the_runs_gate_expects_the_checks_of_the_collected_timed_functions(tmp_path: Path) -> None:
    """The session hands the collected tests' cells (usertiming.expected_cells) to the Outcome, whose
    Gate decides at the level of a family counting them: one max-overhead check per backend and
    timed function here, beside the workloads'."""
    from pytest_encperf.outcome import Outcome
    from pytest_encperf.settings import resolve

    settings = resolve(
        {"backends": "fscrypt,gocryptfs", "profile": "realwork", "max-overhead": "40%", "dir": str(tmp_path)},
        {}, environ={},
    )  # fmt: skip
    workloads = len(settings.workloads)

    def family(cells: list[tuple[str, Any]]) -> int:
        outcome = Outcome(settings)
        outcome.test_cells = cells
        gate = outcome.gate(lambda: ({}, "m1"), machines=1)
        assert gate is not None
        return gate.family_size

    assert family([]) == 2 * workloads
    timed = usertiming.user_workload("test_inserts")
    assert family([("fscrypt", timed), ("gocryptfs", timed)]) == 2 * workloads + 2
