"""report/terminal.py: the terminal summary rendered as lines, without pytest's terminal (a recording
writer)."""

from __future__ import annotations

from pytest_encperf.backends import BackendSpec
from pytest_encperf.model import MachineRun
from pytest_encperf.report import terminal
from pytest_encperf.settings import Settings
from pytest_encperf.workloads import CDM
from tests.unit.test_charts import result


class Recording:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, bool], str | None]] = []

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(("line", markup, line))

    def write_sep(self, sep: str, title: str | None = None, **markup: bool) -> None:
        self.lines.append((sep, markup, title))


def machine(node: str, **fields: object) -> MachineRun:
    results = [result("luks2", w, [100.0, 110.0], [200.0, 190.0]) for w in CDM[:2]]
    return MachineRun("x86_64-a", {"node": node}, {"dir": "/x"}, "fio 3", results, **fields)  # type: ignore[arg-type]


def rendered(
    machine_runs: list[MachineRun], **options: object
) -> list[tuple[str, dict[str, bool], str | None]]:
    settings = Settings(backends=[BackendSpec.parse("luks2")])
    given: dict = {"from_workers": False, "interrupted": False, "dist": "no", **options}
    tr = Recording()
    terminal.write(tr, terminal.summary(machine_runs, settings, lambda machine_run: [], **given))
    return tr.lines


def test_each_table_comes_with_its_legend_from_the_legends_table() -> None:
    texts = [text for _, _, text in rendered([machine("a", lifecycle={"luks2": {"create": [1.0]}})])]
    assert texts[0] == "encperf: encryption overhead vs plain"
    assert terminal.LEGENDS["details"] in texts
    assert terminal.LEGENDS["lifecycle"] in texts
    profile = next(text for text in texts if text and text.startswith("CrystalDiskMark"))
    assert profile.endswith("interleaved with its own and the change between the two")


def test_a_fleet_has_a_section_per_machine_and_says_when_its_machines_ran_different_tests() -> None:
    lines = rendered([machine("a"), machine("b", notes=["x"])], from_workers=True, dist="load")
    assert [(kind, text) for kind, _, text in lines if kind == "="] == [
        ("=", "encperf: machine x86_64-a (a)"),
        ("=", "encperf: machine x86_64-a (b)"),
    ]
    assert ("line", {"yellow": True}, "encperf: x86_64-a (b): x") in lines
    assert lines[-1][0:2] == ("line", {"yellow": True}) and "--dist each" in str(lines[-1][2])


def test_a_verdicts_sections_are_separator_lines() -> None:
    from pytest_encperf.gate import Verdict

    tr = Recording()
    terminal.write(tr, terminal.verdicts([Verdict(errors=["cannot use the reference run: gone"])]))
    assert tr.lines[0][0] == "-"
    assert any("cannot use the reference run: gone" in str(text) for _, _, text in tr.lines)


def test_the_run_notes_say_how_to_clean_up_after_a_failed_teardown() -> None:
    lines = list(terminal.run_notes([], ["umount: busy"], "", "/var/tmp"))
    assert lines == [
        ("line", "red", "encperf: teardown failed: umount: busy"),
        ("line", "red", "encperf: run `encperf cleanup --dir /var/tmp` once this process has exited"),
    ]
