"""The sections of the optional analyses: where the overhead comes from (the ladder) and the
ranking of a sweep's configurations with its recommendation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tabulate import tabulate

from ..ladder import TOLERANCE as LADDER_TOLERANCE
from ..ladder import LadderRow, Rung
from ..sweep import ALPHA as SWEEP_ALPHA
from ..sweep import FamilyRanking, Ranked, parameters
from .formats import format_change, format_p

# ---------------------------------------------------------------- the ladder (--encperf-ladder)

LADDER_TITLE = "where the overhead comes from (--encperf-ladder): cipher, layer, device"
LADDER_LEGEND = (
    "cipher: the speed of the implementation of its cipher that the backend uses, on one core "
    "(encryption, MB/s); in () that cipher, then for reference the same cipher in the other place "
    "(the kernel's through AF_ALG, or user space), which never stands in for it (why one is not "
    "measured: the ladder cipher lines). layer: the same backend and workload "
    "on a RAM-backed container (a loop device over a file on a tmpfs this run mounted), with plain "
    "on the same RAM in (); it measures memory, never a disk, and is never a baseline nor gated. "
    "device: the normal run, with its plain rounds in (). Medians of the rounds. The limiting rung "
    "is the lowest of the three ceilings (cipher, layer, plain on the device); of ceilings within "
    f"{LADDER_TOLERANCE:.0%} of the lowest, the first of cipher, layer, device is named (a layer "
    "at its cipher's speed adds no limit of its own); an unmeasured rung takes no part."
)


def format_speed(mb_per_s: float | None) -> str:
    """``2.1 GB/s``, ``430 MB/s``, ``7.5 MB/s`` (10^6 bytes)."""
    if mb_per_s is None:
        return "-"
    if mb_per_s >= 1000:
        return f"{mb_per_s / 1000:.1f} GB/s"
    return f"{mb_per_s:.0f} MB/s" if mb_per_s >= 10 else f"{mb_per_s:.2g} MB/s"


def _rung_text(rung: Rung) -> str:
    return format_speed(rung.mb_per_s) if rung.mb_per_s else (rung.note or "not measured")


def _cipher_text(rung: Rung) -> str:
    """``gocryptfs:AES-GCM-256 4.6 GB/s`` or ``kernel:xts(aes):512 not measured`` (why: in the
    section's cipher lines); a note without a cipher name as it is."""
    name, separator, _ = rung.note.partition(": ")
    if not separator:
        return rung.note or "not measured"
    return f"{name} {format_speed(rung.mb_per_s) if rung.mb_per_s else 'not measured'}"


def ladder_line(row: LadderRow) -> str:
    """``gocryptfs SEQ1M-Q1T1-write: cipher 2.1 GB/s (...), layer 430 MB/s on RAM (plain 1.8
    GB/s), device 410 MB/s (plain 1.8 GB/s): the layer limits it``."""
    if row.cipher.note == "no encryption":
        cipher = "cipher none (no encryption)"
    else:
        speed = format_speed(row.cipher.mb_per_s) if row.cipher.mb_per_s else "not measured"
        texts = dict.fromkeys((_cipher_text(row.cipher), _cipher_text(row.counterpart)))  # a reason once
        cipher = f"cipher {speed} ({'; '.join(texts)})"
    layer = f"layer {_rung_text(row.layer)}"
    if row.layer.mb_per_s:
        layer += f" on RAM (plain {_rung_text(row.layer_plain)})"
    device = f"device {_rung_text(row.device)} (plain {_rung_text(row.device_plain)})"
    limit = row.limit
    verdict = f"the {limit.rung} limits it" if limit.rung else limit.remark
    if limit.rung and limit.remark:
        verdict += f" ({limit.remark})"
    return f"{row.backend} {row.workload}: {cipher}, {layer}, {device}: {verdict}"


def ladder_lines(rows: Iterable[Mapping[str, object]]) -> list[str]:
    """The ladder section: title, one line per backend x workload (as stored), legend, and each
    cipher's measurement once."""
    parsed = [LadderRow.from_dict(dict(row)) for row in rows]
    if not parsed:
        return []
    ciphers = {
        rung.note: None for row in parsed for rung in (row.cipher, row.counterpart) if ": " in rung.note
    }
    return [
        LADDER_TITLE,
        *(ladder_line(row) for row in parsed),
        LADDER_LEGEND,
        *(f"ladder cipher: {note}" for note in ciphers),
    ]


# ---------------------------------------------------------------- sweeps

SWEEP_LEGEND = (
    "vs plain: geometric mean over the workloads every configuration measured of its paired ratio to "
    "plain (each workload: geometric mean of its rounds' ratios), with a {confidence:.0%} interval from "
    "the spread of the rounds; slower = shown slower than the best by more than {margin:.0%} (one-sided "
    "t-test, p Bonferroni-adjusted over every pair of configurations); otherwise within noise. The "
    "rounds do not show how much two volumes measured at different times differ: 'slower' assumes "
    "they differ by less than the margin (raise --encperf-sweep-margin on a busy machine)."
)


def _sweep_row(ranked: Ranked) -> list[str]:
    interval = "-"
    if ranked.low is not None and ranked.high is not None:
        interval = f"{format_change((ranked.low - 1) * 100)} .. {format_change((ranked.high - 1) * 100)}"
    if ranked.rank == 1:
        standing = "best"
    elif ranked.p_vs_best is None:
        standing = "not tested (no spread of rounds)"
    else:
        standing = f"{'within noise' if ranked.within_noise else 'slower'} (p={format_p(ranked.p_vs_best)})"
    return [
        str(ranked.rank),
        parameters(ranked.spec),
        format_change(ranked.change_percent),
        interval,
        str(ranked.rounds),
        standing,
    ]


def sweep_table(ranking: FamilyRanking, tablefmt: str = "simple") -> str:
    headers = ["#", "configuration", "vs plain", f"{1 - SWEEP_ALPHA:.0%} interval", "pairs", "vs best"]
    rows = [_sweep_row(r) for r in ranking.ranked]
    rows += [["-", parameters(spec), "-", "-", "-", f"not ranked: {why}"] for spec, why in ranking.unranked]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def sweep_recommendation(ranking: FamilyRanking) -> list[str]:
    """What to choose, and how sure: the best configuration, and the others within noise of it."""
    best = ranking.best
    if len(ranking.ranked) < 2:
        return [f"no recommendation for {ranking.family}: fewer than two configurations could be ranked"]
    assert best is not None
    close = [parameters(r.spec) for r in ranking.ranked[1:] if r.within_noise]
    change = format_change(best.change_percent)
    if close and not ranking.decided:
        return [
            f"no recommendation for {ranking.family}: no configuration is shown faster than the others "
            f"by more than {ranking.margin:.0%} here; choose on other grounds",
            f"  best estimate: {parameters(best.spec)} ({change} vs plain), set up with:",
            *(f"  {line}" for line in ranking.recommendation),
        ]
    lines = [f"recommendation for {ranking.family}: {parameters(best.spec)} ({change} vs plain)"]
    if close:
        lines.append(f"  as fast within noise: {'; '.join(close)}")
    return [*lines, *(f"  {line}" for line in ranking.recommendation)]


def sweep_title(ranking: FamilyRanking) -> str:
    ranked = (
        f"{len(ranking.ranked)} of {len(ranking.ranked) + len(ranking.unranked)}" if ranking.unranked else ""
    )
    return (
        f"sweep: {ranking.family}, {ranked or len(ranking.ranked)} configurations ranked over "
        f"{len(ranking.workloads)} workloads"
    )


def sweep_notes(ranking: FamilyRanking) -> list[str]:
    notes = []
    if ranking.left_out:
        notes.append(
            f"not ranked on (not measured comparably by every configuration): {', '.join(ranking.left_out)}"
        )
    return [*notes, SWEEP_LEGEND.format(confidence=1 - SWEEP_ALPHA, margin=ranking.margin)]


def sweep_report(ranking: FamilyRanking) -> list[str]:
    """The ranking of one family's configurations, its legend and the recommendation."""
    return [sweep_title(ranking), sweep_table(ranking), *sweep_notes(ranking), *sweep_recommendation(ranking)]
