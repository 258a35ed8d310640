"""Where the overhead comes from (``--encperf-ladder``): each backend and workload three ways.

- cipher: the speed of the backend's own cipher on this CPU (ceiling.py: the kernel's through
  AF_ALG, or the backend's user-space implementation) and of its counterpart in the other place
  (``ceiling.counterpart``);
- layer: the same backend and workload on a RAM-backed container: a loop device over a container
  file on a tmpfs this run mounts itself, with plain on the same tmpfs as its plain side. It
  measures memory, never a disk: it is never anyone's baseline, never saved among the results
  the gate compares (it goes under its own key, ``encperf.ladder``);
- device: the normal run on the disk (and its plain rounds).

``limiting_rung`` then names the rung that limits the backend (the rule is in its docstring).
Pure: the layer rung is measured by layer.py; the session builds the rows, report/analyses.py renders them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from .model import BASELINE, Result

RUNGS = ("cipher", "layer", "device")
# Two ceilings within this of each other are one limit (the rounds of a short run scatter by
# several percent); the device rung below every ceiling by more than this gets a remark.
TOLERANCE = 0.10
NO_ENCRYPTION = "no encryption"  # the cipher rung of plain
LayerRungs = dict[tuple[str, str], tuple["Rung", "Rung"]]  # (spec, workload name) -> (layer, its plain)


@dataclass(frozen=True)
class Rung:
    """One speed of the ladder (MB/s, 10^6), or None with ``note`` saying why not."""

    mb_per_s: float | None
    note: str = ""  # what was measured ("user:AES-256-XTS, OpenSSL ..."), or why not


@dataclass(frozen=True)
class Limit:
    rung: str | None  # one of RUNGS; None when no rung was measured
    remark: str = ""


def limiting_rung(
    cipher: float | None,
    layer: float | None,
    device_plain: float | None,
    device: float | None = None,
    tolerance: float = TOLERANCE,
) -> Limit:
    """The rung that limits a backend on a workload.

    Each rung is a ceiling the backend cannot pass on the disk: its cipher alone (``cipher``),
    the backend on RAM (``layer``: cipher and layer without a disk), the disk itself (plain on
    the device, ``device_plain``). The limiting rung is the lowest ceiling; when several are
    within ``tolerance`` of the lowest, the first of cipher, layer, device among them is named
    (a layer that runs at its cipher's speed adds no limit of its own). An unmeasured rung
    (None or 0) takes no part. When the backend on the disk (``device``) runs well below every
    ceiling, the remark says that the rungs' costs add up rather than one of them limiting.
    """
    known = {name: value for name, value in zip(RUNGS, (cipher, layer, device_plain), strict=True) if value}
    if not known:
        return Limit(None, "no rung was measured")
    lowest = min(known.values())
    rung = next(name for name in RUNGS if name in known and known[name] <= lowest * (1 + tolerance))
    remark = ""
    if device and device < lowest * (1 - tolerance):
        remark = "the device speed is well below every ceiling: the costs of the rungs add up"
    return Limit(rung, remark)


@dataclass(frozen=True)
class LadderRow:
    """One backend x workload: every rung, and which one limits it."""

    backend: str
    workload: str
    cipher: Rung  # the implementation the backend uses
    counterpart: Rung  # the same cipher in the other place (kernel / user space), beside the ceiling
    layer: Rung  # the backend on the RAM-backed container
    layer_plain: Rung  # plain on the same RAM-backed container
    device: Rung  # the normal run
    device_plain: Rung  # its interleaved plain rounds
    ram_backed_layer: bool = True  # the layer rung measured memory: never a disk figure

    @property
    def limit(self) -> Limit:
        """The rule on this row. Only the implementation the backend uses counts as its cipher
        rung: the counterpart runs elsewhere (a kernel without AES instructions can be many times
        slower than OpenSSL on the same CPU), so it never stands in for it. When that cipher
        cannot be measured here and the layer limits, the remark says the layer rung includes it."""
        cipher, layer = self.cipher.mb_per_s, self.layer.mb_per_s
        found = limiting_rung(cipher, layer, self.device_plain.mb_per_s, self.device.mb_per_s)
        if found.rung == "layer" and not cipher and self.cipher.note != NO_ENCRYPTION:
            unmeasured = "the cipher could not be measured alone here, so the layer rung includes it"
            return Limit("layer", f"{unmeasured}; {found.remark}" if found.remark else unmeasured)
        return found

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        limit = self.limit
        data["limit"] = {"rung": limit.rung, "remark": limit.remark, "tolerance": TOLERANCE}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LadderRow:
        return cls(
            backend=str(data["backend"]),
            workload=str(data["workload"]),
            cipher=Rung(**data["cipher"]),
            counterpart=Rung(**data["counterpart"]),
            layer=Rung(**data["layer"]),
            layer_plain=Rung(**data["layer_plain"]),
            device=Rung(**data["device"]),
            device_plain=Rung(**data["device_plain"]),
            ram_backed_layer=bool(data.get("ram_backed_layer", True)),  # runs saved before it was
        )


def device_rungs(result: Result) -> tuple[Rung, Rung]:
    """The device rung of a normal result: its median MB/s and that of its plain rounds."""
    volume = Rung(result.median("mb_per_s")) if result.rounds else Rung(None, "no rounds")
    plain = (
        Rung(result.median("mb_per_s", baseline=True)) if result.baseline_rounds else Rung(None, "no plain")
    )
    return volume, plain


def rows(
    results: Iterable[Result],
    layers: LayerRungs,
    ciphers: dict[str, Rung],
    counterparts: dict[str, Rung],
) -> list[LadderRow]:
    """A row per result of the normal run (the device rung), with its other rungs.

    ``ciphers``/``counterparts``: cipher name (as the result's ``cipher_ceiling``) -> its rung.
    """
    found = []
    for result in results:
        if result.workload.kind == "task":  # timed in seconds over the user's tools: no MB/s rungs
            continue
        cipher = result.cipher_ceiling
        if result.backend == BASELINE:
            own = other = Rung(None, NO_ENCRYPTION)
        elif cipher is None:
            own = other = Rung(None, "the backend names no cipher that can be measured")
        else:
            own = ciphers.get(cipher, Rung(None, f"{cipher}: not measured"))
            other = counterparts.get(cipher, Rung(None, "no counterpart"))
        layer, layer_plain = layers.get(
            (result.backend, result.workload.name), (Rung(None, "not measured"), Rung(None))
        )
        device, device_plain = device_rungs(result)
        found.append(
            LadderRow(
                result.backend, result.workload.name, own, other, layer, layer_plain, device, device_plain
            )
        )
    return found
