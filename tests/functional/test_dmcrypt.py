"""dm-crypt backends without device-mapper: exact cryptsetup command lines (recording stand-in),
secret handling, parameter checks and problems()."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_encperf import host, resources
from pytest_encperf.backends import (
    BackendSpec,
    Volume,
    dmcrypt,
    make_backend,
)
from pytest_encperf.resources import Resource
from pytest_encperf.targets import Target
from tests.helpers.standin import StandIns


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StandIns:
    tools = StandIns(tmp_path / "bin")
    tools.add("cryptsetup")
    monkeypatch.setenv("PATH", tools.path_env)
    return tools


def new_volume(spec: str, tmp_path: Path) -> tuple[dmcrypt.CryptsetupBackend, Volume]:
    backend = make_backend(BackendSpec.parse(spec))
    assert isinstance(backend, dmcrypt.CryptsetupBackend)
    workdir = tmp_path / "volume"
    workdir.mkdir(parents=True)
    volume = Volume(backend, Target("container", tmp_path, 1 << 20), workdir)
    volume.device = Path("/dev/loop99")
    return backend, volume


def test_luks2_format_and_open_command_lines(standins: StandIns, tmp_path: Path) -> None:
    spec = "luks2:cipher=aes-xts-plain64,key-size=512,hash=sha256,sector-size=4096,no-workqueue=1"
    backend, volume = new_volume(spec, tmp_path)
    backend.format(volume, Path("/dev/loop99"))
    backend.open_mapping(volume, volume.created)
    name = volume.state["dm_name"]
    assert name == f"encperf-{os.getpid()}-{resources.run_token()}-{name.rsplit('-', 1)[1]}"
    fmt, opened = standins.calls("cryptsetup")
    assert fmt.argv == [
        "luksFormat", "--batch-mode", "--type", "luks2", "--cipher", "aes-xts-plain64",
        "--key-size", "512", "--hash", "sha256", "--sector-size", "4096",
        "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", "-", "/dev/loop99",
    ]  # fmt: skip
    assert opened.argv == [
        "open", "--type", "luks2", "--key-file", "-",
        "--perf-no_read_workqueue", "--perf-no_write_workqueue", "/dev/loop99", name,
    ]  # fmt: skip
    # the key: 64 random bytes in memory, on cryptsetup's stdin; in no file and no command line
    key = volume.state["key"]
    assert len(key) == 64
    assert fmt.stdin.encode("latin-1") == key and opened.stdin.encode("latin-1") == key
    assert all(key.hex() not in " ".join(c.argv) for c in standins.calls())
    assert list(volume.workdir.iterdir()) == []
    # the mapping was registered for cleanup before cryptsetup ran
    assert Resource("dm", name) in volume.created.resources
    volume.created.release()
    assert "key" not in volume.state, "the key outlived its volume"


def test_luks_alias_and_luks1_with_perf_flags(standins: StandIns, tmp_path: Path) -> None:
    backend, volume = new_volume("luks", tmp_path)
    assert backend.luks_type == "luks2"
    backend, volume = new_volume("luks1:same-cpu-crypt=1,submit-from-crypt-cpus=yes", tmp_path / "x")
    backend.format(volume, Path("/dev/loop99"))
    backend.open_mapping(volume, volume.created)
    fmt, opened = standins.calls("cryptsetup")
    assert fmt.argv[:5] == ["luksFormat", "--batch-mode", "--type", "luks1", "--pbkdf"]
    assert opened.argv[3:] == [
        "--key-file", "-",
        "--perf-same_cpu_crypt", "--perf-submit_from_crypt_cpus", "/dev/loop99", volume.state["dm_name"],
    ]  # fmt: skip


def test_luks2_integrity_formats_with_dm_integrity(standins: StandIns, tmp_path: Path) -> None:
    backend, volume = new_volume("luks2:integrity=hmac-sha256", tmp_path)
    backend.format(volume, Path("/dev/loop99"))
    argv = standins.calls("cryptsetup")[0].argv
    assert argv[argv.index("--integrity") + 1] == "hmac-sha256"
    assert "--integrity-no-wipe" in argv


def test_dm_plain_open_reads_exactly_the_key(standins: StandIns, tmp_path: Path) -> None:
    backend, volume = new_volume(
        "dm-plain:cipher=serpent-xts-plain64,key-size=256,sector-size=4096", tmp_path
    )
    backend.format(volume, Path("/dev/loop99"))  # no header: nothing to run
    assert standins.calls() == []
    backend.open_mapping(volume, volume.created)
    (opened,) = standins.calls("cryptsetup")
    assert opened.argv == [
        "open", "--type", "plain", "--batch-mode", "--cipher", "serpent-xts-plain64",
        "--key-size", "256", "--key-file", "-", "--keyfile-size", "32",
        "--sector-size", "4096", "/dev/loop99", volume.state["dm_name"],
    ]  # fmt: skip
    assert opened.stdin.encode("latin-1") == volume.state["key"]


def test_dm_plain_cascade_stacks_one_mapping_per_cipher_with_its_own_key(
    standins: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, volume = new_volume(
        "dm-plain:cipher=aes-xts-plain64+twofish-xts-plain64+serpent-xts-plain64", tmp_path
    )
    top = backend.open_mapping(volume, volume.created)
    calls = standins.calls("cryptsetup")
    names = volume.state["dm_layers"]
    assert len(calls) == len(names) == 3
    # first cipher on the device, each next one on the mapping below it; the top one is mounted
    assert [c.argv[c.argv.index("--cipher") + 1] for c in calls] == [
        "aes-xts-plain64", "twofish-xts-plain64", "serpent-xts-plain64",
    ]  # fmt: skip
    assert [c.argv[-2:] for c in calls] == [
        ["/dev/loop99", names[0]],
        [f"/dev/mapper/{names[0]}", names[1]],
        [f"/dev/mapper/{names[1]}", names[2]],
    ]
    assert top == Path("/dev/mapper") / names[2]
    keys = [c.stdin.encode("latin-1") for c in calls]
    assert len(set(keys)) == 3 and all(len(k) == 64 for k in keys)
    # each key top-level in the state, where the secrets scan looks for key material
    assert keys == [volume.state["key"], volume.state["key_1"], volume.state["key_2"]]
    # closed top first: a mapping is never removed while another is stacked on it
    closed: list[str] = []
    monkeypatch.setattr(dmcrypt.devicemapper, "remove_dm", lambda name: closed.append(name) or True)
    backend.close_mapping(volume)
    assert closed == list(reversed(names))


def test_tcrypt_password_on_stdin_keyfiles_pim_hidden(standins: StandIns, tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("cccccccccccccccccccc\n")
    image = tmp_path / "vc.img"
    image.write_bytes(b"x")
    spec = (
        f"tcrypt:image={image},password-file={password},veracrypt-pim=1234,hash=sha512,"
        f"hidden=1,keyfiles={tmp_path}/k1:{tmp_path}/k2"
    )
    backend, volume = new_volume(spec, tmp_path / "v")
    backend.open_mapping(volume, volume.created)
    (opened,) = standins.calls("cryptsetup")
    assert opened.argv == [
        "open", "--type", "tcrypt", "--veracrypt", "--veracrypt-pim", "1234", "--hash", "sha512",
        "--tcrypt-hidden", "--key-file", f"{tmp_path}/k1", "--key-file", f"{tmp_path}/k2",
        "/dev/loop99", volume.state["dm_name"],
    ]  # fmt: skip
    assert opened.stdin == "cccccccccccccccccccc\n"
    assert "cccc" not in " ".join(opened.argv)


def test_bitlk_recovery_key_on_stdin(standins: StandIns, tmp_path: Path) -> None:
    recovery = tmp_path / "rk"
    recovery.write_text("111111-222222-333333-444444-555555-666666-777777-888888")
    image = tmp_path / "bl.img"
    image.write_bytes(b"x")
    backend, volume = new_volume(f"bitlk:image={image},recovery-key-file={recovery}", tmp_path / "v")
    backend.open_mapping(volume, volume.created)
    (opened,) = standins.calls("cryptsetup")
    assert opened.argv == ["open", "--type", "bitlk", "/dev/loop99", volume.state["dm_name"]]
    assert opened.stdin == recovery.read_text() + "\n"


def test_failed_open_still_closes_the_mapping_name(
    standins: StandIns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_EXIT_CRYPTSETUP", "2")
    backend, volume = new_volume("luks2", tmp_path)
    with pytest.raises(host.HostError, match=r"cryptsetup open .*exit 2"):
        backend.open_mapping(volume, volume.created)
    assert Resource("dm", volume.state["dm_name"]) in volume.created.resources
    volume.created.release()  # nothing mapped: closing is a no-op, not an error


@pytest.mark.skipif("device-mapper" in Path("/proc/misc").read_text(), reason="host has device-mapper")
def test_session_skips_luks2_with_the_exact_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bench="def test_w(encperf, encperf_workload):\n    encperf.run(encperf_workload)\n"
    )
    result = pytester.runpytest(
        "--encperf-backends=luks2", "--encperf-size=1MiB", "-k", "SEQ1M-Q1T1", "-rs", "-p", "no:cacheprovider"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) >= 1 and "passed" not in outcomes and "failed" not in outcomes
    result.stdout.fnmatch_lines(
        ["*cryptsetup: kernel has no device-mapper (device-mapper not in /proc/misc)*"]
    )


FAILING_OPEN = """
from pathlib import Path
from pytest_encperf.backends import BackendSpec, Volume, make_backend
from pytest_encperf.targets import Target

def test_open(tmp_path):
    backend = make_backend(BackendSpec.parse("tcrypt:image={image},password-file={password}"))
    backend.requirements = lambda target: []  # the stand-in plays cryptsetup: no device-mapper needed
    volume = Volume(backend, Target("container", tmp_path, 1 << 20), tmp_path)
    volume.device = Path("/dev/loop99")
    backend.mount(volume)
"""


def test_a_failing_open_shows_the_password_nowhere(
    standins: StandIns, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong password file: cryptsetup refuses it, and pytest prints the traceback with every
    function's arguments (--tb=long) and locals (-l) to the terminal and the JUnit XML."""
    wrong = "wrong-password-4f1c9e"
    password = pytester.path / "given-password"
    password.write_text(wrong + "\n")
    image = pytester.path / "given.img"
    image.write_bytes(b"x")
    monkeypatch.setenv("STANDIN_EXIT_CRYPTSETUP", "2")
    pytester.makepyfile(test_open=FAILING_OPEN.format(image=image, password=password))
    result = pytester.runpytest_subprocess(
        "--tb=long", "-l", "--junitxml=report.xml", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=1)
    # the traceback went through the frames that hold the password, and printed their locals
    result.stdout.fnmatch_lines(["*def open_mapping(*", "*stdin * = <secret>*"])
    assert standins.calls("cryptsetup")[0].stdin == wrong + "\n", "the password reached cryptsetup"
    junit = (pytester.path / "report.xml").read_text()
    assert "open_mapping" in junit
    for where, text in {"stdout": result.stdout.str(), "stderr": result.stderr.str(), "junit": junit}.items():
        assert wrong not in text and wrong.encode().hex() not in text, f"the password is in {where}"


@pytest.mark.parametrize("name", ["luks2", "luks1"])
def test_luks_default_kdf_formats_without_the_fast_flags(
    standins: StandIns, tmp_path: Path, name: str
) -> None:
    """kdf=default: cryptsetup's own key derivation (argon2id for LUKS2); the key still on stdin."""
    backend, volume = new_volume(f"{name}:kdf=default", tmp_path)
    backend.format(volume, Path("/dev/loop99"))
    (fmt,) = standins.calls("cryptsetup")
    assert fmt.argv == ["luksFormat", "--batch-mode", "--type", name, "--key-file", "-", "/dev/loop99"]
    assert not set(dmcrypt.FAST_KDF) & set(fmt.argv)
    assert "benchmark only" not in backend.describe(volume)["pbkdf"]
    fast, _ = new_volume(name, tmp_path / "fast")
    assert fast.kdf == "fast" and "benchmark only" in fast.kdf_label()
