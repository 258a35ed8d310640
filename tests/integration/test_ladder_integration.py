"""--encperf-ladder end to end: plain, fscrypt and gocryptfs on this machine, the RAM-backed layer
rung torn down after it and kept apart from the saved results."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from pytest_encperf import mounting, resources, storage
from pytest_encperf.backends import BASELINE_SPEC, BackendSpec
from pytest_encperf.benchmarkentries import measured
from pytest_encperf.engines import select_engine
from pytest_encperf.ladder import Rung
from pytest_encperf.layer import RAM_MOUNT, RAM_SOURCE, LayerSettings, measure_layers, mount_ram, ram_bytes
from pytest_encperf.roundplan import RoundPlan
from pytest_encperf.workloads import MiB, Workload
from tests.helpers.support import problems_here, scratch_dir, tiny_session

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sessions_of_this_test_alone")]

BACKENDS = ("plain", "fscrypt", "gocryptfs")
WORKLOADS = ("SEQ1M-Q1T1-read", "SEQ1M-Q1T1-write")


def ram_mounts(base: Path) -> list[str]:
    """Mount points of the ladder's tmpfs (by its source name) under this test's ``base``: other
    tests' sessions mount theirs at the same time (the suite's other workers)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    points = [line.split()[4] for line in lines if line.split(" - ")[-1].split()[1:2] == [RAM_SOURCE]]
    return [point for point in points if Path(point).is_relative_to(base)]


def test_the_ladder_names_a_limiting_rung_for_each_workload_and_leaves_nothing(
    pytester: pytest.Pytester,
) -> None:
    with scratch_dir("encperf-ladder-") as base:  # asserts no mount or loop device is left under it
        missing = {name: problems_here(name, base) for name in BACKENDS}
        missing = {name: reasons for name, reasons in missing.items() if reasons}
        if missing:
            pytest.skip("; ".join(f"{name}: {'; '.join(why)}" for name, why in missing.items()))
        before = ram_mounts(base)
        saved = base / "saved"
        result = tiny_session(
            pytester, base, f"--encperf-backends={','.join(BACKENDS)}", "--encperf-ladder",
            "--encperf-warmup=0", "--encperf-save=ladder", f"--encperf-storage={saved}",
            f"--encperf-markdown={base / 'report.md'}",
        )  # fmt: skip
        result.assert_outcomes(passed=len(BACKENDS) * len(WORKLOADS))
        result.stdout.fnmatch_lines(["where the overhead comes from (--encperf-ladder): *"])
        for backend in BACKENDS:
            for workload in WORKLOADS:
                result.stdout.fnmatch_lines(
                    [f"{backend} {workload}: cipher *, layer * on RAM (plain *), device *: the * limits it*"]
                )
        markdown = (base / "report.md").read_text()
        assert "**where the overhead comes from (--encperf-ladder): cipher, layer, device**" in markdown
        assert markdown.count(" limits it") == len(BACKENDS) * len(WORKLOADS)
        assert ram_mounts(base) == before, "the ladder's tmpfs is still mounted"
        assert list(base.glob("encperf-*/ladder-ram")) == []
        (path,) = saved.glob("*/*.json")
        doc = json.loads(path.read_text())
        rows = doc["encperf"]["ladder"]
        assert {(row["backend"], row["workload"]) for row in rows} == {
            (backend, workload) for backend in BACKENDS for workload in WORKLOADS
        }
        for row in rows:
            assert row["ram_backed_layer"] is True and row["limit"]["rung"] in ("cipher", "layer", "device")
            assert row["layer"]["note"].startswith("RAM-backed")
        # what the gate compares with is the device rung alone: the saved results are those rounds
        _, results = storage.load(path)
        assert len(results) == len(rows) == len(measured(doc["benchmarks"]))
        device = {(row["backend"], row["workload"]): row["device"]["mb_per_s"] for row in rows}
        for saved_result in results:
            key = (saved_result.backend, saved_result.workload.name)
            assert saved_result.median("mb_per_s") == pytest.approx(device[key])
        assert "RAM-backed" not in json.dumps(doc["benchmarks"])
        assert "ladder-ram" not in json.dumps(doc["benchmarks"])


def test_a_backend_that_cannot_run_says_why_on_its_layer_rung_and_the_ram_is_released() -> None:
    workloads = [Workload("SEQ1M Q1T1", "write", MiB)]
    settings = LayerSettings(select_engine("auto"), RoundPlan(2 * MiB, 0.05, 1, 0))
    with scratch_dir("encperf-layer-") as base:
        before = ram_mounts(base)
        found, errors = measure_layers(
            [(BASELINE_SPEC, workloads), (BackendSpec("luks2"), workloads)], base, settings
        )
        assert errors == []
        layer, plain = found[("plain", "SEQ1M-Q1T1-write")]
        assert layer.mb_per_s and plain.mb_per_s and layer.note.startswith("RAM-backed")
        luks2, _ = found[("luks2", "SEQ1M-Q1T1-write")]
        reasons = problems_here("luks2", base)  # no device-mapper here: the rung gives that reason
        if reasons:
            assert luks2 == Rung(None, f"not measured: {'; '.join(reasons)}")
        else:
            assert luks2.mb_per_s and luks2.note.startswith("RAM-backed")
        assert ram_mounts(base) == before and not (base / RAM_MOUNT).exists()


def test_the_ram_tmpfs_is_private_sized_for_two_containers_and_released() -> None:
    with scratch_dir("encperf-layer-") as base:
        cleanup = resources.Cleanup()
        try:
            point = mount_ram(base, 2 * MiB, cleanup)
            assert mounting.mount_type(point) == "tmpfs"
            assert stat.S_IMODE(os.stat(point).st_mode) == 0o700  # the tmpfs's root
            assert shutil.disk_usage(point).total == ram_bytes(2 * MiB)
            assert len(ram_mounts(base)) >= 1
        finally:
            cleanup.release()
        assert not point.exists()


def test_a_run_asked_to_stop_measures_no_ladder(pytester: pytest.Pytester) -> None:
    """After Ctrl-C, -x or --maxfail the session stops: no RAM rung (it would take minutes)."""
    with scratch_dir("encperf-ladder-stop-") as base:
        if problems_here("plain", base):
            pytest.skip("; ".join(problems_here("plain", base)))
        pytester.makeconftest(
            "def pytest_runtest_teardown(item, nextitem):\n"
            "    if nextitem is None:\n"
            "        item.session.shouldstop = 'stopped by the test'\n"
        )
        before = ram_mounts(base)
        result = tiny_session(pytester, base, "--encperf-backends=plain", "--encperf-ladder")
        result.assert_outcomes(passed=len(WORKLOADS))
        lines = [line for line in result.stdout.lines if line.startswith("plain SEQ1M-Q1T1-")]
        assert len(lines) == len(WORKLOADS) and all("layer not measured" in line for line in lines)
        assert " on RAM" not in result.stdout.str()
        assert ram_mounts(base) == before
