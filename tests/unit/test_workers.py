"""workers.py: the xdist topology, the collection of what workers sent, and ``merge``, driven with
made-up worker parts and mock nodes (as pytest-xdist's test_dsession.py drives its controller):
no processes."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_encperf.machine import fleet_member_id
from pytest_encperf.model import MachineRun, Measurement, Result
from pytest_encperf.workers import Topology, WorkerRuns, XdistResults, merge
from pytest_encperf.workloads import CDM

SEQ_READ, SEQ_WRITE = CDM[0], CDM[1]


def result(workload, backend: str = "fscrypt") -> Result:
    m = Measurement("fio", "1", 100, 1.0, 1, 1.0, 2.0, 3.0, 0.1, "direct", started=1.0, ended=2.0)
    return Result(backend, workload, [m], [m])


def machine_run(machine_id: str, node: str, *results: Result, **fields: object) -> MachineRun:
    return MachineRun(machine_id, {"node": node}, results=list(results), **fields)  # type: ignore[arg-type]


def node(worker: str, output: dict | None = None) -> SimpleNamespace:
    """What xdist's controller hands its hooks: a node with a gateway id and, once it is down,
    the worker's output."""
    return SimpleNamespace(gateway=SimpleNamespace(id=worker), workeroutput=output, workerinput={})


def test_the_workers_of_one_machine_are_one_part_in_the_order_of_the_selection() -> None:
    gw0 = machine_run("x86_64-a", "a", result(SEQ_WRITE, "luks2"), result(SEQ_READ, "fscrypt"))
    gw1 = machine_run("x86_64-a", "a", result(SEQ_READ, "luks2"), skipped={"gocryptfs": "not installed"})
    merged = merge(
        [gw0, gw1], ({"node": "a"}, "x86_64-a"), ["luks2", "fscrypt"], [SEQ_READ.name, SEQ_WRITE.name]
    )
    assert len(merged) == 1
    assert [(r.backend, r.workload.name) for r in merged[0].results] == [
        ("luks2", SEQ_READ.name),
        ("luks2", SEQ_WRITE.name),
        ("fscrypt", SEQ_READ.name),
    ]
    assert merged[0].skipped == {"gocryptfs": "not installed"}
    assert {r.machine_id for r in merged[0].results} == {"x86_64-a"}
    assert [r.backend for r in gw0.results] == ["luks2", "fscrypt"]  # the workers' parts are left as sent


def test_identical_servers_of_a_fleet_are_one_machine_each() -> None:
    """Two hosts with one machine id (the same hardware): each its own machine, by host name."""
    first, second = (
        machine_run("x86_64-a", "server1", result(SEQ_READ)),
        machine_run("x86_64-a", "server2", result(SEQ_READ)),
    )
    merged = merge([first, second], ({"node": "controller"}, "x86_64-b"), ["fscrypt"], [SEQ_READ.name])
    ids = [m.machine_id for m in merged]
    assert ids == [
        fleet_member_id("x86_64-a", {"node": "server1"}),
        fleet_member_id("x86_64-a", {"node": "server2"}),
    ]
    assert len(set(ids)) == 2
    assert [r.machine_id for m in merged for r in m.results] == ids


def test_a_remote_worker_on_the_controllers_hardware_is_another_machine() -> None:
    remote = machine_run("x86_64-a", "remote", result(SEQ_READ))
    merged = merge([remote], ({"node": "here"}, "x86_64-a"), ["fscrypt"], [SEQ_READ.name])
    assert [m.machine_id for m in merged] == [fleet_member_id("x86_64-a", {"node": "remote"})]


def test_without_xdist_the_own_run_is_the_only_machine_run() -> None:
    own = machine_run("x86_64-a", "a", result(SEQ_READ))
    merged = merge([own], None, ["fscrypt"], [SEQ_READ.name])
    assert [m.machine_id for m in merged] == ["x86_64-a"]
    assert merged[0] is not own
    assert [(r.backend, r.workload.name, r.machine_id) for r in merged[0].results] == [
        ("fscrypt", SEQ_READ.name, "x86_64-a")
    ]


def test_worker_runs_are_kept_in_the_order_of_the_workers_whichever_finished_first() -> None:
    runs = WorkerRuns()
    runs.add(machine_run("m2", "b").to_dict(), "gw2")
    runs.add(machine_run("m0", "a").to_dict(), "gw0")
    runs.add(machine_run("m1", "c").to_dict(), "gw1")
    assert [run.machine_id for run in runs.runs] == ["m0", "m1", "m2"]


def test_a_lost_worker_counts_only_when_the_run_measures_or_writes_something() -> None:
    runs = WorkerRuns(lost=["the results of worker gw1 are missing"])
    assert runs.missing(outputs_asked=False) == []
    assert runs.missing(outputs_asked=True) == runs.lost
    runs.add(machine_run("m0", "a", result(SEQ_READ)).to_dict(), "gw0")
    assert runs.missing(outputs_asked=False) == runs.lost


def test_the_controller_plugin_with_mock_nodes() -> None:
    runs, planned = WorkerRuns(), {"test_a.py::x"}
    plugin = XdistResults(runs, planned, "each")
    gw0, gw1, gw2 = (
        node("gw0", {"encperf_machine": machine_run("m0", "a", result(SEQ_READ)).to_dict()}),
        node("gw1"),
        node("gw2", {}),
    )
    plugin.pytest_configure_node(gw0)
    assert gw0.workerinput == {"encperf_dist": "each"}  # a worker's own --dist is always "no"
    plugin.pytest_xdist_node_collection_finished(gw0, ["test_a.py::y"])
    assert planned == {"test_a.py::x", "test_a.py::y"}
    plugin.pytest_testnodedown(gw0, None)
    plugin.pytest_testnodedown(gw1, "Timeout")
    plugin.pytest_testnodedown(gw2, None)
    assert [run.machine_id for run in runs.runs] == ["m0"]
    assert runs.lost == [
        "the results of worker gw1 are missing from this report, the saved run and the gate: "
        "it went down: Timeout",
        "the results of worker gw2 are missing from this report, the saved run and the gate: "
        "it ended without sending them",
    ]


def test_topology_of_a_worker_and_of_the_controller() -> None:
    controller = Topology.of(None)
    assert (controller.is_worker, controller.workers_here(), controller.machine_count()) == (False, 1, 1)
    on_one_machine = Topology.of({"encperf_dist": "load", "workercount": 3, "workerid": "gw1"})
    assert (on_one_machine.workers_here(), on_one_machine.machine_count(), on_one_machine.worker_id) == (
        3,
        1,
        "gw1",
    )
    fleet = Topology.of({"encperf_dist": "each", "workercount": 3})
    assert (fleet.workers_here(), fleet.machine_count()) == (1, 3)
    assert fleet.unreliable(partition=True, parallel_devices=True) == []
    found = on_one_machine.unreliable(partition=True, parallel_devices=True)
    assert [text.split(" with ")[0] for text in found] == [
        "--encperf-target=partition",
        "--encperf-parallel-devices",
    ]
