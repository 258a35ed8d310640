"""Bad input: every malformed option, backend spec and situation gets a clear message, no traceback,
and nothing is created on the target before the refusal."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pytest_encperf.report.drawing import matplotlib_problem

BENCHMARK = """
def test_workload(encperf, encperf_workload):
    encperf.run(encperf_workload)
"""

HUGE = "9" * 400  # a number no option or parameter takes: it overflowed a float before


@dataclass(frozen=True)
class Bad:
    args: tuple[str, ...]
    message: str
    env: dict[str, str] = field(default_factory=dict)
    ini: str = ""


TABLE: dict[str, Bad] = {
    # sizes
    "size-unit": Bad(
        ("--encperf-size=12Q",), "--encperf-size: bad size '12Q': expected e.g. 256MiB, 1GiB, 512M"
    ),
    "size-zero": Bad(("--encperf-size=0",), "bad size '0': must be a whole number of MiB, at least 1MiB"),
    "size-fraction": Bad(("--encperf-size=1.5MiB",), "bad size '1.5MiB': must be a whole number of MiB"),
    "size-negative": Bad(("--encperf-size=-1GiB",), "bad size '-1GiB': expected e.g. 256MiB"),
    "size-words": Bad(
        ("--encperf-size=big",), "bad size 'big': expected e.g. 256MiB, 1GiB, 512M or a byte count"
    ),
    "size-no-room": Bad(
        ("--encperf-target=directory", "--encperf-size=100000GiB"),
        "MiB free, this run needs 204800000 MiB (the baseline and one backend volume of 102400000 MiB each)",
    ),
    "size-400-digits": Bad(
        (f"--encperf-size={HUGE}",),
        f"--encperf-size: bad size '{HUGE}': must be a whole number of MiB, at least 1MiB and at most 1PiB",
    ),
    "project-size-400-digits": Bad(
        (f"--encperf-project-size={HUGE}",),
        "': expected e.g. 1TB, 500GB, 2TiB or a byte count, from 1 byte to 1EB",
    ),
    # durations and counts
    "runtime-400-digits": Bad(
        (f"--encperf-runtime={HUGE}",),
        f"--encperf-runtime: bad duration '{HUGE}': must be more than zero and at most 86400s (a day)",
    ),
    "rounds-400-digits": Bad(
        (f"--encperf-rounds={HUGE}",), f"bad rounds '{HUGE}': expected a whole number from 1 to 10000"
    ),
    "runtime-word": Bad(
        ("--encperf-runtime=soon",), "bad duration 'soon': expected seconds such as 2, 1.5s or 500ms"
    ),
    "runtime-zero": Bad(("--encperf-runtime=0",), "bad duration '0': must be more than zero"),
    "runtime-minutes": Bad(("--encperf-runtime=5min",), "bad duration '5min': expected seconds"),
    "rounds-negative": Bad(
        ("--encperf-rounds=-2",), "bad rounds '-2': expected a whole number from 1 to 10000"
    ),
    "rounds-zero": Bad(("--encperf-rounds=0",), "bad rounds '0': expected a whole number from 1 to 10000"),
    "rounds-fraction": Bad(
        ("--encperf-rounds=2.5",), "bad rounds '2.5': expected a whole number from 1 to 10000"
    ),
    # choices, lists, switches
    "target": Bad(
        ("--encperf-target=cloud",), "bad value 'cloud': expected one of container, partition, directory"
    ),
    "engine": Bad(("--encperf-engine=dd",), "bad value 'dd': expected one of fio, native, auto"),
    "profile": Bad(("--encperf-profile=atto9",), "bad profile 'atto9': expected a comma list of cdm"),
    "profile-empty": Bad(("--encperf-profile=,",), "bad profile ',': expected a comma list of"),
    "verify": Bad(
        ("--encperf-verify=maybe",), "bad switch value 'maybe': expected 1/true/yes/on or 0/false/no/off"
    ),
    # empty values: never a silent default
    "target-empty": Bad(
        ("--encperf-target=",),
        "--encperf-target: bad value '': expected one of container, partition, directory",
    ),
    "backends-empty": Bad(("--encperf-backends=",), "--encperf-backends: empty backend list: expected e.g."),
    "device-empty": Bad(
        ("--encperf-device=",),
        "--encperf-device: empty value: give one (DEV) or leave the option out (default: off)",
    ),
    "json-empty": Bad(("--encperf-json=",), "--encperf-json: empty value: give one (PATH)"),
    "profile-empty-item": Bad(
        ("--encperf-profile=cdm,,cdm",), "bad profile 'cdm,,cdm': expected a comma list"
    ),
    "fail-empty-item": Bad(
        ("--encperf-fail=10%,,5%",), "--encperf-fail: bad expression list '10%,,5%': an empty item"
    ),
    "ini-target-empty": Bad(
        (), "--encperf-target (from encperf_target): bad value '': expected one of", ini="encperf_target ="
    ),
    # outputs that cannot be written: found before the first volume, not after the run
    "json-under-a-file": Bad(
        ("--encperf-json=test_bench.py/out.json",),
        "--encperf-json test_bench.py/out.json: cannot be written: test_bench.py is a regular file, "
        "not a directory (checked before anything is measured",
    ),
    "markdown-is-a-directory": Bad(
        ("--encperf-markdown=.",),
        "--encperf-markdown .: cannot be written: . is a directory, not a regular file",
    ),
    "html-in-proc": Bad(
        ("--encperf-html=/proc/encperf.html",),
        "--encperf-html /proc/encperf.html: cannot be written: /proc: a file cannot be created there",
    ),
    "storage-is-a-file": Bad(
        ("--encperf-save=main", "--encperf-storage=test_bench.py"),
        "--encperf-storage test_bench.py: cannot be written: test_bench.py is a regular file, "
        "not a directory",
    ),
    "storage-in-proc": Bad(
        ("--encperf-autosave", "--encperf-storage=/proc/encperf/runs"),
        "--encperf-storage /proc/encperf/runs: cannot be written: /proc: a directory (for "
        "/proc/encperf/runs) cannot be created there",
    ),
    # directories
    "dir-missing": Bad(("--encperf-dir=/nonexistent/encperf",), "'/nonexistent/encperf': it does not exist"),
    "dir-is-a-file": Bad(
        ("--encperf-dir=/proc/version",), "bad directory '/proc/version': it does not exist"
    ),
    # backend specs
    "backend-unknown": Bad(("--encperf-backends=nosuch",), "unknown backend 'nosuch' (available: "),
    "backend-upper-case": Bad(
        ("--encperf-backends=Fscrypt",), "bad backend spec 'Fscrypt': expected name[:key=value"
    ),
    "backend-empty-item": Bad(
        ("--encperf-backends=plain,,",), "bad backend list 'plain,,': an empty item (two commas in a row"
    ),
    "backend-empty-middle": Bad(
        ("--encperf-backends=plain,,luks2",), "bad backend list 'plain,,luks2': an empty item"
    ),
    "backend-colon-only": Bad(
        ("--encperf-backends=luks2:",),
        "bad backend spec 'luks2:': a ':' with no parameters after it: write luks2 alone, or luks2:key=value",
    ),
    "param-400-digits": Bad(
        (f"--encperf-backends=luks2:key-size={HUGE}",),
        "': expected a whole number from 8 to 4096, a multiple of 8",
    ),
    "param-no-value": Bad(
        ("--encperf-backends=fscrypt:contents",),
        "bad parameter 'contents' in backend spec 'fscrypt:contents': expected key=value",
    ),
    "param-empty-value": Bad(
        ("--encperf-backends=fscrypt:contents=",), "bad parameter 'contents=' in backend spec"
    ),
    "param-no-key": Bad(("--encperf-backends=fscrypt:=aes",), "bad parameter '=aes' in backend spec"),
    "param-twice": Bad(
        ("--encperf-backends=fscrypt:contents=adiantum,contents=aes-256-xts",),
        "parameter 'contents' given twice in backend spec",
    ),
    "param-unknown": Bad(
        ("--encperf-backends=fscrypt:colour=red",),
        "backend 'fscrypt' has no parameter 'colour' (accepted: contents, filenames)",
    ),
    "param-on-plain": Bad(
        ("--encperf-backends=plain:x=1",), "backend 'plain' has no parameter 'x' (accepted: none)"
    ),
    "fscrypt-contents": Bad(
        ("--encperf-backends=fscrypt:contents=rot13",),
        "fscrypt: contents: bad value 'rot13': expected one of aes-256-xts, adiantum, aes-128-cbc, sm4-xts",
    ),
    "fscrypt-filenames": Bad(
        ("--encperf-backends=fscrypt:filenames=rot13",),
        "fscrypt: filenames: bad value 'rot13': expected one of aes-256-cts",
    ),
    # the other sources name themselves
    "env-rounds": Bad(
        (), "--encperf-rounds (from ENCPERF_ROUNDS): bad rounds 'many'", env={"ENCPERF_ROUNDS": "many"}
    ),
    "env-backends": Bad(
        (), "(from ENCPERF_BACKENDS): unknown backend 'nope'", env={"ENCPERF_BACKENDS": "nope"}
    ),
    "ini-size": Bad((), "--encperf-size (from encperf_size): bad size 'huge'", ini="encperf_size = huge"),
}


def test_table_is_large_enough() -> None:
    assert len(TABLE) >= 25


@pytest.mark.parametrize("case", TABLE.values(), ids=TABLE.keys())
def test_bad_input_is_a_usage_error_with_accepted_forms(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, case: Bad
) -> None:
    if any(arg.startswith("--encperf-html") for arg in case.args) and matplotlib_problem():
        pytest.skip(f"--encperf-html needs matplotlib: {matplotlib_problem()}")
    pytester.makepyfile(test_bench=BENCHMARK)
    if case.ini:
        pytester.makeini(f"[pytest]\n{case.ini}\n")
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    has_dir = any(arg.startswith("--encperf-dir") for arg in case.args)
    dir_args = () if has_dir else (f"--encperf-dir={pytester.path}",)
    result = pytester.runpytest(*dir_args, *case.args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert case.message in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    created = sorted(p.name for p in pytester.path.iterdir() if p.name.startswith((".encperf", "encperf-")))
    assert created == [], "something was created before the refusal"


def test_room_is_not_checked_when_only_collecting(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCHMARK)
    result = pytester.runpytest(
        "--encperf-target=directory", f"--encperf-dir={pytester.path}", "--encperf-size=100000GiB", "--co"
    )
    assert result.ret == pytest.ExitCode.OK


def test_the_saved_run_directory_is_checked_only_when_the_run_saves(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_other="def test_x():\n    pass\n")
    result = pytester.runpytest("--encperf-storage=/proc/encperf", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    result = pytester.runpytest(
        "--encperf-storage=/proc/encperf", "--encperf-save=x", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--encperf-storage /proc/encperf: cannot be written" in result.stderr.str()


HANGING_CONFTEST = """
from pytest_encperf import host
from pytest_encperf.backends import BackendBase, Volume

class Hanging(BackendBase):
    def problems(self, target):
        return []

    def create(self, target, workdir):
        volume = Volume(self, target, workdir)
        # a tool waiting for a passphrase on a terminal, or stuck on a device
        host.run(["sh", "-c", "sleep 60 & sleep 60"], timeout=0.5)
        return volume

    def mount(self, volume):
        volume.data_dir = volume.workdir
        return volume.data_dir

    def describe(self, volume):
        return {}

def pytest_encperf_register_backends(config):
    return {"hanging": Hanging}
"""


def test_hung_backend_tool_is_killed_with_a_clear_message(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCHMARK)
    pytester.makeconftest(HANGING_CONFTEST)
    result = pytester.runpytest(
        "--encperf-target=directory",
        f"--encperf-dir={pytester.path}",
        "--encperf-backends=hanging",
        "--encperf-size=1MiB",
        "--encperf-runtime=0.02",
        "--encperf-rounds=1",
        "-k",
        "SEQ1M-Q1T1-read",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*hanging: sh -c sleep 60 & sleep 60: no answer after 0.5 s (killed*"])
    assert not list(pytester.path.glob("encperf-*")), "run directory left behind"
    assert not list(pytester.path.glob(".encperf-runs/run-*.json")), "journal left behind"


def test_consent_in_an_argument_file_is_refused_naming_the_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCHMARK)
    pytester.makefile(".txt", args="--encperf-force=1\n")
    result = pytester.runpytest(
        "--encperf-target=partition",
        "--encperf-device=/dev/sdz1",
        "--encperf-allow-destroy=/dev/sdz1",
        "@args.txt",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--encperf-force: consent to erase a device is taken from this run's command line only, " in (
        result.stderr.str()
    )
    assert "not from the argument file @args.txt: remove it there" in result.stderr.str()
    assert "addopts" not in result.stderr.str()
