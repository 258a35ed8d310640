"""openfiles: other processes' open descriptors and memory maps, on a /proc laid out in a directory."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pytest_encperf import openfiles


def fake_proc(tmp_path: Path) -> tuple[Path, Path, Path]:
    """/proc with pid 10 holding ``opened`` by descriptor and ``mapped`` by two mappings, and
    this process (never reported)."""
    proc, opened, mapped = tmp_path / "proc", tmp_path / "opened", tmp_path / "mapped"
    opened.write_text("")
    mapped.write_text("")
    info = os.stat(mapped)
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}"
    for pid in (10, os.getpid()):
        entry = proc / str(pid)
        (entry / "fd").mkdir(parents=True)
        (entry / "map_files").mkdir()
        (entry / "comm").write_text("holder\n")
        (entry / "fd" / "3").symlink_to(opened)
        (entry / "maps").write_text(
            f"00400000-00452000 r-xp 00000000 {device} {info.st_ino}                  {mapped}\n"
            f"7f0000001000-7f0000002000 rw-s 00001000 {device} {info.st_ino}  {mapped}\n"
            "7f0000003000-7f0000004000 rw-p 00000000 00:00 0 \n"
        )
        (entry / "map_files" / "400000-452000").symlink_to(mapped)
        (entry / "map_files" / "7f0000001000-7f0000002000").symlink_to(mapped)
    (proc / "self").mkdir()
    return proc, opened, mapped


def test_descriptors_and_one_mapping_per_file_of_other_processes(tmp_path: Path) -> None:
    proc, opened, mapped = fake_proc(tmp_path)
    held = [(h.pid, h.info.st_ino, h.mapped) for h in openfiles.held_files(proc)]
    # the maps line is padded (00400000), the map_files name is not (400000)
    assert held == [(10, os.stat(opened).st_ino, False), (10, os.stat(mapped).st_ino, True)]


def test_holders_say_when_a_process_only_maps_the_file(tmp_path: Path) -> None:
    proc, opened, mapped = fake_proc(tmp_path)
    names = {os.stat(opened).st_ino: "opened", os.stat(mapped).st_ino: "mapped"}
    assert openfiles.holders(lambda info: names.get(info.st_ino), proc) == {
        "opened": ["pid 10 (holder)"],
        "mapped": ["pid 10 (holder) as a memory map"],
    }


def test_a_process_that_both_opens_and_maps_a_file_is_named_once(tmp_path: Path) -> None:
    proc, _, _ = fake_proc(tmp_path)
    assert openfiles.holders(lambda info: "any", proc) == {"any": ["pid 10 (holder)"]}


@given(st.text())
def test_any_maps_text_is_read_without_error(text: str) -> None:
    # read from /proc: whatever it holds, the walk goes on
    assert isinstance(openfiles.mapping_names(text), list)
