"""``encperf.time(fn)``: the user's own function, timed on each side like a real-work task.

Each round gets a fresh directory of its side (``encperf-time`` in the volume's data directory,
then in plain's, A B B A as every workload): emptied, given to ``setup(path)`` untimed (then
synced, so its writes are not in the time), the page cache dropped, then ``fn(path)`` timed
with ``sync -f`` of the volume inside the time, as realwork.Steps times a task's step. The
seconds are the round's value (lower is better). An exception in ``fn`` or ``setup`` becomes a
UserFunctionError naming the backend, the side and the round, with the user's own traceback
chained.
"""

from __future__ import annotations

import platform
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import host, trust
from .engines.observe import Observe, Observer, with_caveat
from .gate.rules import selects_name
from .model import Measurement
from .workloads import TASK_MODE, Workload

USER_DIR = "encperf-time"  # under each side's data directory, removed after the rounds
ENGINE = "python"  # what a user round's Measurement says ran it (saved runs keep it)
STEP_TIMEOUT = 3600.0
NEEDS_PLAIN = (
    "encperf.time needs the plain volume beside the volume to run the function on both sides in "
    "turn, which the partition target does not have (one volume at a time); run it on the "
    "container or directory target"
)
# what a gate rule can name: no ':' or ',' (the grammar's separators), no spaces
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+\[\]-]+")

UserFunction = Callable[[Path], Any]


class UserFunctionError(RuntimeError):
    """The user's function (or its setup) raised in a round; the message says where."""


def skip(reason: str) -> NoReturn:
    """Skip the test calling encperf.time, saying why (the only pytest this module touches)."""
    import pytest

    pytest.skip(reason)


def test_name(node: Any) -> str:
    """The name ``encperf.time`` gives a result by default: the test's, with its own parameters
    but not encperf's (the backend is the result's other half), e.g. ``test_insert[wal]``."""
    original = str(getattr(node, "originalname", None) or getattr(node, "name", "encperf-time"))
    callspec = getattr(node, "callspec", None)
    params = getattr(callspec, "params", {}) if callspec is not None else {}
    own = [str(value) for key, value in params.items() if not key.startswith("encperf")]
    return workload_name(f"{original}[{'-'.join(own)}]" if own else original)


def workload_name(name: str) -> str:
    """``name`` as a workload's name: what a gate rule (``NAME:seconds:20%``) can carry."""
    cleaned = _UNSAFE.sub("_", name.strip()).strip("_")
    if not cleaned:
        raise ValueError(f"encperf.time: name {name!r} has nothing a workload's name can carry")
    return cleaned[:120]


def timed_name(name: str | None, default: str) -> str:
    """The workload name of ``encperf.time(fn, name=name)`` (``default``: the test's): a ``name=``
    that a gate rule would read as something else (a metric, a built-in workload, a task, a
    life-cycle step, a backend) or cannot carry is a ValueError, so ``NAME:20%`` always means it."""
    if name is None:
        return workload_name(default)
    cleaned = workload_name(name)
    from .backends import known_names  # the registered backends: late, as the option parsers do
    from .gate import name_clash

    clash = name_clash(cleaned, known_names())
    if clash:
        raise ValueError(f"encperf.time: a gate rule would read the name {name!r} as {clash}; choose another")
    return cleaned


def user_workload(name: str) -> Workload:
    """The workload of a timed function: a task of its own name, judged by its seconds."""
    return Workload(label=name, rw=TASK_MODE, block_size=1, task=name)


def expected_cells(items: Iterable[Any]) -> list[tuple[str, Workload]]:
    """(backend, workload) of what the collected tests ``items`` will measure beyond the run's own
    workloads, for the gate's expected family (gate.expected_family_size): a test asking for the
    ``encperf`` fixture (not the built-in ``encperf_workload``) on a backend measures the Workload
    it is parametrized with (``encperf.run(job)``), or else a timed function under the test's name
    (``encperf.time``; a ``name=`` given in the call is not known before it runs). Skipped tests
    measure nothing."""
    found: dict[tuple[str, str], Workload] = {}
    for item in items:
        if not times_functions(item):
            continue
        if any(item.iter_markers("skip")) or any(
            m.args and m.args[0] is True for m in item.iter_markers("skipif")
        ):
            continue
        params = dict(getattr(getattr(item, "callspec", None), "params", {}))
        backend = params.pop("encperf_volume", None)
        if backend is None:
            continue
        own = [value for value in params.values() if isinstance(value, Workload)]
        for workload in own or [user_workload(test_name(item))]:
            found.setdefault((str(backend), workload.name), workload)
    return [(backend, workload) for (backend, _), workload in found.items()]


def times_functions(item: Any) -> bool:
    """Whether a collected test may call ``encperf.time``: it asks for the ``encperf`` fixture and
    is not one of the built-in ``encperf_workload`` tests (which measure their workload)."""
    fixtures = getattr(item, "fixturenames", ())
    return "encperf" in fixtures and "encperf_workload" not in fixtures


def rule_name_refusals(settings: Any, items: Iterable[Any]) -> list[str]:
    """At collection: the usage errors of gate rules whose WORKLOAD names no built-in workload and
    no fio job, when no collected test may time a function (nothing could be measured under that
    name). When one may, its name (its test's, or a ``name=`` of its own) is known only once
    measured: Outcome checks it at the end, and a rule that named nothing measured is an error."""
    if any(times_functions(item) for item in items):
        return []
    return list(settings.unknown_rule_names([], "collected"))


def later_named_cells(
    test_cells: Sequence[tuple[str, Workload]], reference: Iterable[Workload], rule_names: Iterable[str]
) -> list[tuple[str, Workload]]:
    """Cells for the gate's expected family that the collected tests may measure under a name not
    known before the call (``encperf.time(fn, name=...)``): on every backend a collected test times
    a function on, each timed function of the reference and each name the rules give
    (gate.named_selectors) that no collected test's name claims. A ``name=`` call is so counted
    whatever its name; its test's own cell stays counted too: the family errs on the large side,
    which only makes confirmation stricter, never a FAIL likelier."""
    backends = list(dict.fromkeys(backend for backend, workload in test_cells if workload.kind == "task"))
    claimed = [workload.name for _, workload in test_cells]
    names = [w.name for w in reference if w.is_timed_function]
    names += [name for name in rule_names if not any(selects_name(name, mine) for mine in claimed)]
    taken = {name.lower() for name in claimed}
    unclaimed = [name for name in dict.fromkeys(names) if name.lower() not in taken]
    return [(backend, user_workload(name)) for backend in backends for name in unclaimed]


def prepare_directory(data_dir: Path) -> Path:
    """The side's directory for the function (made private, emptied)."""
    directory = data_dir / USER_DIR
    if directory.exists() and not directory.is_symlink():
        shutil.rmtree(directory)
    trust.make_private_dir(directory)
    return directory


def remove_directory(data_dir: Path) -> None:
    directory = data_dir / USER_DIR
    if directory.is_dir() and not directory.is_symlink():
        shutil.rmtree(directory, ignore_errors=True)


def _sync(directory: Path) -> None:
    host.run(["sync", "-f", directory], timeout=STEP_TIMEOUT)


def time_round(
    fn: UserFunction,
    data_dir: Path,
    *,
    setup: UserFunction | None = None,
    sync: bool = True,
    drop_caches: bool = True,
    observe: Observe | None = None,
) -> Measurement:
    """One round of ``fn`` on the side whose data directory is ``data_dir``."""
    directory = prepare_directory(data_dir)
    if setup is not None:
        setup(directory)
        _sync(directory)  # setup's writes on the device before the time starts
    dropped = host.drop_page_cache() if drop_caches else True
    observer = Observer(observe or Observe())
    observer.start()
    started = time.perf_counter()
    fn(directory)
    if sync:
        _sync(directory)
    seconds = time.perf_counter() - started
    observed = observer.stop()
    if not dropped:
        observed = with_caveat(observed, "cache-not-dropped")
    return Measurement(  # no bytes: what the function moved is its own business
        engine=ENGINE,
        engine_version=platform.python_version(),
        bytes=0,
        seconds=seconds,
        ios=0,
        lat_p50_us=0.0,
        lat_p99_us=0.0,
        lat_p999_us=0.0,
        io_mode="buffered",
        logical_read_bytes=0,
        logical_write_bytes=0,
        **observed,
    )


class SideRounds:
    """Counts one side's rounds, for the message of a function that raised in one."""

    def __init__(self, name: str, backend: str, side: str, data_dir: Path, warmup: int) -> None:
        self.name, self.backend, self.side, self.data_dir, self.warmup = name, backend, side, data_dir, warmup
        self.count = 0

    def failed(self, exc: BaseException) -> UserFunctionError:
        kind = " (warm-up)" if self.count <= self.warmup else ""
        return UserFunctionError(
            f"encperf.time({self.name}) on {self.backend}: the function raised on the {self.side} side "
            f"({self.data_dir / USER_DIR}) in round {self.count}{kind}: {type(exc).__name__}: {exc}"
        )


def cleanup(*data_dirs: Path) -> None:
    for data_dir in data_dirs:
        remove_directory(data_dir)
