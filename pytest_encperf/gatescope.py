"""What the gate's checks do not cover, said in its verdict (no pytest): a reference run measured on
other hardware, and the timings the gate never judges.

- Runs of one hardware are compared whatever else changed (a kernel or crypto-driver update is what
  the gate is there to catch; machine.same_hardware). A reference run of other hardware (another CPU
  model, core count, crypto flags or disk model: machine.HARDWARE_KEYS) is used only when it is
  named, and a difference from it may be the hardware's, not the code's: it is listed as not
  checked, which fails the gate under ``--encperf-strict``, unless the user accepts such a
  reference run with ``--encperf-allow-other-hardware`` (``encperf compare --allow-other-hardware``);
  then it is a note.
- kdf timings (the ``kdf`` profile) and in-place timings (``--encperf-inplace``) are one number per
  backend and run, with no plain side to pair with and no rule that selects them: the gate has no
  check for them. The verdict's header says so (``not gated: kdf timings (luks2)``), so a green
  header never reads as if they had been judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import machine

ALLOW_OTHER_HARDWARE = "--encperf-allow-other-hardware"
# the parts of a saved document's ``encperf`` (and of a run) holding timings the gate never checks
UNGATED_TIMINGS = (("kdf", "kdf timings"), ("inplace", "in-place timings"))


def hardware_differences(reference: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``cpu_model A -> B`` for each hardware field (machine.HARDWARE_KEYS) the runs differ in."""
    return [
        f"{key} {_text(reference.get(key))} -> {_text(current.get(key))}"
        for key in machine.HARDWARE_KEYS
        if reference.get(key) != current.get(key)
    ]


def other_hardware(
    label: str,
    reference: Mapping[str, Any],
    current: Mapping[str, Any],
    allowed: bool,
    gated: bool = True,
    flag: str = ALLOW_OTHER_HARDWARE,
) -> tuple[list[str], list[str]]:
    """(notes, not checked) for a reference run ``label`` measured on ``reference``'s machine, judged on
    ``current``'s: nothing for the same hardware; else a note when ``allowed`` (``flag``) or when
    nothing is ``gated`` (no --encperf-fail rules), otherwise an item the gate could not check
    (which fails under --encperf-strict)."""
    if machine.same_hardware(dict(reference), dict(current)):
        return [], []
    what = "; ".join(hardware_differences(reference, current))
    if allowed:
        return [
            f"reference run {label} was measured on other hardware ({what}), accepted by {flag}: "
            "a difference may be the hardware's, not the code's"
        ], []
    finding = (
        f"reference run {label} was measured on other hardware ({what}): a difference may be the "
        f"hardware's, not the code's ({flag} accepts such a reference run)"
    )
    return ([], [finding]) if gated else ([finding], [])


def ungated_timings(timings: Mapping[str, Any]) -> list[str]:
    """``kdf timings (gocryptfs, luks2)`` for each kind of timing in ``timings`` (a saved document's
    ``encperf`` part, or ``{"kdf": ..., "inplace": ...}`` of a run: backend spec -> its row)."""
    found = []
    for key, what in UNGATED_TIMINGS:
        rows = timings.get(key)
        timed = [str(spec) for spec, row in rows.items() if _timed(row)] if isinstance(rows, Mapping) else []
        if timed:
            found.append(f"{what} ({', '.join(timed)})")
    return found


def _timed(row: Any) -> bool:
    """Whether a kdf or in-place row holds a timing: a kdf row of a backend without a key
    derivation has none (``settings`` empty, kdf.KdfTiming)."""
    return not (isinstance(row, Mapping) and isinstance(row.get("settings"), Mapping) and not row["settings"])


def ungated_in_document(doc: Any) -> list[str]:
    """ungated_timings of a saved document ([] when it has none, or is not a mapping)."""
    own = doc.get("encperf") if isinstance(doc, Mapping) else None
    return ungated_timings(own) if isinstance(own, Mapping) else []


def _text(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)
