"""VeraCrypt: our volume format against real VeraCrypt images, and the veracrypt CLI's exact
command lines through a recording stand-in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_encperf import host, mountedvolume, resources, trust
from pytest_encperf.backends import BackendSpec, Volume, fusedaemon, make_backend, vcformat, veracrypt
from pytest_encperf.resources import Cleanup, Resource
from pytest_encperf.targets import Target
from tests.helpers.standin import StandIns
from tests.helpers.support import TESTDATA


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    archive = TESTDATA / "tcrypt-images.tar.xz"
    if not archive.exists():
        pytest.skip(f"shared test images missing: {archive}")
    into = tmp_path_factory.mktemp("tcrypt")
    members = ["tcrypt-images/vc_1-sha512-xts-aes", "tcrypt-images/vcpim_1_1234-sha256-xts-aes"]
    subprocess.run(["tar", "-xJf", str(archive), "-C", str(into), *members], check=True)
    return into / "tcrypt-images"


@pytest.mark.parametrize(
    ("image", "password", "hash_name", "pim"),
    [
        ("vc_1-sha512-xts-aes", b"aaaaaaaaaaaa", "SHA-512", None),
        ("vcpim_1_1234-sha256-xts-aes", b"cccccccccccccccccccc", "SHA-256", 1234),
    ],
)
def test_our_parser_decrypts_real_veracrypt_headers(
    images: Path, image: str, password: bytes, hash_name: str, pim: int | None
) -> None:
    raw = (images / image).read_bytes()
    primary = vcformat.decrypt_header(raw[:512], password, hash_name, pim)
    backup_at = len(raw) - vcformat.BACKUP_AREA
    backup = vcformat.decrypt_header(raw[backup_at : backup_at + 512], password, hash_name, pim)
    assert primary.version == 5 and primary.sector_size == 512 and primary.hidden_volume_size == 0
    assert primary.data_offset == vcformat.DATA_OFFSET
    assert primary.volume_size == len(raw) - vcformat.DATA_OFFSET - vcformat.BACKUP_AREA
    assert backup.master_keys == primary.master_keys
    with pytest.raises(vcformat.FormatError, match="no VERA magic"):
        vcformat.decrypt_header(raw[:512], b"wrong", hash_name, pim)


def test_native_backend_opens_with_cryptsetup_tcrypt_veracrypt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = StandIns(tmp_path / "bin")
    tools.add("cryptsetup")
    monkeypatch.setenv("PATH", tools.path_env)
    backend = make_backend(BackendSpec.parse("veracrypt:tool=native,pim=3"))
    workdir = tmp_path / "v"
    workdir.mkdir()
    volume = Volume(backend, Target("container", tmp_path, 1 << 20), workdir)
    volume.device = Path("/dev/loop98")
    assert isinstance(backend, veracrypt.VeracryptBackend)
    backend.open_mapping(volume, volume.created)
    (call,) = tools.calls("cryptsetup")
    assert call.argv == [
        "open", "--type", "tcrypt", "--veracrypt", "--veracrypt-pim", "3", "--hash", "sha512",
        "/dev/loop98", volume.state["dm_name"],
    ]  # fmt: skip
    # the password: random, in memory only, on cryptsetup's stdin
    assert call.stdin == volume.state["password"].decode() + "\n"
    assert list(workdir.iterdir()) == []
    volume.created.release()
    assert "password" not in volume.state, "the password outlived its volume"


@pytest.fixture
def fake_veracrypt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StandIns:
    tools = StandIns(tmp_path / "bin")
    tools.add("veracrypt")
    tools.add("losetup")
    monkeypatch.setenv("PATH", tools.path_env)
    monkeypatch.setattr(veracrypt, "_stdin_support", {})
    return tools


def cli_volume(spec: str, tmp_path: Path) -> tuple[veracrypt.VeracryptBackend, Volume]:
    backend = make_backend(BackendSpec.parse(spec))
    assert isinstance(backend, veracrypt.VeracryptBackend)
    workdir = tmp_path / "vol"
    workdir.mkdir(parents=True)
    volume = Volume(backend, Target("container", tmp_path, 64 << 20), workdir)
    return backend, volume


def test_cli_is_chosen_when_installed(fake_veracrypt: StandIns) -> None:
    assert make_backend(BackendSpec("veracrypt")).tool == "cli"  # type: ignore[attr-defined]


def test_cli_create_and_map_with_password_on_stdin(
    fake_veracrypt: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", "  --stdin  Read password from standard input\n")
    backend, volume = cli_volume("veracrypt:encryption=AES-Twofish-Serpent,hash=SHA-512,pim=5", tmp_path)
    container = backend.cli_create(volume)
    volume.state["container"] = container
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", f"1: {container} /dev/mapper/veracrypt1 - \n")
    device = backend.cli_map(volume, volume.mounted)
    assert device == Path("/dev/mapper/veracrypt1")
    calls = fake_veracrypt.calls("veracrypt")
    password = volume.state["password"].decode()
    create = next(c for c in calls if "--create" in c.argv)
    assert create.argv == [
        "--text", "--non-interactive", "--stdin", "--pim=5", "--keyfiles=",
        "--create", str(container), f"--size={64 << 20}", "--volume-type=normal",
        "--encryption=AES-Twofish-Serpent", "--hash=SHA-512", "--filesystem=none",
        "--random-source=/dev/urandom",
    ]  # fmt: skip
    assert create.stdin == password + "\n"
    mapped = next(c for c in calls if str(container) in c.argv and "--create" not in c.argv)
    assert mapped.argv == [
        "--text", "--non-interactive", "--stdin", "--pim=5", "--keyfiles=",
        "--protect-hidden=no", "--filesystem=none", str(container),
    ]  # fmt: skip
    assert all(password not in " ".join(c.argv) for c in calls)
    assert fake_veracrypt.calls("losetup") == []  # kernel mode: no loop device to fix
    volume.mounted.release()  # dismounts through the CLI
    dismount = fake_veracrypt.calls("veracrypt")[-1]
    assert dismount.argv == ["--text", "--non-interactive", "--dismount", str(container)]


def test_cli_fuse_mode_reattaches_loop_with_direct_io(
    fake_veracrypt: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, volume = cli_volume("veracrypt:mode=fuse", tmp_path)
    volume.state["container"] = container = tmp_path / "c.img"
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", f"1: {container} /dev/loop7 - \n--stdin\n")
    assert backend.cli_map(volume, volume.mounted) == Path("/dev/loop7")
    mapped = next(c for c in fake_veracrypt.calls("veracrypt") if str(container) in c.argv)
    assert "--mount-options=nokernelcrypto" in mapped.argv
    (losetup,) = fake_veracrypt.calls("losetup")
    assert losetup.argv == ["--direct-io=on", "/dev/loop7"]
    volume.mounted.release()
    assert fake_veracrypt.calls("veracrypt")[-1].argv[-2:] == ["--dismount", str(container)]


def test_stdin_support_is_found_in_the_usage_line_on_stderr(
    fake_veracrypt: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    # VeraCrypt 1.26.3's console build: the long help on stdout never names --stdin
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", "Synopsis:\n\nveracrypt [OPTIONS] COMMAND\n")
    monkeypatch.setenv(
        "STANDIN_STDERR_VERACRYPT", "Usage: veracrypt [--non-interactive] [--stdin] [-p <str>]\n"
    )
    assert veracrypt.cli_reads_stdin()
    assert fake_veracrypt.calls("veracrypt")[-1].argv == ["--text", "--help"]


def test_cli_without_stdin_support_is_refused_unless_the_spec_accepts_argv(
    fake_veracrypt: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = Target("container", tmp_path, 64 << 20)
    backend, volume = cli_volume("veracrypt", tmp_path)
    refusal = (
        "veracrypt: this veracrypt has no --stdin and takes the password only in its arguments, "
        "where every local user can read it (/proc/PID/cmdline): pass secret-in-argv=yes to accept"
    )
    assert refusal in backend.problems(target)
    with pytest.raises(host.HostError, match="refusing to pass the password in argv"):
        backend.cli_password(volume)
    backend, volume = cli_volume("veracrypt:secret-in-argv=yes", tmp_path / "accepted")
    assert refusal not in backend.problems(target)
    args, stdin = backend.cli_password(volume)
    password = volume.state["password"].decode()
    assert args == [f"--password={password}"] and stdin == b""
    assert volume.state["secret_in_argv"] is True
    assert backend.describe(volume)["secret_in_argv"] is True
    # an error of that command shows <secret>, not the password
    monkeypatch.setenv("STANDIN_EXIT_VERACRYPT", "1")
    with pytest.raises(host.HostError) as failed:
        backend.run_cli(volume, backend.cli_map_command(tmp_path / "c.img", args), stdin, 10)
    assert password not in str(failed.value) and "--password=<secret>" in str(failed.value)


def test_veracrypt_volume_is_journaled_before_the_map_and_dismounted_by_its_kind(
    fake_veracrypt: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, volume = cli_volume("veracrypt:mode=fuse", tmp_path)
    volume.state["container"] = container = tmp_path / "c.img"
    monkeypatch.setenv("STANDIN_EXIT_VERACRYPT", "1")  # the map fails half-way
    cleanup = Cleanup()
    with pytest.raises(host.HostError):
        backend.cli_map(volume, cleanup)
    # registered before the call: whatever VeraCrypt made before failing is released with it
    assert cleanup.resources == [Resource("veracrypt-volume", str(container))]
    # a dead run's journal may name only a container in its own run directory
    check = resources.KINDS["veracrypt-volume"].check
    scope = trust.RunScope(os.getpid(), (tmp_path,))
    assert check(Resource("veracrypt-volume", "/home/someone/private.hc"), scope) == (
        f"/home/someone/private.hc is outside the run's own directories ({tmp_path}/encperf-{os.getpid()}-*)"
    )
    monkeypatch.setenv("STANDIN_EXIT_VERACRYPT", "0")
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", f"1: {container} /dev/loop7 /tmp/.veracrypt_aux_mnt1\n")
    cleanup.release()
    dismount = fake_veracrypt.calls("veracrypt")[-1]
    assert dismount.argv == ["--text", "--non-interactive", "--dismount", str(container)]
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", "")  # not listed: nothing to dismount
    assert resources.release(Resource("veracrypt-volume", str(container))) == (
        f"veracrypt volume {container}: not mapped any more"
    )


HINT = "runs here (VeraCrypt's own crypto, no device-mapper)"


@pytest.mark.skipif(not Path("/dev/fuse").exists(), reason="mode=fuse needs /dev/fuse here")
def test_kernel_mode_without_device_mapper_names_the_fuse_spec_that_runs(
    fake_veracrypt: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", "  --stdin  Read password from standard input\n")
    monkeypatch.setattr(
        veracrypt, "device_mapper_problems", lambda: ["cryptsetup: kernel has no device-mapper"]
    )
    target = Target("container", tmp_path, 1 << 20)
    fuse_problems = make_backend(BackendSpec.parse("veracrypt:mode=fuse")).problems(target)
    assert fuse_problems == []
    problems = make_backend(BackendSpec("veracrypt")).problems(target)
    assert problems == [
        "veracrypt (kernel mode): kernel has no device-mapper",
        f"veracrypt:mode=fuse {HINT}",
    ]
    # the hint names the user's own spec, switched to mode=fuse
    problems = make_backend(BackendSpec.parse("veracrypt:pim=5,mode=kernel")).problems(target)
    assert f"veracrypt:pim=5,mode=fuse {HINT}" in problems
    # with device-mapper, kernel mode runs: no problems, no hint
    monkeypatch.setattr(veracrypt, "device_mapper_problems", lambda: [])
    assert make_backend(BackendSpec("veracrypt")).problems(target) == []


def test_no_fuse_hint_where_mode_fuse_cannot_run_either(
    fake_veracrypt: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        veracrypt, "device_mapper_problems", lambda: ["cryptsetup: kernel has no device-mapper"]
    )
    target = Target("container", tmp_path, 1 << 20)
    # this veracrypt has no --stdin: mode=fuse is refused as well, so it is not suggested
    assert make_backend(BackendSpec.parse("veracrypt:mode=fuse")).problems(target) != []
    assert not any(HINT in p for p in make_backend(BackendSpec("veracrypt")).problems(target))
    # without /dev/fuse neither
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", "--stdin\n")
    monkeypatch.setattr(veracrypt, "_stdin_support", {})
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: False if str(self) == "/dev/fuse" else real_exists(self))
    problems = make_backend(BackendSpec("veracrypt")).problems(target)
    assert problems == ["veracrypt (kernel mode): kernel has no device-mapper"]


def test_fuse_mode_attributes_veracrypts_forked_daemon(
    fake_veracrypt: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VeraCrypt forks its FUSE daemon (it carries the command's arguments, the container
    among them): it is found after the map, its CPU counts in the daemon column, and it is
    forgotten when the volume is dismounted."""
    backend, volume = cli_volume("veracrypt:mode=fuse", tmp_path)
    volume.state["container"] = container = tmp_path / "c.img"
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", f"1: {container} /dev/loop7 - \n--stdin\n")
    daemon = subprocess.Popen(["sleep", "60"])
    asked: list[tuple[str, int, str | None]] = []

    def found(argument: str, since: int, executable: str | None = None) -> list[int]:
        asked.append((argument, since, executable))
        return [daemon.pid]

    monkeypatch.setattr(veracrypt, "foreign_daemon_pids", found)
    before = fusedaemon.boot_ticks()
    try:
        backend.cli_map(volume, volume.mounted)
        assert asked and asked[0][0] == str(container) and asked[0][1] >= before
        assert asked[0][2] == "veracrypt"  # only a process running the program counts
        assert volume.foreign_daemons == [daemon.pid]
        mounted_volume = mountedvolume.MountedVolume(backend, volume, tmp_path)
        assert mounted_volume.daemon_pids == (daemon.pid,)
        volume.mounted.release()
        assert volume.foreign_daemons == [] and mounted_volume.daemon_pids == ()
    finally:
        daemon.kill()
        daemon.wait()
    # kernel mode: VeraCrypt's mapping is device-mapper, no daemon to attribute
    asked.clear()
    backend, volume = cli_volume("veracrypt", tmp_path / "kernel")
    volume.state["container"] = container
    backend.cli_map(volume, volume.mounted)
    assert asked == [] and volume.foreign_daemons == []
    volume.mounted.release()


@pytest.mark.parametrize(("kdf", "pim_flag"), [("fast", "--pim=1"), ("default", "--pim=0")])
def test_cli_kdf_setting_reaches_create_and_map(
    fake_veracrypt: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kdf: str, pim_flag: str
) -> None:
    """kdf=default: VeraCrypt's own PIM (0), never the benchmark's PIM 1; the password on stdin."""
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", "  --stdin  Read password from standard input\n")
    backend, volume = cli_volume(f"veracrypt:kdf={kdf}", tmp_path)
    container = backend.cli_create(volume)
    volume.state["container"] = container
    monkeypatch.setenv("STANDIN_STDOUT_VERACRYPT", f"1: {container} /dev/mapper/veracrypt1 - \n")
    backend.cli_map(volume, volume.mounted)
    calls = [c for c in fake_veracrypt.calls("veracrypt") if str(container) in c.argv]
    assert len(calls) == 2  # create, map
    assert all([a for a in c.argv if a.startswith("--pim")] == [pim_flag] for c in calls)
    assert all(volume.state["password"].decode() not in " ".join(c.argv) for c in calls)
    assert ("benchmark only" in backend.kdf_label()) == (kdf == "fast")
    volume.mounted.release()


def test_native_default_kdf_opens_without_a_pim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = StandIns(tmp_path / "bin")
    tools.add("cryptsetup")
    monkeypatch.setenv("PATH", tools.path_env)
    backend = make_backend(BackendSpec.parse("veracrypt:tool=native,kdf=default"))
    assert isinstance(backend, veracrypt.VeracryptBackend)
    workdir = tmp_path / "v"
    workdir.mkdir()
    volume = Volume(backend, Target("container", tmp_path, 1 << 20), workdir)
    volume.device = Path("/dev/loop98")
    backend.open_mapping(volume, volume.created)
    (call,) = tools.calls("cryptsetup")
    assert "--veracrypt-pim" not in call.argv  # cryptsetup then tries VeraCrypt's default iterations
    assert backend.pim == 0 and backend.kdf_label() == "VeraCrypt's default PIM"
    volume.created.release()


def test_a_fuse_mount_is_the_containers_when_its_control_file_names_it_as_veracrypt_does(
    tmp_path: Path,
) -> None:
    """VeraCrypt's FUSE service describes the volume in ``control`` (VolumeInfo, serialized):
    its ``Path`` field, not the mount's number, says whose loop devices are there."""
    container = tmp_path / "run" / "container.img"
    control = tmp_path / "control"
    wide = f"{container}\0".encode("utf-32-le")
    field = (
        b"\0" * 7
        + b"\x08"
        + b"\0" * 7
        + b"\x05Path\0"
        + b"\0" * 7
        + b"\x08"
        + len(wide).to_bytes(8, "big")
        + wide
    )
    assert veracrypt.serialized_path(str(container)) == field
    control.write_bytes(b"...LoopDevice..." + field + b"...Pkcs5IterationCount...")
    assert veracrypt._control_names(control, container)
    assert not veracrypt._control_names(control, tmp_path / "run" / "container")  # a prefix of it
    assert not veracrypt._control_names(control, tmp_path / "other.img")
    control.write_bytes(wide)  # not as VeraCrypt writes it: no field
    assert not veracrypt._control_names(control, container)
    assert not veracrypt._control_names(tmp_path / "missing", container)
