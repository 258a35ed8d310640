"""The real-kernel lane: the dm-crypt, device-mapper partition and eCryptfs tests inside
user-mode Linux (see tests/helpers/uml.py).

Runs where the host kernel has no device-mapper (this project's CI); where it has one, the
same tests run directly and this lane is skipped.
"""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import matrix, uml
from tests.helpers.support import disk_dir
from tests.integration.test_reliability_integration import INTERRUPT_MATRIX, SIGKILLS

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The secrets scan of the dm-crypt based backends (LUKS, plain, VeraCrypt, TrueCrypt/VeraCrypt and
# BitLocker volumes) and of eCryptfs runs here too.
DM_SECRETS = ("luks2", "luks1", "dm-plain", "veracrypt", "tcrypt", "bitlk", "ecryptfs")
RELIABILITY = "tests/integration/test_reliability_integration.py"
# eCryptfs's cases of the chaos matrices that run (all of them with ENCPERF_TEST_EXHAUSTIVE=1)
ECRYPTFS_KILLS = SIGKILLS.ids_run("ecryptfs")
ECRYPTFS_INTERRUPTS = INTERRUPT_MATRIX.ids_run("ecryptfs")
DMCRYPT = "tests/integration/test_dmcrypt_integration.py"
# the TrueCrypt/VeraCrypt images' tests (key derivations of up to 1.2 million iterations) run beside
# the secrets scan, not in the rest of their file: the two guests take about as long
TCRYPT = [
    f"{DMCRYPT}::test_tcrypt_opens_shared_truecrypt_and_veracrypt_images",
    f"{DMCRYPT}::test_tcrypt_wrong_password_fails_and_leaves_nothing",
]


@dataclass(frozen=True)
class Half:
    """One guest's share of the lane: what it runs (paths, node ids), what of that it leaves to
    the other guest (node id prefixes, --deselect), and what must have run and passed in it (the
    lane is worthless if they all skip). tests/unit/test_uml_lane_split.py checks that the
    halves together run and check what the lane did in one guest."""

    runs: list[str]
    leaves: list[str]
    must_pass: list[str]

    def pytest_args(self) -> list[str]:
        return [*self.runs, *(f"--deselect={prefix}" for prefix in self.leaves)]


# The lane in two guests, each a test of its own (one virtual CPU each): xdist runs them side by
# side, so the lane's wall time is its larger half's (about half of one guest's: issue 26). A
# guest costs its boot (~3 s) and its own byte-code cache.
HALVES: dict[str, Half] = {
    "dm-crypt": Half(
        [DMCRYPT],
        TCRYPT,
        [
            "test_create_mount_write_remount_read_destroy[luks2]",
            "test_create_mount_write_remount_read_destroy[luks1]",
            "test_create_mount_write_remount_read_destroy[dm-plain]",
            "test_bitlk_opens_shared_image_with_the_right_content[recovery-key-file]",
            "test_native_veracrypt_volume_life_cycle_and_tcrypt_dump[veracrypt:tool=native]",
            "test_luks2_on_a_partition_target",
            "test_full_session_with_dm_crypt_backends",
            *(["test_ready_made_sweep_ranks_and_recommends[luks-tuning]"] if matrix.exhaustive() else []),
            "test_ready_made_sweep_ranks_and_recommends[ciphers]",
            "test_life_cycle_is_timed_and_a_cascade_leaves_no_mapping[luks2]",
            "test_life_cycle_is_timed_and_a_cascade_leaves_no_mapping[cascade]",
            "test_kdf_profile_luks2_default_opens_slower_than_fast",
            "test_luks2_in_place_encryption_keeps_the_data",
        ],
    ),
    "tcrypt, secrets, eCryptfs, partitions": Half(
        [
            "tests/integration/test_ecryptfs_integration.py",
            "tests/integration/test_partition_integration.py",
            # overlapping partitions: the guest's kernel reads them from the MBR (the host's adds none)
            "tests/integration/test_partition.py::test_partitions_that_share_bytes_refuse_each_other",
            "tests/unit/test_ceiling.py::test_kernel_cipher_speed_through_af_alg",  # the guest loads af_alg
            *(
                f"tests/integration/test_secrets_integration.py::test_secret_is_never_exposed[{name}]"
                for name in DM_SECRETS
            ),
            # eCryptfs after a kill: a mount keeps its keys alive; encperf cleanup must leave neither
            *(
                f"{RELIABILITY}::test_sigkill_then_encperf_cleanup_leaves_nothing[{case}]"
                for case in ECRYPTFS_KILLS
            ),
            *(
                f"{RELIABILITY}::test_interrupt_tears_down_without_cleanup[{case}]"
                for case in ECRYPTFS_INTERRUPTS
            ),
            *TCRYPT,
        ],
        [],
        [
            "test_lvm_like_stack_under_a_mounted_file_system",
            "test_a_mapping_on_a_partition_refuses_the_whole_disk",
            "test_a_mapping_on_a_loop_device_on_the_device_refuses_it",
            "test_a_mapping_on_a_loop_device_over_the_same_file",
            "test_root_on_a_mapping_refuses_the_device_under_it",
            "test_a_failed_luks_format_wipes_nothing",
            "test_luks2_on_a_partition_leaves_it_as_it_was",
            "test_partitions_that_share_bytes_refuse_each_other",
            "test_kernel_cipher_speed_through_af_alg",
            *(f"test_secret_is_never_exposed[{name}]" for name in DM_SECRETS),
            "test_create_mount_write_remount_read_destroy[ecryptfs-container]",
            "test_create_mount_write_remount_read_destroy[ecryptfs:cipher=aes,key-bytes=32,filename-encryption=0-container]",
            "test_create_mount_write_remount_read_destroy[ecryptfs:cipher=twofish,key-bytes=16-directory]",
            "test_a_wrong_passphrase_gives_no_plaintext",
            "test_a_wrong_passphrase_hides_encrypted_names",
            "test_keys_are_the_ones_ecryptfs_add_passphrase_adds",
            "test_full_session_with_ecryptfs",
            *(f"test_sigkill_then_encperf_cleanup_leaves_nothing[{case}]" for case in ECRYPTFS_KILLS),
            *(f"test_interrupt_tears_down_without_cleanup[{case}]" for case in ECRYPTFS_INTERRUPTS),
            "test_tcrypt_opens_shared_truecrypt_and_veracrypt_images[vc_1-sha512-xts-aes-aaaaaaaaaaaa-,hash=sha512]",
        ],
    ),
}
LANE_TESTS = [test for half in HALVES.values() for test in half.runs]
MUST_PASS = [name for half in HALVES.values() for name in half.must_pass]


# the guest's slowest tests, printed by the lane: the lane is the suite's long pole (issue 26)
DURATIONS = ["--durations=40", "--durations-min=2"]


def slowest(console: str) -> str:
    """The guest's ``--durations`` section (from its heading to the summary line)."""
    lines = console.splitlines()
    start = next((i for i, line in enumerate(lines) if "slowest" in line and "durations" in line), None)
    if start is None:
        return "UML lane: no durations in the guest's output"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return "\n".join(lines[start:end])


def junit_outcomes(path: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        outcomes[case.get("name", "")] = outcome
    return outcomes


@pytest.mark.parametrize("half", list(HALVES))
def test_dm_crypt_tests_pass_inside_user_mode_linux(
    half: str, record_property: pytest.RecordProperty
) -> None:
    if uml.in_guest():
        pytest.skip("already inside the UML guest")
    if "device-mapper" in Path("/proc/misc").read_text():
        pytest.skip("host kernel has device-mapper: the dm-crypt tests run directly")
    reasons = uml.problems()
    if reasons:
        pytest.skip("; ".join(reasons))
    base = disk_dir()
    with tempfile.TemporaryDirectory(prefix="encperf-uml-", dir=base) as workdir:
        # half the lane's tests in an emulated kernel beside the rest of the suite: about 300 s
        # each on the 2-core machine (the whole lane took 558 s, 1280 s on a busy one); room for that
        share = HALVES[half]
        result = uml.run_pytest(
            ["-q", *DURATIONS, *share.pytest_args()], Path(workdir), cwd=REPO, timeout=1800
        )
        record_property("uml_lane_seconds", round(result.seconds, 1))
        print(f"UML lane: {result.seconds:.1f} s wall time")
        print(slowest(result.console))  # where the guest's time went (shown with -s or -rP)
        detail = (
            f"\n--- guest console ---\n{result.console[-6000:]}\n--- kernel ---\n{result.kernel_log[-3000:]}"
        )
        assert result.exitcode == 0, f"pytest in the guest exited {result.exitcode}{detail}"
        outcomes = junit_outcomes(result.junit)
        # what the guest's sessions measured (UML, one virtual CPU: not performance figures)
        for table in sorted(result.junit.parent.glob("*.txt")):
            print(f"--- {table.name} (UML: not a performance figure) ---\n{table.read_text()}")
    not_passed = {
        name: outcomes.get(name, "missing") for name in share.must_pass if outcomes.get(name) != "passed"
    }
    assert not_passed == {}, f"{not_passed}{detail}"
