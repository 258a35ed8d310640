"""VeraCrypt volumes (placeholder until the veracrypt backend lands)."""

from __future__ import annotations

from ..targets import Target
from . import BackendBase


class VeracryptBackend(BackendBase):
    accepted_params: dict[str, str] = {}

    def problems(self, target: Target) -> list[str]:
        return ["veracrypt: not implemented yet"]
