"""What a resource is and rests on (its footprint), and which of two resources may rest on the
other: when a dead run's release fails, what it may rest on is kept, everything else released.

A footprint is the paths (files, directories, device nodes) a resource is or rests on: a loop
device and its backing file, a mount point and the device mounted there. Each resource kind
says what its own is (resources.register_kind); this module only compares them.
"""

from __future__ import annotations

import os

# None: not known (a daemon, what a FUSE mount's daemon serves), so it may rest on anything and
# anything on it
Footprint = tuple[str, ...] | None


def overlaps(one: Footprint, other: Footprint) -> bool:
    """Whether of two resources one may rest on the other: a path of one is, or lies under, a
    path of the other (a loop device's backing file in a mount, a mount from a loop device);
    a footprint not known overlaps everything."""
    if one is None or other is None:
        return True
    return any(_nested(a, b) or _nested(b, a) for a in one for b in other)


def _nested(inner: str, outer: str) -> bool:
    inner, outer = os.path.normpath(inner), os.path.normpath(outer)
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def held_by(held: list[tuple[str, Footprint]], footprint: Footprint) -> str | None:
    """The first of ``held`` (what was not released, with its footprint) that may rest on a
    resource of ``footprint`` (or it on that), or None: then it may be released."""
    return next((name for name, other in held if overlaps(other, footprint)), None)
