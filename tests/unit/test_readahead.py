"""The read-ahead of a store below a stacked volume during random read rounds (engines/readahead.py):
which rounds limit it, on which devices, that it is set before the file is opened and restored
after the round, in both engines; on a scripted /sys/block (no root, no device touched)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_encperf import host
from pytest_encperf.backends import BackendSpec, Volume, make_backend
from pytest_encperf.engines import fio, readahead
from pytest_encperf.engines.fio import FioEngine
from pytest_encperf.engines.native import NativeEngine
from pytest_encperf.engines.observe import Observe
from pytest_encperf.engines.readahead import (
    ROUND_READAHEAD_KB,
    limits_readahead,
    round_readahead_limited,
    setting,
    store_readahead_limited,
)
from pytest_encperf.model import Measurement
from pytest_encperf.mountedvolume import MountedVolume
from pytest_encperf.targets import Target
from pytest_encperf.workloads import (
    CDM,
    DD,
    DRAINED_DEFINITION_SUFFIX,
    LIMITED_DEFINITION_SUFFIX,
    ROUND_DEFINITION,
    SMALLFILES,
    MiB,
    Workload,
)

RND_READ = next(w for w in CDM if w.name == "RND4K-Q1T1-read")
RND_READ_Q32 = next(w for w in CDM if w.name == "RND4K-Q32T1-read")
SEQ_READ = next(w for w in CDM if w.name == "SEQ1M-Q1T1-read")
RND_WRITE = next(w for w in CDM if w.name == "RND4K-Q1T1-write")
LIMITED = ROUND_DEFINITION + LIMITED_DEFINITION_SUFFIX


def fake_device(sys_block: Path, name: str, kb: str = "128", loop: bool = True) -> Path:
    """A device in a scripted /sys/block: its read_ahead_kb file (and loop/ for a loop device)."""
    (sys_block / name / "queue").mkdir(parents=True)
    if loop:
        (sys_block / name / "loop").mkdir()
    path = sys_block / name / "queue" / "read_ahead_kb"
    path.write_text(f"{kb}\n")
    return path


@pytest.fixture
def sys_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sys-block"
    root.mkdir()
    monkeypatch.setattr(readahead, "SYS_BLOCK", root)
    return root


def test_only_random_reads_of_a_block_workload_limit_the_store_below() -> None:
    assert limits_readahead(RND_READ) and limits_readahead(RND_READ_Q32)
    assert not limits_readahead(SEQ_READ) and not limits_readahead(RND_WRITE)
    assert not limits_readahead(SMALLFILES[0]) and not any(limits_readahead(w) for w in DD)
    job = Workload("mine", "fio-job", 4096, job=(("rw", "randread"),))
    assert not limits_readahead(job)  # the user's own fio job keeps its own options


def test_a_loop_device_reads_ahead_one_page_inside_and_its_own_setting_after(sys_block: Path) -> None:
    first, second = fake_device(sys_block, "loop7"), fake_device(sys_block, "loop12", "512")
    with store_readahead_limited(("loop7", "loop12")) as limited:
        assert limited
        assert first.read_text() == second.read_text() == f"{ROUND_READAHEAD_KB}\n"
    assert first.read_text().strip() == "128" and second.read_text().strip() == "512"


def test_the_engines_round_wrapper_limits_the_observed_store_only_for_a_random_read(sys_block: Path) -> None:
    """round_readahead_limited, what both engines wrap a block round in: the volume's store
    devices (Observe.store_devices) for a round that limits them (limits_readahead), else none."""
    device = fake_device(sys_block, "loop7")
    observe = Observe(store_below=True, store_devices=("loop7",))
    with round_readahead_limited(RND_READ, observe) as limited:
        assert limited and device.read_text() == f"{ROUND_READAHEAD_KB}\n"
    assert device.read_text().strip() == "128"
    for workload, seen in ((SEQ_READ, observe), (RND_WRITE, observe), (RND_READ, Observe())):
        with round_readahead_limited(workload, seen) as limited:
            assert not limited and device.read_text().strip() == "128"


def test_a_device_that_reads_ahead_less_keeps_its_setting(sys_block: Path) -> None:
    none, one = fake_device(sys_block, "loop5", "0"), fake_device(sys_block, "loop6", "4")
    with store_readahead_limited(("loop5", "loop6")) as limited:
        assert limited and none.read_text().strip() == "0" and one.read_text().strip() == "4"
    assert none.read_text().strip() == "0" and one.read_text().strip() == "4"


def test_the_setting_is_restored_when_the_round_fails(sys_block: Path) -> None:
    path = fake_device(sys_block, "loop3")
    with pytest.raises(OSError, match="round failed"), store_readahead_limited(("loop3",)):
        assert path.read_text() == f"{ROUND_READAHEAD_KB}\n"
        raise OSError("round failed")
    assert path.read_text().strip() == "128"


@pytest.mark.parametrize("name", ["sda", "nvme0n1", "dm-0", "loop", "loop1/../sda", "../loop1", "loop1x"])
def test_only_a_loop_device_is_touched(sys_block: Path, name: str) -> None:
    fake_device(sys_block, "sda", loop=False)
    fake_device(sys_block, "loop1")
    assert setting(name) is None
    with store_readahead_limited((name,)) as limited:
        assert not limited
    assert (sys_block / "sda" / "queue" / "read_ahead_kb").read_text().strip() == "128"
    assert (sys_block / "loop1" / "queue" / "read_ahead_kb").read_text().strip() == "128"


def test_a_name_that_is_no_loop_device_is_left_alone(sys_block: Path) -> None:
    # a loopN name whose sysfs entry says it is not a loop device (no loop/ directory)
    path = fake_device(sys_block, "loop9", loop=False)
    with store_readahead_limited(("loop9",)) as limited:
        assert not limited and path.read_text().strip() == "128"


def test_no_devices_no_limit_and_a_setting_that_cannot_be_written_is_skipped(sys_block: Path) -> None:
    with store_readahead_limited(()) as limited:
        assert not limited
    good = fake_device(sys_block, "loop2")
    (sys_block / "loop4" / "queue" / "read_ahead_kb").mkdir(parents=True)  # reading it fails
    (sys_block / "loop4" / "loop").mkdir()
    fake_device(sys_block, "loop8", "not a number")
    with store_readahead_limited(("loop4", "loop8", "loop2")) as limited:
        assert not limited  # the round reads as before on loop4 and says it was not limited
        assert good.read_text() == f"{ROUND_READAHEAD_KB}\n"
    assert good.read_text().strip() == "128"


# ---------------------------------------------------------------- which devices a volume names


def volume_of(spec: str, kind: str, tmp_path: Path, stacked: bool = True) -> Volume:
    device = Path("/dev/sdz") if kind == "partition" else Path("/dev/loop7")
    target = Target(kind, tmp_path, 64 * MiB, device=device if kind == "partition" else None)
    volume = Volume(make_backend(BackendSpec.parse(spec)), target, tmp_path)
    if kind != "directory":
        volume.device = device
    if stacked:
        volume.state["root"] = str(tmp_path / "mnt")
    return volume


@pytest.mark.parametrize("spec", ["gocryptfs", "encfs", "cryfs", "securefs", "ecryptfs"])
def test_a_stacked_store_on_the_containers_loop_device_names_that_device(spec: str, tmp_path: Path) -> None:
    volume = volume_of(spec, "container", tmp_path)
    assert volume.backend.store_devices(volume) == (Path("/dev/loop7"),)


@pytest.mark.parametrize(
    ("spec", "kind", "stacked"),
    [
        ("gocryptfs", "directory", True),  # the user's disk
        ("ecryptfs", "partition", True),  # the user's partition
        ("qemu-luks", "container", False),  # its image lies on the disk holding the run's directory
        ("bitlocker:image=/tmp/x.img", "container", False),
        ("plain", "container", False),  # no store below
        ("luks2", "container", False),
    ],
)
def test_no_device_of_the_user_and_no_image_on_the_users_disk_is_named(
    spec: str, kind: str, stacked: bool, tmp_path: Path
) -> None:
    volume = volume_of(spec, kind, tmp_path, stacked)
    assert volume.backend.store_devices(volume) == ()


def test_the_volume_hands_the_engines_its_store_devices_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "devices_below", lambda name: [])
    monkeypatch.setattr(host, "loop_direct_io", lambda device: True)
    stacked = volume_of("gocryptfs", "container", tmp_path)
    observe = MountedVolume(stacked.backend, stacked, tmp_path / "data").observe()
    assert observe.store_below and observe.store_devices == ("loop7",) and observe.devices == ("loop7",)
    image = volume_of("qemu-luks", "container", tmp_path, stacked=False)
    observe = MountedVolume(image.backend, image, tmp_path / "data").observe()
    assert observe.store_below and observe.store_devices == ()


# ---------------------------------------------------------------- both engines


@pytest.fixture
def test_file(tmp_path: Path) -> Path:
    return NativeEngine().prepare(tmp_path, MiB)


@pytest.fixture
def drops(monkeypatch: pytest.MonkeyPatch, sys_block: Path) -> Iterator[list[str]]:
    """The loop7 setting at each page drop of a round (no system-wide drop in a unit test)."""
    seen: list[str] = []
    path = fake_device(sys_block, "loop7")

    def drop(_path: Path | None = None) -> bool:
        seen.append(path.read_text().strip())
        return True

    monkeypatch.setattr(host, "drop_page_cache", drop)
    yield seen
    assert path.read_text().strip() == "128"  # restored after every round


STORE = Observe(store_below=True, store_devices=("loop7",))


def test_native_random_read_rounds_open_the_file_with_the_store_read_ahead_limited(
    test_file: Path, drops: list[str], sys_block: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setting_file = sys_block / "loop7" / "queue" / "read_ahead_kb"
    at_open: list[str] = []
    real_open = os.open

    def spy(path: Any, flags: int, *args: Any) -> int:
        if Path(path) == test_file:
            at_open.append(setting_file.read_text().strip())
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", spy)
    m = NativeEngine().run(RND_READ, test_file, runtime=0.05, direct=False, observe=STORE)
    assert m.round_definition == LIMITED
    assert at_open and set(at_open) == {str(ROUND_READAHEAD_KB)} and drops == [str(ROUND_READAHEAD_KB)]
    at_open.clear()
    for workload in (SEQ_READ, RND_WRITE):
        m = NativeEngine().run(workload, test_file, runtime=0.05, direct=False, observe=STORE)
        assert m.round_definition == ROUND_DEFINITION and set(at_open) == {"128"}
    # a volume without a store device of ours: as before
    assert NativeEngine().run(RND_READ, test_file, runtime=0.05, direct=False).round_definition == (
        ROUND_DEFINITION
    )
    m = NativeEngine().run(RND_READ_Q32, test_file, runtime=0.05, direct=False, observe=STORE)
    assert m.round_definition == LIMITED  # 32 reads out, but one pass (a store below): no pass end


def test_fio_random_read_rounds_run_fio_with_the_store_read_ahead_limited(
    test_file: Path, drops: list[str], sys_block: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setting_file = sys_block / "loop7" / "queue" / "read_ahead_kb"
    runs: list[tuple[str, str]] = []

    def stand_in(args: list[str], **kwargs: Any) -> Measurement:
        runs.append((setting_file.read_text().strip(), kwargs["round_definition"]))
        return Measurement(
            engine="fio",
            engine_version="3.33",
            bytes=4096,
            seconds=1.0,
            ios=1,
            lat_p50_us=1.0,
            lat_p99_us=1.0,
            lat_p999_us=1.0,
            cpu_seconds=0.0,
            io_mode=kwargs["io_mode"],
            round_definition=kwargs["round_definition"],
        )

    monkeypatch.setattr(fio, "run_fio", stand_in)
    monkeypatch.setattr(fio, "creatable", lambda: True)  # io_uring: more than one read in flight
    engine = FioEngine()
    engine._version = "3.33"
    engine.run(RND_READ, test_file, runtime=0.05, direct=False, observe=STORE)
    engine.run(SEQ_READ, test_file, runtime=0.05, direct=False, observe=STORE)
    engine.run(RND_READ, test_file, runtime=0.05, direct=False)
    engine.run(RND_READ_Q32, test_file, runtime=0.05, direct=False, observe=STORE)
    engine.run(RND_READ_Q32, test_file, runtime=0.05, direct=False)
    assert runs == [
        (str(ROUND_READAHEAD_KB), LIMITED),
        ("128", ROUND_DEFINITION),
        ("128", ROUND_DEFINITION),
        (str(ROUND_READAHEAD_KB), LIMITED),  # 32 reads out, but one pass (a store below): no pass end
        ("128", ROUND_DEFINITION + DRAINED_DEFINITION_SUFFIX),  # no store below: pass after pass
    ]
    assert drops == [
        str(ROUND_READAHEAD_KB),
        "128",
        "128",
        str(ROUND_READAHEAD_KB),
        "128",
    ]  # inside the limit
