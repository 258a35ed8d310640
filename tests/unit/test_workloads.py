"""workloads.io_plan: the one definition of a round that both engines implement."""

from __future__ import annotations

import pytest

from pytest_encperf.workloads import (
    CDM,
    CDM_NVME,
    DD,
    DRAINED_DEFINITION_SUFFIX,
    FLUSH_BYTES,
    LIMITED_DEFINITION_SUFFIX,
    MATRIX,
    ROUND_DEFINITION,
    TAKEN_TOGETHER_DEFINITION_SUFFIX,
    KiB,
    MiB,
    Workload,
    io_plan,
    round_definition,
)


def by_label(profile: tuple[Workload, ...], label: str, rw: str) -> Workload:
    return next(w for w in profile if w.label == label and w.rw == rw)


def test_q8t1_is_one_stream_with_eight_in_flight_in_both_modes() -> None:
    seq_q8 = by_label(CDM, "SEQ1M Q8T1", "read")
    for direct in (True, False):
        plan = io_plan(seq_q8, 64 * MiB, direct)
        assert (plan.streams, plan.outstanding, plan.in_flight) == (1, 8, 8)
        assert plan.stripe == 64 * MiB and plan.blocks == 64 and not plan.random
        assert plan.advice == "normal" and plan.flush_every is None and not plan.end_flush


def test_threads_split_the_file_into_stripes_of_whole_blocks() -> None:
    t16 = by_label(CDM_NVME, "RND4K Q32T16", "randread")
    plan = io_plan(t16, 64 * MiB + 100, direct=True)
    assert (plan.streams, plan.outstanding, plan.in_flight) == (16, 32, 512)
    assert plan.stripe == 4 * MiB and plan.stripe % plan.block_size == 0
    assert plan.random and plan.advice == "random"
    # a file too small for one block per thread gets fewer streams, never an empty one
    tiny = io_plan(t16, 8 * KiB, direct=True)
    assert tiny.streams == 2 and tiny.stripe == 4 * KiB


def test_writes_flush_every_16_mib_when_buffered_and_always_at_the_end() -> None:
    write = by_label(CDM, "RND4K Q32T1", "randwrite")
    buffered, direct = io_plan(write, 64 * MiB, False), io_plan(write, 64 * MiB, True)
    assert buffered.flush_every == FLUSH_BYTES == 16 * MiB and buffered.end_flush
    assert direct.flush_every is None and direct.end_flush
    big = Workload("SEQ32M", "write", 32 * MiB)
    assert io_plan(big, 64 * MiB, False).flush_every == 32 * MiB  # at least one block


def test_dd_moves_its_amount_once_and_the_grid_its_extent() -> None:
    assert io_plan(DD[0], 32 * MiB, False).amount == 32 * MiB  # the whole file when smaller
    assert io_plan(DD[0], 256 * MiB, False).amount == 64 * MiB
    assert io_plan(CDM[0], 64 * MiB, True).amount is None  # time based
    small = MATRIX[0]
    assert io_plan(small, 64 * MiB, True).stripe == small.extent == 4 * MiB


def test_only_buffered_time_based_reads_with_more_than_one_out_can_end_a_pass_with_reads_out() -> None:
    out = {w.name for w in CDM if io_plan(w, 64 * MiB, direct=False).reads_out_at_pass_ends}
    assert out == {"SEQ1M-Q8T1-read", "RND4K-Q32T1-read"}
    assert not any(io_plan(w, 64 * MiB, direct=True).reads_out_at_pass_ends for w in CDM)  # no pages left
    dd_read = Workload("DD-read", "read", 4 * KiB, iodepth=8, amount=64 * MiB)
    assert not io_plan(dd_read, 64 * MiB, direct=False).reads_out_at_pass_ends  # one pass: no pass end
    assert io_plan(Workload("DD-read", "read", 4 * KiB, iodepth=8), 64 * MiB, False).reads_out_at_pass_ends


def test_the_round_definition_says_what_a_round_did_that_earlier_ones_did_not() -> None:
    assert round_definition(False, pass_ends_drained=False) == ROUND_DEFINITION
    assert round_definition(True, pass_ends_drained=False) == ROUND_DEFINITION + LIMITED_DEFINITION_SUFFIX
    assert round_definition(False, pass_ends_drained=True) == ROUND_DEFINITION + DRAINED_DEFINITION_SUFFIX
    whole = round_definition(False, pass_ends_drained=False, completions_taken_together=True)
    assert whole == ROUND_DEFINITION + TAKEN_TOGETHER_DEFINITION_SUFFIX
    kinds = {
        round_definition(limited, drained, whole)
        for limited in (False, True)
        for drained in (False, True)
        for whole in (False, True)
    }
    assert len(kinds) == 8


def test_only_a_queued_direct_random_stream_has_fio_take_its_completions_together() -> None:
    batches = {
        (w.name, direct): io_plan(w, 64 * MiB, direct).completion_batch
        for w in CDM
        for direct in (True, False)
    }
    assert {key: batch for key, batch in batches.items() if batch != 1} == {
        ("RND4K-Q32T1-read", True): 32,
        ("RND4K-Q32T1-write", True): 32,
    }


def test_a_file_smaller_than_a_block_and_the_files_cycle_are_refused() -> None:
    with pytest.raises(ValueError, match="smaller than one 1048576-byte block"):
        io_plan(CDM[0], 512 * KiB, True)
    from pytest_encperf.workloads import SMALLFILES

    with pytest.raises(ValueError, match="not a block workload"):
        io_plan(SMALLFILES[0], 64 * MiB, False)


def test_realwork_tasks_are_timed_in_seconds_and_not_in_the_default_profile() -> None:
    from pytest_encperf.settings import resolve
    from pytest_encperf.workloads import PROFILES, profile_workloads, same_definition

    assert "realwork" not in resolve({}, {}, {}).profile  # the README's main job does not grow
    tasks = profile_workloads(["realwork"], 256 * MiB, tree_size=8 * MiB, tree_seed=5)
    assert [w.name for w in tasks] == ["archive", "untar", "metadata", "copy"]
    assert all(w.kind == "task" and w.unit == "s" and w.lower_is_better for w in tasks)
    assert all(w.tree_size == 8 * MiB and w.tree_seed == 5 for w in tasks)
    assert all(same_definition(p, w) for p, w in zip(PROFILES["realwork"].workloads, tasks, strict=True))
    block = profile_workloads(["cdm"], 256 * MiB, tree_size=8 * MiB, tree_seed=5)
    assert block == list(CDM) and not any(w.lower_is_better for w in block)


def test_a_task_workload_names_its_task() -> None:
    with pytest.raises(ValueError, match="names its task"):
        Workload("archive", "task", 1)
    with pytest.raises(ValueError, match="names its task"):
        Workload("SEQ", "read", MiB, task="archive")


def test_a_timed_function_is_a_task_of_its_own_name_never_a_built_in_task_or_io_pattern() -> None:
    """Workload.is_timed_function: the one predicate the reports, the saved entries, the rule names
    and the round meter ask (a timed function moves no bytes of its own)."""
    from pytest_encperf.usertiming import user_workload
    from pytest_encperf.workloads import FIO_JOB_MODE, REALWORK

    assert user_workload("test_insert[wal]").is_timed_function
    assert not any(w.is_timed_function for w in (*REALWORK, *CDM, *MATRIX, *DD))
    job = Workload("mine", FIO_JOB_MODE, 1, job=(("rw", "read"),))
    assert job.kind == "job" and not job.is_timed_function
