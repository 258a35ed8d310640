"""The run's outcome: the reference run it is compared with, the gate, the verdicts, the written outputs.

``load_reference`` reads a saved run and its history the one way both the pytest run and
``encperf compare`` judge with. ``Outcome`` is built from the settings; the machine, the merged
machine runs and the sweeps' rankings are handed to it when asked: it saves each machine's run,
writes the JSON, Markdown and HTML reports, and judges every machine against its own reference run.
"""

from __future__ import annotations

import datetime as dt
import os
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import gatescope, machine, outputs, storage, usertiming
from .ceiling import from_wire
from .gate import Gate, Rule, Verdict, expected_family_size, judge_machines, named_selectors
from .model import MachineRun, RunData
from .report import MACHINES_NOTE, machines_table, markdown_report
from .report import html as html_report
from .rounds import ConfirmBudget
from .settings import Settings
from .sweep import FamilyRanking
from .workloads import Workload

MachineInfoAndId = tuple[dict[str, Any], str]  # this machine's info and id (session.machine_info_and_id)


@dataclass
class ReferenceRun:
    """The saved run this session compares with, its history, and what went wrong finding it."""

    run: RunData | None = None
    history: list[RunData] = field(default_factory=list)  # the reference run first, newest first
    machine_differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # --encperf-fail could not be checked
    errors: list[str] = field(default_factory=list)


def load_reference(
    directory: Path,
    run: storage.SavedRun,
    ref: str,
    history: int,
    info: dict[str, Any],
    *,
    allow_other_hardware: bool,
    gated: bool,
    flag: str = gatescope.ALLOW_OTHER_HARDWARE,
    leave_out: Path | None = None,
    unreadable_history: bool = True,
) -> ReferenceRun:
    """The saved ``run`` (named ``ref``) as the reference run of a run on the machine ``info``, with up
    to ``history`` saved runs before it (never ``leave_out``: the run being judged), the
    differences of the machines, and what other hardware leaves unchecked (gatescope). An
    unreadable run of the history is left out with a note, or with ``unreadable_history=False``
    raises its StorageError (``encperf compare`` stops on it)."""
    reference_run = storage.load_run(run)
    loaded = ReferenceRun(run=reference_run)
    loaded.notes, loaded.unchecked = gatescope.other_hardware(
        reference_run.label, reference_run.machine_info, info, allow_other_hardware, gated=gated, flag=flag
    )
    loaded.machine_differences = machine.differences(reference_run.machine_info, info)
    for saved in storage.history(directory, run, ref, history)[1:]:
        if saved.path == leave_out:
            continue
        try:
            loaded.history.append(storage.load_run(saved))
        except storage.StorageError as exc:
            if not unreadable_history:
                raise
            loaded.notes.append(f"history: left out {exc}")
    loaded.history.insert(0, reference_run)
    return loaded


def names_measured(machine_runs: list[MachineRun]) -> list[str]:
    """The names a rule may give beyond the built-in ones and --encperf-fio-job's, as measured on
    any machine: the timed functions (encperf.time) and the fio jobs tests ran (encperf.run)."""
    return [
        result.workload.name
        for run in machine_runs
        for result in run.results
        if result.rounds and (result.workload.kind == "job" or result.workload.is_timed_function)
    ]


def did_not_finish(interrupted: str, stopped: str, planned: int, ran: int, lost_workers: int) -> str:
    """Why a run did not finish, for its saved file ("" when it did): it was interrupted (Ctrl-C,
    SIGTERM, SIGHUP), or stopped early (-x, --maxfail), or some of the tests it collected never
    ran, or xdist workers' results are missing. A test that ran and failed or skipped is part of
    a finished run (its result is missing for a reason the summary gives, not cut short)."""
    count = f"{ran} of {planned} tests ran" if planned else f"{ran} tests ran"
    if interrupted:
        return f"interrupted {interrupted}; {count}"
    if stopped and ran < planned:
        return f"stopped early ({stopped}); {count}"
    if ran < planned:
        return f"{planned - ran} of {planned} tests did not run"
    if lost_workers:
        return f"the results of {lost_workers} xdist worker(s) are missing"
    return ""


def unexpected_error(exc: BaseException) -> str:
    """An exception nobody caught, for the verdict's errors: its type and message, then where it
    came from, each frame of its traceback as ``file:line function`` (outermost first; encperf's
    files from the package, an installed library's from its package, the standard library's by
    name), so a report of it says which line raised without a rerun."""
    frames = " > ".join(
        f"{_short_path(frame.filename)}:{frame.lineno} {frame.name}"
        for frame in traceback.extract_tb(exc.__traceback__)
    )
    return f"{type(exc).__name__}: {exc}" + (f" (traceback: {frames})" if frames else "")


def _short_path(filename: str) -> str:
    """``pytest_encperf/gate/checks.py``, ``pytest_benchmark/stats.py``, ``statistics.py``."""
    path = Path(filename)
    for marker in ("site-packages", "dist-packages"):
        if marker in path.parts:
            return "/".join(path.parts[path.parts.index(marker) + 1 :])
    package = Path(__file__).parent
    if path.is_relative_to(package):
        return str(Path(package.name) / path.relative_to(package))
    return path.name


class Outcome:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.verdict: Verdict | None = None  # the verdict of a run on one machine
        self.verdicts: dict[str, Verdict] = {}  # every machine's (one family: gate.judge_machines)
        self.confirm_budget: ConfirmBudget | None = None
        self._reference_run: ReferenceRun | None = None
        self._gate: Gate | None = None
        # what the collected tests measure beyond the workloads (usertiming.expected_cells)
        self.test_cells: list[tuple[str, Workload]] = []
        # the usage errors of gate rules that named nothing this run measured (exit 4)
        self.unknown_rule_names: list[str] = []

    def expect(self, items: Iterable[Any], checks_rule_names: bool) -> list[str]:
        """The collected tests: the gate's expected family counts the cells their timed functions and
        own workloads will measure (usertiming.expected_cells), beside the selected workloads'; the
        usage errors of rules naming what none of them can measure (``checks_rule_names``: not on
        an xdist worker, the controller checks)."""
        self.test_cells = usertiming.expected_cells(items)
        return usertiming.rule_name_refusals(self.settings, items) if checks_rule_names else []

    def unwritable(self) -> list[str]:
        """Why a saved-run directory or report file this run will write cannot be written."""
        s = self.settings
        asked: list[tuple[str, Path, str]] = []
        if s.save or s.autosave:
            asked.append(("--encperf-storage", s.storage, "directory"))
        reports = (("--encperf-json", s.json), ("--encperf-markdown", s.markdown), ("--encperf-html", s.html))
        asked += [(option, path, "file") for option, path in reports if path is not None]
        return outputs.output_problems(asked)

    def reference_run(self, machine_info_and_id: Callable[[], MachineInfoAndId]) -> ReferenceRun:
        """The saved run to compare with and its history, loaded once: before this run saves, so
        ``latest`` is never this run itself (``machine``: this machine's info and id, read late)."""
        if self._reference_run is None:
            self._reference_run = self._load_reference_run(*machine_info_and_id())
        return self._reference_run

    def reference_run_for(
        self, machine_run: MachineRun, machine_info_and_id: Callable[[], MachineInfoAndId]
    ) -> ReferenceRun:
        """The reference run of one machine of the run (another machine of a fleet: its own)."""
        info, machine_id = machine_info_and_id()
        if machine_run.machine_id == machine_id and machine_run.machine_info.get("node") == info.get("node"):
            return self.reference_run(machine_info_and_id)
        return self._load_reference_run(machine_run.machine_info, machine_run.machine_id)

    def _load_reference_run(self, info: dict[str, Any], machine_id: str) -> ReferenceRun:
        s = self.settings
        wanted = s.compare or ("latest" if s.fail else None)  # --encperf-fail alone: vs latest
        if not wanted:
            return ReferenceRun()
        try:
            run, warning = storage.resolve(s.storage, wanted, machine_id, info)
            loaded = load_reference(
                s.storage, run, wanted, s.history, info,
                allow_other_hardware=s.allow_other_hardware, gated=bool(s.fail),
            )  # fmt: skip
        except storage.NoSavedRun as exc:
            message = (
                f"no reference run to compare with: {exc}; nothing was gated "
                "(save one with --encperf-save=NAME or --encperf-autosave)"
            )
            return ReferenceRun(unchecked=[message]) if s.fail else ReferenceRun(notes=[message])
        except storage.StorageError as exc:
            return ReferenceRun(errors=[f"cannot use the reference run: {exc}"])
        if warning:
            loaded.notes.insert(0, f"warning: {warning}")
        return loaded

    def gate(self, machine_info_and_id: Callable[[], MachineInfoAndId], machines: int) -> Gate | None:
        """What the runner asks whether a workload's checks are decided (None: no confirmation
        rounds, because nothing is gated, the budget is 0, or on a partition target); the checks
        of all ``machines`` of the run form one family."""
        s = self.settings
        if not (s.fail or s.max_overhead) or s.confirm_budget <= 0 or s.one_volume_at_a_time:
            return None
        if self._gate is None:
            reference_run = self.reference_run(machine_info_and_id)
            rules = s.fail if reference_run.run else []
            size = expected_family_size(
                s.backend_specs,
                s.workloads,
                rules,
                s.max_overhead,
                reference_run.run,
                len(reference_run.history),
                s.lifecycle_cycles,
                noise=s.noise,
                test_cells=[*self.test_cells, *self.later_named_cells(reference_run.run, rules)],
            )
            size *= machines  # the checks of every machine form one family (judge_machines)
            self._gate = Gate(
                reference_run.run, tuple(rules), tuple(s.max_overhead), s.saved_text(), size,
                history=tuple(reference_run.history), noise=s.noise,
            )  # fmt: skip
            self.confirm_budget = ConfirmBudget(s.confirm_budget)
        return self._gate

    def later_named_cells(self, reference: RunData | None, rules: list[Rule]) -> list[tuple[str, Workload]]:
        """usertiming.later_named_cells of the collected tests: what a ``name=`` may measure."""
        workloads = [result.workload for result in reference.results] if reference else []
        jobs = [workload.name for workload in self.settings.fio_job]
        names = named_selectors([*rules, *self.settings.max_overhead], jobs)
        return usertiming.later_named_cells(self.test_cells, workloads, names)

    def finish(
        self,
        merged_machine_runs: Callable[[], list[MachineRun]],
        machine_info_and_id: Callable[[], MachineInfoAndId],
        rankings: Callable[[MachineRun], list[FamilyRanking]],
        incomplete: str,
    ) -> bool:
        """Save, compare, write reports, decide (``merged_machine_runs``: one MachineRun per machine
        of the run); whether the gate failed. Never raises: what went wrong is the verdict's error."""
        try:
            self.verdicts = self._judge(merged_machine_runs(), machine_info_and_id, rankings, incomplete)
        except Exception as exc:  # never a traceback at the end of a run: say what went wrong, and where
            self.verdicts = {"": Verdict(errors=[unexpected_error(exc)])}
        self.verdict = next(iter(self.verdicts.values())) if len(self.verdicts) == 1 else None
        return any(v.failed for v in self.verdicts.values())

    def _judge(
        self,
        machine_runs: list[MachineRun],
        machine_info_and_id: Callable[[], MachineInfoAndId],
        rankings: Callable[[MachineRun], list[FamilyRanking]],
        incomplete: str,
    ) -> dict[str, Verdict]:
        """Each machine against its own reference run, loaded before anything is saved; one verdict
        per machine, their gated checks one family (gate.judge_machines)."""
        s = self.settings
        now = dt.datetime.now(dt.UTC)
        fleet = len(machine_runs) > 1
        reference_runs = {
            machine_run.machine_id: self.reference_run_for(machine_run, machine_info_and_id)
            for machine_run in machine_runs
        }
        commit = storage.commit_info() if (s.save or s.autosave or s.json) else {}
        saved: dict[str, str | None] = {}
        notes: dict[str, list[str]] = {machine_run.machine_id: [] for machine_run in machine_runs}
        errors: dict[str, list[str]] = {machine_run.machine_id: [] for machine_run in machine_runs}
        for machine_run in machine_runs:  # saved before anything is judged
            mid = machine_run.machine_id
            doc = self.document(machine_run, commit, now, incomplete, rankings(machine_run))
            if machine_run.results and (s.save or s.autosave):
                name = s.save or storage.autosave_name(commit, now)
                try:
                    saved[mid] = str(storage.save(s.storage, mid, name, doc))
                except (OSError, storage.StorageError) as exc:
                    errors[mid].append(f"could not save the run: {exc}")
                else:
                    if incomplete:
                        notes[mid].append(
                            f"saved as incomplete ({incomplete}): the name {name} and latest will not "
                            f"pick it, {name}{storage.EXPLICIT} will"
                        )
            elif s.save or s.autosave:
                notes[mid].append("nothing measured, nothing saved")
            if s.json:
                path = s.json.with_name(f"{s.json.stem}.{mid}{s.json.suffix}") if fleet else s.json
                storage.write_json(path, doc)
        machines = [
            (
                RunData(
                    "this run",
                    tuple(machine_run.results),
                    machine_run.settings,
                    machine_run.machine_info,
                    machine_run.lifecycle,
                ),
                reference_runs[machine_run.machine_id].run,
                reference_runs[machine_run.machine_id].history,
            )
            for machine_run in machine_runs
        ]
        verdicts = judge_machines(machines, s.fail, s.max_overhead, strict=s.strict, noise=s.noise)
        if not incomplete:  # a name a rule gave must have named something measured
            self.unknown_rule_names = s.unknown_rule_names(
                names_measured(machine_runs), "measured by this run"
            )
            verdicts[0].errors += self.unknown_rule_names
        for machine_run, verdict in zip(machine_runs, verdicts, strict=True):
            reference_run, mid = reference_runs[machine_run.machine_id], machine_run.machine_id
            verdict.saved = saved.get(mid)
            verdict.notes = [*reference_run.notes, *notes[mid], *verdict.notes]
            verdict.errors = [*reference_run.errors, *errors[mid], *verdict.errors]
            verdict.unchecked = [*reference_run.unchecked, *verdict.unchecked]
            verdict.machine_differences = reference_run.machine_differences
            verdict.machine = machine_run.label if fleet else ""
            if s.fail or s.max_overhead or s.compare:  # a gate: it says what it never checks
                verdict.not_gated = gatescope.ungated_timings(
                    {"kdf": machine_run.kdf, "inplace": machine_run.inplace}
                )
        if s.html:
            try:
                self.write_html(s.html, machine_runs, reference_runs, verdicts)
            except Exception as exc:  # the verdict stands; the report that failed is an error
                verdicts[0].errors.append(
                    f"could not write the HTML report {s.html}: {type(exc).__name__}: {exc}"
                )
        if s.markdown:
            self.write_markdown(s.markdown, machine_runs, verdicts, rankings)
        return {
            machine_run.machine_id: verdict
            for machine_run, verdict in zip(machine_runs, verdicts, strict=True)
        }

    def document(
        self,
        machine_run: MachineRun,
        commit: dict[str, Any],
        now: dt.datetime,
        incomplete: str,
        rankings: list[FamilyRanking],
    ) -> dict[str, Any]:
        """One machine's saved run (pytest-benchmark's JSON shape, encperf's own parts beside)."""
        doc = storage.document(
            machine_run.results,
            machine_run.machine_info,
            machine_run.machine_id,
            commit,
            machine_run.settings,
            now,
            incomplete,
        )
        doc["encperf"]["lifecycle"] = machine_run.lifecycle
        if machine_run.kdf:
            doc["encperf"]["kdf"] = machine_run.kdf
        if machine_run.inplace:
            doc["encperf"]["inplace"] = machine_run.inplace
            doc["encperf"]["project_size"] = self.settings.project_size
        if machine_run.ladder:  # its own key: the RAM-backed layer rung is never a result to compare with
            doc["encperf"]["ladder"] = machine_run.ladder
        if rankings:
            doc["encperf"]["sweeps"] = [ranking.to_dict() for ranking in rankings]
        return doc

    def write_markdown(
        self,
        path: Path,
        machine_runs: list[MachineRun],
        verdicts: list[Verdict],
        rankings: Callable[[MachineRun], list[FamilyRanking]],
    ) -> None:
        """The Markdown report (a section per machine of a fleet), also to GitHub's step summary."""
        s = self.settings
        if len(machine_runs) > 1:
            text = "\n".join(
                markdown_report(
                    machine_run.results,
                    verdict,
                    f"encperf: machine {machine_run.label}",
                    s.backend_specs,
                    s.profile,
                    sweeps=rankings(machine_run),
                    ladder=machine_run.ladder,
                )
                for machine_run, verdict in zip(machine_runs, verdicts, strict=True)
            )
            table = machines_table(
                [(machine_run.label, machine_run.results) for machine_run in machine_runs], tablefmt="github"
            )
            text += f"\n## encperf: across machines\n\n{table}\n\n{MACHINES_NOTE}\n"
        else:
            text = markdown_report(
                machine_runs[0].results,
                verdicts[0],
                backends=s.backend_specs,
                profiles=s.profile,
                sweeps=rankings(machine_runs[0]),
                ladder=machine_runs[0].ladder,
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as file:
                file.write(text)

    @staticmethod
    def write_html(
        path: Path,
        machine_runs: list[MachineRun],
        reference_runs: dict[str, ReferenceRun],
        verdicts: list[Verdict],
    ) -> None:
        """The HTML report of this run: a section per machine (a fleet has several), each with
        its saved history before it and its own verdict."""
        sections, judged, skipped, notes = [], {}, {}, []
        for machine_run, verdict in zip(machine_runs, verdicts, strict=True):
            info = {**machine_run.machine_info, "machine_id": machine_run.machine_id}
            now = RunData("this run", tuple(machine_run.results), machine_run.settings, info)
            sections.append([*reversed(reference_runs[machine_run.machine_id].history), now])
            if verdict.reference or verdict.checks or verdict.errors or verdict.unchecked:
                judged[machine_run.machine_id] = verdict
            skipped.update({spec: why for spec, why in machine_run.skipped.items() if spec not in skipped})
            prefix = f"{machine_run.label}: " if len(machine_runs) > 1 else ""
            notes += [
                f"{prefix}cipher ceiling: {c.describe()}" for c in from_wire(machine_run.ceilings).values()
            ]
        page = html_report.Page(
            [run for runs in sections for run in runs], None, "encperf report: this run", skipped, notes,
            sections=sections, verdicts=judged,
        )  # fmt: skip
        storage.write_report(path, html_report.render(page))
