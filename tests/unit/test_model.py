"""model.MachineRun: what a worker sends, and how the controller merges one machine's workers."""

from __future__ import annotations

import json

from pytest_encperf.model import MachineRun, Measurement, Result
from pytest_encperf.workloads import CDM

SEQ_READ, SEQ_WRITE = CDM[0], CDM[1]


def result(workload, backend: str = "fscrypt") -> Result:
    m = Measurement("fio", "1", 100, 1.0, 1, 1.0, 2.0, 3.0, 0.1, "direct", started=1.0, ended=2.0)
    return Result(backend, workload, [m], [m], machine_id="x86_64-a", lock_wait=0.5)


def test_a_machine_run_survives_the_wire_as_json() -> None:
    machine_run = MachineRun(
        "x86_64-a", {"node": "a"}, {"dir": "/var/tmp"}, "fio 3.33", [result(SEQ_READ)],
        {"luks2": "no device-mapper"}, {"kernel:xts(aes):512": (123.0, "aesni")}, "xts-aes-aesni",
    )  # fmt: skip
    back = MachineRun.from_dict(json.loads(json.dumps(machine_run.to_dict())))
    assert back == machine_run
    assert back.results[0].rounds[0].ended == 2.0 and back.results[0].lock_wait == 0.5
    assert back.label == "x86_64-a (a)"


def test_workers_of_one_machine_merge_and_a_cell_measured_twice_keeps_the_first() -> None:
    first = MachineRun("x86_64-a", results=[result(SEQ_READ)], skipped={"luks2": "no dm"})
    second = MachineRun("x86_64-a", results=[result(SEQ_READ), result(SEQ_WRITE)], problems=["umount failed"])
    first.merge(second)
    assert [r.workload.name for r in first.results] == [SEQ_READ.name, SEQ_WRITE.name]
    assert first.skipped == {"luks2": "no dm"}
    assert first.problems == ["umount failed"]
    assert first.notes == [f"fscrypt {SEQ_READ.name} was measured twice on this machine: the first is kept"]


def test_a_backend_one_worker_skipped_and_another_measured_is_measured() -> None:
    """--dist load may split a backend's tests: one worker's volume failed, the other's did not."""
    first = MachineRun("x86_64-a", skipped={"fscrypt": "device busy", "luks2": "no dm"})
    first.merge(MachineRun("x86_64-a", results=[result(SEQ_READ)]))
    assert first.skipped == {"luks2": "no dm"}
    second = MachineRun("x86_64-a", results=[result(SEQ_READ)])
    second.merge(MachineRun("x86_64-a", skipped={"fscrypt": "device busy"}))
    assert second.skipped == {}


def test_a_task_is_compared_by_speed_and_keeps_its_steps_in_json() -> None:
    from pytest_encperf.workloads import PROFILES

    archive = PROFILES["realwork"].workloads[0]

    def timed(seconds: float) -> Measurement:
        steps = (("create tar.gz", seconds / 4), ("extract tar.gz", 3 * seconds / 4))
        return Measurement("tools", "1", 100, seconds, 1, 0.0, 0.0, 0.0, 0.1, "buffered", steps=steps)

    task = Result("fscrypt", archive, [timed(20.0)], [timed(10.0)])
    assert task.primary_metric == "seconds"
    assert task.change_percent == -50.0  # twice plain's time: half its speed, as a throughput
    assert task.efficiency(1000.0) is None  # a task's bytes are not what the cipher moved
    back = Result.from_dict(json.loads(json.dumps(task.to_dict())))
    assert back.rounds[0].steps == (("create tar.gz", 5.0), ("extract tar.gz", 15.0))
    assert back.workload == archive


def test_lifecycle_samples_read_one_float_per_step_as_one_cycle_and_lists_as_cycles() -> None:
    from pytest_encperf.lifecycledata import lifecycle_medians, lifecycle_samples

    old = {"plain": {"create": 0.5, "mount": 1}}  # saved before --encperf-lifecycle-cycles
    assert lifecycle_samples(old) == {"plain": {"create": [0.5], "mount": [1.0]}}
    now = {"fscrypt": {"create": [0.3, 0.1, 0.2], "mount": [0.02]}}
    assert lifecycle_samples(now) == now
    assert lifecycle_medians(now) == {"fscrypt": {"create": 0.2, "mount": 0.02}}
    junk = {"a": "x", "b": {"mount": "slow", "create": [None, True]}, "c": {"mount": [1.0, "x"]}}
    assert lifecycle_samples(junk) == {"c": {"mount": [1.0]}}
    assert lifecycle_samples(None) == {} and lifecycle_samples([1.0]) == {}
