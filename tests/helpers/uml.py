"""A real-kernel lane for tests that need device-mapper: boot Debian's user-mode Linux kernel
(package ``user-mode-linux``) as an ordinary process and run pytest inside it.

This is a test helper, not a user feature. The guest's root file system is the host's, read
only (hostfs), so the guest runs this checkout with the host's Python and packages. The guest
loads dm_crypt, loop, dm_integrity and ecryptfs from ``/usr/lib/uml/modules``, formats nothing on the
host: its scratch disk is a sparse ext4 image (ubd0) mounted at /srv without write barriers (a
flush there is an fsync on the host), and its results (exit code, junit XML, pytest output) are
written to a hostfs-mounted output directory.

Two workarounds for modern hosts, both needed on x86-64 CPUs with AVX-512 or AMX:

* UML 6.1 restores a process's FPU state with PTRACE_SETREGSET(NT_X86_XSTATE) and a buffer
  sized for AVX only; the host kernel refuses any size but its own (EFAULT), and init dies
  ("ptrace set fp regs failed, errno = 14"). A seccomp filter on the UML process makes that
  request fail with EIO, so UML falls back to PTRACE_GETFPREGS/SETFPREGS (the FXSAVE area).
* That fallback keeps only x87/SSE state, so guest processes must not use AVX: glibc's
  string functions are steered off AVX with GLIBC_TUNABLES and OpenSSL (cryptsetup's and
  Python's crypto) with OPENSSL_ia32cap. Without this, Python loops forever in its start-up.

Numbers measured inside the guest are not performance results: one virtual CPU, generic C
crypto. The lane checks function.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import platform
import py_compile
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import matrix

UML_KERNEL = "linux.uml"
UML_MODULES = Path("/usr/lib/uml/modules")
GUEST_DISK_DIR = "/srv"  # exists on Debian; the guest mounts its scratch disk over it
GUEST_OUTPUT_DIR = "/mnt"
IN_GUEST_ENV = "ENCPERF_IN_UML"
TESTDATA_ENV = "ENCPERF_CRYPTSETUP_TESTDATA"  # the shared test images, where the host has them (support.py)
# Loaded up front: the guest kernel's own module requests do not reach our module tree.
# Block layer, device-mapper targets (zero: BitLocker's metadata areas), the userspace crypto
# API cryptsetup uses for header keys, and the ciphers, modes and hashes of the test volumes.
# Crypto first: dm_crypt needs encrypted_keys, which needs cbc(aes) when it loads; eCryptfs
# (which needs encrypted_keys too) runs on cbc and ecb of the ciphers above.
GUEST_MODULES = (
    "af_alg", "algif_skcipher", "algif_hash",
    "ecb", "cbc", "xts", "lrw", "essiv",
    "serpent_generic", "twofish_generic", "camellia_generic", "blowfish_generic", "cast5_generic",
    "des_generic", "sha512_generic", "wp512", "rmd160", "streebog_generic",
    "loop", "dm_mod", "dm_crypt", "dm_integrity", "dm_zero",
    "encrypted_keys", "ecryptfs",
)  # fmt: skip

# glibc 2.36 names (sysdeps/x86/cpu-tunables.c); unknown names are ignored, not fatal
GLIBC_NO_AVX = (
    "glibc.cpu.hwcaps=-AVX,-AVX2,-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,"
    "-FMA,-AVX_Fast_Unaligned_Load,-ERMS"
)
# OpenSSL: clear AVX and OSXSAVE (CPUID.1:ECX bits 28, 27) and every CPUID.7 feature
OPENSSL_NO_AVX = "~0x1800000000000000:0x0"

# seccomp: struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
_AUDIT_ARCH_X86_64 = 0xC000003E
_NR_PTRACE = 101
_PTRACE_GETREGSET, _PTRACE_SETREGSET, _NT_X86_XSTATE = 0x4204, 0x4205, 0x202
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO_EIO = 0x7FFF0000, 0x00050000 | 5
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def _xstate_filter() -> bytes:
    """ptrace(PTRACE_{GET,SET}REGSET, pid, NT_X86_XSTATE, ...) -> EIO; everything else allowed.

    seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8*i (low word first on x86-64).
    """
    program = [
        (_BPF_LD_W_ABS, 0, 0, 4),
        (_BPF_JEQ_K, 0, 8, _AUDIT_ARCH_X86_64),  # other arch -> allow
        (_BPF_LD_W_ABS, 0, 0, 0),
        (_BPF_JEQ_K, 0, 6, _NR_PTRACE),  # not ptrace -> allow
        (_BPF_LD_W_ABS, 0, 0, 16),  # request
        (_BPF_JEQ_K, 1, 0, _PTRACE_GETREGSET),
        (_BPF_JEQ_K, 0, 3, _PTRACE_SETREGSET),
        (_BPF_LD_W_ABS, 0, 0, 32),  # addr: the regset type
        (_BPF_JEQ_K, 0, 1, _NT_X86_XSTATE),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO_EIO),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
    ]
    return b"".join(struct.pack("<HBBI", *instruction) for instruction in program)


def _install_xstate_filter() -> None:  # runs in the child between fork and exec
    code = _xstate_filter()
    buffer = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(code) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        os._exit(120)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        os._exit(121)


def in_guest() -> bool:
    return os.environ.get(IN_GUEST_ENV) == "1"


def problems() -> list[str]:
    """Why the lane cannot run here; empty when it can."""
    found = []
    if platform.machine() != "x86_64":
        found.append(f"UML lane: x86-64 hosts only (this is {platform.machine()})")
    if shutil.which(UML_KERNEL) is None:
        found.append(f"UML lane: {UML_KERNEL} not installed (Debian package user-mode-linux)")
    elif not any(UML_MODULES.glob("*/kernel/drivers/md/dm-crypt.ko*")):
        found.append(f"UML lane: no dm-crypt module under {UML_MODULES}")
    for directory in (GUEST_DISK_DIR, GUEST_OUTPUT_DIR):
        if not Path(directory).is_dir():
            found.append(f"UML lane: {directory} missing (the guest mounts its disk and output there)")
    for tool, package in (("modprobe", "kmod"), ("mkfs.ext4", "e2fsprogs"), ("cryptsetup", "cryptsetup-bin")):
        if shutil.which(tool) is None:
            found.append(f"UML lane: {tool} not installed (Debian package {package})")
    return found


INIT = """#!/bin/sh
# init of the UML guest (PID 1): set up, run pytest, record the exit code, power off
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export GLIBC_TUNABLES={glibc}
export OPENSSL_ia32cap={openssl}
# Scratch space lives on a tmpfs at /run, not /tmp: the project (and its venv) may itself be
# under /tmp on the host, and a tmpfs there would hide it from the guest.
export {in_guest}=1 {exhaustive}={exhaustive_value} HOME=/run/home TMPDIR=/run/tmp
# Byte code, and pytest's rewritten test modules and plugins, to a cache the guest's processes
# share: compiled once per boot, not by every session (the root is read only). Each pytest session
# imports hypothesis (its plugin's summary), rewritten: without the cache ~40 s a session here.
# The host fills it first with the byte code of what it imported (byte_code_for_guest).
export PYTHONPYCACHEPREFIX={output_dir}/{byte_code}
export ENCPERF_TEST_DIR={disk_dir} ENCPERF_DIR={disk_dir}{testdata}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mkdir -p /run/home /run/tmp
mount -t hostfs -o {output} none {output_dir}
exec >{output_dir}/console.log 2>&1
mkdir -p /run/kmod/lib/modules
mount -t hostfs -o {modules} none /run/kmod/lib/modules
for module in {kernel_modules}; do
    modprobe --dirname=/run/kmod "$module" || echo "modprobe $module failed"
done
# nobarrier: a flush of the scratch disk is an fsync of its image on the host (UML's ubd driver),
# 20 ms on this project's CI disk, and every fsync, sync and journal commit of the volumes the
# tests stack on it (loop, dm-crypt, ext4) ends in one; the disk is thrown away after the run
mount -o nobarrier /dev/ubda {disk_dir} || mount /dev/ubda {disk_dir}
cd {cwd}
echo "guest ready after $(cut -d' ' -f1 /proc/uptime) s"
{pytest} ; echo $? > {output_dir}/exitcode.tmp
mv {output_dir}/exitcode.tmp {output_dir}/exitcode
umount {disk_dir}
sync
echo o > /proc/sysrq-trigger
sleep 10
"""


BYTE_CODE_DIR = "pycache"  # in the output directory


def byte_code_for_guest(cache: Path) -> int:
    """Put the byte code of every module this process imported from a ``.py`` file under ``cache``,
    laid out as PYTHONPYCACHEPREFIX wants it (the source's absolute directory, then the name): the
    guest, which sees the host's files at the same paths, then compiles only what the host did not
    import. Compiling in the guest is slow (UML's page faults); a stale or missing file here is only
    compiled there (Python checks each against its source). Returns how many were put there."""
    put = 0
    for module in list(sys.modules.values()):
        spec = getattr(module, "__spec__", None)
        source, cached = (spec.origin, spec.cached) if spec is not None else (None, None)
        if not (source and cached and source.endswith(".py") and os.path.isabs(source)):
            continue
        target = cache / os.path.dirname(source).lstrip(os.sep) / os.path.basename(cached)
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            target.parent.mkdir(parents=True, exist_ok=True)
            if fresh_byte_code(Path(cached), Path(source)):
                shutil.copyfile(cached, target)
            else:  # not written on the host (PYTHONDONTWRITEBYTECODE) or stale: compile it here
                py_compile.compile(source, cfile=str(target), doraise=True)
            put += 1
    return put


def fresh_byte_code(cached: Path, source: Path) -> bool:
    """Whether ``cached`` is the timestamp-checked byte code of ``source`` as it is now."""
    try:
        with cached.open("rb") as handle:
            header = handle.read(16)
        stat = source.stat()
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = struct.unpack("<III", header[4:16])
    return flags == 0 and mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


@dataclass
class LaneResult:
    exitcode: int | None  # pytest's exit code in the guest; None if it never finished
    junit: Path
    console: str  # the guest's init and pytest output
    kernel_log: str  # UML's own console (boot messages, panics)
    seconds: float


def run_pytest(
    args: list[str],
    workdir: Path,
    *,
    cwd: Path,
    disk_size: int = 2 << 30,
    memory_mb: int = 1024,
    timeout: float = 600.0,
    kernel_modules: tuple[str, ...] = GUEST_MODULES,
) -> LaneResult:
    """Boot UML, run ``python -m pytest ARGS`` in ``cwd`` inside it, return what happened."""
    workdir.mkdir(parents=True, exist_ok=True)
    output = workdir / "out"
    output.mkdir()
    disk = workdir / "disk.img"
    with disk.open("wb") as handle:
        handle.truncate(disk_size)  # sparse
    subprocess.run(["mkfs.ext4", "-F", "-q", "-E", "nodiscard", str(disk)], check=True, capture_output=True)
    byte_code_for_guest(output / BYTE_CODE_DIR)
    junit = output / "junit.xml"
    pytest_argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist"]
    pytest_argv += [f"--junitxml={GUEST_OUTPUT_DIR}/junit.xml", "-rs", *args]
    init = workdir / "init.sh"
    init.write_text(
        INIT.format(
            glibc=GLIBC_NO_AVX,
            openssl=OPENSSL_NO_AVX,
            in_guest=IN_GUEST_ENV,
            exhaustive=matrix.EXHAUSTIVE_ENV,
            exhaustive_value=int(matrix.exhaustive()),  # the guest's lane as the host's
            testdata=f" {TESTDATA_ENV}={shlex.quote(testdata)}"
            if (testdata := os.environ.get(TESTDATA_ENV))
            else "",
            disk_dir=GUEST_DISK_DIR,
            output=shlex.quote(str(output)),
            output_dir=GUEST_OUTPUT_DIR,
            byte_code=BYTE_CODE_DIR,
            modules=shlex.quote(str(UML_MODULES)),
            kernel_modules=" ".join(kernel_modules),
            cwd=shlex.quote(str(cwd)),
            pytest=" ".join(shlex.quote(a) for a in pytest_argv),
        )
    )
    init.chmod(0o755)
    argv = [
        UML_KERNEL,
        f"mem={memory_mb}M",
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "ro",
        f"init={init}",
        f"ubd0={disk}",
        "con=null",
        "con0=fd:0,fd:1",
        "quiet",
    ]
    started = time.monotonic()
    kernel_log = workdir / "kernel.log"
    with kernel_log.open("wb") as log:
        # UML's console is stdin/stdout; its own files (~/.uml, mconsole) go to a private HOME
        # its memory file is best on tmpfs (/dev/shm), if that is big enough (containers often
        # give it 64 MiB: the guest would die of SIGBUS), else the scratch directory
        roomy = os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free > (memory_mb + 64) << 20
        shm = "/dev/shm" if roomy else str(workdir)
        env = {**os.environ, "HOME": str(workdir), "TMPDIR": shm}
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_install_xstate_filter,
            env=env,
            start_new_session=True,  # UML forks helpers; kill the whole group on timeout
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # UML's helper processes, if any remain
    seconds = time.monotonic() - started
    with_code = output / "exitcode"
    exitcode = int(with_code.read_text()) if with_code.exists() else None
    console = (
        (output / "console.log").read_text(errors="replace") if (output / "console.log").exists() else ""
    )
    disk.unlink()  # 2 GiB sparse: don't keep it around
    return LaneResult(exitcode, junit, console, kernel_log.read_text(errors="replace"), seconds)
