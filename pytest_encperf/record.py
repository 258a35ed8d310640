"""The run's record: what this process measured, and what its report needs from this machine.

Results, kdf and in-place timings, the cipher ceilings, the ladder, the sweeps' rankings; and
``machine_run``, all of it as one ``MachineRun`` (what an xdist worker sends its controller).
Built from nothing; what it needs of the run (the settings, the volumes' skips and life cycles)
is handed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import backends, host, ladder, layer, sweep
from .backends import BASELINE, BackendSpec
from .ceiling import Ceiling, counterpart, kernel_xts_driver, measure_ciphers
from .engines import Engine
from .model import MachineRun, Measurement, Result
from .roundplan import RoundPlan
from .workloads import Workload


@dataclass
class RunRecord:
    results: list[Result] = field(default_factory=list)
    kdf: dict[str, dict[str, Any]] = field(default_factory=dict)  # backend spec -> the kdf row (KdfTiming)
    inplace: dict[str, dict[str, Any]] = field(default_factory=dict)  # spec -> in-place (InplaceTiming)
    # --encperf-ladder: the layer rungs (RAM-backed, kept apart from the results) and the
    # ciphers' counterparts (ladder.py)
    layers: ladder.LayerRungs = field(default_factory=dict)
    counterparts: dict[str, ladder.Rung] = field(default_factory=dict)
    # each result's backend spec (Result.backend is its text): the ladder opens the backends again
    specs: dict[str, BackendSpec] = field(default_factory=dict)
    _ceilings: dict[str, Ceiling] = field(default_factory=dict)
    _rankings: dict[str, list[sweep.FamilyRanking]] = field(default_factory=dict)  # machine id -> ...

    def add(self, result: Result, spec: BackendSpec, machine_id: str) -> list[tuple[str, object]]:
        """Keep a result measured on a volume of ``spec`` on ``machine_id``; returns its test properties."""
        result.machine_id = machine_id
        self.results.append(result)
        self.specs[result.backend] = spec
        return user_properties(result)

    def add_baseline_rounds(self, spec: str, rounds: dict[str, list[Measurement]]) -> None:
        """Partition target: the baseline measured again after ``spec``'s volume, by workload."""
        for result in self.results:
            if result.backend == spec:
                result.baseline_rounds.extend(rounds.get(result.workload.name, []))

    def measure_cipher_ceilings(self, measure: bool = True) -> dict[str, Ceiling]:
        """The speed of each cipher the measured backends name, measured once per session (none
        measured when not ``measure``: after an interrupt, the user asked the run to stop)."""
        wanted = [c for c in dict.fromkeys(r.cipher_ceiling for r in self.results) if c]
        missing = [c for c in wanted if c not in self._ceilings]
        if measure:
            self._ceilings.update(measure_ciphers(missing))
        return {c: self._ceilings[c] for c in wanted if c in self._ceilings}

    def measure_ladder(self, engine: Engine, plan: RoundPlan, base: Path, measure: bool = True) -> list[str]:
        """--encperf-ladder: the layer rung of every backend x workload measured (on a RAM-backed
        container under ``base``, with the run's ``plan``) and the counterparts of their ciphers.
        Returns the layers' teardown failures (they fail the run)."""
        cases: dict[BackendSpec, list[Workload]] = {}
        for result in self.results:
            if result.workload.kind != "task":  # a real-work task has no ladder (ladder.rows)
                cases.setdefault(self.specs[result.backend], []).append(result.workload)
        settings = layer.LayerSettings(
            engine, plan,
            lock=lambda: host.measurement_lock(None),  # memory and CPU: the whole machine
            between_measurements=lambda: host.measurement_lock(None, shared=True),
        )  # fmt: skip
        self.layers, errors = layer.measure_layers(cases.items(), base, settings)
        with host.measurement_lock(None):
            for cipher in self.measure_cipher_ceilings(measure):
                other, why = counterpart(cipher)
                if other is None:
                    self.counterparts[cipher] = ladder.Rung(None, why)
                else:
                    found = measure_ciphers([other])[other]
                    self.counterparts[cipher] = ladder.Rung(found.mb_per_s, found.describe())
        return errors

    def ladder_rows(self, measure: bool = True) -> list[dict[str, Any]]:
        """The ladder of this process's results."""
        ciphers = {
            name: ladder.Rung(c.mb_per_s, c.describe())
            for name, c in self.measure_cipher_ceilings(measure).items()
        }
        rows = ladder.rows(self.results, self.layers, ciphers, self.counterparts)
        return [row.to_dict() for row in rows]

    def sweep_rankings(
        self, machine_run: MachineRun, specs: list[str], margin: float
    ) -> list[sweep.FamilyRanking]:
        """A ranking for every backend family run in several configurations (a sweep), each with
        the best configuration's set-up commands for the recommendation."""
        if machine_run.machine_id not in self._rankings:  # the summary, the JSON and the Markdown: once
            found = sweep.rank(machine_run.results, [spec for spec in specs if spec != BASELINE], margin)
            self._rankings[machine_run.machine_id] = backends.recommend(found)
        return self._rankings[machine_run.machine_id]

    def as_machine_run(
        self,
        machine_info_and_id: tuple[dict[str, Any], str],
        settings: dict[str, str],
        engine: str,
        skipped: dict[str, str],
        lifecycle: dict[str, dict[str, list[float]]],
        *,
        problems: list[str],
        notes: list[str],
        ladder: bool,
        measure: bool,
    ) -> MachineRun:
        """What this process measured on this machine, and what its report needs from here."""
        info, machine_id = machine_info_and_id
        return MachineRun(
            machine_id=machine_id,
            machine_info=info,
            settings=settings,
            engine=engine,
            results=list(self.results),
            skipped=dict(skipped),
            ceilings={
                cipher: (c.mb_per_s, c.how) for cipher, c in self.measure_cipher_ceilings(measure).items()
            },
            xts_driver=kernel_xts_driver(),
            problems=list(problems),
            lifecycle={spec: {k: list(v) for k, v in cycles.items()} for spec, cycles in lifecycle.items()},
            kdf=dict(self.kdf),
            inplace=dict(self.inplace),
            ladder=self.ladder_rows(measure) if ladder else [],
            notes=notes,
        )


def user_properties(result: Result) -> list[tuple[str, object]]:
    """Per-test properties for junitxml (``record_property`` style): the medians and the overhead."""
    prefix = f"encperf.{result.backend}.{result.workload.name}"
    if not result.rounds:
        return []
    change = result.change_percent
    return [
        (f"{prefix}.mb_per_s", round(result.median("mb_per_s"), 3)),
        (f"{prefix}.iops", round(result.median("iops"), 1)),
        (f"{prefix}.lat_p50_us", round(result.median("lat_p50_us"), 1)),
        (f"{prefix}.lat_p99_us", round(result.median("lat_p99_us"), 1)),
        (f"{prefix}.cpu_s_per_gib", round(result.median("cpu_s_per_gib"), 4)),
        (f"{prefix}.vs_plain_percent", None if change is None else round(change, 2)),
    ]
