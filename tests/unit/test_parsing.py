"""The value parsers the option table and the backends' parameter tables share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_encperf import options
from pytest_encperf.parsing import parse_bool, parse_choice, parse_int, parse_int_choice


def test_int_with_range_and_step() -> None:
    assert parse_int(1, 4)(" 3 ") == 3
    assert parse_int(0, 2147468)("500000") == 500000
    assert parse_int(0, 9)("0007") == 7  # leading zeros are not digits of the number
    assert parse_int(8, 512, multiple_of=8)("256") == 256
    for bad, parse, expected in [
        ("5", parse_int(1, 4), "bad value '5': expected a whole number from 1 to 4"),
        ("-1", parse_int(0, 9), "bad value '-1': expected a whole number from 0 to 9"),
        ("1.5", parse_int(0, 9), "bad value '1.5': expected a whole number from 0 to 9"),
        ("+5", parse_int(0, 9), "bad value '+5': expected a whole number from 0 to 9"),
        ("\u0663", parse_int(0, 9), "bad value '\u0663': expected a whole number from 0 to 9"),
        ("9" * 400, parse_int(0, 9), f"bad value '{'9' * 400}': expected a whole number from 0 to 9"),
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
    for huge in ("4" * 400, "4" * 5000):  # Python's int() refuses over 4300 digits with its own words
        with pytest.raises(ValueError, match=r"expected one of 512, 4096$"):
            parse_int_choice((512, 4096))(huge)


@given(st.text(max_size=20) | st.integers(min_value=-(10**500), max_value=10**500).map(str))
def test_parse_int_returns_a_number_in_range_or_names_the_range(text: str) -> None:
    parse = parse_int(8, 4096, multiple_of=8)
    try:
        number = parse(text)
    except ValueError as exc:
        assert str(exc).endswith("expected a whole number from 8 to 4096, a multiple of 8")
    else:
        assert 8 <= number <= 4096 and number % 8 == 0


def test_one_switch_parser_for_options_and_backend_parameters() -> None:
    assert options.parse_bool is parse_bool
    assert [parse_bool(text) for text in ("1", "YES", "on", "true", "0", "no", "Off", "false")] == [
        True
    ] * 4 + [False] * 4
    with pytest.raises(
        ValueError, match=r"^bad switch value 'maybe': expected 1/true/yes/on or 0/false/no/off$"
    ):
        parse_bool("maybe")
