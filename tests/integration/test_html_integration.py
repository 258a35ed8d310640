"""The HTML report of a real run (plain, fscrypt and gocryptfs on containers, root), opened in
headless Chromium. Its screenshot is the README's ``docs/report.png``: run this test with
``ENCPERF_UPDATE_DOCS=1`` to replace it with one made on this machine."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pytest_encperf.report import drawing
from tests.functional.test_html import blank, chromium, external_references, parts, screenshot
from tests.helpers.support import disk_dir, problems_here

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sessions_of_this_test_alone")]

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "report.png"
SIZE = (1200, 1600)  # the screenshot's width and height in pixels
BENCH = (ROOT / "benchmarks" / "test_crystaldiskmark.py").read_text()
# Small and short, for a fast test (the native engine: no process per round): numbers from
# rounds this short are no measurement. 4 rounds a side bound the overhead's 95% interval.
RUN = (
    "--encperf-size=16MiB", "--encperf-runtime=0.1", "--encperf-rounds=4", "--encperf-warmup=0",
    "--encperf-engine=native",
)  # fmt: skip


def test_a_real_run_of_fscrypt_and_gocryptfs_as_a_page_chromium_shows(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    if drawing.matplotlib_problem():
        pytest.skip(f"the page's charts need matplotlib: {drawing.matplotlib_problem()}")
    missing = {name: problems_here(name, disk_dir()) for name in ("fscrypt", "gocryptfs")}
    if any(missing.values()):
        pytest.skip(f"backends not usable here: {missing}")
    pytester.makepyfile(test_bench=BENCH)
    page = tmp_path / "report.html"
    result = pytester.runpytest(
        f"--encperf-dir={disk_dir()}", "--encperf-backends=fscrypt,gocryptfs", *RUN,
        f"--encperf-html={page}", "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(passed=16)
    text = page.read_text()
    found = parts(text)
    assert list(found) == ["tiles", "overhead", "latency", "cpu", "context"]
    assert text.count("<svg") == 3 and external_references(text) == []  # overhead, latency, CPU
    assert 'class="verdict' not in text  # nothing was gated
    tiles = found["tiles"]
    assert tiles.count("<b>fscrypt</b>") == tiles.count("<b>gocryptfs</b>") == 8
    assert "buffered*" in tiles  # fscrypt serves O_DIRECT through the page cache here
    assert "cipher ceiling: kernel:xts(aes):512" in found["context"]
    print(f"page: {len(text.encode()):,} bytes")
    if chromium() is None:
        pytest.skip("headless Chromium absent (Debian package chromium): the page was not opened")
    png = tmp_path / "report.png"
    assert screenshot(page, png, *SIZE) == []
    assert 0.2 < blank(png) < 0.95
    if os.environ.get("ENCPERF_UPDATE_DOCS") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(png, SCREENSHOT)
    from PIL import Image

    with Image.open(SCREENSHOT) as committed:  # the README's picture is one of these
        assert committed.size == SIZE
    assert 0.2 < blank(SCREENSHOT) < 0.95
