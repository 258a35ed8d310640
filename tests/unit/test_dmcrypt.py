"""dm-crypt backends without device-mapper: exact cryptsetup command lines (recording stand-in),
secret handling, parameter checks and problems()."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_encperf import host, resources
from pytest_encperf.backends import (
    BackendError,
    BackendSpec,
    Volume,
    dmcrypt,
    make_backend,
    parse_backend_list,
)
from pytest_encperf.resources import Cleanup, Resource
from pytest_encperf.targets import Target


def test_dm_plain_cascade_of_more_than_three_or_an_empty_layer_is_refused() -> None:
    for cipher in ("a-xts-plain64+b-xts-plain64+c-xts-plain64+d-xts-plain64", "aes-xts-plain64+"):
        with pytest.raises(ValueError, match="up to 3 joined by"):
            make_backend(BackendSpec.parse(f"dm-plain:cipher={cipher}"))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("luks1:sector-size=4096", "luks1: sector-size needs LUKS2"),
        ("luks1:integrity=hmac-sha256", "luks1: integrity needs LUKS2"),
        (
            "luks2:sector-size=3000",
            "luks2: sector-size: bad value '3000': expected one of 512, 1024, 2048, 4096",
        ),
        (
            "luks2:key-size=big",
            "luks2: key-size: bad value 'big': expected a whole number from 8 to 4096, a multiple of 8",
        ),
        ("luks2:no-workqueue=maybe", "luks2: no-workqueue: bad switch value 'maybe': expected 1/true/yes/on"),
        ("luks2:pbkdf=argon2id", "has no parameter 'pbkdf'"),
        (
            "dm-plain:key-size=1000",
            "dm-plain: key-size: bad value '1000': expected a whole number from 8 to 512, a multiple of 8",
        ),
        ("tcrypt:image=/x", "tcrypt: give password-file"),
        ("tcrypt:password-file=/p", "give exactly one of image=FILE or device="),
        (
            "tcrypt:image=/x,password-file=/p,veracrypt-pim=high",
            "tcrypt: veracrypt-pim: bad value 'high': expected a whole number from 0 to 2147468",
        ),
        ("bitlk:image=/x", "bitlk: give exactly one of password-file"),
    ],
)
def test_bad_parameters_name_the_rule(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_backend_list(spec)


def test_auto_includes_dm_crypt_family_but_not_aliases_or_existing_volumes() -> None:
    names = [str(s) for s in parse_backend_list("auto")]
    assert {"luks2", "luks1", "dm-plain"} <= set(names)
    assert not {"luks", "tcrypt", "bitlk", "plain"} & set(names)


def test_problems_name_missing_device_mapper_cryptsetup_and_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    has_dm = "device-mapper" in Path("/proc/misc").read_text()
    reasons = dmcrypt.device_mapper_problems()
    no_dm = "cryptsetup: kernel has no device-mapper (device-mapper not in /proc/misc)"
    assert (no_dm in reasons) is not has_dm
    monkeypatch.setattr(host, "is_root", lambda: False)
    monkeypatch.setattr(host, "missing_tools", lambda *names: [n for n in names if n != "mkfs.ext4"])
    reasons = dmcrypt.device_mapper_problems()
    assert "cryptsetup: needs root (device-mapper, losetup, mount)" in reasons
    assert "cryptsetup: not installed (Debian package cryptsetup-bin)" in reasons


def test_problems_name_missing_dm_crypt_target(monkeypatch: pytest.MonkeyPatch) -> None:
    real_read_text = Path.read_text

    def fake_read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/misc":
            return "236 device-mapper\n"
        if str(self) == "/proc/modules":
            return "loop 32768 0 - Live 0x0\n"
        return real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    def fake_run(argv: list[str], **kwargs: object) -> str:
        if argv[:2] == ["dmsetup", "targets"]:
            return "striped v1.6.0\nlinear v1.4.0\n"
        raise host.HostError(f"{argv[0]}: exit 1: not found")

    monkeypatch.setattr(Path, "read_text", fake_read_text)
    monkeypatch.setattr(host, "run", fake_run)
    monkeypatch.setattr(host, "missing_tools", lambda *names: [])
    monkeypatch.setattr(host, "is_root", lambda: True)
    assert dmcrypt.device_mapper_problems() == [
        "cryptsetup: kernel has no dm-crypt target (crypt not in dmsetup targets, no dm_crypt module)"
    ]


def test_directory_target_is_refused() -> None:
    backend = make_backend(BackendSpec("luks2"))
    reasons = backend.problems(Target("directory", Path("/var/tmp"), 1 << 20))
    assert "luks2: needs a block device (--encperf-target=container or partition)" in reasons


def test_tcrypt_device_needs_the_allowed_partition(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("x")
    backend = make_backend(BackendSpec.parse(f"tcrypt:device=/dev/sdz9,password-file={password}"))
    reasons = backend.problems(Target("container", tmp_path, 1 << 20))
    assert any("--encperf-allow-destroy=/dev/sdz9" in r for r in reasons)
    allowed = Target("partition", tmp_path, 1 << 20, device=Path("/dev/sdz9"))
    assert not any("allow-destroy" in r for r in backend.problems(allowed))
    # create() checks again, whether or not its caller asked problems() first
    volume = Volume(backend, Target("container", tmp_path, 1 << 20), tmp_path)
    with pytest.raises(BackendError, match="device=/dev/sdz9 is overwritten"):
        backend.prepare_device(volume)
    assert backend.prepare_device(Volume(backend, allowed, tmp_path)) == Path("/dev/sdz9")


def test_cleanup_dm_records_resource_and_is_a_no_op_when_absent() -> None:
    cleanup = Cleanup()
    name = resources.dm_name(os.getpid(), resources.run_token(), 999999)  # never mapped
    cleanup.dm(name)
    assert cleanup.resources == [Resource("dm", name)]
    cleanup.release()
    assert len(cleanup) == 0


def test_luks2_in_place_encryption_command_line() -> None:
    """cryptsetup reencrypt --encrypt with 32 MiB header room, the spec's cipher, the benchmark's
    fast key derivation, the key on stdin; LUKS1 and integrity volumes are filled instead."""
    backend = make_backend(BackendSpec.parse("luks2:cipher=aes-xts-plain64,key-size=512"))
    assert isinstance(backend, dmcrypt.LuksBackend)
    assert backend.in_place_method() == "cryptsetup reencrypt --encrypt"
    assert backend.reencrypt_command(Path("/dev/loop99")) == [
        "cryptsetup", "reencrypt", "--encrypt", "--batch-mode", "--type", "luks2",
        "--reduce-device-size", "32M", "--cipher", "aes-xts-plain64", "--key-size", "512",
        "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", "-", "/dev/loop99",
    ]  # fmt: skip
    default = make_backend(BackendSpec.parse("luks2:kdf=default"))
    assert isinstance(default, dmcrypt.LuksBackend)
    assert "--pbkdf" not in default.reencrypt_command(Path("/dev/loop99"))
    assert make_backend(BackendSpec("luks1")).in_place_method() == ""
    assert make_backend(BackendSpec.parse("luks2:integrity=hmac-sha256")).in_place_method() == ""


def test_in_place_encryption_runs_cryptsetup_in_the_volumes_own_work_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """cryptsetup reencrypt --encrypt writes its temporary LUKS2 header into its working
    directory: it runs in the volume's private work directory, never where the user started
    (a read-only checkout failed --encperf-inplace; a header there is theirs to find)."""
    started_in = tmp_path / "users-checkout"
    started_in.mkdir()
    started_in.chmod(0o555)
    monkeypatch.chdir(started_in)
    backend = make_backend(BackendSpec("luks2"))
    assert isinstance(backend, dmcrypt.LuksBackend)
    ran: list[tuple[list[str], Path | None]] = []

    def record(argv: list[str], **kwargs: object) -> str:
        cwd = kwargs.get("cwd")
        ran.append((list(argv), Path(cwd) if isinstance(cwd, (str, Path)) else None))
        return ""

    monkeypatch.setattr(host, "run", record)
    monkeypatch.setattr(backend, "target_device", lambda volume: Path("/dev/loop99"))
    monkeypatch.setattr(dmcrypt, "device_size", lambda device: 64 << 20)
    monkeypatch.setattr(dmcrypt, "make_ext4", lambda device, **kwargs: None)
    filesystem = tmp_path / "filesystem"
    filesystem.mkdir()
    monkeypatch.setattr(dmcrypt, "mount_ext4", lambda volume, device: filesystem)
    workdir = tmp_path / "run" / "03-inplace-luks2"
    workdir.parent.mkdir()
    volume, size, _ = backend.encrypt_in_place(
        Target("container", tmp_path, 64 << 20), workdir, lambda data: (data / "f").write_bytes(b"x")
    )
    (argv, cwd), *_ = [(argv, cwd) for argv, cwd in ran if argv[:2] == ["cryptsetup", "reencrypt"]]
    assert argv == backend.reencrypt_command(Path("/dev/loop99"))
    assert cwd == volume.workdir == workdir != Path(os.getcwd())
    assert (workdir.stat().st_mode & 0o777) == 0o700  # ours, private: the header is nobody else's
    assert size == (64 << 20) - dmcrypt.REDUCE_DEVICE_SIZE


@pytest.mark.parametrize(
    ("modules", "targets", "loadable", "present", "asked"),
    [
        ("dm_crypt 61440 0 - Live 0x0\n", None, None, True, []),  # loaded: no process
        ("loop 40960 0 - Live 0x0\n", "crypt v1.24.0\nlinear v1.4.0\n", None, True, ["dmsetup"]),  # built in
        ("", "linear v1.4.0\n", True, True, ["dmsetup", "modprobe"]),  # loadable
        ("", "linear v1.4.0\n", False, False, ["dmsetup", "modprobe"]),
        (None, None, False, False, ["dmsetup", "modprobe"]),  # no /proc/modules, no dmsetup
    ],
)
def test_a_target_is_present_when_its_module_is_loaded_listed_or_loadable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    modules: str | None,
    targets: str | None,
    loadable: bool | None,
    present: bool,
    asked: list[str],
) -> None:
    """The answer of dmsetup targets, /proc/modules and modprobe -n together (any of them says
    yes), with no process started when the module is loaded."""
    proc_modules = tmp_path / "modules"
    if modules is not None:
        proc_modules.write_text(modules)
    monkeypatch.setattr(dmcrypt, "PROC_MODULES", proc_modules)
    started: list[str] = []

    def run(argv: list[str], **kwargs: object) -> str:
        started.append(argv[0])
        if argv[0] == "dmsetup" and targets is not None:
            return targets
        if argv[0] == "modprobe" and loadable:
            return ""
        raise host.HostError(f"{argv[0]} failed")

    monkeypatch.setattr(host, "run", run)
    assert dmcrypt.dm_target_present("crypt", "dm_crypt") is present
    assert started == asked
