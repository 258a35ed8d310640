"""Hooks that conftest files and other plugins implement to extend pytest-encperf."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_encperf_register_backends(config: pytest.Config) -> dict[str, Any] | None:
    """Return extra backends as ``{name: BackendClass}`` (or ``"package.module:Class"``).

    Called before the options are parsed, so the names are valid in ``--encperf-backends``.
    A class takes a ``BackendSpec`` and implements the ``Backend`` protocol; subclassing
    ``pytest_encperf.backends.BackendBase`` gives the parameter table, the availability check
    before create and mount, undo on failure and idempotent teardown (its docstring lists what
    a subclass overrides). Example, in a conftest.py::

        from pytest_encperf.backends import BackendBase, Param
        from pytest_encperf.parsing import parse_int

        class RamBackend(BackendBase):
            params = (Param("size-mib", parse_int(1, 4096), 64, "tmpfs size"),)
            ...

        def pytest_encperf_register_backends(config):
            return {"ram": RamBackend}
    """


def pytest_encperf_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Change ``machine_info`` in place before it is saved with the run (and hashed into the
    machine id: the keys in ``pytest_encperf.machine.STABLE_KEYS`` decide the folder in
    ``.encperf/``). Every implementation is called. Example, in a conftest.py::

        def pytest_encperf_update_machine_info(config, machine_info):
            machine_info["ci_runner"] = os.environ.get("RUNNER_NAME", "local")
            # runners of one pool have different disks but should share baselines:
            machine_info["device_model"] = "ci-pool-a"
    """
