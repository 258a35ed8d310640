"""The chaos matrices' default lane (tests/helpers/matrix.py): every kill point is still met on a
machine without device-mapper, every backend is stopped more than once, and the whole matrix is one
variable away."""

from __future__ import annotations

import pytest

from tests.helpers import matrix
from tests.integration.test_chaos_integration import JOURNAL_STEPS
from tests.integration.test_reliability_integration import INTERRUPT_MATRIX, SIGKILLS

MATRICES = {"sigkill": SIGKILLS, "interrupt": INTERRUPT_MATRIX, "journal-step": JOURNAL_STEPS}


@pytest.mark.parametrize("matrix_name", MATRICES)
def test_without_device_mapper_every_point_is_met_and_every_backend_stopped_more_than_once(
    matrix_name: str,
) -> None:
    names, cases, per_name = (
        MATRICES[matrix_name].names,
        MATRICES[matrix_name].cases,
        MATRICES[matrix_name].per_name,
    )
    chosen = matrix.covering(names, cases, per_name)
    here = {(name, case) for name, case in chosen if name in matrix.WITHOUT_DEVICE_MAPPER}
    assert {case for _, case in here} == set(cases)
    for name in names:
        assert len({case for n, case in chosen if n == name}) == per_name, name
    assert len(chosen) < len(names) * len(cases)  # the point of it


def test_the_params_keep_the_ids_of_stacked_parametrize_and_skip_outside_the_subset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(matrix.EXHAUSTIVE_ENV, raising=False)
    points = ["create", "mount", "round"]
    params = matrix.Matrix(["plain", "luks2"], points, points, 1).params()
    ids = [p.id for p in params]
    assert ids == [f"{n}-{c}" for n in ("plain", "luks2") for c in ("create", "mount", "round")]
    skipped = {p.id for p in params if p.marks}
    # plain comes first in the rotation (no device-mapper needed): create; luks2 next: mount
    assert skipped == {"plain-mount", "plain-round", "luks2-create", "luks2-round"}
    assert params[0].values == ("plain", "create")


def test_the_exhaustive_variable_runs_every_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(matrix.EXHAUSTIVE_ENV, "1")
    params = matrix.Matrix(["plain", "luks2"], [("round", 2)], ["round-SIGINT"], 1).params()
    assert [p.values for p in params] == [("plain", "round", 2), ("luks2", "round", 2)]
    assert not any(p.marks for p in params)


def test_the_uml_lane_names_the_ecryptfs_cases_that_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(matrix.EXHAUSTIVE_ENV, raising=False)
    default = SIGKILLS.ids_run("ecryptfs")
    assert 0 < len(default) < 4
    monkeypatch.setenv(matrix.EXHAUSTIVE_ENV, "1")
    assert SIGKILLS.ids_run("ecryptfs") == [
        f"ecryptfs-{point}" for point in ("create", "mount", "round", "teardown")
    ]


def test_the_default_lane_is_computed_once_per_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Collection asks ``runs`` for every pair of every matrix: the covering set is worked out once."""
    monkeypatch.delenv(matrix.EXHAUSTIVE_ENV, raising=False)
    calls: list[int] = []
    real = matrix.covering

    def counting(*args: object) -> set:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(matrix, "covering", counting)
    points = ["create", "mount", "round"]
    once = matrix.Matrix(["plain", "luks2", "fscrypt"], points, points, 1)
    once.params()
    once.ids_run("plain")
    assert len(calls) == 1
    assert once.params() == matrix.Matrix(["plain", "luks2", "fscrypt"], points, points, 1).params()
