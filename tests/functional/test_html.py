"""The HTML report (report/html.py): from saved result files (``encperf report``) and from a live run
(``--encperf-html``), its structure, and what headless Chromium makes of it."""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_encperf import cli, storage
from pytest_encperf.gate import EXIT_REGRESSION
from pytest_encperf.model import Measurement, Result
from pytest_encperf.report import charts, drawing, html, verdict_header
from pytest_encperf.workloads import ATTO, CDM, MATRIX, MiB, fit_to_size
from tests.functional.test_gate import gate, run  # noqa: F401  (the scripted-engine fixture)
from tests.helpers.priors import quiet_prior  # noqa: F401 (autouse: a quiet machine's between-run prior)

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
WORKLOADS = [*CDM, *ATTO, *(fit_to_size(w, 16 * MiB) for w in MATRIX)]
EVERY_PART = ["tiles", "overhead", "latency", "cpu", "atto", "matrix", "history", "context"]
MATPLOTLIB_PROBLEM = drawing.matplotlib_problem()
needs_matplotlib = pytest.mark.skipif(
    MATPLOTLIB_PROBLEM is not None, reason=f"the charts need matplotlib: {MATPLOTLIB_PROBLEM}"
)
CHARTS = {"overhead": 1, "latency": 1, "cpu": 1, "atto": 1, "matrix": 1, "history": 2}


def measured(mb_per_s: float, workload, rng: random.Random, mode: str = "direct", **fields) -> Measurement:
    value = mb_per_s * (1 + rng.uniform(-0.02, 0.02))
    moved = int(value * 1e6)
    return Measurement(
        "fio", "3.33", moved, 1.0, moved // workload.block_size, 5e3 / value, 3e4 / value, 9e4 / value,
        0.4, mode, daemon_cpu_seconds=fields.get("daemon"), caveats=fields.get("caveats", ()),
    )  # fmt: skip


def save_run(storage_dir: Path, name: str, seed: int, gocryptfs: float, minutes: int = 0) -> Path:
    """A saved run of fscrypt (buffered, one caveat) and gocryptfs against plain: CrystalDiskMark,
    ATTO and the grid, 8 rounds each side (enough for 100 checks to reach significance)."""
    rng = random.Random(seed)
    results = []
    for backend, factor, mode, daemon in (
        ("fscrypt", 0.3, "buffered", None),
        ("gocryptfs", gocryptfs, "direct", 0.1),
    ):
        for w in WORKLOADS:
            base = 200.0 if w.is_random else 800.0
            caveats = ("loop-dio-off",) if backend == "fscrypt" and w == CDM[0] else ()
            rounds = [measured(base * factor, w, rng, mode, daemon=daemon, caveats=caveats) for _ in range(8)]
            plain = [measured(base, w, rng, mode) for _ in range(8)]
            description = {"cipher": "AES-256-XTS" if backend == "fscrypt" else "AES-256-GCM", "version": "1"}
            results.append(Result(backend, w, rounds, plain, description))
    info = {"cpu_model": "Test CPU", "cpu_count": 2, "kernel": "6.1.0-test"}
    settings = {"size": str(16 * MiB), "rounds": "8", "profile": "cdm,atto,matrix"}
    doc = storage.document(
        results, info, "m1", {"id": "c0ffee"}, settings, NOW + dt.timedelta(minutes=minutes)
    )
    return storage.save(storage_dir, "m1", name, doc)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("saved") / ".encperf"
    save_run(root, "main", 1, 0.5)
    save_run(root, "main", 2, 0.5, minutes=1)
    save_run(root, "pr", 3, 0.3, minutes=2)  # gocryptfs 40% slower
    return root


def parts(page: str) -> dict[str, str]:
    """Each part of the first machine's section, by name."""
    found = re.split(r'<section class="part" id="m0-\w+" data-part="(\w+)">', page)
    return {found[i]: found[i + 1] for i in range(1, len(found), 2)}


def external_references(page: str) -> list[str]:
    """Anything the page could load from elsewhere when viewed."""
    pattern = (
        r"""(?:src|href)\s*=\s*["'](?!#|data:)[^"']*|url\((?!#)[^)]*\)|https?:|//[a-z0-9.-]+\.[a-z]{2,}"""
        r"|<script|<link|@import"
    )
    return re.findall(pattern, page, re.I)


@needs_matplotlib
def test_a_page_from_saved_runs_has_every_part_an_svg_per_chart_and_nothing_to_fetch(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    status = cli.main(
        ["--storage", str(saved), "report", "m1/1", "m1/3", "m1/2", "-o", str(out), "--fail", "10%"]
    )
    assert status == EXIT_REGRESSION  # gocryptfs is 40% slower in the newest run than in the one before
    printed = capsys.readouterr().out
    assert printed.startswith(f"encperf report: wrote {out} (") and "; 3 run(s))" in printed
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    found = parts(page)
    assert list(found) == EVERY_PART
    for name, body in found.items():
        assert body.count("<svg") == CHARTS.get(name, 0), name
    assert page.count("<svg") == sum(CHARTS.values())
    assert external_references(page) == []
    assert f'content="{html.CSP}"' in page and "currentColor" in page and drawing.FOREGROUND not in page
    # the newest run in full, the others in the history, in the order they were saved
    assert "#1: m1/0001_main.json</li><li>#2: m1/0002_main.json</li><li>#3: m1/0003_pr.json" in page
    assert "Verdict against m1/0002_main.json" in found["context"]
    header = re.search(r'<p class="verdict fail">(.*?)</p>', page)[1]
    assert "gate failed" in header and re.search(r"encperf: \d+ regressions", header)
    assert header.endswith(verdict_header_of(saved))
    assert re.search(r"<th>rounds now/before *</th>", found["context"])  # the check table
    tiles = found["tiles"]
    assert tiles.count('class="tile ') == 2 * 8  # two backends x CrystalDiskMark's 8 cells
    assert "buffered" in tiles and "loop dio off" in tiles and "tone-severe" in tiles
    assert "ATTO" not in tiles  # the sweeps have their own charts
    assert "AES-256-GCM" in found["context"] and "Test CPU" in found["context"]
    # light and dark viewers, colour-blind-safe colours, a text label on every bar
    assert "@media (prefers-color-scheme: dark)" in page
    assert "#e69f00" in found["overhead"] and "#009e73" in found["overhead"]  # Okabe-Ito
    plain = drawing.PLAIN_COLOUR.lower()
    assert plain in found["cpu"] and plain not in found["overhead"]
    newest = storage.load_run(storage.resolve(saved, "m1/3", None)[0])
    focus = [r for r in newest.results if r.workload in CDM]
    bars = charts.overhead_bars(focus)
    assert len(bars) == 16 and all(f">{bar.estimate:+.1f}%</text>" in found["overhead"] for bar in bars)


def verdict_header_of(saved: Path) -> str:
    """The header the terminal prints for the same comparison (the same function)."""
    args = cli.make_parser().parse_args(["--storage", str(saved), "compare", "m1/2", "m1/3", "--fail", "10%"])
    verdict, _ = cli.saved_verdict(
        args, "m1/2", *(storage.resolve(saved, r, None)[0] for r in ("m1/2", "m1/3"))
    )
    return verdict_header(verdict)


@needs_matplotlib
def test_one_saved_run_has_no_history(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "one.html"
    assert cli.main(["--storage", str(saved), "report", "m1/1", "-o", str(out)]) == 0
    page = out.read_text()
    assert list(parts(page)) == [p for p in EVERY_PART if p != "history"]
    assert 'class="verdict' not in page  # nothing was judged


def test_without_matplotlib_the_report_is_a_usage_error_saying_how_to_install_it(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    pytester: pytest.Pytester,
) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(SystemExit) as exited:
        cli.main(["--storage", str(saved), "report", "1", "-o", str(tmp_path / "x.html")])
    assert exited.value.code == 2
    assert "pip install 'pytest-encperf[html]'" in capsys.readouterr().err
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    result = pytester.runpytest(f"--encperf-html={tmp_path / 'x.html'}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--encperf-html: the HTML report draws its charts with matplotlib, which is not installed: "
         "pip install 'pytest-encperf[[]html]'"]
    )  # fmt: skip
    assert not (tmp_path / "x.html").exists()


@needs_matplotlib
def test_a_live_run_writes_the_same_page_with_its_history(gate: pytest.Pytester) -> None:
    run(gate, "--encperf-save=main", rounds=4).assert_outcomes(passed=2)
    page_path = gate.path / "out" / "live.html"
    result = run(
        gate, "--encperf-compare=main", "--encperf-fail=10%", f"--encperf-html={page_path}", rounds=4
    )
    result.assert_outcomes(passed=2)
    page = page_path.read_text()
    assert list(parts(page)) == ["tiles", "overhead", "cpu", "history", "context"]  # -k Q8T1: no 4K row
    assert external_references(page) == []
    assert "#2: this run" in page and re.search(r"#1: [\w-]+/0001_main\.json", page)
    assert (
        '<p class="verdict pass"><span class="badge pass">gate passed</span> encperf: 0 regressions' in page
    )
    assert "cipher ceiling" not in page  # the fake backends name no cipher
    assert oct(page_path.stat().st_mode & 0o777) == "0o644"


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(page: Path, png: Path, width: int = 1200, height: int = 1800) -> list[str]:
    """Open ``page`` in headless Chromium and save what it shows; returns the console messages
    (a script error, or anything the page's Content-Security-Policy blocked from loading). Any
    host name resolves to nothing, so a page that needed the network would show it."""
    browser = chromium()
    assert browser is not None
    with_profile = png.parent / f".chromium-{png.stem}"
    done = subprocess.run(
        [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
            f"--user-data-dir={with_profile}", "--hide-scrollbars", f"--window-size={width},{height}",
            f"--screenshot={png}", page.resolve().as_uri(),
        ],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(png.parent)},
    )  # fmt: skip
    shutil.rmtree(with_profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def blank(png: Path) -> float:
    """The share of the picture in its most common colour (1.0 = one flat colour)."""
    from PIL import Image

    with Image.open(png) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 24)
    assert colours is not None
    return max(count for count, _ in colours) / sum(count for count, _ in colours)


@needs_matplotlib
@pytest.mark.skipif(chromium() is None, reason="headless Chromium absent (Debian package chromium)")
def test_chromium_shows_the_page_without_console_errors(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    cli.main(["--storage", str(saved), "report", "m1/2", "m1/3", "-o", str(out)])
    png = tmp_path / "report.png"
    assert screenshot(out, png) == []
    assert 0.2 < blank(png) < 0.95  # a page, not an empty window
    # the check itself: a page that fetches something or runs a broken script is caught
    bad = tmp_path / "bad.html"
    bad.write_text(
        out.read_text().replace(
            "</body>", '<img src="https://example.com/x.png"><svg><image href="http://x/y"/></svg></body>'
        )
    )
    messages = screenshot(bad, tmp_path / "bad.png", 400, 300)
    assert any("Content Security Policy" in m and "example.com" in m for m in messages)
