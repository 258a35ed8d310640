"""Machine fingerprint: what moves encryption numbers, read from psutil and /proc (no pytest).

``machine_info()`` gathers everything (saved with each run); ``machine_id()`` hashes only the
stable part (STABLE_KEYS: CPU model and crypto flags, core count, kernel, the kernel's
``xts(aes)`` driver, backing device model), so runs of one machine share a folder in
``.encperf/`` whatever else changed (free memory, governor, tool versions).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
from pathlib import Path
from typing import Any

import psutil

from . import __version__, host

CRYPTO_FLAGS = ("aes", "vaes", "avx", "avx2", "avx512f", "avx512vl", "sha_ni", "pclmulqdq", "vpclmulqdq")
STABLE_KEYS = ("machine", "cpu_model", "cpu_count", "cpu_flags", "kernel", "xts_aes_driver", "device_model")
# The hardware part: runs of one hardware are compared even when the kernel or its crypto driver
# changed (that is what the gate is for), with the fields that differ shown.
HARDWARE_KEYS = ("machine", "cpu_model", "cpu_count", "cpu_flags", "device_model")
TOOLS = {  # name -> argv printing its version
    "cryptsetup": ["cryptsetup", "--version"],
    "fio": ["fio", "--version"],
    "gocryptfs": ["gocryptfs", "--version"],
    "veracrypt": ["veracrypt", "--text", "--version"],
    "fscrypt": ["fscrypt", "--version"],
    "mkfs.ext4": ["mke2fs", "-V"],
}


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def cpu_model(cpuinfo: str) -> str:
    for key in ("model name", "Processor", "cpu model", "Hardware"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or "unknown"


def cpu_flags(cpuinfo: str) -> list[str]:
    """The crypto-relevant flags (x86 ``flags``, arm ``Features``) present on this CPU."""
    match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    present = set(match.group(1).split()) if match else set()
    return [flag for flag in CRYPTO_FLAGS if flag in present] + sorted(
        flag for flag in present & {"aes", "pmull", "sha2"} if flag not in CRYPTO_FLAGS
    )


def crypto_driver(crypto: str, algorithm: str = "xts(aes)") -> str:
    """The driver the kernel picks for ``algorithm``: the highest-priority entry in /proc/crypto."""
    best: tuple[int, str] | None = None
    for block in crypto.split("\n\n"):
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition(":") for line in block.splitlines())
            if value
        )
        if fields.get("name") != algorithm:
            continue
        priority = int(fields.get("priority", "0") or 0)
        if best is None or priority > best[0]:
            best = (priority, fields.get("driver", "unknown"))
    return best[1] if best else "none"


def _mount_of(path: Path) -> Any | None:
    """psutil's partition entry whose mountpoint is the longest prefix of path."""
    best = None
    for part in psutil.disk_partitions(all=True):
        mountpoint = Path(part.mountpoint)
        contains = path == mountpoint or mountpoint in path.parents
        if contains and (best is None or len(part.mountpoint) > len(best.mountpoint)):
            best = part
    return best


def device_model(device: str) -> str:
    """Model of the disk holding a block device (``/dev/sda2`` -> sda's model), or "unknown"."""
    name = Path(os.path.realpath(device)).name
    sys_block = Path("/sys/class/block") / name
    if not sys_block.exists():
        return "unknown"
    disk = sys_block.resolve()
    if (disk / "partition").exists():
        disk = disk.parent
    for candidate in ("device/model", "device/name"):
        text = _read(disk / candidate).strip()
        if text:
            return text
    if disk.name.startswith("vd"):
        return "virtio disk"
    return disk.name


def tool_versions() -> dict[str, str]:
    return {name: host.tool_version(argv) for name, argv in TOOLS.items() if shutil.which(argv[0])}


def governor() -> str:
    text = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").strip()
    return text or "unknown"


def cpu_frequency() -> dict[str, float | None]:
    """Current (mean over the CPUs), minimum and maximum frequency in MHz, read when the run
    starts: the frequency alone moves encrypted throughput. None where the kernel does not say
    (no cpufreq, as in many VMs, gives no minimum or maximum)."""
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        freq = None
    if freq is None:
        return {"current": None, "min": None, "max": None}
    return {"current": round(freq.current, 1) or None, "min": freq.min or None, "max": freq.max or None}


def machine_info(directory: Path | None = None) -> dict[str, Any]:
    """Everything known about this machine and the storage under ``directory``."""
    cpuinfo = _read("/proc/cpuinfo")
    mount = _mount_of(Path(directory).resolve()) if directory else None
    uname = platform.uname()
    return {
        "node": uname.node,
        "machine": uname.machine,
        "system": uname.system,
        "kernel": uname.release,
        "python_version": platform.python_version(),
        "encperf_version": __version__,
        "cpu_model": cpu_model(cpuinfo),
        "cpu_count": psutil.cpu_count(logical=True),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "cpu_flags": cpu_flags(cpuinfo),
        "xts_aes_driver": crypto_driver(_read("/proc/crypto")),
        "memory_bytes": psutil.virtual_memory().total,
        "governor": governor(),
        "cpu_mhz": cpu_frequency(),
        "directory": str(directory) if directory else None,
        "filesystem": mount.fstype if mount else "unknown",
        "device": mount.device if mount else "unknown",
        "device_model": device_model(mount.device)
        if mount and mount.device.startswith("/dev/")
        else "unknown",
        "tools": tool_versions(),
    }


def machine_id(info: dict[str, Any]) -> str:
    """``<machine>-<12 hex>`` from the stable keys, e.g. ``x86_64-3f2a9c01b4de``."""
    stable = {key: info.get(key) for key in STABLE_KEYS}
    digest = hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:12]
    arch = re.sub(r"[^A-Za-z0-9_]+", "_", str(info.get("machine") or "unknown"))
    return f"{arch}-{digest}"


def same_hardware(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(key) == b.get(key) for key in HARDWARE_KEYS)


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same hardware under the same host name: this machine after a kernel or driver update,
    not an identical server beside it (fleets of one server model)."""
    return same_hardware(a, b) and a.get("node") == b.get("node")


def fleet_member_id(machine_id: str, info: dict[str, Any]) -> str:
    """The id of one of several machines of a fleet that share hardware, and so ``machine_id``:
    the id with the host name (``x86_64-3f2a9c01b4de-gen8a``)."""
    return f"{machine_id}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', str(info.get('node') or 'unknown'))}"


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``kernel 6.1.0-1 -> 6.1.0-2`` for every identifying field and tool version that differs."""
    found = [
        f"{key} {_text(before.get(key))} -> {_text(now.get(key))}"
        for key in STABLE_KEYS
        if before.get(key) != now.get(key)
    ]
    old_tools, new_tools = before.get("tools") or {}, now.get("tools") or {}
    found += [
        f"{name} {old_tools.get(name, 'absent')} -> {new_tools.get(name, 'absent')}"
        for name in sorted({*old_tools, *new_tools})
        if old_tools.get(name) != new_tools.get(name)
    ]
    return found


def _text(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)
