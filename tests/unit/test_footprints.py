"""footprints.py: which of two resources may rest on the other, and the one rule every release
loop follows (Holdback: the run's teardown, its journal's safety net, a dead run's cleanup):
what a failed release may rest on is kept, everything else is still released, newest first."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pytest_encperf import footprints, host
from pytest_encperf.footprints import Failed, Footprint, Holdback, Kept, Released

ROOT = Path(__file__).resolve().parents[2]

# a stack, oldest first, as a run makes it: a file, a loop device on it, a mount from that loop,
# and, apart from it, another file
STACK: list[tuple[str, Footprint]] = [
    ("other.img", ("/work/other.img",)),
    ("container.img", ("/work/container.img",)),
    ("loop9", ("/dev/loop9", "/work/container.img")),
    ("mnt", ("/work/mnt", "/dev/loop9")),
]


def _release_newest_first(
    stack: list[tuple[str, Footprint]], failing: set[str]
) -> tuple[list[str], dict[str, Kept | Failed | Released[str]]]:
    tried: list[str] = []
    outcomes: dict[str, Kept | Failed | Released[str]] = {}
    holdback = Holdback()
    for name, footprint in reversed(stack):

        def release(name: str = name) -> str:
            tried.append(name)
            if name in failing:
                raise host.HostError(f"{name}: busy")
            return f"released {name}"

        outcomes[name] = holdback.release(name, release, lambda footprint=footprint: footprint)
    return tried, outcomes


def test_overlaps_is_nesting_either_way_and_unknown_overlaps_everything() -> None:
    assert footprints.overlaps(("/work/mnt/x.img",), ("/work/mnt",))
    assert footprints.overlaps(("/work/mnt",), ("/work/mnt/x.img",))
    assert not footprints.overlaps(("/work/mnt2",), ("/work/mnt",))
    assert footprints.overlaps(None, ("/anything",)) and footprints.overlaps(("/anything",), None)


def test_what_a_failed_release_may_rest_on_is_kept_and_the_rest_released() -> None:
    tried, outcomes = _release_newest_first(STACK, failing={"mnt"})
    assert tried == ["mnt", "other.img"]  # newest first; nothing under the stuck mount is forced
    failure = outcomes["mnt"]
    assert isinstance(failure, Failed) and str(failure.error) == "mnt: busy"
    assert outcomes["loop9"] == Kept("mnt")  # the mount is from it
    assert outcomes["container.img"] == Kept("loop9")  # kept in turn: the kept loop rests on it
    assert outcomes["other.img"] == Released("released other.img")  # apart from all of it


def test_without_a_failure_everything_is_released_newest_first() -> None:
    tried, outcomes = _release_newest_first(STACK, failing=set())
    assert tried == ["mnt", "loop9", "container.img", "other.img"]  # the reverse of acquisition
    assert all(isinstance(outcome, Released) for outcome in outcomes.values())


def test_a_failure_holds_only_what_it_may_rest_on() -> None:
    tried, outcomes = _release_newest_first(STACK, failing={"other.img"})
    assert tried == ["mnt", "loop9", "container.img", "other.img"]
    assert isinstance(outcomes["other.img"], Failed)
    assert [name for name, outcome in outcomes.items() if isinstance(outcome, Released)] == [
        "mnt",
        "loop9",
        "container.img",
    ]


def test_a_failure_whose_footprint_is_unknown_keeps_everything_older() -> None:
    stack = [*STACK, ("daemon", None)]  # a daemon: what it serves is not known
    tried, outcomes = _release_newest_first(stack, failing={"daemon"})
    assert tried == ["daemon"]
    assert all(isinstance(outcome, Kept) for name, outcome in outcomes.items() if name != "daemon")


def test_what_nobody_can_release_holds_what_it_may_rest_on() -> None:
    holdback = Holdback()
    holdback.hold("teleporter t1", ("/dev/loop9",))
    assert holdback.release("loop9", lambda: "released", lambda: ("/dev/loop9", "/work/c.img")) == Kept(
        "teleporter t1"
    )
    assert holdback.release("other", lambda: "released", lambda: ("/work/other.img",)) == Released("released")


def test_an_in_memory_action_always_runs_and_never_holds() -> None:
    holdback = Holdback()
    holdback.hold("daemon", None)  # holds every resource

    def fail() -> None:
        raise RuntimeError("no such key")

    assert holdback.release("forget the key", lambda: "forgot", None) == Released("forgot")
    assert isinstance(holdback.release("forget another key", fail, None), Failed)
    holdback = Holdback()
    assert isinstance(holdback.release("forget the key", fail, None), Failed)
    assert holdback.release("file", lambda: "removed", lambda: ("/work/x.img",)) == Released("removed")


@pytest.mark.parametrize(
    ("held", "fails", "reads"),
    [
        (False, False, 0),  # nothing held, released: what it rests on is never asked
        (False, True, 1),  # read after the failure, to hold what it rests on
        (True, False, 1),  # read before, to see whether it may be released
        (True, True, 1),  # read once, not again after the failure
    ],
)
def test_a_footprint_is_read_at_most_once_and_only_when_needed(held: bool, fails: bool, reads: int) -> None:
    holdback = Holdback()
    if held:
        holdback.hold("apart", ("/elsewhere",))
    asked: list[int] = []

    def footprint() -> Footprint:
        asked.append(1)
        return ("/work/x.img",)

    def release() -> str:
        if fails:
            raise host.HostError("busy")
        return "removed"

    holdback.release("file", release, footprint)
    assert len(asked) == reads


@pytest.mark.parametrize(
    ("module", "loop"),
    [("resources", "release"), ("journal", "release_leftovers"), ("deadruns", "_release_entries")],
)
def test_every_release_loop_follows_the_one_rule(module: str, loop: str) -> None:
    """Cleanup.release, Journal.release_leftovers and a dead run's cleanup keep no list of their
    own of what is held: each asks a Holdback."""
    tree = ast.parse((ROOT / "pytest_encperf" / f"{module}.py").read_text())
    found = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == loop
    ]
    assert any("Holdback()" in source for source in found)
    assert not any("held_by" in source for source in found)
