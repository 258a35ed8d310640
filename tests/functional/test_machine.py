"""Machine fingerprint parsing (sample /proc texts) and the id's stability."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import pytest

from pytest_encperf import machine

CRYPTO = """name         : xts(aes)
driver       : xts(ecb(aes-generic))
module       : kernel
priority     : 100

name         : xts(aes)
driver       : xts-aes-vaes-avx512
module       : aesni_intel
priority     : 800

name         : cbc(aes)
driver       : cbc-aes-aesni
priority     : 400
"""

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse2 aes avx avx2 vaes avx512f sha_ni
"""


def test_crypto_driver_is_the_highest_priority_one() -> None:
    assert machine.crypto_driver(CRYPTO) == "xts-aes-vaes-avx512"
    assert machine.crypto_driver(CRYPTO, "cbc(aes)") == "cbc-aes-aesni"
    assert machine.crypto_driver("", "xts(aes)") == "none"


def test_cpu_model_and_crypto_flags() -> None:
    assert machine.cpu_model(CPUINFO) == "AMD EPYC 7B13"
    assert machine.cpu_flags(CPUINFO) == ["aes", "vaes", "avx", "avx2", "avx512f", "sha_ni"]
    assert machine.cpu_flags("Features\t: fp asimd aes pmull sha2\n") == ["aes", "pmull", "sha2"]


def test_machine_id_hashes_only_the_stable_part() -> None:
    info = machine.machine_info(Path("/"))
    assert info["cpu_count"] >= 1 and info["memory_bytes"] > 0
    assert info["kernel"] and info["xts_aes_driver"]
    first = machine.machine_id(info)
    assert first.startswith(f"{info['machine']}-") and len(first.split("-")[-1]) == 12
    assert machine.machine_id({**info, "memory_bytes": 1, "governor": "x", "tools": {}}) == first
    assert machine.machine_id({**info, "kernel": "0.0.1"}) != first
    assert machine.machine_id({**info, "cpu_flags": []}) != first


def test_directory_on_this_machine_has_a_filesystem() -> None:
    info = machine.machine_info(Path(__file__).parent)
    assert info["filesystem"] not in ("", "unknown")


def test_cpu_frequency_is_recorded_and_unknown_parts_are_none(monkeypatch: pytest.MonkeyPatch) -> None:
    frequency = namedtuple("Freq", "current min max")  # psutil's scpufreq
    monkeypatch.setattr(machine.psutil, "cpu_freq", lambda: frequency(2400.04, 800.0, 3500.0))
    assert machine.cpu_frequency() == {"current": 2400.0, "min": 800.0, "max": 3500.0}
    # a VM without cpufreq: psutil reads the current MHz from /proc/cpuinfo, min and max are 0
    monkeypatch.setattr(machine.psutil, "cpu_freq", lambda: frequency(2596.1, 0.0, 0.0))
    assert machine.cpu_frequency() == {"current": 2596.1, "min": None, "max": None}
    monkeypatch.setattr(machine.psutil, "cpu_freq", lambda: None)
    assert machine.cpu_frequency() == {"current": None, "min": None, "max": None}
    assert "cpu_mhz" in machine.machine_info()
