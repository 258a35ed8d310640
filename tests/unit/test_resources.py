"""resources.py: one release function per resource kind, for live teardown and dead-run cleanup
alike; the safe-path checks a dead run's journal is held to; secret directories in RAM."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from pytest_encperf import footprints, host, journal, mounting, mounttable, resources, secretdirs, trust
from pytest_encperf.resources import Cleanup, Resource
from pytest_encperf.secretdirs import SecretDir

ROOT = Path(__file__).resolve().parents[2]


def test_infrastructure_imports_no_backend() -> None:
    for module in ("host", "resources", "journal"):
        tree = ast.parse((ROOT / "pytest_encperf" / f"{module}.py").read_text())
        imported = [
            (node.module or "") + "." + ",".join(a.name for a in node.names)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        ]
        imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
        assert not [name for name in imported if "backends" in name], f"{module} imports {imported}"


def test_backends_register_the_kinds_they_add() -> None:
    from pytest_encperf import backends

    assert backends.load_all() == []
    assert {"fscrypt-key", "veracrypt-volume"} <= set(resources.KINDS)
    assert {"path", "mount", "loop", "dm", "process"} <= set(resources.KINDS)


def test_a_kind_nobody_registered_cannot_be_held() -> None:
    with pytest.raises(host.HostError, match="no release function for 'teleporter' resources"):
        Cleanup().add(Resource("teleporter", "t1"))


def test_a_mount_is_unmounted_retried_then_lazily_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """As root through umount2 without following a link; otherwise fusermount for FUSE, umount
    for the rest; each retried while busy, then lazy."""
    calls: list[list[str]] = []

    def busy(argv: list[str], **kwargs: object) -> str:
        calls.append(list(argv))
        if "-z" not in argv and "--lazy" not in argv:
            raise host.HostError(f"{argv[0]}: exit 1: Device or resource busy")
        return ""

    def umount2(target: str, flags: int) -> None:
        calls.append(["umount2", target, str(flags)])
        if not flags & mounting.MNT_DETACH:
            raise host.HostError(f"umount {target}: Device or resource busy")

    mounted = [True]
    monkeypatch.setattr(mounting, "is_mounted", lambda path: mounted[0])
    monkeypatch.setattr(mounting, "_unmountable", lambda target: None)
    monkeypatch.setattr(mounting, "_umount2", umount2)
    monkeypatch.setattr(host, "is_root", lambda: True)
    monkeypatch.setattr(mounting, "mount_type", lambda path: "fuse.gocryptfs")
    monkeypatch.setattr(mounting, "fusermount_binary", lambda: "fusermount3")
    monkeypatch.setattr(host, "run", busy)
    monkeypatch.setattr(host.time, "sleep", lambda seconds: None)
    with pytest.warns(RuntimeWarning, match="/mnt/x was still busy: unmounted lazily"):
        message = resources.release(Resource("mount", "/mnt/x"))
    assert message == "unmounted /mnt/x (lazily: it was still busy)"
    assert calls == [["umount2", "/mnt/x", "0"]] * 10 + [["umount2", "/mnt/x", str(mounting.MNT_DETACH)]]
    monkeypatch.setattr(host, "is_root", lambda: False)
    calls.clear()
    with pytest.warns(RuntimeWarning):
        resources.release(Resource("mount", "/mnt/x"))
    assert calls == [["fusermount3", "-u", "/mnt/x"]] * 10 + [["fusermount3", "-u", "-z", "/mnt/x"]]
    monkeypatch.setattr(mounting, "mount_type", lambda path: "ext4")
    calls.clear()
    with pytest.warns(RuntimeWarning):
        resources.release(Resource("mount", "/mnt/x"))
    assert calls[0] == ["umount", "--no-canonicalize", "/mnt/x"]
    assert calls[-1] == ["umount", "--no-canonicalize", "--lazy", "/mnt/x"]
    mounted[0] = False
    assert resources.release(Resource("mount", "/mnt/x")) == "/mnt/x: not mounted any more"


def test_path_removal_refuses_to_delete_through_a_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "run"
    target.mkdir()
    monkeypatch.setattr(mounting, "mounts_under", lambda p: [target / "mnt"])
    monkeypatch.setattr(mounting, "unmount", lambda p: False)  # an unmount that does not take
    cleanup = Cleanup()
    cleanup.path(target)
    with pytest.raises(host.HostError, match=r"not removing .*still mounted"):
        cleanup.release()
    assert target.exists()


def test_secret_dir_is_0700_in_ram_named_like_a_run_directory_and_removed_with_its_cleanup() -> None:
    cleanup = Cleanup()
    secrets = SecretDir.create(cleanup)
    key = secrets.write("key", b"s3cret")
    assert oct(secrets.path.stat().st_mode & 0o777) == "0o700"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert mounting.filesystem_type(secrets.path) in secretdirs.MEMORY_FILESYSTEMS
    assert secrets.path.parent in secretdirs.secret_bases()
    assert secrets.path.name.startswith(f"encperf-{os.getpid()}-")
    assert cleanup.resources == [Resource("path", str(secrets.path))]
    secrets.discard("key")
    assert not key.exists()
    cleanup.release()
    assert not secrets.path.exists()


def test_key_file_directories_go_where_the_readme_says() -> None:
    bases = secretdirs.secret_bases()
    assert bases[-1] == Path("/dev/shm")
    assert (bases[0] == Path("/run/encperf")) is (os.geteuid() == 0)
    if os.environ.get("XDG_RUNTIME_DIR"):
        assert Path(os.environ["XDG_RUNTIME_DIR"]) in bases


def test_no_ram_file_system_means_no_key_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(secretdirs, "secret_bases", lambda: [tmp_path])  # on disk
    with pytest.raises(host.HostError, match="no RAM file system for key files"):
        SecretDir.create(Cleanup())


def test_safe_path_rules(tmp_path: Path) -> None:
    assert trust.unsafe_ancestor(Path("/var/tmp")) is None  # sticky: fine
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert trust.unsafe_ancestor(shared / "x") == f"{shared / 'x'}: No such file or directory"
    assert trust.unsafe_ancestor(shared) == f"{shared} is writable by other users"
    run = tmp_path / "encperf-7-a"
    run.mkdir(mode=0o755)
    scope = trust.RunScope(7, (tmp_path,))
    assert scope.unsafe(str(run / "f")) == f"{run} has mode 0755, not 0700"
    run.chmod(0o700)
    assert scope.unsafe(str(run / "f")) is None
    assert scope.unsafe(str(run)) is None
    assert trust.RunScope(8, (tmp_path,)).unsafe(str(run / "f")) is not None  # another run's
    (run / "link").symlink_to("/etc")
    assert scope.unsafe(str(run / "link" / "passwd")) == f"{run / 'link'} is not a directory"
    assert scope.outside(str(run / "link" / "passwd")) is None  # by its text alone it is inside
    # a directory on the way is gone: nothing to release, and the name must not be acted on
    # (someone else could make it again, with a symbolic link in it)
    with pytest.raises(trust.Gone):
        scope.unsafe(str(tmp_path / "encperf-7-b" / "link" / "shadow"))


NOBODY = 65534


def test_the_run_s_own_teardown_does_not_follow_a_planted_symbolic_link(tmp_path: Path) -> None:
    """The reviewer's case (h2_userdir.py): whoever owns --encperf-dir renames the run directory
    and puts symbolic links in its place; the teardown, which acts by name, must not follow them
    to a directory it never made."""
    base = tmp_path / "userdir"
    base.mkdir()
    victim = tmp_path / "victim" / "mnt"
    victim.mkdir(parents=True)
    (victim / "important.txt").write_text("data")
    fake = tmp_path / "fake"
    fake.mkdir()
    (tmp_path / "journal").mkdir(mode=0o700)
    cleanup = Cleanup(journal.Journal(tmp_path / "journal"))  # not the journal of this pytest run
    run_dir = base / f"encperf-{os.getpid()}-x"
    run_dir.mkdir(mode=0o700)
    cleanup.path(run_dir)
    (run_dir / "01-plain" / "mnt").mkdir(parents=True)
    cleanup.path(run_dir / "01-plain" / "mnt")
    if os.geteuid() == 0:
        os.chown(base, NOBODY, NOBODY)  # what makes the renames below possible for another user
    run_dir.rename(tmp_path / "moved")
    run_dir.symlink_to(fake)
    (fake / "01-plain").symlink_to(victim.parent)
    with pytest.raises(host.HostError) as failed:
        cleanup.release()
    assert (victim / "important.txt").read_text() == "data"
    assert (
        f"not removing {run_dir / '01-plain' / 'mnt'}: {run_dir / '01-plain'} is a symbolic link "
        "(another user could redirect it)"
    ) in str(failed.value)
    # the run directory holds what failed: kept, not tried (Cleanup.release)
    assert f"remove {run_dir} (may rest on remove {run_dir / '01-plain' / 'mnt'})" in str(failed.value)
    if os.geteuid() == 0:  # tried on its own, it is refused: its parent is another user's now
        alone = Cleanup(journal.Journal(tmp_path / "journal"))
        alone.path(run_dir)
        with pytest.raises(host.HostError, match=rf"not removing {run_dir}: {base} is owned by uid {NOBODY}"):
            alone.release()
    assert run_dir.is_symlink() and fake.exists(), "nothing was acted on through the links"


class RecordingObserver:
    """Notes, at each registration, whether the path it names exists yet."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []
        self.dropped: list[object] = []

    def registered(self, resource: Resource, label: str) -> object:
        self.seen.append((resource.ident, os.path.lexists(resource.ident)))
        return len(self.seen)

    def released(self, token: object) -> None:
        self.dropped.append(token)


def test_a_private_directory_is_journaled_before_it_is_made(tmp_path: Path) -> None:
    observer = RecordingObserver()
    cleanup = Cleanup(observer)
    made = secretdirs.private_directory(cleanup, tmp_path)
    assert observer.seen == [(str(made), False)]  # registered while it did not exist yet
    assert made.name.startswith(f"encperf-{os.getpid()}-")
    assert made.stat().st_mode & 0o777 == 0o700
    cleanup.release()
    assert not made.exists()


def test_a_private_directory_whose_name_someone_took_is_never_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = iter(["taken", "free"])
    monkeypatch.setattr(secretdirs.secrets, "token_hex", lambda n: next(names))
    taken = tmp_path / f"encperf-{os.getpid()}-taken"
    taken.mkdir()
    observer = RecordingObserver()
    cleanup = Cleanup(observer)
    made = secretdirs.private_directory(cleanup, tmp_path)
    assert made.name.endswith("-free")
    assert observer.dropped == [1]  # the taken name's entry was dropped, not released
    cleanup.release()
    assert taken.is_dir()


def test_secret_dir_is_journaled_before_it_is_made() -> None:
    observer = RecordingObserver()
    cleanup = Cleanup(observer)
    secrets = SecretDir.create(cleanup)
    try:
        assert observer.seen == [(str(secrets.path), False)]
    finally:
        cleanup.release()


def test_removing_a_symbolic_link_to_a_mount_point_removes_the_link_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unmounted: list[Path] = []
    monkeypatch.setattr(mounting, "unmount", lambda mountpoint, **_: unmounted.append(mountpoint))
    link = tmp_path / "link"
    link.symlink_to("/proc")  # a mount point of the system's
    assert resources.release(Resource("path", str(link))) == f"removed {link}"
    assert not os.path.lexists(link) and unmounted == []


@pytest.mark.parametrize(
    ("one", "other", "expected"),
    [
        (("/r/a",), ("/r/a",), True),
        (("/r/a/file",), ("/r/a",), True),  # a file in a directory, a backing file in a mount
        (("/r/a",), ("/r/a/file",), True),
        (("/r/a",), ("/r/ab",), False),  # a name's prefix is not a parent
        (("/dev/loop1", "/r/x.img"), ("/r/mnt", "/dev/loop1"), True),  # a mount from a loop device
        (("/dev/loop1", "/r/x.img"), ("/r/mnt", "/dev/loop2"), False),
        (("/r/a/",), ("/r/a/b",), True),
        ((), ("/r",), False),
        (None, ("/r",), True),  # not known: may rest on anything
        (("/r",), None, True),
    ],
)
def test_what_may_rest_on_what(
    one: footprints.Footprint, other: footprints.Footprint, expected: bool
) -> None:
    assert footprints.overlaps(one, other) is expected


def test_each_kind_says_what_it_rests_on(monkeypatch: pytest.MonkeyPatch) -> None:
    table = [["/dev/loop3", "/r/m", "ext4", "rw"], ["gocryptfs", "/r/g", "fuse.gocryptfs", "rw"]]
    monkeypatch.setattr(mounttable, "lines", lambda path: table)
    assert resources.footprint(Resource("mount", "/r/m")) == ("/r/m", "/dev/loop3")  # the device under it
    assert resources.footprint(Resource("mount", "/r/g")) is None  # its daemon is in no entry
    assert resources.footprint(Resource("mount", "/r/gone")) == ("/r/gone",)
    assert resources.footprint(Resource("loop", "/dev/loop3", "/r/x.img")) == ("/dev/loop3", "/r/x.img")
    assert resources.footprint(Resource("path", "/r/x.img")) == ("/r/x.img",)
    assert resources.footprint(Resource("process", "1")) is None  # what a process holds is not known
    assert resources.footprint(Resource("no-such-kind", "x")) is None


def test_a_failed_release_in_the_runs_own_teardown_keeps_what_may_rest_on_it() -> None:
    """The dead-run rule (journal.release_dead_runs) in the run's own teardown: newest first, a
    failed release holds every older typed resource that may rest on it, the rest is released,
    and in-memory actions always run."""
    done: list[str] = []

    def footprint_of(resource: Resource) -> footprints.Footprint:
        return tuple(resource.ident.split("+"))

    def release_of(resource: Resource) -> str:
        if resource.ident.startswith("/stuck"):
            raise host.HostError(f"{resource.ident}: busy")
        done.append(resource.ident)
        return f"released {resource.ident}"

    resources.register_kind("test-stack", release_of, footprint=footprint_of)
    try:
        observer = RecordingObserver()  # not this pytest run's journal: what is kept stays in it
        cleanup = Cleanup(observer)
        cleanup.add(Resource("test-stack", "/work/other.img"))  # apart from what fails: released
        cleanup.add(Resource("test-stack", "/work/container.img"))  # under the stuck mount: kept
        cleanup.add(Resource("test-stack", "/dev/loop9+/work/container.img"))  # on it: kept
        cleanup.push("forget the key", lambda: done.append("forgot"))  # memory only: always
        cleanup.add(Resource("test-stack", "/stuck/mnt+/dev/loop9"))  # newest: fails
        with pytest.raises(host.HostError) as failed:
            cleanup.release()
        assert done == ["forgot", "/work/other.img"]
        message = str(failed.value)
        assert message.startswith("cleanup failed: release test-stack /stuck/mnt+/dev/loop9: /stuck/mnt")
        assert "kept for `encperf cleanup`: release test-stack /dev/loop9+/work/container.img" in message
        assert "release test-stack /work/container.img (may rest on release test-stack /dev/loop9" in message
        assert observer.dropped == [1]  # only the one released leaves the journal
        assert len(cleanup) == 0  # a second release is a no-op
    finally:
        del resources.KINDS["test-stack"]
