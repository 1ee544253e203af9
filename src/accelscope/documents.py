"""Reading other analyses' stored documents (contracts.md): roofline profiles and load
capacities. Every key read is validated; a malformed document is a one-line error naming the
document and the key, never a ``KeyError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accelscope.errors import BadInputError

__all__ = ["LoadCapacity", "Operator", "RooflineProfile", "normalise_dtype"]

_DTYPE_ALIASES = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tf32": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "int8": "int8",
    "qint8": "int8",
    "quint8": "int8",
    "uint8": "int8",
    "i8": "int8",
    "fp8": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
}


def normalise_dtype(name: str) -> str | None:
    """Map a dtype name to the catalog's (``fp32``, ``bf16``, ...); ``None`` if unknown."""
    return _DTYPE_ALIASES.get(name.strip().lower().removeprefix("torch."))


class _Doc:
    def __init__(self, what: str, payload: Any) -> None:
        if not isinstance(payload, Mapping):
            raise BadInputError(f"{what}: not a JSON object")
        self.what, self.payload = what, payload

    def fail(self, key: str, problem: str) -> BadInputError:
        return BadInputError(f"{self.what}: key {key!r}: {problem}")

    def get(self, key: str, kind: type | tuple[type, ...]) -> Any:
        if key not in self.payload:
            raise self.fail(key, "missing")
        value = self.payload[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise self.fail(key, f"has the wrong type ({type(value).__name__})")
        return value

    def number(self, key: str, *, positive: bool = True, source: Any = None) -> float:
        value = self.get(key, (int, float)) if source is None else source
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, got {value!r}")
        number = float(value)
        if not math.isfinite(number) or number < 0 or (positive and number == 0):
            raise self.fail(key, f"must be a {'positive' if positive else 'non-negative'} number")
        return number


@dataclass(frozen=True)
class Operator:
    """One operator's work for one batch (from a roofline profile)."""

    name: str
    dtype: str
    flops: float
    bytes: float
    measured_time_s: float | None


@dataclass(frozen=True)
class RooflineProfile:
    """What plan needs from a ``roofline`` document: the model's per-operator work for one
    batch, how long that batch took here, and this machine's ceilings (measured, and the
    theoretical spec peaks where the roofline helper derived them)."""

    model: str
    precision: str
    batch_size: int
    device: str
    environment_fingerprint: str
    measured_time_s: float
    floor_time_s: float
    operators: tuple[Operator, ...]
    measured_peaks: tuple[tuple[str, float], ...]
    measured_bandwidth_bytes_per_s: float
    theoretical_peaks: tuple[tuple[str, float], ...]
    theoretical_bandwidth_bytes_per_s: float | None
    device_name: str

    @classmethod
    def from_payload(cls, payload: Any, what: str = "roofline document") -> RooflineProfile:
        """Validate a ``roofline`` payload (contracts.md) and keep what plan uses."""
        doc = _Doc(what, payload)
        device = doc.get("device", str)
        if device not in ("cpu", "cuda"):
            raise doc.fail("device", f"must be 'cpu' or 'cuda', got {device!r}")
        batch = doc.get("batch_size", int)
        if batch <= 0:
            raise doc.fail("batch_size", "must be positive")
        ceilings = _Doc(f"{what} ceilings", doc.get("ceilings", Mapping))
        peaks_raw = ceilings.get("matmul_flops_per_s", Mapping)
        peaks = _peaks(ceilings, "matmul_flops_per_s", peaks_raw)
        if not peaks:
            raise ceilings.fail("matmul_flops_per_s", "holds no measured peak")
        theoretical_peaks: tuple[tuple[str, float], ...] = ()
        theoretical_bw = None
        theory = ceilings.payload.get("theoretical")
        if isinstance(theory, Mapping):
            flops = theory.get("flops_per_s")
            if isinstance(flops, Mapping):
                theoretical_peaks = _peaks(ceilings, "theoretical.flops_per_s", flops)
            bw = theory.get("bandwidth_bytes_per_s")
            if isinstance(bw, int | float) and not isinstance(bw, bool) and bw > 0:
                theoretical_bw = float(bw)
        operators_raw = doc.get("operators", list)
        operators = []
        for index, raw in enumerate(operators_raw):
            op = _Doc(f"{what} operators[{index}]", raw)
            dtype = op.get("dtype", str)
            time_raw = op.payload.get("measured_time_s")
            operators.append(
                Operator(
                    name=op.get("name", str),
                    dtype=dtype,
                    flops=op.number("flops", positive=False),
                    bytes=op.number("bytes", positive=False),
                    measured_time_s=float(time_raw)
                    if isinstance(time_raw, int | float)
                    and not isinstance(time_raw, bool)
                    and math.isfinite(time_raw)
                    else None,
                )
            )
        if not operators:
            raise doc.fail("operators", "is empty: nothing to project")
        return cls(
            model=doc.get("model", str),
            precision=doc.get("precision", str),
            batch_size=batch,
            device=device,
            environment_fingerprint=doc.get("environment_fingerprint", str),
            measured_time_s=doc.number("measured_time_s"),
            floor_time_s=doc.number("floor_time_s"),
            operators=tuple(operators),
            measured_peaks=peaks,
            measured_bandwidth_bytes_per_s=ceilings.number("bandwidth_bytes_per_s"),
            theoretical_peaks=theoretical_peaks,
            theoretical_bandwidth_bytes_per_s=theoretical_bw,
            device_name=str(ceilings.payload.get("device_name", device)),
        )


def _peaks(doc: _Doc, key: str, raw: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    found = []
    for name, value in raw.items():
        dtype = normalise_dtype(str(name))
        if dtype is None or value is None:
            continue
        found.append((dtype, doc.number(f"{key}.{name}", source=value)))
    return tuple(found)


@dataclass(frozen=True)
class LoadCapacity:
    """A ``capacity`` document: the highest rate whose p99 met the SLA, measured here."""

    model: str
    label: str
    sla_p99_s: float
    capacity_qps: float
    device: str
    environment_fingerprint: str
    valid: bool

    @classmethod
    def from_payload(cls, payload: Any, what: str = "capacity document") -> LoadCapacity:
        """Validate a ``capacity`` payload (contracts.md)."""
        doc = _Doc(what, payload)
        device = doc.get("device", str)
        if device not in ("cpu", "cuda"):
            raise doc.fail("device", f"must be 'cpu' or 'cuda', got {device!r}")
        valid = doc.payload.get("valid")
        if not isinstance(valid, bool):
            raise doc.fail("valid", "missing or not true/false")
        return cls(
            model=doc.get("model", str),
            label=doc.get("label", str),
            sla_p99_s=doc.number("sla_p99_s"),
            capacity_qps=doc.number("capacity_qps", positive=False),
            device=device,
            environment_fingerprint=doc.get("environment_fingerprint", str),
            valid=valid,
        )
