"""A stand-in for the ``veracrypt`` console program that maps volumes the way VeraCrypt's FUSE
mode does, so that cleanup after a killed run is tested without the real program.

VeraCrypt (1.26, ``--mount-options=nokernelcrypto``) mounts a FUSE file system of its own at
``/tmp/.veracrypt_aux_mntN`` exposing the decrypted volume as a file ``volume``, attaches a loop
device over that file and leaves detached daemon processes running; only
``veracrypt --text --dismount <container>`` takes all of that down. This stand-in makes the same
kinds of resources, outside the run's directory and not as children of the caller: a tmpfs at
``/tmp/.veracrypt_aux_mntN`` with the container bind-mounted on its ``volume`` file (no
encryption: the stand-in tests resource handling, not crypto) and the container's path in its
``control`` file (as VeraCrypt's FUSE service describes the volume there), a loop device over
it (noted in the state after ``losetup`` returns, as VeraCrypt notes it in its FUSE service)
and a detached daemon holding the container open. It answers ``--help`` (listing ``--stdin``),
``--version``, ``--create``, mapping (``... <container>``), ``--list`` and ``--dismount``, and
checks the password given on stdin.

State lives in ``$VERACRYPT_STANDIN_STATE`` (one JSON file per slot). With
``$VERACRYPT_STANDIN_PAUSE`` set to a directory, a mapping writes ``tool-paused`` there once
everything exists and waits for a ``go`` file (at most 60 s): a test kills the run then, while
the tool is still working.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

AUX_PREFIX = "/tmp/.veracrypt_aux_mnt"


def state_dir() -> Path:
    path = Path(os.environ.get("VERACRYPT_STANDIN_STATE", "/run/encperf-veracrypt-standin"))
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def slots() -> dict[int, dict[str, str]]:
    found = {}
    for path in state_dir().glob("slot[0-9]*.json"):
        found[int(path.stem[4:])] = json.loads(path.read_text())
    return found


def read_password(argv: list[str]) -> bytes:
    if "--stdin" in argv:
        return sys.stdin.buffer.readline().rstrip(b"\n")
    for arg in argv:
        if arg.startswith("--password="):
            return arg.split("=", 1)[1].encode()
    raise SystemExit("Error: no password (the stand-in needs --stdin or --password=)")


def serialized_path(path: str) -> bytes:
    """The ``Path`` field as VeraCrypt's Serializer writes it (big-endian sizes, each preceded
    by its own size 8; the name NUL-terminated, the value NUL-terminated wchar_t, UTF-32)."""
    name, value = b"Path\0", f"{path}\0".encode("utf-32-le")
    return struct.pack(">QQ", 8, len(name)) + name + struct.pack(">QQ", 8, len(value)) + value


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def attach(image: Path) -> str:
    """``losetup --find --show``, as VeraCrypt runs it; tried again when another program took
    the free device it found first (two --find at once pick the same one: EBUSY)."""
    for attempt in range(10):
        try:
            return run("losetup", "--find", "--show", str(image))
        except subprocess.CalledProcessError:
            if attempt == 9:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def read_or_none(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def passwords() -> Path:
    """Which password opens which container (sha256), kept beside the slots: the whole
    container is the "decrypted" volume, so it has no room for a header."""
    return state_dir() / "volumes.json"


def create(argv: list[str]) -> int:
    container = Path(argv[argv.index("--create") + 1])
    size = int(next(a for a in argv if a.startswith("--size=")).split("=", 1)[1])
    password = read_password(argv)
    fd = os.open(container, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    known = json.loads(passwords().read_text()) if passwords().exists() else {}
    known[os.path.realpath(container)] = hashlib.sha256(password).hexdigest()
    passwords().write_text(json.dumps(known))
    return 0


def daemon(container: str) -> int:
    """A detached "VeraCrypt daemon": holds the container open until SIGTERM."""
    fd = os.open(container, os.O_RDONLY)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)
    os.close(fd)


def map_volume(argv: list[str]) -> int:
    container = os.path.realpath(argv[-1])
    password = read_password(argv)
    known = json.loads(passwords().read_text()) if passwords().exists() else {}
    if known.get(container) != hashlib.sha256(password).hexdigest():
        print("Error: Incorrect password or not a VeraCrypt volume.", file=sys.stderr)
        return 1
    if any(slot["container"] == container for slot in slots().values()):
        print("Error: The volume you are trying to mount is already mounted.", file=sys.stderr)
        return 1
    number = 1
    while True:  # the first free slot, claimed atomically
        aux = Path(f"{AUX_PREFIX}{number}")
        try:
            aux.mkdir(mode=0o700)
            break
        except FileExistsError:
            number += 1
    slot: dict[str, str] = {"container": container, "aux": str(aux)}
    save = state_dir() / f"slot{number}.json"
    save.write_text(json.dumps(slot))  # first: a dismount finds whatever exists from now on
    run("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(aux))
    (aux / "volume").touch()
    # VeraCrypt's FUSE service describes the volume in "control" (its path among the rest)
    (aux / "control").write_bytes(serialized_path(container))
    run("mount", "--bind", container, str(aux / "volume"))
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--standin-daemon", container],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # detached, like VeraCrypt's daemons: not the caller's child
    )
    slot["daemon"] = str(proc.pid)
    save.write_text(json.dumps(slot))
    slot["device"] = attach(aux / "volume")
    save.write_text(json.dumps(slot))
    pause = os.environ.get("VERACRYPT_STANDIN_PAUSE")
    if pause:
        (Path(pause) / "tool-paused").write_text(container)
        deadline = time.monotonic() + 60
        while not (Path(pause) / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return 0


def dismount(container: str) -> int:
    container = os.path.realpath(container)
    for number, slot in slots().items():
        if slot["container"] != container:
            continue
        aux = Path(slot["aux"])
        backing = Path("/sys/block") / Path(slot.get("device") or "none").name / "loop" / "backing_file"
        if slot.get("device") and read_or_none(backing) == str(aux / "volume"):  # never another's
            subprocess.run(["losetup", "--detach", slot["device"]], check=False)
            deadline = time.monotonic() + 10
            while read_or_none(backing) == str(aux / "volume") and time.monotonic() < deadline:
                time.sleep(0.05)
        if slot.get("daemon"):
            pid = int(slot["daemon"])
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"--standin-daemon" in cmdline:
                    os.kill(pid, signal.SIGTERM)
            except (OSError, ProcessLookupError):
                pass
        for mountpoint in (aux / "volume", aux):
            subprocess.run(["umount", str(mountpoint)], check=False, capture_output=True)
        if aux.is_dir() and not os.path.ismount(aux):
            aux.rmdir()
        (state_dir() / f"slot{number}.json").unlink()
        return 0
    print(f"Error: No such volume is mounted: {container}", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--standin-daemon"]:
        return daemon(argv[1])
    if "--help" in argv:
        # as VeraCrypt 1.26.3 (console build) does: the option list is the usage line on stderr,
        # the long help on stdout does not mention --stdin
        stdin = "" if os.environ.get("VERACRYPT_STANDIN_NO_STDIN") else " [--stdin]"
        print(
            f"Usage: veracrypt [--text] [--non-interactive]{stdin} [Volume path] [Mount point]",
            file=sys.stderr,
        )
        print("\nSynopsis:\n\nveracrypt [OPTIONS] COMMAND\nveracrypt [OPTIONS] VOLUME_PATH [MOUNT_DIRECTORY]")
        return 0
    if "--version" in argv:
        print("VeraCrypt 1.26.7 (stand-in)")
        return 0
    if "--create" in argv:
        return create(argv)
    if "--list" in argv:
        listed = slots()
        if not listed:
            print("Error: No volumes mounted.", file=sys.stderr)
            return 1
        for number, slot in sorted(listed.items()):
            print(f"{number}: {slot['container']} {slot.get('device', '-')} -")
        return 0
    if "--dismount" in argv:
        return dismount(argv[argv.index("--dismount") + 1])
    return map_volume(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
