"""What a resource is and rests on (its footprint), and which of two resources may rest on the
other: when a dead run's release fails, what it may rest on is kept, everything else released.

A footprint is the paths (files, directories, device nodes) a resource is or rests on: a loop
device and its backing file, a mount point and the device mounted there. Each resource kind
says what its own is (resources.register_kind); this module compares them, and holds the rule
every release loop follows (Holdback: the run's teardown, its journal's safety net, a dead
run's cleanup).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

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


Value = TypeVar("Value")


@dataclass(frozen=True)
class Kept:
    """Not tried: ``blocker``, one not released, may rest on it."""

    blocker: str


@dataclass(frozen=True)
class Failed:
    error: Exception


@dataclass(frozen=True)
class Released(Generic[Value]):
    value: Value  # what the release returned


class Holdback:
    """The rule of a release loop that goes on past a failure: what a resource whose release
    failed, or one kept, may rest on (overlaps) is kept, not released from under it; everything
    else is still released. Feed it resources newest first (the reverse of the order they were
    made in), so that each comes before what it rests on."""

    def __init__(self) -> None:
        self._held: list[tuple[str, Footprint]] = []  # failed or kept: what it is and rests on

    def hold(self, name: str, footprint: Footprint) -> None:
        """``name`` will not be released (nobody can): what may rest on it is kept."""
        self._held.append((name, footprint))

    def release(
        self, name: str, release: Callable[[], Value], footprint: Callable[[], Footprint] | None
    ) -> Kept | Failed | Released[Value]:
        """Run ``release`` unless a resource held may rest on this one (then it is held too).
        ``footprint`` reads what this one is and rests on, at most once, only when needed: before
        the release when something is held, after it when it failed. None: an in-memory action,
        which rests on nothing and nothing on it: always run, never held."""
        its: Footprint = None
        read = False
        if footprint is not None and self._held:
            its, read = footprint(), True
            blocker = held_by(self._held, its)
            if blocker is not None:
                self.hold(name, its)
                return Kept(blocker)
        try:
            value = release()
        except Exception as exc:  # the caller reports it; what does not rest on it is still released
            if footprint is not None:
                self.hold(name, its if read else footprint())
            return Failed(exc)
        return Released(value)
