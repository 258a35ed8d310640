"""The workloads the partition target's baseline measures: those of the collected tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_encperf.workloads import CDM, baseline_workloads


@dataclass
class Callspec:
    params: dict[str, object]


@dataclass
class Item:
    """What baseline_workloads reads of a pytest item."""

    fixturenames: tuple[str, ...] = ()
    params: dict[str, object] = field(default_factory=dict)

    @property
    def callspec(self) -> Callspec:
        return Callspec(self.params)


def benchmark(workload: object) -> Item:
    return Item(("encperf", "encperf_workload"), {"encperf_volume": "luks2", "encperf_workload": workload})


def test_the_baseline_measures_the_workloads_the_selected_tests_measure_in_the_profiles_order() -> None:
    first, second, third = CDM[:3]
    items = [benchmark(third), benchmark(first), benchmark(third)]
    assert baseline_workloads(items, list(CDM)) == [first, third]  # -k left these
    assert second not in baseline_workloads(items, list(CDM))


def test_a_full_run_measures_every_workload() -> None:
    assert baseline_workloads([benchmark(w) for w in CDM], list(CDM)) == list(CDM)


def test_a_test_measuring_with_encperf_without_a_workload_parameter_may_run_any() -> None:
    items = [benchmark(CDM[0]), Item(("encperf", "encperf_volume"), {"encperf_volume": "luks2"})]
    assert baseline_workloads(items, list(CDM)) == list(CDM)


def test_tests_measuring_no_workload_need_no_baseline_rounds() -> None:
    items = [
        Item(("encperf_volume",), {"encperf_volume": "luks2"}),  # the volume alone
        Item(("encperf_kdf",), {"encperf_kdf": "luks2"}),
        Item(("encperf", "encperf_workload"), {"encperf_workload": None}),  # --encperf-profile=kdf alone
        Item(),  # not a benchmark
    ]
    assert baseline_workloads(items, list(CDM)) == []
