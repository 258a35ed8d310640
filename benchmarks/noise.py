"""How noisy is a backend's ratio to plain, within a run and between runs (a script, not a timed test).

    python benchmarks/noise.py --runs 10 --backends gocryptfs,fscrypt --out DIR [-- PYTEST OPTIONS]
    python benchmarks/noise.py --analyse DIR [--label TEXT]

Runs ``pytest benchmarks/test_crystaldiskmark.py`` ``--runs`` times, unchanged, each a separate
process saving a baseline the default way (``--encperf-save``: 10 rounds per workload) with its
JSON in ``DIR/run-NN.json``, its volumes in a directory of its own under ``--dir`` and, with
``--own-lock``, its measurement locks in a private directory of its own (ENCPERF_LOCK_DIR), so it
does not wait for other runs on the machine (and measures beside them). Options after ``--`` go to
every run (e.g. ``-- --encperf-size=32MiB``). A file DIR/STOP stops it before the next run. Then,
per backend and workload, a one-way random-effects ANOVA of the per-round log ratios backend/plain
grouped by run (pytest_encperf.noise) splits their variance into round-to-round (within a run) and
run-to-run (a new volume, its placement, the machine's state) parts. ``--analyse DIR`` estimates
from the runs already in DIR (e.g. while more are still running). The raw log ratios and the
estimates are written to ``--data``/noise-<date>.json and .md (the benchmark's kept data).
Needs root (loop devices, mounts); every run tears down what it made.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_encperf import noise  # noqa: E402  (the checkout's module, not an installed one)


def one_run(args: argparse.Namespace, index: int, extra: list[str]) -> tuple[int, float]:
    """Run ``index``: (exit status, seconds). Its JSON is DIR/run-NN.json, its log DIR/run-NN.log."""
    stem = args.out / f"run-{index:02d}"
    volumes = Path(tempfile.mkdtemp(prefix=f"encperf-noise-{index:02d}-", dir=args.dir))  # 0700
    environment = dict(os.environ)
    if args.own_lock:
        environment["ENCPERF_LOCK_DIR"] = tempfile.mkdtemp(prefix="encperf-noise-lock-")  # 0700
    command = [
        sys.executable, "-m", "pytest", str(ROOT / "benchmarks" / "test_crystaldiskmark.py"), "-q",
        "-p", "no:cacheprovider", f"--encperf-backends={args.backends}",
        f"--encperf-storage={args.out / 'storage'}", f"--encperf-save=noise-{index:02d}",
        f"--encperf-json={stem}.json", f"--encperf-dir={volumes}", *extra,
    ]  # fmt: skip
    started = time.monotonic()
    with open(f"{stem}.log", "w", encoding="utf-8") as log:
        status = subprocess.run(
            command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=environment
        ).returncode
    seconds = time.monotonic() - started
    for made in (volumes, Path(environment.get("ENCPERF_LOCK_DIR", volumes))):
        try:
            for leftover in made.iterdir():
                if leftover.is_symlink() or not leftover.is_dir():
                    leftover.unlink()  # lock files
                else:
                    leftover.rmdir()  # the journal directory, empty after a clean run
            made.rmdir()
        except OSError as exc:
            print(f"  left {made} ({exc.strerror})")
    return status, seconds


def analyse(out: Path, data_dir: Path, label: str) -> Path:
    """Estimate from every run-NN.json in ``out``; write noise-<date>.json/.md in ``data_dir``."""
    runs: dict[str, dict[tuple[str, str], list[float]]] = {}
    for path in sorted(out.glob("run-*.json")):
        try:
            runs[path.stem] = noise.read_log_ratios(json.loads(path.read_text(encoding="utf-8")), path.name)
        except (OSError, ValueError, noise.StorageError) as exc:
            print(f"skipped {path.name}: {exc}")
    table = noise.estimate_all(runs)
    today = dt.date.today().isoformat()
    data_dir.mkdir(parents=True, exist_ok=True)
    doc = noise.data_document(runs, table, label=label, date=today)
    json_path = data_dir / f"noise-{today}.json"
    json_path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    markdown = noise.markdown_table(table, label=label, date=today)
    (data_dir / f"noise-{today}.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return json_path


def main() -> int:
    own_args, _, extra = (sys.argv[1:], None, [])
    if "--" in own_args:
        cut = own_args.index("--")
        own_args, extra = own_args[:cut], own_args[cut + 1 :]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--backends", default="gocryptfs,fscrypt")
    parser.add_argument(
        "--out", type=Path, default=None, help="the runs' JSON and logs (default: a new temp dir)"
    )
    parser.add_argument("--analyse", type=Path, default=None, metavar="DIR", help="only estimate from DIR")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("ENCPERF_DIR", "/var/tmp")))
    parser.add_argument(
        "--own-lock", action="store_true", help="each run takes its locks in a private directory"
    )
    parser.add_argument(
        "--data", type=Path, default=ROOT / "benchmarks" / "data", help="where noise-<date>.* go"
    )
    parser.add_argument("--label", default="", help="settings and conditions, written next to the figures")
    args = parser.parse_args(own_args)
    if args.analyse:
        analyse(args.analyse.resolve(), args.data, args.label)
        return 0
    args.out = (args.out or Path(tempfile.mkdtemp(prefix="encperf-noise-"))).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{args.runs} runs of {args.backends} vs plain, out {args.out}, extra options {extra or 'none'}")
    first = 1 + len(list(args.out.glob("run-*.json")))  # a second invocation adds runs to DIR
    for index in range(first, first + args.runs):
        if (args.out / "STOP").exists():
            print(f"{args.out / 'STOP'} exists: no more runs")
            break
        status, seconds = one_run(args, index, extra)
        print(f"run {index}: exit {status}, {seconds:.0f} s", flush=True)
    label = args.label or f"{args.backends}, {' '.join(extra) or 'defaults'}"
    analyse(args.out, args.data, label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
