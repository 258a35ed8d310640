"""The UML lane's split into guests (tests/integration/test_uml_lane.py, HALVES): together the
halves run every test the lane ran in one guest, none twice, and check every name it checked, each
in the guest that runs it. A half may leave part of a file it runs to the other (--deselect)."""

from __future__ import annotations

from tests.helpers import matrix
from tests.integration.test_uml_lane import (
    DM_SECRETS,
    ECRYPTFS_INTERRUPTS,
    ECRYPTFS_KILLS,
    HALVES,
    RELIABILITY,
)

DMCRYPT = "tests/integration/test_dmcrypt_integration.py"
# What the lane ran and checked in one guest (at 2e5c971), the chaos cases as the matrices name them;
# and since then, overlapping partitions (which only the guest's kernel reads from an MBR)
OVERLAP = "test_partitions_that_share_bytes_refuse_each_other"
ONE_GUEST_RUNS = [
    DMCRYPT,
    "tests/integration/test_ecryptfs_integration.py",
    "tests/integration/test_partition_integration.py",
    f"tests/integration/test_partition.py::{OVERLAP}",
    "tests/unit/test_ceiling.py::test_kernel_cipher_speed_through_af_alg",
    *(
        f"tests/integration/test_secrets_integration.py::test_secret_is_never_exposed[{name}]"
        for name in DM_SECRETS
    ),
    *(f"{RELIABILITY}::test_sigkill_then_encperf_cleanup_leaves_nothing[{case}]" for case in ECRYPTFS_KILLS),
    *(f"{RELIABILITY}::test_interrupt_tears_down_without_cleanup[{case}]" for case in ECRYPTFS_INTERRUPTS),
]
ONE_GUEST_MUST_PASS = [
    "test_create_mount_write_remount_read_destroy[luks2]",
    "test_create_mount_write_remount_read_destroy[luks1]",
    "test_create_mount_write_remount_read_destroy[dm-plain]",
    "test_tcrypt_opens_shared_truecrypt_and_veracrypt_images[vc_1-sha512-xts-aes-aaaaaaaaaaaa-,hash=sha512]",
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
    "test_lvm_like_stack_under_a_mounted_file_system",
    "test_a_mapping_on_a_partition_refuses_the_whole_disk",
    "test_a_mapping_on_a_loop_device_on_the_device_refuses_it",
    "test_a_mapping_on_a_loop_device_over_the_same_file",
    "test_root_on_a_mapping_refuses_the_device_under_it",
    "test_a_failed_luks_format_wipes_nothing",
    "test_luks2_on_a_partition_leaves_it_as_it_was",
    OVERLAP,
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
]


def test_the_halves_run_what_one_guest_ran_none_twice() -> None:
    runs = [test for half in HALVES.values() for test in half.runs]
    left = {prefix for half in HALVES.values() for prefix in half.leaves}
    assert len(runs) == len(set(runs)), "a test runs in two guests"
    assert sorted(set(runs) - left) == sorted(ONE_GUEST_RUNS)
    for name, half in HALVES.items():
        for prefix in half.leaves:
            # left: part of what this half runs, run by exactly one other half
            assert any(prefix.startswith(f"{test}::") for test in half.runs), (name, prefix)
            assert prefix not in half.runs and sum(prefix in share.runs for share in HALVES.values()) == 1, (
                prefix
            )


def test_the_halves_check_what_one_guest_checked_each_where_it_runs() -> None:
    must_pass = [test for half in HALVES.values() for test in half.must_pass]
    assert sorted(must_pass) == sorted(ONE_GUEST_MUST_PASS)
    moved = {prefix.rsplit("::", 1)[1] for half in HALVES.values() for prefix in half.leaves}
    for name, half in HALVES.items():
        for test in half.must_pass:
            function = test.split("[", 1)[0]
            if function in moved:  # checked where it runs, not in the half that leaves it
                assert any(prefix.endswith(f"::{function}") for prefix in half.runs), (name, test)
