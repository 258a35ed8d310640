"""What an engine watches around a round: device counters and CPU time (psutil only).

The runner hands the engine an :class:`Observe` built from the volume as plain data (device
names, daemon pids), so an engine never needs to know which backend made the volume.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class Observe:
    """Plain data from the runner: what to watch during a round."""

    devices: tuple[str, ...] = ()  # block device names ("loop3", "vda"); the volume's own first
    daemon_pids: tuple[int, ...] = ()  # the backend's daemons (FUSE ...), whose CPU time counts
    # the data lives in a store read through the page cache below the volume (see
    # BackendBase.store_below): buffered read rounds then read at most one pass
    store_below: bool = False
    # the block devices of ours that hold that store (a container's loop device): a random read
    # round reads them with one page of read-ahead (engines/readahead.py)
    store_devices: tuple[str, ...] = ()
    # model.CAVEATS keys that hold for every round on this volume (a loop device without
    # direct I/O below it); the engine adds the ones of a round (cache-not-dropped)
    caveats: tuple[str, ...] = ()

    def one_pass(self, is_read: bool, io_mode: str) -> bool:
        """Whether a round must end after one pass over the file even before its runtime: a
        buffered read on a volume with a store below would read that store from memory on
        its second pass. Both engines follow this."""
        return self.store_below and is_read and io_mode != "direct"


def with_caveat(observed: dict[str, Any], caveat: str) -> dict[str, Any]:
    """``observed`` (from Observer.stop) with one more caveat for its round."""
    return {**observed, "caveats": (*observed.get("caveats", ()), caveat)}


def busy_cpu_seconds() -> float:
    """System-wide CPU time spent working (all cores), from psutil."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def own_cpu_seconds() -> float:
    """This process (all threads) plus the children it has waited for (fio)."""
    t = psutil.Process().cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def _process_cpu(pid: int) -> float | None:
    with contextlib.suppress(psutil.Error):
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system + t.children_user + t.children_system
    return None


def _disk_counters(devices: tuple[str, ...]) -> dict[str, tuple[int, int, int, int]]:
    """(bytes read, bytes written, reads completed, writes completed) per device."""
    if not devices:
        return {}
    counters = psutil.disk_io_counters(perdisk=True, nowrap=True) or {}
    return {
        name: (c.read_bytes, c.write_bytes, c.read_count, c.write_count)
        for name, c in counters.items()
        if name in devices
    }


class Observer:
    """``start()`` before the timed part of a round, ``stop()`` after it: the deltas, as
    Measurement fields."""

    def __init__(self, observe: Observe) -> None:
        self.observe = observe
        self._disks: dict[str, tuple[int, int, int, int]] = {}
        self._busy = self._own = 0.0
        self._daemons: dict[int, float | None] = {}

    def start(self) -> None:
        self._disks = _disk_counters(self.observe.devices)
        self._daemons = {pid: _process_cpu(pid) for pid in self.observe.daemon_pids}
        self._own = own_cpu_seconds()
        self._busy = busy_cpu_seconds()

    def stop(self) -> dict[str, Any]:
        busy = busy_cpu_seconds() - self._busy
        own = own_cpu_seconds() - self._own
        after = _disk_counters(self.observe.devices)
        deltas = {
            name: tuple(now - then for now, then in zip(after[name], self._disks[name], strict=True))
            for name in self.observe.devices
            if name in after and name in self._disks
        }
        physical = tuple((name, delta[0], delta[1]) for name, delta in deltas.items())
        daemon: float | None = None
        if self._daemons:
            daemon = 0.0
            for pid, before in self._daemons.items():
                now = _process_cpu(pid)
                if before is not None and now is not None:
                    daemon += now - before
        first = deltas.get(self.observe.devices[0]) if self.observe.devices else None
        return {
            "caveats": self.observe.caveats,
            "cpu_seconds": busy,
            "engine_cpu_seconds": own,
            "daemon_cpu_seconds": daemon,
            "physical": physical,
            "physical_read_bytes": first[0] if first else None,
            "physical_write_bytes": first[1] if first else None,
            "physical_read_requests": first[2] if first else None,
            "physical_write_requests": first[3] if first else None,
        }
