"""Every rendering of results: the tables, the gate's verdict, Markdown, the terminal summary,
the HTML page and the data behind its charts. Pure functions, no pytest.

The modules, each one job, none importing the package itself: ``formats`` (how numbers read),
``tables`` (the results tables), ``timings`` (life cycle, key derivation, in-place),
``analyses`` (the ladder, sweeps), ``verdict`` (the gate's verdict), ``markdown``,
``terminal`` (the terminal summary), ``charts`` (each chart's data), ``drawing`` (matplotlib)
and ``html`` (the page). The names below are the tables' and the verdict's, as the session, the
command line and the tests use them; ``terminal``, ``charts``, ``drawing`` and ``html`` are
imported as modules (``terminal`` is not imported here: it reads the settings, which import
``drawing`` and so this package).
"""

from __future__ import annotations

from .analyses import (
    LADDER_LEGEND,
    LADDER_TITLE,
    SWEEP_LEGEND,
    format_speed,
    ladder_line,
    ladder_lines,
    sweep_notes,
    sweep_recommendation,
    sweep_report,
    sweep_table,
    sweep_title,
)
from .markdown import MARKDOWN_LIMIT, markdown_report, results_markdown
from .tables import (
    BUSY_MEANING,
    CACHED_BELOW_MARK,
    CACHED_BELOW_MEANING,
    CAVEAT_MARKS,
    INTERVAL_MEANING,
    MACHINES_NOTE,
    busy_mark,
    compact_table,
    cpu_line,
    detail_table,
    interval_mark,
    machines_table,
    shown_profiles,
    summary_table,
    task_steps_table,
)
from .timings import KDF_HEADERS, inplace_table, kdf_table, lifecycle_table, projected_time
from .verdict import (
    CHECK_HEADERS,
    CHECK_LEGEND,
    Line,
    check_table,
    describe_check,
    verdict_header,
    verdict_messages,
    verdict_report,
)

__all__ = [
    "BUSY_MEANING",
    "CACHED_BELOW_MARK",
    "CACHED_BELOW_MEANING",
    "CAVEAT_MARKS",
    "CHECK_HEADERS",
    "CHECK_LEGEND",
    "INTERVAL_MEANING",
    "KDF_HEADERS",
    "LADDER_LEGEND",
    "LADDER_TITLE",
    "MACHINES_NOTE",
    "MARKDOWN_LIMIT",
    "SWEEP_LEGEND",
    "Line",
    "busy_mark",
    "check_table",
    "compact_table",
    "cpu_line",
    "describe_check",
    "detail_table",
    "format_speed",
    "inplace_table",
    "interval_mark",
    "kdf_table",
    "ladder_line",
    "ladder_lines",
    "lifecycle_table",
    "machines_table",
    "markdown_report",
    "projected_time",
    "results_markdown",
    "shown_profiles",
    "summary_table",
    "sweep_notes",
    "sweep_recommendation",
    "sweep_report",
    "sweep_table",
    "sweep_title",
    "task_steps_table",
    "verdict_header",
    "verdict_messages",
    "verdict_report",
]
