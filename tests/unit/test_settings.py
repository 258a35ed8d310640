"""Option parsing and precedence (pure code, no pytest session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_encperf.backends import BackendSpec, parse_backend_list
from pytest_encperf.optionparsers import parse_duration, parse_rounds, parse_size
from pytest_encperf.roundplan import WARMUP_SECONDS, RoundPlan
from pytest_encperf.settings import OPTIONS, resolve
from pytest_encperf.workloads import GiB, MiB


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256MiB", 256 * MiB),
        ("1GiB", GiB),
        ("512M", 512 * MiB),
        ("1G", GiB),
        ("1048576", MiB),
        ("2 MiB", 2 * MiB),
    ],
)
def test_parse_size_accepts_binary_units(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "12Q", "-5MiB", "0", "1000KB", "1.5KiB", "MiB"])
def test_parse_size_rejects_with_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected e\.g\. 256MiB|whole number of MiB"):
        parse_size(text)


@pytest.mark.parametrize(("text", "expected"), [("2", 2.0), ("1.5s", 1.5), ("500ms", 0.5)])
def test_parse_duration(text: str, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "fast", "2h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0", "-3", "two", "1.5"])
def test_parse_rounds_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"whole number from 1 to 10000"):
        parse_rounds(text)


def test_backend_spec_round_trips() -> None:
    spec = BackendSpec.parse("fscrypt:contents=adiantum,filenames=adiantum")
    assert spec.name == "fscrypt"
    assert spec.param_dict == {"contents": "adiantum", "filenames": "adiantum"}
    assert str(spec) == "fscrypt:contents=adiantum,filenames=adiantum"


def test_backend_list_keeps_parameters_with_their_spec() -> None:
    specs = parse_backend_list("fscrypt:contents=adiantum,filenames=adiantum,plain")
    assert [str(s) for s in specs] == ["fscrypt:contents=adiantum,filenames=adiantum", "plain"]


def test_backend_list_auto_excludes_baseline_and_dedupes() -> None:
    names = [str(s) for s in parse_backend_list("auto,fscrypt")]
    assert "plain" not in names and names.count("fscrypt") == 1
    assert names == sorted(names)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nosuch", "unknown backend 'nosuch' \\(available: .*fscrypt.*plain"),
        ("fscrypt:cipher=aes", "has no parameter 'cipher'"),
        ("fscrypt:contents", "expected key=value"),
        ("Bad Name", "expected name"),
        ("", "empty backend list"),
        ("fscrypt:contents=rot13", "fscrypt: contents: bad value 'rot13': expected one of"),
    ],
)
def test_backend_list_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_backend_list(text)


def test_precedence_cli_then_env_then_ini_then_default(tmp_path: Path) -> None:
    env = {"ENCPERF_ROUNDS": "5", "ENCPERF_SIZE": "8MiB"}
    ini = {"rounds": "7", "size": "16MiB", "runtime": "3s"}
    settings = resolve({"rounds": "2"}, ini, env)
    assert settings.rounds == 2 and settings.sources["rounds"] == "--encperf-rounds"
    assert settings.size == 8 * MiB and settings.sources["size"] == "ENCPERF_SIZE"
    assert settings.runtime == 3.0 and settings.sources["runtime"] == "encperf_runtime"
    assert settings.engine == "auto" and settings.sources["engine"] == "default"


def test_the_round_settings_travel_as_one_round_plan() -> None:
    settings = resolve({"rounds": "2", "warmup": "0"}, {"size": "16MiB", "runtime": "3s"}, {})
    plan = settings.round_plan
    assert plan == RoundPlan(size=16 * MiB, runtime=3.0, rounds=2, warmup=0)
    assert plan.warmup_runtime == WARMUP_SECONDS  # a warm-up round lasts at most a second
    assert RoundPlan(MiB, 0.5, 1, 1).warmup_runtime == 0.5
    with pytest.raises(AttributeError):
        plan.rounds = 3  # type: ignore[misc]  # frozen: one value for the whole run


def test_resolve_names_option_and_source() -> None:
    with pytest.raises(ValueError, match=r"--encperf-size \(from ENCPERF_SIZE\): bad size 'huge'"):
        resolve({}, {}, {"ENCPERF_SIZE": "huge"})


def test_gate_options_resolve_with_precedence(tmp_path: Path) -> None:
    cli = {"autosave": "1", "fail": "seq-read:5%", "compare": "latest", "json": str(tmp_path / "r.json")}
    ini = {"autosave": "no", "fail": "50%", "storage": str(tmp_path / "runs"), "markdown": ""}
    settings = resolve(cli, ini, environ={"ENCPERF_SAVE": "main", "ENCPERF_AUTOSAVE": "off"})
    assert settings.autosave is True  # the bare flag beats the environment's "off"
    assert settings.save == "main"
    assert [rule.text for rule in settings.fail] == ["seq-read:5%"]
    assert settings.storage == tmp_path / "runs"
    assert settings.compare == "latest"
    assert settings.json == tmp_path / "r.json"
    assert settings.markdown is None
    assert settings.sources["autosave"] == "--encperf-autosave"


def test_gate_options_default_to_off() -> None:
    settings = resolve({}, {}, environ={})
    assert (settings.save, settings.autosave, settings.compare, settings.json, settings.markdown) == (
        None,
        False,
        None,
        None,
        None,
    )
    assert settings.fail == [] and settings.max_overhead == []
    assert settings.storage == Path(".encperf")


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("autosave", "maybe", "bad switch value 'maybe'"),
        ("fail", "10", "[BACKEND:][WORKLOAD:][METRIC:]PERCENT%"),
        ("max-overhead", "no such:5%", "unknown part 'no such'"),  # a well-formed name: checked later
        ("compare", "a b", "bad reference run 'a b'"),
        ("save", "a/b", "bad run name"),
    ],
)
def test_gate_options_reject_with_accepted_forms(option: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"--encperf-{option}") as info:
        resolve({option: value}, {}, environ={})
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "size"), [("1TB", 10**12), ("500GB", 500 * 10**9), ("2TiB", 2 * 2**40), ("1.5tb", 15 * 10**11)]
)
def test_project_size_takes_decimal_and_binary_units(text: str, size: int) -> None:
    from pytest_encperf.optionparsers import parse_project_size

    assert parse_project_size(text) == size


def test_project_size_refuses_nonsense_with_the_accepted_forms() -> None:
    from pytest_encperf.optionparsers import parse_project_size

    with pytest.raises(ValueError, match=r"expected e\.g\. 1TB, 500GB, 2TiB"):
        parse_project_size("lots")
    assert resolve({}, {}, {}).project_size == 10**12
    assert resolve({}, {"inplace": "yes", "project-size": "2TB"}, {}).project_size == 2 * 10**12


def test_tree_options_resolve_with_precedence_and_defaults() -> None:
    settings = resolve({"tree-seed": "7"}, {"tree-seed": "3", "tree-size": "16MiB"}, {})
    assert settings.tree_seed == 7 and settings.sources["tree-seed"] == "--encperf-tree-seed"
    assert settings.tree_size == 16 * MiB and settings.sources["tree-size"] == "encperf_tree_size"
    defaults = resolve({}, {}, {"ENCPERF_TREE_SIZE": "2MiB"})
    assert defaults.tree_size == 2 * MiB and defaults.tree_seed == 1
    with pytest.raises(ValueError, match=r"--encperf-tree-seed: bad seed 'x'"):
        resolve({"tree-seed": "x"}, {}, {})


def test_ladder_is_off_by_default_and_resolves_cli_then_env_then_ini() -> None:
    assert resolve({}, {}, environ={}).ladder is False
    assert resolve({}, {"ladder": "yes"}, environ={}).sources["ladder"] == "encperf_ladder"
    from_env = resolve({}, {"ladder": "yes"}, environ={"ENCPERF_LADDER": "no"})
    assert from_env.ladder is False and from_env.sources["ladder"] == "ENCPERF_LADDER"
    typed = resolve({"ladder": "1"}, {"ladder": "no"}, environ={"ENCPERF_LADDER": "no"})
    assert typed.ladder is True and typed.sources["ladder"] == "--encperf-ladder"
    with pytest.raises(ValueError, match=r"--encperf-ladder \(from ENCPERF_LADDER\)"):
        resolve({}, {}, environ={"ENCPERF_LADDER": "perhaps"})


def test_allow_other_hardware_is_off_by_default_and_resolves_cli_then_env_then_ini() -> None:
    assert resolve({}, {}, environ={}).allow_other_hardware is False
    from_ini = resolve({}, {"allow-other-hardware": "yes"}, environ={})
    assert from_ini.allow_other_hardware is True
    assert from_ini.sources["allow-other-hardware"] == "encperf_allow_other_hardware"
    from_env = resolve({}, {"allow-other-hardware": "yes"}, environ={"ENCPERF_ALLOW_OTHER_HARDWARE": "no"})
    assert from_env.allow_other_hardware is False
    assert from_env.sources["allow-other-hardware"] == "ENCPERF_ALLOW_OTHER_HARDWARE"
    typed = resolve({"allow-other-hardware": "1"}, {}, environ={"ENCPERF_ALLOW_OTHER_HARDWARE": "no"})
    assert typed.allow_other_hardware is True
    assert typed.sources["allow-other-hardware"] == "--encperf-allow-other-hardware"
    with pytest.raises(
        ValueError, match=r"--encperf-allow-other-hardware \(from ENCPERF_ALLOW_OTHER_HARDWARE\)"
    ):
        resolve({}, {}, environ={"ENCPERF_ALLOW_OTHER_HARDWARE": "perhaps"})


def test_lifecycle_cycles_default_to_one_and_follow_the_precedence() -> None:
    assert resolve({}, {}, environ={}).lifecycle_cycles == 1  # the benchmark volume's cycle alone
    ini = {"lifecycle-cycles": "5"}
    from_env = resolve({}, ini, {"ENCPERF_LIFECYCLE_CYCLES": "4"})
    assert (from_env.lifecycle_cycles, from_env.sources["lifecycle-cycles"]) == (
        4,
        "ENCPERF_LIFECYCLE_CYCLES",
    )
    from_cli = resolve({"lifecycle-cycles": "3"}, ini, {"ENCPERF_LIFECYCLE_CYCLES": "4"})
    assert (from_cli.lifecycle_cycles, from_cli.sources["lifecycle-cycles"]) == (
        3,
        "--encperf-lifecycle-cycles",
    )
    from_ini = resolve({}, ini, {})
    assert (from_ini.lifecycle_cycles, from_ini.sources["lifecycle-cycles"]) == (
        5,
        "encperf_lifecycle_cycles",
    )


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_lifecycle_cycles_refuse_anything_but_a_whole_number_from_one(value: str) -> None:
    with pytest.raises(
        ValueError, match=r"--encperf-lifecycle-cycles.*expected a whole number from 1 to 1000"
    ):
        resolve({"lifecycle-cycles": value}, {}, environ={})


def test_max_overhead_refuses_a_lifecycle_rule_and_says_where_it_belongs() -> None:
    with pytest.raises(
        ValueError, match=r"lifecycle:50%: a life-cycle rule compares with saved runs.*--encperf-fail"
    ):
        resolve({"max-overhead": "lifecycle:50%"}, {}, {})
    assert resolve({"fail": "lifecycle:50%"}, {}, {}).fail[0].metric == "lifecycle"


HUGE = "9" * 400

# every numeric option: a number beyond its range is refused naming the option and the range
RANGES = {
    "size": "at least 1MiB and at most 1PiB",
    "tree-size": "at least 1MiB and at most 1PiB",
    "project-size": "from 1 byte to 1EB",
    "runtime": "more than zero and at most 86400s",
    "steady-budget": "more than zero and at most 86400s",
    "confirm-budget": "more than zero and at most 86400s",
    "quiet-wait": "more than zero and at most 86400s",
    "busy-threshold": "more than zero and at most 8192",
    "rounds": "from 1 to 10000",
    "save-rounds": "from 1 to 10000",
    "warmup": "from 0 to 10000",
    "lifecycle-cycles": "from 1 to 1000",
    "history": "from 0 to 1000",
    "volumes": "from 1 to 20",
    "tree-seed": "from 0 to 9223372036854775807",
    "steady-cv": "expected off, or a CV",
    "precision": "percentage points more than 0 and at most 100",
    "sweep-margin": "expected a relative difference",
}


@pytest.mark.parametrize("option", RANGES)
@pytest.mark.parametrize("value", [HUGE, HUGE + ".5", "9" * 5000])
def test_a_huge_number_is_refused_naming_the_option_and_its_range(option: str, value: str) -> None:
    with pytest.raises(ValueError) as refused:
        resolve({option: value}, {}, environ={})
    assert str(refused.value).startswith(f"--encperf-{option}: bad ")
    assert RANGES[option] in str(refused.value)


@pytest.mark.parametrize("value", [HUGE, f"x86_64-0d4169638225/{HUGE}", "9" * 5000, f"{HUGE}!"])
def test_a_huge_run_number_to_compare_with_is_refused(value: str) -> None:
    """It reached int() at the end of the run (over 4300 digits: a ValueError there)."""
    with pytest.raises(ValueError, match=r"a run number is a whole number from 1 to 999999999$"):
        resolve({"compare": value}, {}, environ={})
    assert resolve({"compare": "x86_64-0d4169638225/12"}, {}, environ={}).compare == "x86_64-0d4169638225/12"


@pytest.mark.parametrize("option", ["size", "tree-size", "project-size"])
def test_a_huge_size_with_a_unit_is_refused_naming_the_range(option: str) -> None:
    with pytest.raises(ValueError, match=RANGES[option]):
        resolve({option: HUGE + "TiB"}, {}, environ={})


def test_every_numeric_option_has_a_range() -> None:
    """Each option that reads a number is in RANGES, so the test above covers a new one too."""
    numeric = set()
    for option in OPTIONS:
        for text in ("1", "1048576", "0.5"):  # a count, a size in bytes, a fraction
            try:
                value = option.parse(text)
            except ValueError:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                numeric.add(option.name)
    assert numeric == set(RANGES)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (f"luks2:key-size={HUGE}", "luks2: key-size: bad value"),
        (f"luks2:sector-size={HUGE}", "luks2: sector-size: bad value"),
        (f"veracrypt:pim={HUGE}", "expected a whole number from 0 to 2147468"),
        (f"ecryptfs:key-bytes={HUGE}", "expected a whole number from 1 to 64"),
        (f"gocryptfs:scryptn={HUGE}", "expected a whole number from 10 to 28"),
        (f"qemu-luks:key-size={HUGE}", "expected one of 128, 256, 384, 512"),
        (f"tcrypt:device=/dev/x,veracrypt-pim={HUGE}", "expected a whole number from 0 to 2147468"),
        (f"dm-plain:key-size={HUGE}", "expected a whole number from 8 to 512, a multiple of 8"),
        (f"cryfs:blocksize={HUGE}", "expected a whole number from 4096 to 16777216"),
        (f"securefs:format={HUGE}", "expected a whole number from 1 to 4"),
    ],
)
def test_a_huge_backend_parameter_is_refused_naming_its_range(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^--encperf-backends: .*{message}"):
        resolve({"backends": spec}, {}, environ={})


def test_luks_key_size_has_an_upper_limit() -> None:
    with pytest.raises(ValueError, match="expected a whole number from 8 to 4096, a multiple of 8"):
        resolve({"backends": "luks2:key-size=8192"}, {}, environ={})
    assert (
        str(resolve({"backends": "luks2:key-size=512"}, {}, environ={}).backends[0]) == "luks2:key-size=512"
    )


PARTITION = {"target": "partition", "device": "/dev/sdz1", "allow-destroy": "/dev/sdz1"}
TYPED = ["--encperf-target=partition", "--encperf-device=/dev/sdz1", "--encperf-allow-destroy=/dev/sdz1"]


def test_consent_from_an_argument_file_names_the_file(tmp_path: Path) -> None:
    """It was said to come from addopts."""
    args = tmp_path / "args.txt"
    args.write_text("--encperf-force=1\n")
    outer = tmp_path / "outer.txt"
    outer.write_text(f"-q\n@{args}\n")
    for typed_file in (f"@{args}", f"@{outer}"):
        with pytest.raises(ValueError) as refused:
            resolve({**PARTITION, "force": "1"}, {}, {}, typed=[*TYPED, typed_file])
        assert str(refused.value) == (
            "--encperf-force: consent to erase a device is taken from this run's command line only, "
            f"not from the argument file {typed_file}: remove it there and type --encperf-force=... "
            "with the command"
        )


def test_consent_from_an_argument_file_with_the_value_on_its_own_line(tmp_path: Path) -> None:
    args = tmp_path / "args.txt"
    args.write_text(
        "--encperf-target=partition\n--encperf-device=/dev/sdz1\n--encperf-allow-destroy\n/dev/sdz1\n"
    )
    with pytest.raises(ValueError, match=f"--encperf-allow-destroy: .* not from the argument file @{args}:"):
        resolve(PARTITION, {}, {}, typed=[f"@{args}"])


def test_consent_not_found_in_an_argument_file_names_every_place_it_can_have_come_from(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match=r"not from addopts, PYTEST_ADDOPTS or an argument file \(@file\):"):
        resolve({**PARTITION, "force": "1"}, {}, {}, typed=[*TYPED, f"@{tmp_path / 'unreadable'}"])
    with pytest.raises(ValueError, match=r"not from addopts or PYTEST_ADDOPTS:"):
        resolve({**PARTITION, "force": "1"}, {}, {}, typed=TYPED)


def test_empty_values_the_readme_describes() -> None:
    """Command line: always refused. Ini: refused unless off is a value of the option. An empty
    environment variable: unset."""
    for option in ("target", "backends", "device", "json", "verify", "size"):
        with pytest.raises(ValueError, match=f"^--encperf-{option}: "):
            resolve({option: ""}, {}, environ={})
    with pytest.raises(ValueError, match=r"^--encperf-size \(from encperf_size\): bad size ''"):
        resolve({}, {"size": ""}, environ={})
    assert resolve({}, {"json": " "}, environ={}).json is None
    from_env = resolve({}, {}, environ={"ENCPERF_TARGET": "", "ENCPERF_SIZE": ""})
    assert (from_env.target, from_env.size) == ("container", 256 * MiB)
    assert from_env.sources["target"] == "default"
    with pytest.raises(ValueError, match=r"^--encperf-profile: bad profile 'cdm,': expected a comma list"):
        resolve({"profile": "cdm,"}, {}, environ={})


def test_precision_is_off_by_default_and_follows_the_precedence() -> None:
    assert resolve({}, {}, environ={}).precision is None
    ini = {"precision": "5%"}
    assert resolve({}, ini, environ={}).precision == 5.0
    from_env = resolve({}, ini, environ={"ENCPERF_PRECISION": "2.5"})
    assert (from_env.precision, from_env.sources["precision"]) == (2.5, "ENCPERF_PRECISION")
    typed = resolve({"precision": "off"}, ini, environ={"ENCPERF_PRECISION": "2%"})
    assert typed.precision is None


@pytest.mark.parametrize("value", ["0.5%", "2", "2%", " 10 % ", "100%"])
def test_precision_takes_percentage_points(value: str) -> None:
    assert resolve({"precision": value}, {}, environ={}).precision == float(value.strip(" %"))


@pytest.mark.parametrize("value", ["-2%", "101%", "two", "2x", "0.0"])
def test_precision_refuses_what_is_not_points_from_0_to_100(value: str) -> None:
    with pytest.raises(ValueError, match=r"--encperf-precision: bad precision .*at most 100 such as 2%"):
        resolve({"precision": value}, {}, environ={})


def test_rounds_default_to_two_whole_a_b_b_a_blocks() -> None:
    assert resolve({}, {}, environ={}).rounds == 4
