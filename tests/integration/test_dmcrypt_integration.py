"""Real dm-crypt volumes: LUKS2, LUKS1, plain dm-crypt, TrueCrypt/VeraCrypt and BitLocker images.

They need device-mapper with dm_crypt. Where the host kernel has none (this project's CI),
``test_uml_lane.py`` runs this file inside a user-mode Linux kernel; elsewhere each test
skips with the backend's own problems() reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf import host, inplace, kdf
from pytest_encperf.backends import BackendSpec, Volume, make_backend
from pytest_encperf.backends.dmcrypt import CryptsetupBackend, device_mapper_problems, status
from pytest_encperf.lifecycledata import LIFECYCLE_STEPS
from pytest_encperf.mountedvolume import close_volume, open_volume
from pytest_encperf.report.timings import inplace_table, kdf_table
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB
from tests.helpers import matrix, uml
from tests.helpers.support import (
    BITLK_IMAGE,
    bitlk_passwords,
    disk_dir,
    extract,
    mounts_and_loops_left,
    tiny_session,
)

pytestmark = [pytest.mark.integration, pytest.mark.dmcrypt]

MARKER = b"ENCPERF-PLAINTEXT-MARKER-5d1e42"
TC_PASSWORD = "aaaaaaaaaaaa"
PIM_PASSWORD = "cccccccccccccccccccc"


def our_mappings() -> list[str]:
    mapper = Path("/dev/mapper")
    return sorted(p.name for p in mapper.glob(f"encperf-{os.getpid()}-*")) if mapper.is_dir() else []


@pytest.fixture(autouse=True)
def needs_dm_crypt() -> None:
    reasons = device_mapper_problems()
    if reasons:
        pytest.skip("; ".join(reasons))


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory on a disk (not tmpfs), checked for leftovers of ours when the test ends."""
    base = disk_dir()
    path = Path(tempfile.mkdtemp(prefix="encperf-dm-", dir=base))
    yield path
    assert mounts_and_loops_left(path) == [], "mount or loop device left behind"
    assert our_mappings() == [], "dm mapping left behind"

    shutil.rmtree(path)


@pytest.fixture
def target(scratch: Path) -> Target:
    return Target("container", scratch, container_size(16 * MiB))


def write_secret(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    "spec",
    [
        "luks2",
        "luks1",
        "dm-plain",
        "luks2:cipher=aes-xts-plain64,key-size=256,sector-size=4096,no-workqueue=1",
        "luks1:cipher=serpent-xts-plain64,hash=sha256,same-cpu-crypt=1,submit-from-crypt-cpus=1",
    ],
)
def test_create_mount_write_remount_read_destroy(spec: str, target: Target, scratch: Path) -> None:
    backend = make_backend(BackendSpec.parse(spec))
    workdir = scratch / "volume"
    mounted = open_volume(backend, target, workdir)
    volume = mounted.volume
    try:
        name = volume.state["dm_name"]
        assert (Path("/dev/mapper") / name).exists()
        info = mounted.description
        assert info["cipher"] == backend.spec.param_dict.get("cipher", "aes-xts-plain64")
        # the efficiency reference: the kernel cipher the mapping runs on, with its key size
        block_cipher = info["cipher"].split("-")[0]  # aes, serpent
        assert info["cipher_ceiling"] == f"kernel:xts({block_cipher}):{info['keysize'].split()[0]}"
        if "sector-size=4096" in spec:
            assert info["sector_size"] == "4096"
        if "no-workqueue=1" in spec:
            assert "no_read_workqueue" in info["flags"] and "no_write_workqueue" in info["flags"]
        if "same-cpu-crypt=1" in spec:
            assert "same_cpu_crypt" in info["flags"]
        payload = MARKER * 8192
        (mounted.data_dir / "marker").write_bytes(payload)
        with (mounted.data_dir / "marker").open("rb+") as handle:
            os.fsync(handle.fileno())
        backend.unmount(volume)
        assert not (Path("/dev/mapper") / name).exists(), "unmount must close the mapping"
        assert MARKER not in (workdir / "container.img").read_bytes(), "plaintext on the disk"
        data_dir = backend.mount(volume)
        assert (data_dir / "marker").read_bytes() == payload
    finally:
        backend.destroy(volume)
    assert not (workdir / "container.img").exists()
    backend.destroy(volume)  # idempotent


@pytest.mark.parametrize("step", ["format", "open", "mkfs", "mount"])
def test_failure_at_each_step_leaves_nothing(
    step: str, target: Target, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_encperf.backends import dmcrypt, ext4

    backend = make_backend(BackendSpec("luks2"))

    def broken(*args: object, **kwargs: object) -> None:
        raise host.HostError(f"injected failure at {step}")

    if step == "format":
        monkeypatch.setattr(dmcrypt.LuksBackend, "format", broken)
    elif step == "open":
        real_run = host.run

        def run(argv: list[str], **kwargs: object) -> str:
            out = real_run(argv, **kwargs)  # type: ignore[arg-type]
            if argv[:2] == ["cryptsetup", "open"]:
                raise host.HostError("injected failure at open (after the mapping exists)")
            return out

        monkeypatch.setattr(host, "run", run)
    elif step == "mkfs":
        monkeypatch.setattr(dmcrypt, "make_ext4", broken)
    else:
        monkeypatch.setattr(ext4.mounting, "mount", broken)
    with pytest.raises(Exception, match="injected failure"):
        open_volume(backend, target, scratch / "volume")
    # the scratch fixture asserts no mount, loop device or mapping remains


@contextlib.contextmanager
def image_mapping(spec: str, scratch: Path) -> Iterator[tuple[Volume, Path]]:
    """Open an existing image's dm-crypt mapping without a file system on it (the shared
    images are too small for ext4, or hold NTFS); destroyed afterwards."""
    backend = make_backend(BackendSpec.parse(spec))
    assert isinstance(backend, CryptsetupBackend)
    assert backend.problems(Target("container", scratch, 1)) == []
    volume_dir = scratch / "volume"
    volume_dir.mkdir()
    volume = Volume(backend, Target("container", scratch, 1), volume_dir)
    try:
        volume.device = backend.prepare_device(volume)
        yield volume, backend.open_mapping(volume, volume.mounted)
    finally:
        backend.destroy(volume)
    assert not any(volume_dir.iterdir())


TCRYPT_CASES = [
    # hash= spares cryptsetup trying every KDF (VeraCrypt's are slow by design)
    ("vc_1-sha512-xts-aes", TC_PASSWORD, ",hash=sha512"),
    ("vc_1-sha512-xts-aes-twofish-serpent", TC_PASSWORD, ",hash=sha512"),
    ("tc_5-sha512-xts-aes", TC_PASSWORD, ",veracrypt=0,hash=sha512"),
    ("vcpim_1_1234-sha256-xts-aes", PIM_PASSWORD, ",veracrypt-pim=1234,hash=sha256"),
    ("vc_1-sha512-xts-aes-hidden", "bbbbbbbbbbbb", ",hidden=1,hash=sha512"),
]


@pytest.fixture(scope="module")
def tcrypt_images() -> Iterator[Path]:
    """The shared TrueCrypt/VeraCrypt images these tests open, out of their archive in one pass:
    it unpacks to 118 MiB, piped from xz to tar through the UML guest's kernel for each member
    otherwise. Read only: the backend opens a copy (the tests name them as a user would)."""
    if reasons := device_mapper_problems():  # before the autouse check, which runs after this
        pytest.skip("; ".join(reasons))
    path = Path(tempfile.mkdtemp(prefix="encperf-tcrypt-", dir=disk_dir()))
    try:
        members = [f"tcrypt-images/{image}" for image, _, _ in TCRYPT_CASES]
        yield extract("tcrypt-images.tar.xz", members[0], path, *members[1:]).parent
    finally:
        shutil.rmtree(path)


@pytest.mark.parametrize(("image", "password", "params"), TCRYPT_CASES)
def test_tcrypt_opens_shared_truecrypt_and_veracrypt_images(
    image: str, password: str, params: str, scratch: Path, tcrypt_images: Path
) -> None:
    """The images are too small for ext4 (a few hundred KiB): open, read, close."""
    path = tcrypt_images / image
    secret = write_secret(scratch, "password", password + "\n")
    with image_mapping(f"tcrypt:image={path},password-file={secret}{params}", scratch) as (volume, mapped):
        info = status(volume.state["dm_name"])
        assert info["type"] == "TCRYPT"
        expected_cipher = image.split("-xts-")[-1].removesuffix("-hidden").split("-")
        assert all(part in info["cipher"] for part in expected_cipher), info["cipher"]
        assert len(mapped.read_bytes()) > 0


def test_tcrypt_wrong_password_fails_and_leaves_nothing(scratch: Path, tcrypt_images: Path) -> None:
    path = tcrypt_images / "tc_5-sha512-xts-aes"
    secret = write_secret(scratch, "password", "wrong password")
    spec = f"tcrypt:image={path},password-file={secret},hash=sha512,veracrypt=0"  # quick to reject
    backend = make_backend(BackendSpec.parse(spec))
    with pytest.raises(Exception, match="cryptsetup open"):
        open_volume(backend, Target("container", scratch, 1), scratch / "volume")


@pytest.mark.parametrize("secret_kind", ["password-file", "recovery-key-file"])
def test_bitlk_opens_shared_image_with_the_right_content(secret_kind: str, scratch: Path) -> None:
    conf = bitlk_passwords(scratch)
    path = extract("bitlk-images.tar.xz", f"bitlk-images/{BITLK_IMAGE}.img", scratch)
    secret = write_secret(scratch, "secret", conf["PW"] if secret_kind == "password-file" else conf["RP"])
    with image_mapping(f"bitlk:image={path},{secret_kind}={secret}", scratch) as (volume, mapped):
        assert status(volume.state["dm_name"])["type"] == "BITLK"
        digest = hashlib.sha256()
        with mapped.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        assert digest.hexdigest() == conf["SHA256SUM"]  # cryptsetup's own test checks the same


def test_bitlk_full_volume_life_cycle(scratch: Path) -> None:
    conf = bitlk_passwords(scratch)
    path = extract("bitlk-images.tar.xz", f"bitlk-images/{BITLK_IMAGE}.img", scratch)
    secret = write_secret(scratch, "secret", conf["PW"])
    original = hashlib.sha256(path.read_bytes()).hexdigest()
    backend = make_backend(BackendSpec.parse(f"bitlk:image={path},password-file={secret}"))
    mounted = open_volume(backend, Target("container", scratch, 1), scratch / "volume")
    try:
        (mounted.data_dir / "marker").write_bytes(MARKER * 1024)
        assert mounted.description["cipher"].startswith("aes-xts-plain64")
        backend.unmount(mounted.volume)
        assert MARKER not in (scratch / "volume" / "container.img").read_bytes()
        assert (backend.mount(mounted.volume) / "marker").read_bytes() == MARKER * 1024
    finally:
        backend.destroy(mounted.volume)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == original, "the user's image was modified"


@pytest.mark.parametrize("spec", ["veracrypt:tool=native", "veracrypt:tool=native,hash=SHA-256,pim=2"])
def test_native_veracrypt_volume_life_cycle_and_tcrypt_dump(spec: str, target: Target, scratch: Path) -> None:
    """Our VeraCrypt-format writer, opened by cryptsetup's tcrypt code and checked by tcryptDump."""
    from pytest_encperf.backends.vcformat import DATA_OFFSET, SECTOR

    backend = make_backend(BackendSpec.parse(spec))
    workdir = scratch / "volume"
    mounted = open_volume(backend, target, workdir)
    volume = mounted.volume
    try:
        assert mounted.description["type"] == "TCRYPT"
        assert mounted.description["cipher"] == "aes-xts-plain64"
        (mounted.data_dir / "marker").write_bytes(MARKER * 1024)
        password = volume.state["password"]
        pim = str(backend.spec.param_dict.get("pim", "1"))
        hash_name = "sha256" if "SHA-256" in spec else "sha512"
        dump = host.run(
            ["cryptsetup", "tcryptDump", "--veracrypt", "--veracrypt-pim", pim, "--hash", hash_name,
             str(volume.device)],
            input=password + b"\n",
        )  # fmt: skip
        fields = dict(line.split(":", 1) for line in dump.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        assert f"VERACRYPT header information for {volume.device}" in dump, dump
        assert fields["Version"] == "5", dump
        assert fields["Cipher chain"] == "aes", dump
        assert fields["Cipher mode"] == "xts-plain64", dump
        assert fields["PBKDF2 hash"] == hash_name, dump
        assert fields["Sector size"] == str(SECTOR), dump
        assert int(fields["MK offset"]) == DATA_OFFSET, dump
        assert fields["MK bits"] == "512", dump
        backend.unmount(volume)
        assert MARKER not in (workdir / "container.img").read_bytes()
        assert (backend.mount(volume) / "marker").read_bytes() == MARKER * 1024
    finally:
        backend.destroy(volume)


@pytest.mark.skipif(
    not shutil.which("veracrypt"), reason="veracrypt program not installed (tool=cli untested here)"
)
@pytest.mark.parametrize("mode", ["kernel", "fuse"])
def test_veracrypt_cli_volume_life_cycle(mode: str, target: Target, scratch: Path) -> None:
    backend = make_backend(
        BackendSpec.parse(f"veracrypt:tool=cli,mode={mode},encryption=AES-Twofish-Serpent")
    )
    mounted = open_volume(backend, target, scratch / "volume")
    try:
        (mounted.data_dir / "marker").write_bytes(MARKER * 1024)
        if mode == "fuse":
            assert mounted.description["loop_direct_io"] is True
        backend.unmount(mounted.volume)
        assert MARKER not in (scratch / "volume" / "container.img").read_bytes()
        assert (backend.mount(mounted.volume) / "marker").read_bytes() == MARKER * 1024
    finally:
        backend.destroy(mounted.volume)


def test_luks2_on_a_partition_target(scratch: Path) -> None:
    """A loop device standing in for a partition named with --encperf-device."""
    image = scratch / "disk.img"
    with image.open("wb") as handle:
        handle.truncate(96 * MiB)  # a volume for 16 MiB workloads needs 80
    loop = host.attach_loop(image, direct_io=True)
    try:
        target = Target("partition", scratch, 16 * MiB, device=loop.path)
        backend = make_backend(BackendSpec("luks2"))
        mounted = open_volume(backend, target, scratch / "volume")
        try:
            assert mounted.volume.device == loop.path
            (mounted.data_dir / "marker").write_bytes(MARKER * 1024)
            # while open, the partition is held by our dm-crypt mapping: refused to anyone else
            assert "partition rule 'not in use'" in " ".join(target.problems())
        finally:
            backend.destroy(mounted.volume)
        assert subprocess.run(["cryptsetup", "isLuks", str(loop.path)]).returncode != 0, (
            "LUKS header not wiped"
        )
        assert MARKER not in image.read_bytes()
    finally:
        host.detach_loop(loop.path, image)


def test_full_session_with_dm_crypt_backends(pytester: pytest.Pytester, scratch: Path) -> None:
    """The plugin end to end: pytest --encperf-backends=luks2,dm-plain,veracrypt, with the fio
    engine (the default where fio is installed; the lane's other sessions measure with the native
    engine: support.guest_engine). Without warm-up rounds (the same for every backend, tested in
    tests/functional): in the UML lane each is a pair of fio runs per backend and workload, 12 of
    the session's 36 (issue 26)."""
    if shutil.which("fio") is None:
        pytest.skip("fio not installed: the full session with the fio engine")
    result = tiny_session(
        pytester,
        scratch,
        "--encperf-backends=luks2:no-workqueue=1,dm-plain,veracrypt",
        "--encperf-warmup=0",
        "--encperf-engine=fio",
    )
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*luks2:no-workqueue=1*", "*plain *", "*dm-plain*", "*veracrypt*"])
    assert list(scratch.glob("encperf-*")) == [], "run directory left behind"


@pytest.mark.parametrize(
    ("sweep_name", "configurations", "recommended"),
    [
        # 8 configurations, the lane's costliest test (about 250 s in UML): ciphers' 4 run by default
        pytest.param(
            "luks-tuning",
            8,
            "cryptsetup luksFormat --type luks2",
            id="luks-tuning",
            marks=matrix.exhaustive_only(),
        ),
        pytest.param("ciphers", 4, "cryptsetup open --type plain", id="ciphers"),
    ],
)
def test_ready_made_sweep_ranks_and_recommends(
    pytester: pytest.Pytester, scratch: Path, sweep_name: str, configurations: int, recommended: str
) -> None:
    """A ready-made sweep end to end, at a tiny size (UML lane: function, not performance)."""
    out = pytester.path / "sweep.json"
    result = tiny_session(
        pytester,
        scratch,
        f"--encperf-sweep={sweep_name}",
        "--encperf-warmup=0",
        f"--encperf-json={out}",
        rounds=2,
    )
    result.assert_outcomes(passed=2 * configurations)
    family = "luks2" if sweep_name == "luks-tuning" else "dm-plain"
    result.stdout.fnmatch_lines(
        [f"sweep: {family}, {configurations} configurations ranked over 2 workloads", f"*{recommended}*"]
    )
    (ranking,) = json.loads(out.read_text())["encperf"]["sweeps"]
    assert len(ranking["configurations"]) == configurations and ranking["unranked"] == []
    assert list(scratch.glob("encperf-*")) == [], "run directory left behind"
    assert list(Path("/dev/mapper").glob("encperf-*")) == [], "mapping left behind"


@pytest.mark.parametrize(
    "spec",
    ["luks2", "dm-plain:cipher=aes-xts-plain64+twofish-xts-plain64+serpent-xts-plain64"],
    ids=["luks2", "cascade"],
)
def test_life_cycle_is_timed_and_a_cascade_leaves_no_mapping(
    spec: str, target: Target, scratch: Path
) -> None:
    backend = make_backend(BackendSpec.parse(spec))
    mounted = open_volume(backend, target, scratch / "volume")
    state = mounted.volume.state
    layers = list(state.get("dm_layers") or [state["dm_name"]])  # a cascade records its layers
    try:
        assert len(layers) == (3 if "+" in spec else 1)
        assert all((Path("/dev/mapper") / name).exists() for name in layers)
        (mounted.data_dir / "marker").write_bytes(MARKER * 4096)
    finally:
        close_volume(mounted)
    assert list(mounted.lifecycle) == list(LIFECYCLE_STEPS)
    assert all(seconds > 0 for seconds in mounted.lifecycle.values())
    assert not [name for name in layers if (Path("/dev/mapper") / name).exists()], "mapping left behind"


def test_kdf_profile_luks2_default_opens_slower_than_fast(scratch: Path) -> None:
    """The kdf profile's timing of LUKS2 (kdf.measure, what the profile runs for each backend):
    cryptsetup's default (argon2id) against the benchmark's PBKDF2 with 1000 iterations. The
    profile's session (its test per backend, JSON and table) is tested on the host with gocryptfs
    and qemu-luks (test_kdf_integration.py); here, in UML, one function instead of a session
    (about 60 s less). The lane prints the table (UML: not a performance figure)."""
    spec, target = BackendSpec("luks2"), Target("container", scratch, container_size(2 * MiB))  # as 2MiB
    row = kdf.measure(spec, target, scratch / "run" / "kdf-luks2").to_dict()
    fast, default = row["settings"]["fast"], row["settings"]["default"]
    assert default["mount"] > fast["mount"] > 0
    assert "argon2id" in default["label"] and "benchmark only" in fast["label"]
    assert list(Path("/dev/mapper").glob("encperf-*")) == [], "mapping left behind"
    if uml.in_guest():  # the lane prints it from its output directory
        (Path(uml.GUEST_OUTPUT_DIR) / "kdf-luks2.txt").write_text(kdf_table({str(spec): row}) + "\n")


def test_luks2_in_place_encryption_keeps_the_data(scratch: Path) -> None:
    """cryptsetup reencrypt --encrypt of a filled plain ext4 (inplace.measure, what
    --encperf-inplace runs for each backend): a rate, the volume opens as LUKS2 and the file reads
    back unchanged. The option's session is tested on the host (test_inplace_integration.py);
    here one function instead of a session. The lane prints the table (UML: not a performance
    figure)."""
    # no chdir: in the UML lane the working directory is the read-only checkout, so this fails if
    # reencrypt writes its temporary header anywhere but the volume's own work directory
    spec, target = BackendSpec("luks2"), Target("container", scratch, container_size(4 * MiB))  # as 4MiB
    row = inplace.measure(spec, target, scratch / "run" / "inplace-luks2", 4 * MiB).to_dict()
    assert row["method"] == "cryptsetup reencrypt --encrypt"
    assert row["mb_per_s"] > 0 and row["bytes"] > 4 * MiB  # the whole data area, not just the file
    assert row["intact"] is True and row["format_after"] == "LUKS2"
    assert list(Path("/dev/mapper").glob("encperf-*")) == [], "mapping left behind"
    if uml.in_guest():
        table = inplace_table({str(spec): row}, project_size=1000**4)
        (Path(uml.GUEST_OUTPUT_DIR) / "inplace-luks2.txt").write_text(table + "\n")
