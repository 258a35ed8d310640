"""A verdict with an undecided check is yellow in every report, as in the terminal: the Markdown
header's icon (⚠️, not ✅) and the HTML page's badge ("gate undecided", not "gate passed")."""

from __future__ import annotations

import pytest

from pytest_encperf.gate import UNDECIDED, Verdict, judge, parse_rules
from pytest_encperf.model import RunData
from pytest_encperf.report import markdown_report, verdict_report
from pytest_encperf.workloads import MiB
from tests.helpers.fakes import fakecrypt_result as result
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)

HERE = {"machine": "x86_64", "cpu_model": "CPU A", "cpu_count": 8, "node": "ci-1"}
SETTINGS = {"size": str(256 * MiB), "runtime": "1.5", "target": "container"}


def verdict_now(volume_mb_per_s: float, *, strict: bool = False) -> Verdict:
    reference = RunData("m1/0001_main.json", (result(50, 10),), SETTINGS, HERE)
    current = RunData("this run", (result(volume_mb_per_s, 3),), SETTINGS, HERE)
    return judge(current, reference, parse_rules("10%"), strict=strict)


def test_an_undecided_check_makes_every_report_yellow_and_strict_fails() -> None:
    passed, undecided = verdict_now(50), verdict_now(45)  # unchanged; exactly the threshold worse
    assert not passed.incomplete and not passed.failed
    assert undecided.count(UNDECIDED) == 1 and not undecided.failures and not undecided.failed
    assert verdict_now(45, strict=True).failed
    assert verdict_report(undecided)[1][1] == "yellow" and verdict_report(passed)[1][1] == "green"
    assert "**⚠️ encperf: 0 regressions, " in markdown_report([], undecided)
    assert "**✅ encperf: 0 regressions, " in markdown_report([], passed)


def test_the_html_page_badge_says_undecided_not_passed() -> None:
    pytest.importorskip("matplotlib", reason="matplotlib (pytest-encperf[html]) is not installed")
    from pytest_encperf.report import html

    run = RunData("this run", (result(45, 3),), SETTINGS, HERE)
    page = html.render(html.Page(runs=[run], verdict=verdict_now(45)))
    assert '<span class="badge incomplete">gate undecided</span>' in page
    assert "gate passed" not in page
    page = html.render(html.Page(runs=[run], verdict=verdict_now(50)))
    assert '<span class="badge pass">gate passed</span>' in page
