"""Machine fingerprint parsing (sample /proc texts) and the id's stability."""

from __future__ import annotations

from pathlib import Path

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
