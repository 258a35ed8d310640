"""Shared by the tests that run every registered backend that can run here."""

from __future__ import annotations

from pathlib import Path

from pytest_encperf.backends import BackendSpec, make_backend
from pytest_encperf.targets import Target, container_size
from pytest_encperf.workloads import MiB


def problems_here(name: str, base: Path) -> list[str]:
    """Why backend ``name`` (without parameters) cannot run on a small container in ``base``.

    Backends that open an existing volume (tcrypt, bitlk, bitlocker) need parameters such as
    image=: without them they cannot run in a generic test either.
    """
    try:
        backend = make_backend(BackendSpec(name))
    except ValueError as exc:
        return [f"needs parameters: {exc}"]
    return backend.problems(Target("container", base, container_size(2 * MiB)))
