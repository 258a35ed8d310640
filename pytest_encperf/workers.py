"""xdist: where this process stands among the workers, and the merge of what the workers sent.

``Topology`` reads a worker's ``workerinput`` (the controller's --dist and the number of
workers); ``WorkerRuns`` collects, on the controller, each worker's ``MachineRun`` and the
workers whose results never came; ``merge`` makes one ``MachineRun`` per machine of them, a pure
function (tests/unit/test_workers.py drives it with made-up workers' machine runs, no processes).
``XdistResults`` is the controller's plugin for xdist's own hooks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import machine
from .model import MachineRun


@dataclass(frozen=True)
class Topology:
    is_worker: bool = False
    dist: str = "no"  # the controller's --dist (a worker's own is always "no")
    workers: int = 1
    worker_id: str = "gw0"

    @classmethod
    def of(cls, workerinput: Mapping[str, Any] | None) -> Topology:
        """This process's place: ``config.workerinput`` on an xdist worker, None elsewhere."""
        if workerinput is None:
            return cls()
        return cls(
            True,
            str(workerinput.get("encperf_dist", "load")),
            int(workerinput.get("workercount", 1)),
            str(workerinput.get("workerid", "gw0")),
        )

    def workers_here(self) -> int:
        """xdist workers measuring on this machine at once: 1 without xdist, and with
        ``--dist each``, where each worker is taken for a machine of its own (a fleet)."""
        return 1 if not self.is_worker or self.dist == "each" else self.workers

    def machine_count(self) -> int:
        """Machines in this run as a worker can tell before the end: a fleet (``--dist each``)
        has one per worker."""
        return self.workers if self.is_worker and self.dist == "each" else 1

    def unreliable(self, partition: bool, parallel_devices: bool) -> list[str]:
        """Why this configuration cannot measure reliably (several workers on one machine)."""
        workers = self.workers_here()
        if workers <= 1:
            return []
        found = []
        if partition:
            found.append(
                f"--encperf-target=partition with {workers} xdist workers on one machine: the partition "
                "holds one volume at a time and one worker holds it for the whole run; the other workers' "
                "backends are skipped. Run it without -n, or with one worker per machine (--dist each)"
            )
        if parallel_devices:
            found.append(
                f"--encperf-parallel-devices with {workers} xdist workers on one machine: rounds on "
                "different disks run at the same time and share the CPUs, memory and buses of the "
                "machine; encryption costs CPU, so such overheads are not those of a machine measuring alone"
            )
        return found


@dataclass
class WorkerRuns:
    """On the controller: what each worker measured, in the order of the workers (gw0, gw1, ...)
    whichever finished first, and the workers whose results never came."""

    runs: list[MachineRun] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    _order: list[int] = field(default_factory=list)  # the runs' workers' numbers (gw0 -> 0)

    def add(self, document: dict[str, Any], worker: str = "") -> None:
        """What a worker (``gw3``) measured, its ``workeroutput``."""
        self.runs.append(MachineRun.from_dict(document))
        self._order.append(int("".join(filter(str.isdigit, worker)) or 0))
        order = sorted(range(len(self.runs)), key=self._order.__getitem__)
        self.runs = [self.runs[i] for i in order]
        self._order = [self._order[i] for i in order]

    def missing(self, outputs_asked: bool) -> list[str]:
        """Workers whose results never came, when this run measures (another worker sent results
        or skips, or a report, save or gate was asked for): a crashed worker in a run of other
        tests is xdist's business alone."""
        if any(run.results or run.skipped for run in self.runs) or outputs_asked:
            return self.lost
        return []


def merge(
    runs: Sequence[MachineRun],
    controller: tuple[dict[str, Any], str] | None,
    backend_order: Sequence[str],
    workload_order: Sequence[str],
) -> list[MachineRun]:
    """One MachineRun per machine of ``runs`` (the workers' machine runs, or this process's own), merged
    by machine id (one machine may have several workers). ``controller``: the controller's
    (info, id) under xdist, whose host counts (identical servers of a fleet, the controller's
    among them, are one machine each). Results in the order of the selected backends and
    workloads, whichever worker measured them; ``runs`` are left as they are."""
    hosts: dict[str, set[str]] = {}
    if controller is not None:
        info, machine_id = controller
        hosts[machine_id] = {str(info.get("node"))}
    for run in runs:
        hosts.setdefault(run.machine_id, set()).add(str(run.machine_info.get("node")))
    by_machine: dict[str, MachineRun] = {}
    for run in runs:
        key = run.machine_id
        if len(hosts.get(key, ())) > 1:  # identical servers of a fleet: one machine each
            key = machine.fleet_member_id(key, run.machine_info)
        if key in by_machine:
            by_machine[key].merge(run)
        else:
            by_machine[key] = MachineRun.from_dict(run.to_dict())
            by_machine[key].machine_id = key
    for key, merged in by_machine.items():
        for result in merged.results:
            result.machine_id = key
    specs = {spec: index for index, spec in enumerate(backend_order)}
    names = {name: index for index, name in enumerate(workload_order)}
    for machine_run in by_machine.values():
        machine_run.results.sort(
            key=lambda r: (specs.get(r.backend, len(specs)), names.get(r.workload.name, len(names)))
        )
    return list(by_machine.values())


class XdistResults:
    """Registered on the xdist controller only (hook names unknown without xdist)."""

    def __init__(self, runs: WorkerRuns, planned: set[str], dist: str) -> None:
        self.runs = runs
        self.planned = planned  # the run's planned tests, filled in (every worker collects its own)
        self.dist = dist

    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self.planned.update(ids)

    def pytest_configure_node(self, node: Any) -> None:
        # a worker's own --dist is always "no": tell it the run's (a fleet is --dist each)
        node.workerinput["encperf_dist"] = self.dist

    def pytest_testnodedown(self, node: object, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        worker = getattr(getattr(node, "gateway", None), "id", "")
        if "encperf_machine" in output:
            self.runs.add(output["encperf_machine"], str(worker))
        if error or "encperf_machine" not in output:
            why = f"it went down: {error}" if error else "it ended without sending them"
            self.runs.lost.append(
                f"the results of worker {worker or '?'} are missing from this report, the saved run and "
                f"the gate: {why}"
            )
