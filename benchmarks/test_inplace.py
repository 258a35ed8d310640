"""In-place encryption throughput (``--encperf-inplace``): LUKS2 encrypting a filled plain volume
(cryptsetup reencrypt --encrypt), the others filling a volume through the encryption layer."""

from pytest_encperf.inplace import InplaceTiming


def test_in_place_encryption(encperf_inplace: InplaceTiming) -> None:
    assert encperf_inplace.bytes > 0 and encperf_inplace.seconds > 0
    assert encperf_inplace.intact in (None, True)
