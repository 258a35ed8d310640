"""Mount tables as the kernel writes them: every octal escape decoded, fields split on spaces only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_encperf import mounting, mounttable
from pytest_encperf.mounttable import escape, parse, unescape


@pytest.mark.parametrize(
    ("written", "name"),
    [
        ("/var/tmp/a\\040b", "/var/tmp/a b"),
        ("/var/tmp/a\\011b", "/var/tmp/a\tb"),
        ("/var/tmp/a\\012b", "/var/tmp/a\nb"),
        ("/var/tmp/a\\134b", "/var/tmp/a\\b"),
        ("/var/tmp/a\\134040b", "/var/tmp/a\\040b"),  # an escaped backslash before digits stays one
        ("/var/tmp/\\040\\011\\012\\134", "/var/tmp/ \t\n\\"),
        ("/var/tmp/a\\08b\\7", "/var/tmp/a\\08b\\7"),  # not three octal digits: as written
    ],
)
def test_each_escaped_character_is_decoded(written: str, name: str) -> None:
    assert unescape(written) == name
    assert unescape(written.encode()) == name


def test_non_ascii_names_come_back_as_text() -> None:
    """The kernel writes non-ASCII bytes as they are (UTF-8 names); an octal escape of such a
    byte decodes to that byte too; bytes that are no UTF-8 round-trip through os.fsencode."""
    assert unescape("/var/tmp/é\\040ü-日本".encode()) == "/var/tmp/é ü-日本"
    assert unescape("/var/tmp/\\303\\251") == "/var/tmp/é"
    assert os.fsencode(unescape(b"/var/tmp/\xff\\040x")) == b"/var/tmp/\xff x"


def test_a_table_splits_on_spaces_and_newlines_only() -> None:
    """A carriage return, form feed or non-ASCII space in a name is written as it is: no
    separator (str.split() and splitlines() would cut the name there)."""
    data = "tmpfs /var/tmp/a\rb\x0cc\u2028d\\040e tmpfs rw 0 0\n/dev/loop3 /mnt/x ext4 rw 0 0\n".encode()
    assert parse(data) == [
        ["tmpfs", "/var/tmp/a\rb\x0cc\u2028d e", "tmpfs", "rw", "0", "0"],
        ["/dev/loop3", "/mnt/x", "ext4", "rw", "0", "0"],
    ]


@given(st.text())
def test_escape_then_unescape_is_the_name(name: str) -> None:
    written = escape(name)
    assert not any(char in written for char in " \t\n")
    assert unescape(written) == name


@given(st.lists(st.text(min_size=1), min_size=1, max_size=4))
def test_a_table_of_any_mount_points_reads_back_exactly(points: list[str]) -> None:
    data = "".join(f"tmpfs {escape(point)} tmpfs rw 0 0\n" for point in points)
    assert [fields[1] for fields in parse(os.fsencode(data))] == points


def test_mounts_under_and_is_mounted_read_escaped_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = tmp_path / "a b\tc\nd\\e-é"
    (odd / "mnt").mkdir(parents=True)
    table = tmp_path / "mounts"
    table.write_bytes(os.fsencode(f"/dev/loop9 {escape(str(odd / 'mnt'))} ext4 rw 0 0\n"))
    monkeypatch.setattr(mounttable, "MOUNTS", table)
    assert mounting.mounts_under(odd) == [odd / "mnt"]
    assert mounting.is_mounted(odd / "mnt") and mounting.mount_type(odd / "mnt") == "ext4"
    assert mounting.filesystem_type(odd / "mnt" / "file") == "ext4"
