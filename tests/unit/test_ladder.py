"""The ladder's rule (which rung limits a backend), its rows and their rendering: pure numbers."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_encperf.ladder import TOLERANCE, LadderRow, Limit, Rung, limiting_rung, rows
from pytest_encperf.model import Measurement, Result
from pytest_encperf.report import format_speed, ladder_line, ladder_lines, markdown_report
from pytest_encperf.workloads import TASK_MODE, MiB, Workload


def test_the_issue_example_is_limited_by_the_layer() -> None:
    # gocryptfs SEQ1M write: cipher 2.1 GB/s, layer 430 MB/s, device 410 MB/s (plain 1.8 GB/s)
    assert limiting_rung(2100, 430, 1800, 410) == Limit("layer")


@pytest.mark.parametrize(
    ("cipher", "layer", "device_plain", "rung"),
    [
        (2000, 1900, 500, "device"),  # the disk is the lowest ceiling
        (200, 190, 1800, "cipher"),  # the layer runs at its cipher's speed: the cipher limits
        (2000, 1000, 500, "device"),
        (None, 430, 1800, "layer"),  # no cipher measured: the others decide
        (None, 5000, 1800, "device"),  # plain: no cipher
        (2100, None, 1800, "device"),  # no layer measured
        (300, 3000, 3000, "cipher"),
    ],
)
def test_the_lowest_ceiling_limits(
    cipher: float | None, layer: float | None, device_plain: float | None, rung: str
) -> None:
    assert limiting_rung(cipher, layer, device_plain).rung == rung


def test_ceilings_within_the_tolerance_name_the_earlier_rung() -> None:
    lowest = 1000.0
    inside, outside = lowest * (1 + TOLERANCE) - 1, lowest * (1 + TOLERANCE) + 1
    assert limiting_rung(inside, lowest, 5000).rung == "cipher"
    assert limiting_rung(outside, lowest, 5000).rung == "layer"
    assert limiting_rung(5000, inside, lowest).rung == "layer"
    assert limiting_rung(5000, outside, lowest).rung == "device"


def test_a_device_far_below_every_ceiling_says_the_costs_add_up() -> None:
    limit = limiting_rung(2000, 900, 1000, 300)
    assert limit.rung == "layer" and "add up" in limit.remark
    assert limiting_rung(2000, 900, 1000, 850).remark == ""


def test_nothing_measured_names_no_rung() -> None:
    assert limiting_rung(None, None, None, 100) == Limit(None, "no rung was measured")
    assert limiting_rung(0, 0, 0).rung is None


def measurement(mb_per_s: float) -> Measurement:
    return Measurement(
        engine="fio", engine_version="3", bytes=int(mb_per_s * 1e6), seconds=1.0, ios=1,
        lat_p50_us=1.0, lat_p99_us=1.0, lat_p999_us=1.0, cpu_seconds=0.1, io_mode="direct",
    )  # fmt: skip


def result(backend: str, cipher: str | None, volume: list[float], plain: list[float]) -> Result:
    found = Result(
        backend=backend,
        workload=Workload("SEQ1M Q1T1", "write", MiB),
        description={"cipher_ceiling": cipher} if cipher else {},
    )
    found.rounds += [measurement(value) for value in volume]
    found.baseline_rounds += [measurement(value) for value in plain]
    return found


def test_rows_take_the_device_rung_from_the_run_and_the_layer_from_the_ram_rungs() -> None:
    layers = {("gocryptfs", "SEQ1M-Q1T1-write"): (Rung(430.0, "RAM-backed"), Rung(1900.0, "RAM-backed"))}
    ciphers = {"gocryptfs:AES-GCM-256": Rung(2100.0, "gocryptfs:AES-GCM-256: 2100 MB/s (gocryptfs -speed)")}
    others = {"gocryptfs:AES-GCM-256": Rung(None, "kernel-aead:gcm(aes):256: not measured: no AF_ALG")}
    found = rows(
        [result("gocryptfs", "gocryptfs:AES-GCM-256", [400, 410, 420], [1800, 1800, 1800])],
        layers, ciphers, others,
    )  # fmt: skip
    (row,) = found
    assert (row.device.mb_per_s, row.device_plain.mb_per_s, row.layer.mb_per_s) == (410, 1800, 430)
    assert row.limit.rung == "layer"
    assert LadderRow.from_dict(row.to_dict()) == row
    assert row.to_dict()["ram_backed_layer"] is True
    on_disk = dataclasses.replace(row, ram_backed_layer=False)
    assert LadderRow.from_dict(on_disk.to_dict()) == on_disk  # read back as saved, not as the default
    markdown = markdown_report([], None, ladder=[row.to_dict()])
    assert f"- {ladder_line(row)}" in markdown and "**where the overhead comes from" in markdown
    line = ladder_line(row)
    assert line == (
        "gocryptfs SEQ1M-Q1T1-write: cipher 2.1 GB/s (gocryptfs:AES-GCM-256 2.1 GB/s; "
        "kernel-aead:gcm(aes):256 not measured), layer 430 MB/s on RAM (plain 1.9 GB/s), "
        "device 410 MB/s (plain 1.8 GB/s): the layer limits it"
    )


def test_a_real_work_task_has_no_ladder_row() -> None:
    task = result("fscrypt", None, [2.0, 2.1, 2.2], [1.0, 1.0, 1.0])
    task.workload = Workload("archive tar.gz", TASK_MODE, 1, task="archive")
    block = result("fscrypt", None, [40.0, 41.0, 42.0], [90.0, 90.0, 90.0])
    assert [row.workload for row in rows([task, block], {}, {}, {})] == ["SEQ1M-Q1T1-write"]


def test_a_counterpart_never_stands_in_for_the_backends_own_cipher() -> None:
    ciphers = {"kernel:xts(aes):512": Rung(None, "kernel:xts(aes):512: not measured: no AF_ALG")}
    others = {"kernel:xts(aes):512": Rung(50.0, "user:AES-256-XTS: 50 MB/s (OpenSSL)")}
    layers = {("fscrypt", "SEQ1M-Q1T1-write"): (Rung(880.0, "RAM"), Rung(3000.0, "RAM"))}
    (row,) = rows([result("fscrypt", "kernel:xts(aes):512", [850], [2000])], layers, ciphers, others)
    assert row.limit == Limit(
        "layer", "the cipher could not be measured alone here, so the layer rung includes it"
    )
    lines = ladder_lines([row.to_dict()])
    assert "cipher not measured (kernel:xts(aes):512 not measured; user:AES-256-XTS 50 MB/s)" in lines[1]
    assert "ladder cipher: kernel:xts(aes):512: not measured: no AF_ALG" in lines
    assert lines[1].endswith(
        "the layer limits it (the cipher could not be measured alone here, so the layer rung includes it)"
    )


def test_plain_has_no_cipher_rung_and_an_unmeasured_layer_says_why() -> None:
    layers = {("plain", "SEQ1M-Q1T1-write"): (Rung(None, "not measured: needs root"), Rung(None))}
    (row,) = rows([result("plain", None, [500], [500])], layers, {}, {})
    line = ladder_line(row)
    assert line.startswith(
        "plain SEQ1M-Q1T1-write: cipher none (no encryption), layer not measured: needs root"
    )
    assert line.endswith("device 500 MB/s (plain 500 MB/s): the device limits it")


@pytest.mark.parametrize(
    ("value", "text"), [(2100.0, "2.1 GB/s"), (430.4, "430 MB/s"), (7.46, "7.5 MB/s"), (None, "-")]
)
def test_format_speed(value: float | None, text: str) -> None:
    assert format_speed(value) == text


def test_the_ram_container_is_refused_when_it_would_take_more_than_half_the_free_memory() -> None:
    from pytest_encperf import host
    from pytest_encperf.layer import ram_bytes, ram_problem

    if not host.is_root():
        assert "needs root" in ram_problem(MiB, available=10**12)
        return
    need = ram_bytes(256 * MiB)
    assert ram_problem(256 * MiB, available=2 * need) == ""
    assert ram_problem(256 * MiB, available=2 * need - MiB) == (
        f"the RAM-backed container needs {need // MiB} MiB of memory, more than half of the "
        f"{(2 * need - MiB) // MiB} MiB available: pass a smaller --encperf-size"
    )


def test_a_cipher_reason_both_rungs_share_is_said_once() -> None:
    why = Rung(None, "the backend names no cipher that can be measured")
    row = LadderRow(
        "qemu-luks", "SEQ1M-Q1T1-write", why, why, Rung(400.0), Rung(5000.0), Rung(410.0), Rung(3000.0)
    )
    assert "cipher not measured (the backend names no cipher that can be measured), layer" in ladder_line(row)


def test_the_ladder_opens_each_backend_from_the_spec_its_results_were_measured_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """The record keeps the BackendSpec each result came from and hands those to the layer rung, so
    a spec is never parsed again from a result's text; its rungs keep the text as their key."""
    import contextlib

    from pytest_encperf import host, layer
    from pytest_encperf.backends import BASELINE_SPEC, BackendSpec
    from pytest_encperf.record import RunRecord
    from pytest_encperf.roundplan import RoundPlan

    luks2 = BackendSpec("luks2", (("cipher", "aes-xts-plain64"),))
    record = RunRecord()
    for spec in (BASELINE_SPEC, luks2):
        record.add(result(str(spec), None, [100.0], [100.0]), spec, "m1")
    handed: list[tuple[BackendSpec, list[str]]] = []

    def measure_layers(cases, base, settings):
        handed.extend((spec, [w.name for w in workloads]) for spec, workloads in cases)
        return {(str(spec), "SEQ1M-Q1T1-write"): (Rung(1.0), Rung(2.0)) for spec, _ in handed}, []

    def never(text: str) -> BackendSpec:
        raise AssertionError(f"parsed again: {text}")

    monkeypatch.setattr(layer, "measure_layers", measure_layers)
    monkeypatch.setattr(BackendSpec, "parse", staticmethod(never))
    monkeypatch.setattr(host, "measurement_lock", lambda *args, **kwargs: contextlib.nullcontext(0.0))
    assert record.measure_ladder(None, RoundPlan(MiB, 0.01, 1, 0), tmp_path, measure=False) == []  # type: ignore[arg-type]
    assert handed == [(BASELINE_SPEC, ["SEQ1M-Q1T1-write"]), (luks2, ["SEQ1M-Q1T1-write"])]
    assert handed[1][0] is luks2
    assert set(record.layers) == {
        ("plain", "SEQ1M-Q1T1-write"),
        ("luks2:cipher=aes-xts-plain64", "SEQ1M-Q1T1-write"),
    }
