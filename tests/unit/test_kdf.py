"""The kdf profile's pure parts: which settings a backend is timed with, the row's ratio and
its saved form."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_encperf import kdf
from pytest_encperf.backends import BackendSpec
from pytest_encperf.kdf import KdfSetting, KdfTiming, setting_spec
from pytest_encperf.optionparsers import parse_profiles
from pytest_encperf.targets import Target
from pytest_encperf.workloads import profile_workloads


def test_both_settings_are_spec_parameters_and_a_single_one_leaves_the_spec() -> None:
    spec = BackendSpec.parse("gocryptfs:aessiv=1")
    assert str(setting_spec(spec, "default", ("fast", "default"))) == "gocryptfs:aessiv=1,kdf=default"
    assert setting_spec(BackendSpec("cryfs"), "default", ("default",)) == BackendSpec("cryfs")


@pytest.mark.parametrize("name", ["plain", "fscrypt", "dm-plain"])
def test_a_backend_without_key_derivation_says_so(name: str, tmp_path: Path) -> None:
    timing = kdf.measure(BackendSpec(name), Target("container", tmp_path, 1 << 20), tmp_path / "kdf")
    assert timing.note == "no key derivation" and timing.settings == {}
    assert not (tmp_path / "kdf").exists()  # nothing made


def test_ratio_is_default_over_fast_mount_and_survives_saving() -> None:
    timing = KdfTiming(
        "gocryptfs",
        {
            "fast": KdfSetting("scrypt N=2^10 (benchmark only)", 0.1, 0.05),
            "default": KdfSetting("own", 0.3, 0.2),
        },
    )
    assert timing.ratio == pytest.approx(4.0)
    saved = timing.to_dict()
    assert saved["ratio"] == pytest.approx(4.0)
    assert KdfTiming.from_dict(saved) == timing
    assert KdfTiming("cryfs", {"default": KdfSetting("own", 0.1, 1.0)}).ratio is None


def test_kdf_profile_is_accepted_and_runs_no_workload() -> None:
    assert parse_profiles("cdm,kdf") == ["cdm", "kdf"]
    assert profile_workloads(["kdf"], 1 << 20) == []
    with pytest.raises(ValueError, match="kdf"):
        parse_profiles("nope")


class ScriptedOpens:
    """A backend whose mounts take the seconds it is given (recorded as the base records its
    steps), so that time_open's choice is seen without a volume."""

    def __init__(self, mount_seconds: list[float]) -> None:
        self.mount_seconds = mount_seconds
        self.calls: list[str] = []

    def create(self, target: Target, workdir: Path) -> SimpleNamespace:
        self.calls.append("create")
        return SimpleNamespace(timings={"create": 0.5})

    def mount(self, volume: SimpleNamespace) -> None:
        self.calls.append("mount")
        volume.timings["mount"] = self.mount_seconds.pop(0)

    def unmount(self, volume: SimpleNamespace) -> None:
        self.calls.append("unmount")

    def destroy(self, volume: SimpleNamespace) -> None:
        self.calls.append("destroy")

    def kdf_label(self, volume: SimpleNamespace) -> str:
        return "scripted"


def test_the_faster_of_the_timed_opens_counts_and_the_first_mount_is_not_timed(tmp_path: Path) -> None:
    """An open slowed by other work on the machine does not make the default look no slower."""
    backend = ScriptedOpens([9.0, 0.8, 0.3])  # the first mount follows create: not an open timed
    setting = kdf.time_open(backend, Target("container", tmp_path, 1 << 20), tmp_path / "kdf")  # type: ignore[arg-type]
    assert kdf.TIMED_OPENS == 2
    assert setting == KdfSetting("scripted", 0.5, 0.3)
    assert backend.calls == ["create", "mount", "unmount", "mount", "unmount", "mount", "destroy"]
