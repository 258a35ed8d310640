"""The unencrypted baseline: ext4 on the same kind of container, or a plain directory.

Every overhead in the report is measured against this backend on the same target. It is the
base's default life cycle (ext4 on the target's device, mounted; or the directory) unchanged.
"""

from __future__ import annotations

from typing import Any

from ..targets import Target
from . import BackendBase, Volume


class PlainBackend(BackendBase):
    def partition_refusal(self, target: Target) -> str | None:
        return None  # ext4 on the partition itself

    def describe(self, volume: Volume) -> dict[str, Any]:
        return {"encryption": "none", "target": volume.target.kind, **self.describe_target(volume)}
