"""The unencrypted baseline: ext4 on the same kind of container, or a plain directory.

Every overhead in the report is measured against this backend on the same target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import uuid4

from .. import host
from ..targets import Target, create_container, wipe_own_signature
from . import BackendBase, Volume
from .ext4 import e2fsprogs_version, make_ext4, mount_ext4


class PlainBackend(BackendBase):
    accepted_params: dict[str, str] = {}

    def problems(self, target: Target) -> list[str]:
        found = target.problems()
        if target.kind in ("container", "partition"):
            found += [f"needs {tool} (e2fsprogs)" for tool in host.missing_tools("mkfs.ext4")]
        return found

    def partition_refusal(self, target: Target) -> str | None:
        return None  # ext4 on the partition itself

    def create(self, target: Target, workdir: Path) -> Volume:
        volume = Volume(self, target, workdir)
        if target.kind == "partition":
            device = target.device
            assert device is not None
            volume.state["device"] = device
            uuid = str(uuid4())
            # registered first (an interrupted mkfs may have written), but wipes only the file
            # system with this UUID: when mkfs wrote nothing, nothing is wiped
            volume.created.push(f"wipe our ext4 on {device}", lambda: wipe_own_signature(device, uuid))
            make_ext4(device, uuid=uuid)
        elif target.kind == "container":
            with self.undo_on_failure(volume, "create", self.destroy):
                loop = create_container(target, workdir, volume.created)
                volume.state.update(device=loop.path, loop_direct_io=loop.direct_io)
                make_ext4(loop.path)
        return volume

    def mount(self, volume: Volume) -> Path:
        if volume.target.kind in ("container", "partition"):
            root = mount_ext4(volume, volume.state["device"])
        else:
            root = volume.workdir
        volume.data_dir = root / "data"
        volume.data_dir.mkdir(exist_ok=True)
        return volume.data_dir

    def describe(self, volume: Volume) -> dict[str, Any]:
        info: dict[str, Any] = {"encryption": "none", "target": volume.target.kind}
        if volume.target.kind == "partition":
            info.update(filesystem="ext4", e2fsprogs=e2fsprogs_version(), device=str(volume.target.device))
        elif volume.target.kind == "container":
            info.update(
                filesystem="ext4",
                e2fsprogs=e2fsprogs_version(),
                loop_direct_io=volume.state.get("loop_direct_io"),
            )
        else:
            info["filesystem"] = host.filesystem_type(volume.workdir)
        return info
