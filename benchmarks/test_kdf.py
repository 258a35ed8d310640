"""The cost of key derivation (``--encperf-profile=kdf``): each selected backend's volume opened
with its fast (benchmark only) and its default key derivation."""

from pytest_encperf.kdf import KdfTiming


def test_key_derivation(encperf_kdf: KdfTiming) -> None:
    assert encperf_kdf.note or encperf_kdf.settings
    assert all(setting.create > 0 and setting.mount > 0 for setting in encperf_kdf.settings.values())
