"""The cipher ceiling: each backend's own cipher, measured where it can be, or none."""

from __future__ import annotations

import socket

import pytest

from pytest_encperf import ceiling
from pytest_encperf.ceiling import dm_crypt_cipher, measure

# `gocryptfs -speed` of gocryptfs 2.3 on the development machine


def af_alg_works() -> bool:
    try:
        with socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET, 0) as alg:
            alg.bind(("skcipher", "xts(aes)"))
        return True
    except (AttributeError, OSError):
        return False


@pytest.mark.parametrize(
    ("spec", "bits", "expected"),
    [
        ("aes-xts-plain64", 512, "kernel:xts(aes):512"),
        ("aes-xts-plain64", 256, "kernel:xts(aes):256"),
        ("serpent-xts-plain64", 512, "kernel:xts(serpent):512"),
        ("aes-cbc-essiv:sha256", 256, "kernel:essiv(cbc(aes),sha256):256"),
        ("xchacha12,aes-adiantum-plain64", 256, "kernel:adiantum(xchacha12,aes):256"),
        ("capi:adiantum(xchacha12,aes)-plain64", 256, "kernel:adiantum(xchacha12,aes):256"),
        ("aes-cbc-plain", 256, None),  # no single kernel cipher is that
        ("aes-twofish-serpent-xts-plain64", 1536, None),  # a TrueCrypt cascade
        ("aes-xts-plain64", None, None),
    ],
)
def test_dm_crypt_ciphers_are_named_as_the_kernel_names_them(
    spec: str, bits: int | None, expected: str
) -> None:
    assert dm_crypt_cipher(spec, bits) == expected


def test_an_unknown_cipher_has_no_ceiling() -> None:
    found = measure("openssl:aes-192-cbc")
    assert found.mb_per_s is None and found.how == "not measured: no way to measure this cipher here"
    assert "not measured" in found.describe()


@pytest.mark.skipif(af_alg_works(), reason="this kernel has AF_ALG: see the next test")
def test_without_af_alg_kernel_ciphers_are_not_measured() -> None:
    found = measure("kernel:xts(aes):512", seconds=0.05)
    assert found.mb_per_s is None and "not measured" in found.how and "AF_ALG" in found.how


@pytest.mark.skipif(not af_alg_works(), reason="this kernel has no AF_ALG skcipher interface (UML lane has)")
def test_kernel_cipher_speed_through_af_alg() -> None:
    found = measure("kernel:xts(aes):512", seconds=0.05)
    assert found.mb_per_s is not None and found.mb_per_s > 0
    assert found.how == f"kernel driver {ceiling.kernel_driver('xts(aes)')} via AF_ALG"
    assert measure("kernel:nosuch(aes):512", seconds=0.05).mb_per_s is None


@pytest.mark.parametrize(
    ("cipher", "other"),
    [
        ("kernel:xts(aes):512", "user:AES-256-XTS"),
        ("kernel:xts(aes):256", "user:AES-128-XTS"),
        ("kernel:cbc(aes):128", "user:AES-128-CBC"),
        ("gocryptfs:AES-GCM-256", "kernel-aead:gcm(aes):256"),
    ],
)
def test_the_ladder_measures_each_cipher_in_the_other_place_too(cipher: str, other: str) -> None:
    assert ceiling.counterpart(cipher) == (other, "")


def test_a_cipher_without_a_counterpart_says_why() -> None:
    assert ceiling.counterpart("gocryptfs:AES-SIV-512") == (
        None,
        "the kernel has no AES-SIV-512 (gocryptfs's own user-space implementation only)",
    )
    assert ceiling.counterpart("kernel:adiantum(xchacha12,aes):256")[0] is None


def test_the_user_space_counterpart_is_measured_here() -> None:
    found = measure("user:AES-256-XTS", seconds=0.05)
    assert found.mb_per_s and found.mb_per_s > 0 and "via cryptography" in found.how


def test_the_kernel_aead_counterpart_says_why_when_af_alg_is_missing() -> None:
    found = measure("kernel-aead:gcm(aes):256", seconds=0.05)
    if found.mb_per_s is None:
        assert found.how.startswith("not measured: ")
        assert "AF_ALG" in found.how or hasattr(socket, "AF_ALG")
    else:
        assert found.how.endswith("via AF_ALG")
