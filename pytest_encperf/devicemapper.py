"""Device-mapper targets by name: whether one exists, and closing one (dm-crypt's volumes and a
killed run's leftovers, resources.py)."""

from __future__ import annotations

from pathlib import Path

from . import host


def dm_exists(name: str) -> bool:
    return (Path("/dev/mapper") / name).exists()


def remove_dm(name: str) -> bool:
    """Close a device-mapper mapping if it exists: ``cryptsetup close``, else ``dmsetup remove``
    (a mapping cryptsetup does not know); False when there was none.

    ``--retry`` because udev may still hold the device for a moment after an unmount.
    """
    if not dm_exists(name):
        return False
    try:
        host.run(["cryptsetup", "close", name], timeout=60)
    except host.HostError:
        if dm_exists(name):
            host.run(["dmsetup", "remove", "--retry", name], timeout=60)
    return True
