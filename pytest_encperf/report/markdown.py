"""The GitHub-flavoured Markdown report (PR comments, $GITHUB_STEP_SUMMARY). No pytest."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tabulate import tabulate

from ..gate import INFO, NOT_GATED, PASS, Check, Verdict
from ..model import Result
from ..sweep import FamilyRanking
from .analyses import LADDER_LEGEND, ladder_lines, sweep_notes, sweep_recommendation, sweep_table, sweep_title
from .formats import format_value
from .tables import (
    INTERVAL_MEANING,
    TIMED_TITLE,
    compact_table,
    in_seconds,
    shown_profiles,
    speed_cells,
    timed_table,
    vs_plain,
)
from .verdict import CHECK_LEGEND, check_table, verdict_header, verdict_messages

MARKDOWN_LIMIT = 60_000  # characters; a GitHub PR comment takes 65,536


def results_markdown(results: list[Result]) -> str:
    """Every result: the MB/s (or IOPS) workloads, then the tasks and timed functions in seconds
    per round (lower is better) in a table of their own (tables.timed_table)."""
    headers = [
        "backend",
        "workload",
        "MB/s",
        "IOPS",
        "p99 µs",
        "CPU s/GiB",
        "plain MB/s",
        "vs plain",
        "rounds",
    ]
    rows = []
    for r in (r for r in results if r.rounds and not in_seconds(r)):
        speed, _, plain_speed = speed_cells(r)
        rows.append([
            r.backend,
            r.workload.name,
            speed,
            format_value(r.median("iops")),
            format_value(r.median("lat_p99_us")),
            format_value(r.median("cpu_s_per_gib")),
            plain_speed,
            vs_plain(r),
            str(len(r.rounds)),
        ])  # fmt: skip
    parts = [tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)] if rows else []
    timed = timed_table(results, "github")
    if timed:
        parts += [f"**{TIMED_TITLE[0].upper()}{TIMED_TITLE[1:]}**", timed]
    if not parts:
        return ""
    table = "\n\n".join(parts)
    return table + f"\n\nvs plain {INTERVAL_MEANING}" if any(r.overhead_interval for r in results) else table


def markdown_report(
    results: list[Result],
    verdict: Verdict | None,
    title: str = "encperf",
    backends: list[str] | None = None,
    profiles: Iterable[str] | None = None,
    limit: int = MARKDOWN_LIMIT,
    sweeps: Iterable[FamilyRanking] = (),
    ladder: Iterable[Mapping[str, object]] = (),
) -> str:
    """A GitHub-flavoured Markdown report (for PR comments and $GITHUB_STEP_SUMMARY): the verdict's
    one-line header (✅/⚠️/❌ with its counts; ⚠️ when a check is undecided or not checked), what
    failed, the compact CrystalDiskMark table(s) of ``profiles`` (see shown_profiles), then
    everything else in a collapsed ``<details>`` block: every result, what explains the verdict and
    the check table.

    The text stays under ``limit`` characters (a PR comment takes 65,536): the details shrink to
    the checks that need attention, then go, then the tables; the header and the failures stay."""
    head = [f"## {title}", ""]
    failures: list[str] = []
    if verdict is not None:
        # the terminal's red / yellow / green
        icon = "❌" if verdict.failed else ("⚠️" if verdict.incomplete else "✅")
        reference = f" (reference run `{verdict.reference}`)" if verdict.reference else ""
        head += [f"**{icon} {verdict_header(verdict)}**{reference}", ""]
        failures = [f"- {message}" for tone, message in verdict_messages(verdict) if tone == "red"]
    names = backends or list(dict.fromkeys(r.backend for r in results))
    # the CrystalDiskMark-style tables, and real work (its seconds are in no other table)
    tables = [part for profile, workloads in shown_profiles(results, profiles)
              if profile.value == "best" or any(w.kind == "task" for w in workloads)
              for part in (f"**{profile.title}** ({profile.value} of the rounds; under it plain "
                           "beside it and the change)", "",
                           compact_table(results, names, workloads, profile.value), "")]  # fmt: skip
    if not any(r.rounds for r in results):
        tables = ["_no results_", ""]
    for ranking in sweeps:
        tables += [f"**{sweep_title(ranking)}**", "", sweep_table(ranking, tablefmt="github"), ""]
        tables += [*sweep_notes(ranking), "", "```", *sweep_recommendation(ranking), "```", ""]
    ladder_section = ladder_lines(ladder)
    if ladder_section:
        title, *lines = ladder_section
        tables += [f"**{title}**", "", *(f"- {line}" for line in lines if line != LADDER_LEGEND)]
        tables += ["", LADDER_LEGEND, ""]

    def details(checks: list[Check] | None, note: str = "") -> list[str]:
        body = [results_markdown(results), ""] if checks is None else []
        if verdict is not None:
            body += [f"- {message}" for tone, message in verdict_messages(verdict) if tone != "red"]
            shown = verdict.checks if checks is None else checks
            if shown:
                body += ["", check_table(shown, tablefmt="github"), "", CHECK_LEGEND]
        body += [note] if note else []
        summary = (
            "Details: every result and check" if checks is None else "Details: checks that need attention"
        )
        return ["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>", ""]

    def text(*parts: list[str]) -> str:
        return "\n".join(line for part in parts for line in part) + "\n"

    attention = [c for c in (verdict.checks if verdict else []) if c.status not in (PASS, INFO, NOT_GATED)]
    cut = "_details cut to keep this report under {limit:,} characters: see the JSON or HTML report_"
    for candidate in (
        text(head, failures, tables, details(None)),
        text(head, failures, tables, details(attention, cut.format(limit=limit))),
        text(head, failures, tables, [cut.format(limit=limit)]),
        text(head, failures, [cut.format(limit=limit)]),
    ):
        if len(candidate) < limit:
            return candidate
    kept: list[str] = []  # the failures alone are too long: as many as fit, and how many were left
    size = len(text(head)) + len("- ... and 999999 more\n")
    for line in failures:
        size += len(line) + 1
        if size >= limit:
            break
        kept.append(line)
    return text(head, kept, [f"- ... and {len(failures) - len(kept)} more"])
