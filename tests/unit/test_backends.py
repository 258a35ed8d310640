"""BackendBase: the availability check before create() and mount(), undo when a step fails,
the parameter table, and the target helpers every backend shares."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

from pytest_encperf import cli, host, inplace, kdf, mounting
from pytest_encperf.backends import (
    BackendBase,
    BackendError,
    BackendSpec,
    BackendUnavailable,
    Param,
    Volume,
    make_backend,
    register,
    unregister,
)
from pytest_encperf.mountedvolume import Unavailable, open_volume
from pytest_encperf.parsing import parse_bool, parse_choice, parse_int
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB


class Steps(BackendBase):
    """Records the steps the base runs; ``missing`` is what requirements() reports."""

    params = (
        Param("fail", parse_choice(("none", "build", "open", "interrupt")), "none", "which step fails"),
        Param("depth", parse_int(1, 64), 8, "a number"),
        Param("fast", parse_bool, False, "a switch"),
    )
    missing: list[str] = []

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self.log: list[str] = []

    def requirements(self, target: Target) -> list[str]:
        return list(self.missing)

    def partition_refusal(self, target: Target) -> str | None:
        return None

    def build(self, volume: Volume) -> None:
        self.log.append("build")
        volume.created.push("release the first", lambda: self.log.append("released first"))
        if self.options["fail"] == "build":
            raise host.HostError("tool exited with status 1")
        if self.options["fail"] == "interrupt":
            raise KeyboardInterrupt
        volume.created.push("release the second", lambda: self.log.append("released second"))

    def open(self, volume: Volume) -> Path:
        self.log.append("open")
        volume.mounted.push("unmount", lambda: self.log.append("unmounted"))
        if self.options["fail"] == "open":
            raise OSError(5, "Input/output error")
        return volume.workdir

    def describe(self, volume: Volume) -> dict[str, object]:
        return {}


def steps(spec: str = "steps") -> Steps:
    return Steps(BackendSpec.parse(spec))


@pytest.fixture
def target(tmp_path: Path) -> Target:
    return Target("directory", tmp_path, 1 << 20)


def test_create_refuses_an_unavailable_backend_before_any_step(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = steps()
    monkeypatch.setattr(
        Steps, "missing", ["steps: needs frobnicate (Debian package frob)", "steps: needs root"]
    )
    with pytest.raises(BackendUnavailable) as refused:
        backend.create(target, tmp_path / "vol")
    assert str(refused.value) == (
        "steps: cannot run here: steps: needs frobnicate (Debian package frob); steps: needs root"
    )
    assert isinstance(refused.value, BackendError)
    assert backend.log == [] and not (tmp_path / "vol").exists()


def test_create_refuses_what_the_placement_rules_refuse(tmp_path: Path) -> None:
    class Elsewhere(Steps):
        def partition_refusal(self, target: Target) -> str | None:
            return "its data lives elsewhere"

    backend = Elsewhere(BackendSpec("elsewhere"))
    partition = Target("partition", tmp_path, 1 << 20, device=Path("/dev/encperf-none"))
    with pytest.raises(BackendUnavailable, match="elsewhere: refused on the partition target: its data"):
        backend.create(partition, tmp_path / "vol")
    assert backend.log == []


def test_whether_a_backend_can_run_here_is_decided_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One decision (unavailable_reasons: the backend's problems and the placement rules), asked
    by the volumes, create(), the kdf and in-place measurements and ``encperf backends``."""

    class Elsewhere(Steps):
        kdf_settings = ("default",)

        def partition_refusal(self, target: Target) -> str | None:
            return "its data lives elsewhere"

    monkeypatch.setattr(Steps, "missing", ["elsewhere: needs frobnicate"])
    partition = Target("partition", tmp_path, 1 << 20, device=Path("/dev/encperf-none"))
    spec = BackendSpec("elsewhere")
    reasons = Elsewhere(spec).unavailable_reasons(partition)
    assert reasons[-2:] == [
        "elsewhere: needs frobnicate",
        "elsewhere: refused on the partition target: its data lives elsewhere",
    ]
    said = "; ".join(reasons)
    register("elsewhere", Elsewhere)
    try:
        with pytest.raises(Unavailable) as skipped:
            open_volume(make_backend(spec), partition, tmp_path / "volume")
        assert str(skipped.value) == said
        with pytest.raises(BackendUnavailable) as refused:
            make_backend(spec).create(partition, tmp_path / "created")
        assert str(refused.value) == f"elsewhere: cannot run here: {said}"
        with pytest.raises(kdf.KdfUnavailable) as no_kdf:
            kdf.measure(spec, partition, tmp_path / "kdf")
        assert str(no_kdf.value) == said
        with pytest.raises(inplace.InplaceUnavailable) as no_inplace:
            inplace.measure(spec, partition, tmp_path / "inplace", 1 << 20)
        assert str(no_inplace.value) == said
        directory = Target("directory", tmp_path, container_size(256 * MiB))
        assert cli.run_backends(argparse.Namespace(name="elsewhere", target="directory", dir=tmp_path)) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("elsewhere"))
        assert row.split(None, 2)[1:] == ["no", "; ".join(make_backend(spec).unavailable_reasons(directory))]
    finally:
        unregister("elsewhere")


def test_mount_refuses_when_the_machine_lost_what_the_backend_needs(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = steps()
    volume = backend.create(target, tmp_path)
    monkeypatch.setattr(Steps, "missing", ["steps: needs FUSE (/dev/fuse missing)"])
    with pytest.raises(
        BackendUnavailable, match=r"steps: cannot run here: steps: needs FUSE \(/dev/fuse missing\)"
    ):
        backend.mount(volume)
    assert backend.log == ["build"] and volume.data_dir is None
    monkeypatch.setattr(Steps, "missing", [])
    assert backend.mount(volume) == tmp_path / "data" and (tmp_path / "data").is_dir()
    assert backend.log == ["build", "open"]
    backend.destroy(volume)
    assert backend.log[-3:] == ["unmounted", "released second", "released first"]


def test_a_failing_create_step_releases_what_exists_and_names_spec_and_step(
    target: Target, tmp_path: Path
) -> None:
    backend = steps("steps:fail=build")
    with pytest.raises(BackendError) as failed:
        backend.create(target, tmp_path)
    assert str(failed.value) == "steps:fail=build: create: tool exited with status 1"
    assert backend.log == ["build", "released first"]


def test_an_interrupted_create_releases_what_exists_and_goes_on(target: Target, tmp_path: Path) -> None:
    backend = steps("steps:fail=interrupt")
    with pytest.raises(KeyboardInterrupt):
        backend.create(target, tmp_path)
    assert backend.log == ["build", "released first"]


def test_a_failing_mount_step_unmounts_and_keeps_the_volume(target: Target, tmp_path: Path) -> None:
    backend = steps("steps:fail=open")
    volume = backend.create(target, tmp_path)
    with pytest.raises(BackendError, match=r"^steps:fail=open: mount: \[Errno 5\] Input/output error$"):
        backend.mount(volume)
    assert backend.log == ["build", "open", "unmounted"]
    assert len(volume.created) == 2, "a failed mount must not destroy the volume"
    backend.destroy(volume)
    backend.destroy(volume)  # idempotent
    assert backend.log[-2:] == ["released second", "released first"]


def test_parameters_get_their_defaults_and_parsed_values() -> None:
    assert steps().options == {"fail": "none", "depth": 8, "fast": False}
    assert steps("steps:depth=64,fast=yes").options == {"fail": "none", "depth": 64, "fast": True}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("steps:speed=1", "backend 'steps' has no parameter 'speed' (accepted: depth, fail, fast)"),
        ("steps:depth=65", "steps: depth: bad value '65': expected a whole number from 1 to 64"),
        ("steps:depth=many", "steps: depth: bad value 'many': expected a whole number from 1 to 64"),
        (
            "steps:fast=maybe",
            "steps: fast: bad switch value 'maybe': expected 1/true/yes/on or 0/false/no/off",
        ),
        ("steps:fail=later", "steps: fail: bad value 'later': expected one of none, build, open, interrupt"),
    ],
)
def test_bad_parameters_name_backend_key_and_accepted_forms(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        steps(spec)
    assert str(refused.value) == message


def test_a_plugin_backend_declares_its_parameters_in_its_param_table() -> None:
    class Tagged(BackendBase):
        params = (Param("tag", help="a label"),)

    assert Tagged(BackendSpec.parse("tagged:tag=x")).options == {"tag": "x"}
    with pytest.raises(ValueError, match="has no parameter 'other' \\(accepted: tag\\)"):
        Tagged(BackendSpec.parse("tagged:other=x"))


def test_the_spec_text_stays_the_identity_of_results() -> None:
    backend = make_backend(BackendSpec.parse("gocryptfs:scryptn=12,aessiv=yes"))
    assert str(backend.spec) == "gocryptfs:scryptn=12,aessiv=yes"  # not normalised to the parsed values
    assert backend.options["aessiv"] is True and backend.options["scryptn"] == 12


def test_create_and_mount_time_their_steps_without_the_checks(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = steps()
    slow_checks = backend.requirements
    checks: list[float] = []  # the seconds each check took

    def requirements(target: Target) -> list[str]:
        started = time.perf_counter()
        time.sleep(0.2)  # a slow availability check (modprobe -n, dmsetup targets)
        found = slow_checks(target)
        checks.append(time.perf_counter() - started)
        return found

    monkeypatch.setattr(backend, "requirements", requirements)
    walls = {}
    started = time.perf_counter()
    volume = backend.create(target, tmp_path)
    walls["create"], checked_in_create = time.perf_counter() - started, sum(checks)
    started = time.perf_counter()
    backend.mount(volume)
    walls["mount"], checked_in_mount = time.perf_counter() - started, sum(checks) - checked_in_create
    assert checked_in_create > 0  # create checks first: its timing must leave that out
    assert set(volume.timings) == {"create", "mount"}
    # each step's timing is its wall time less its checks (not a bound on the step's own speed: a
    # busy machine, such as the suite's other workers, may make the step itself slow)
    checked = {"create": checked_in_create, "mount": checked_in_mount}
    for step, seconds in volume.timings.items():
        assert 0 < seconds <= walls[step] - checked[step], step
    backend.destroy(volume)


def test_target_helpers_on_a_directory_target(target: Target, tmp_path: Path) -> None:
    backend = steps()
    volume = Volume(backend, target, tmp_path)
    assert backend.target_device(volume) is None and backend.ext4_on_target(volume) is None
    assert backend.mount_target(volume) == tmp_path
    assert volume.state == {} and len(volume.created) == 0 and len(volume.mounted) == 0
    assert backend.describe_target(volume, under=" (under the store)") == {
        "filesystem": mounting.filesystem_type(tmp_path) + " (under the store)"
    }


def test_target_device_of_a_partition_is_the_named_device_untouched(tmp_path: Path) -> None:
    backend = steps()
    partition = Target("partition", tmp_path, 1 << 20, device=Path("/dev/encperf-none"))
    volume = Volume(backend, partition, tmp_path)
    assert backend.target_device(volume) == Path("/dev/encperf-none")
    assert volume.device == Path("/dev/encperf-none") and volume.loop_direct_io is None
    assert volume.state == {} and len(volume.created) == 0


def test_every_registered_backend_declares_its_parameters_in_one_table() -> None:
    from pytest_encperf.backends import REGISTRY, backend_class

    for name in REGISTRY:
        cls = backend_class(name)
        assert "accepted_params" not in vars(cls), f"{name}: parameters outside the table"
        names = [param.name for param in cls.params]
        assert len(names) == len(set(names)), f"{name}: a parameter declared twice"
        assert all(param.help for param in cls.params), f"{name}: a parameter without help"
