"""The value parsers the option table and the backends' parameter tables share."""

from __future__ import annotations

import pytest

from pytest_encperf import settings
from pytest_encperf.parsing import parse_bool, parse_choice, parse_int, parse_int_choice


def test_int_with_range_and_step() -> None:
    assert parse_int(1, 4)(" 3 ") == 3
    assert parse_int(0)("500000") == 500000
    assert parse_int(8, 512, multiple_of=8)("256") == 256
    for bad, parse, expected in [
        ("5", parse_int(1, 4), "bad value '5': expected a whole number from 1 to 4"),
        ("-1", parse_int(0), "bad value '-1': expected a whole number >= 0"),
        ("1.5", parse_int(0), "bad value '1.5': expected a whole number >= 0"),
        (
            "12",
            parse_int(8, 512, multiple_of=8),
            "bad value '12': expected a whole number from 8 to 512, a multiple of 8",
        ),
    ]:
        with pytest.raises(ValueError) as refused:
            parse(bad)
        assert str(refused.value) == expected


def test_choices_of_text_and_numbers() -> None:
    assert parse_choice(("kernel", "fuse"))("fuse") == "fuse"
    assert parse_int_choice((512, 4096))("4096") == 4096
    with pytest.raises(ValueError, match=r"^bad value 'Fuse': expected one of kernel, fuse$"):
        parse_choice(("kernel", "fuse"))("Fuse")
    with pytest.raises(ValueError, match=r"^bad value '1024': expected one of 512, 4096$"):
        parse_int_choice((512, 4096))("1024")


def test_one_switch_parser_for_options_and_backend_parameters() -> None:
    assert settings.parse_bool is parse_bool
    assert [parse_bool(text) for text in ("1", "YES", "on", "true", "0", "no", "Off", "false")] == [
        True
    ] * 4 + [False] * 4
    with pytest.raises(
        ValueError, match=r"^bad switch value 'maybe': expected 1/true/yes/on or 0/false/no/off$"
    ):
        parse_bool("maybe")
