"""pytest glue: options and their ini twins, hookspecs, fixtures, parametrization.

All behaviour lives elsewhere; each hook here hands over to the EncperfSession kept in
``config.stash`` (the way pytest's junitxml keeps its LogXML).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from . import backends, fiojob, hookspec, usertiming
from .backends import BASELINE_SPEC, BackendSpec
from .engines.fio import fio_available
from .inplace import InplaceTiming
from .kdf import KdfTiming
from .mountedvolume import MountedVolume
from .runner import TASK_NEEDS_PLAIN, Runner
from .session import EncperfSession
from .settings import OPTIONS, resolve
from .volumes import VolumeFailure, VolumeSkip
from .workers import XdistResults
from .workloads import KDF_PROFILE, Workload

session_key = pytest.StashKey[EncperfSession]()
registered_key = pytest.StashKey[list[str]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("encperf", "encryption overhead benchmarks (pytest-encperf)")
    for option in OPTIONS:
        # default None on the command line, so settings.resolve can see what was not given
        form: dict[str, object] = {"metavar": option.metavar}
        if option.form == "flag":
            form = {"action": "store_const", "const": option.const}
        elif option.form == "optional":
            form = {"metavar": option.metavar, "nargs": "?", "const": option.const}
        twins = "command line only" if option.command_line_only else f"ini: {option.ini}, env: {option.env}"
        help_text = f"{option.help} ({twins}; default: {option.default_display()})"
        group.addoption(
            option.flag,
            dest=f"encperf_{option.name.replace('-', '_')}",
            default=None,
            help=help_text.replace("%", "%%"),  # argparse expands %-formats in help
            **form,
        )
        parser.addini(option.ini, f"{option.help} (default: {option.default_display()})", default=None)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # xdist's own marker, declared for runs without xdist too (--strict-markers): the benchmarks carry it
    config.addinivalue_line("markers", "xdist_group(name): run the tests of one group on one xdist worker")
    config.stash[registered_key] = []
    for extra in config.hook.pytest_encperf_register_backends(config=config):
        for name, backend in (extra or {}).items():
            try:
                backends.register(name, backend)
            except ValueError as exc:
                raise pytest.UsageError(f"pytest_encperf_register_backends: {exc}") from None
            config.stash[registered_key].append(name)
    dest = {option.name: f"encperf_{option.name.replace('-', '_')}" for option in OPTIONS}
    cli = {name: config.getoption(attr) for name, attr in dest.items()}
    ini = {option.name: config.getini(option.ini) for option in OPTIONS}
    try:
        # the arguments typed for this run, without addopts (an xdist worker's come from the
        # controller, which has checked them)
        typed = None if hasattr(config, "workerinput") else [str(a) for a in config.invocation_params.args]
        settings = resolve(cli, ini, typed=typed)
        fiojob.check_room(settings.fio_job, settings.size)  # a job asking more than the test file
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    session = EncperfSession(config, settings)
    config.stash[session_key] = session
    config.pluginmanager.register(session, "encperf-session")
    if config.pluginmanager.hasplugin("xdist") and not session.is_worker:
        xdist = XdistResults(session.workers, session.planned, config.getoption("dist", "no"))
        config.pluginmanager.register(xdist, "encperf-xdist")
    session.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    for name in config.stash.get(registered_key, []):
        backends.unregister(name)  # registrations belong to this run (pytester runs many)
    session = config.stash.get(session_key, None)
    if session is not None:
        session.stop()
        del config.stash[session_key]
        config.pluginmanager.unregister(session)
        xdist = config.pluginmanager.get_plugin("encperf-xdist")
        if xdist is not None:
            config.pluginmanager.unregister(xdist)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    session = metafunc.config.stash[session_key]
    if "encperf_volume" in metafunc.fixturenames:
        # one xdist group per backend, for --dist loadgroup (pytest-xdist 3.8 under pytest 9.2 does
        # not yet keep such session-scoped parameters together: a worker may make its own volume)
        group = pytest.mark.xdist_group
        specs = [pytest.param(s, id=str(s), marks=group(f"encperf-{s}")) for s in session.settings.backends]
        metafunc.parametrize("encperf_volume", specs, indirect=True, scope="session")
    if "encperf_workload" in metafunc.fixturenames:
        workloads = session.settings.workloads
        if workloads:
            params = [pytest.param(w, id=w.name, marks=_workload_marks(session, w)) for w in workloads]
            metafunc.parametrize("encperf_workload", params)
        else:  # --encperf-profile=kdf alone
            why = pytest.mark.skip(reason="the selected profiles run no I/O workload")
            metafunc.parametrize("encperf_workload", [pytest.param(None, id="no-workload", marks=why)])
    if "encperf_kdf" in metafunc.fixturenames:
        if KDF_PROFILE in session.settings.profile:
            metafunc.parametrize("encperf_kdf", _with_baseline(session.settings.backends), indirect=True)
        else:
            why = pytest.mark.skip(reason=f"the {KDF_PROFILE} profile is not selected (--encperf-profile)")
            metafunc.parametrize(
                "encperf_kdf", [pytest.param(None, id=KDF_PROFILE, marks=why)], indirect=True
            )
    if "encperf_inplace" in metafunc.fixturenames:
        if session.settings.inplace:
            metafunc.parametrize("encperf_inplace", _with_baseline(session.settings.backends), indirect=True)
        else:
            why = pytest.mark.skip(reason="in-place encryption is not asked for (--encperf-inplace)")
            unasked = pytest.param(None, id="inplace", marks=why)
            metafunc.parametrize("encperf_inplace", [unasked], indirect=True)


def _with_baseline(specs: list[BackendSpec]) -> list[object]:
    """Plain and the selected backends, each once, as parameters named by their spec text."""
    unique = dict.fromkeys([BASELINE_SPEC, *specs])
    return [pytest.param(spec, id=str(spec)) for spec in unique]


def _workload_marks(session: EncperfSession, workload: Workload) -> list[pytest.MarkDecorator]:
    """A real-work task is skipped on the partition target, saying why (runner._run_task)."""
    if workload.kind == "task" and session.settings.one_volume_at_a_time:
        return [pytest.mark.skip(reason=f"{workload.name}: {TASK_NEEDS_PLAIN}")]
    if workload.kind == "job" and not fio_available():
        return [pytest.mark.skip(reason=f"{workload.name}: a fio job needs fio (apt-get install fio)")]
    return []


@contextlib.contextmanager
def _skip_or_fail() -> Iterator[None]:
    """A volume that cannot run here skips the test; one that failed before fails it, briefly."""
    try:
        yield
    except VolumeSkip as exc:
        pytest.skip(str(exc))
    except VolumeFailure as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def encperf_baseline(request: pytest.FixtureRequest) -> Iterator[MountedVolume | None]:
    """The unencrypted volume on the same kind of target, created once per session.

    None on a partition target: the partition holds one volume at a time, so the baseline is
    measured on it before and after each encrypted volume instead (Settings.one_volume_at_a_time).
    """
    session = request.config.stash[session_key]
    if session.settings.one_volume_at_a_time:
        yield None
        return
    with _skip_or_fail():
        mounted = session.volumes.open(BASELINE_SPEC)
    try:
        yield mounted
    finally:
        with _skip_or_fail():
            session.close(mounted)


@pytest.fixture(scope="session")
def encperf_volume(request: pytest.FixtureRequest) -> Iterator[MountedVolume]:
    """The volume of one selected backend (parametrized by ``--encperf-backends``)."""
    session = request.config.stash[session_key]
    with _skip_or_fail():
        mounted = session.volumes.open(request.param)
    try:
        yield mounted
    finally:
        with _skip_or_fail():
            session.close(mounted)


@pytest.fixture
def encperf_kdf(request: pytest.FixtureRequest) -> KdfTiming:
    """The kdf profile's timing of one backend (parametrized like ``encperf_volume``): create and
    the mount of an existing volume with its fast and its default key derivation."""
    with _skip_or_fail():
        return request.config.stash[session_key].measure_kdf(request.param)


@pytest.fixture
def encperf_inplace(request: pytest.FixtureRequest) -> InplaceTiming:
    """The in-place encryption figure of one backend (parametrized like ``encperf_volume``,
    with ``--encperf-inplace``): MB/s of encrypting existing data, or of filling a volume."""
    with _skip_or_fail():
        return request.config.stash[session_key].measure_inplace(request.param)


@pytest.fixture
def encperf(
    request: pytest.FixtureRequest, encperf_baseline: MountedVolume | None, encperf_volume: MountedVolume
) -> Runner:
    """The runner: ``encperf.run(workload)`` measures ``workload`` on the volume against
    the baseline and returns the Result; ``encperf.time(fn)`` does the same for a function."""
    runner = request.config.stash[session_key].runner(encperf_volume, encperf_baseline, request.node)
    runner.test_name = usertiming.test_name(request.node)  # encperf.time's default name
    return runner
