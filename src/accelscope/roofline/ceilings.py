"""The measured ceilings of one device: peak matrix rate per dtype and memory bandwidth.

:class:`Ceilings` is the ``ceilings`` document of ``docs``/contracts: ``to_dict`` writes the
contract keys (plus details), ``from_dict`` validates what it reads and raises
:class:`~accelscope.errors.BadInputError` naming the first missing or malformed key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from accelscope.errors import BadInputError

__all__ = ["DTYPES", "Ceilings", "KernelPeak", "Theoretical"]

DTYPES = ("fp32", "bf16", "fp16", "int8")
"""Dtypes whose matrix peak is searched, in display order."""


def _number(data: dict[str, Any], key: str, where: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInputError(f"{where}: {key!r} must be a finite number, got {value!r}")
    return float(value)


def _rates(data: dict[str, Any], key: str, where: str) -> dict[str, float]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise BadInputError(f"{where}: {key!r} must be an object of dtype -> rate")
    return {str(k): _number(value, k, f"{where}.{key}") for k in value}


def _dtypes(data: dict[str, Any]) -> tuple[str, ...]:
    value = data.get("measured_dtypes", list(DTYPES))
    if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
        raise BadInputError("ceilings: 'measured_dtypes' must be a list of dtype names")
    return tuple(value)


def _reasons(data: dict[str, Any]) -> dict[str, str]:
    value = data.get("not_searched", {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BadInputError("ceilings: 'not_searched' must be an object of dtype -> reason")
    return {str(k): v for k, v in value.items()}


@dataclass(frozen=True)
class KernelPeak:
    """The kernel that reached a dtype's peak: family (``linear``, ``conv3x3_nhwc`` …), shape,
    threads, rate (FLOP/s) and the library path that ran it. ``probe``: the dtype was not
    searched (see :attr:`Ceilings.not_searched`) and this is its probe's small call."""

    family: str
    shape: tuple[int, ...]
    threads: int
    flops_per_s: float
    path: str
    probe: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "family": self.family,
            "shape": list(self.shape),
            "threads": self.threads,
            "flops_per_s": self.flops_per_s,
            "path": self.path,
            "probe": self.probe,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelPeak:
        """Inverse of :meth:`to_dict`."""
        return cls(
            str(data["family"]),
            tuple(int(x) for x in data["shape"]),
            int(data["threads"]),
            float(data["flops_per_s"]),
            str(data.get("path", "")),
            bool(data.get("probe", False)),
        )


@dataclass(frozen=True)
class Theoretical:
    """The ISA peak: cores x clock x FLOP/cycle of the unit per dtype, and how it was derived."""

    flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float | None
    derivation: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the contract's ``theoretical`` object)."""
        return {
            "flops_per_s": dict(self.flops_per_s),
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "derivation": self.derivation,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Theoretical:
        """Inverse of :meth:`to_dict`, validated."""
        if not isinstance(data, dict):
            raise BadInputError("ceilings: 'theoretical' must be an object")
        bandwidth = data.get("bandwidth_bytes_per_s")
        return cls(
            flops_per_s=_rates(data, "flops_per_s", "ceilings.theoretical"),
            bandwidth_bytes_per_s=None
            if bandwidth is None
            else _number(data, "bandwidth_bytes_per_s", "ceilings.theoretical"),
            derivation=str(data.get("derivation", "")),
        )


@dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of one device (all usable cores on CPU).

    ``matmul_flops_per_s`` holds only dtypes with a measured peak. ``bandwidth_bytes_per_s`` is
    the memory roof used by rooflines: the best of the measured streams (copy, triad).
    ``by_threads`` maps a thread count to its per-dtype peaks (the roofs for ``--threads``).

    ``measured_dtypes`` are the dtypes this measurement covered (searched, stopped after their
    probe, or found not to run here); a command needing another dtype measures it and extends
    the cached ceilings. A document without the key covers every dtype (older measurements
    searched them all). ``not_searched`` maps a dtype stopped after its probe to the reason; its
    peak is then the probe's figure (``probe_flops_per_s``, the best small call per dtype).
    """

    device: str
    device_name: str
    environment_fingerprint: str
    measured_at: str
    threads: int
    matmul_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float
    bandwidth_detail_bytes_per_s: dict[str, float]
    theoretical: Theoretical
    peaks: dict[str, KernelPeak] = field(default_factory=dict)
    by_threads: dict[int, dict[str, float]] = field(default_factory=dict)
    naive_flops_per_s: dict[str, float] = field(default_factory=dict)
    """A naive square matmul per dtype (4096² on CPU), for comparison with the searched peak."""
    trials: int = 0
    search_s: float = 0.0
    notes: tuple[str, ...] = ()
    measured_dtypes: tuple[str, ...] = DTYPES
    probe_flops_per_s: dict[str, float] = field(default_factory=dict)
    not_searched: dict[str, str] = field(default_factory=dict)

    def missing(self, dtypes: Sequence[str]) -> tuple[str, ...]:
        """The dtypes of ``dtypes`` this measurement did not cover, in order."""
        return tuple(d for d in dtypes if d not in self.measured_dtypes)

    def peak(self, dtype: str, threads: int | None = None) -> float | None:
        """The measured peak for ``dtype`` (at ``threads`` when measured), ``None`` if absent."""
        if threads is not None and threads in self.by_threads:
            value = self.by_threads[threads].get(dtype)
            if value is not None:
                return value
        return self.matmul_flops_per_s.get(dtype)

    def fraction_of_theoretical(self, dtype: str) -> float | None:
        """Measured peak / ISA peak for ``dtype`` (``None`` when either is unknown)."""
        measured = self.matmul_flops_per_s.get(dtype)
        ideal = self.theoretical.flops_per_s.get(dtype)
        return None if not measured or not ideal else measured / ideal

    def to_dict(self) -> dict[str, Any]:
        """The contract's ``ceilings`` payload plus details (JSON-ready, no NaN)."""
        return {
            "device": self.device,
            "device_name": self.device_name,
            "environment_fingerprint": self.environment_fingerprint,
            "measured_at": self.measured_at,
            "threads": self.threads,
            "matmul_flops_per_s": dict(self.matmul_flops_per_s),
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "bandwidth_detail_bytes_per_s": dict(self.bandwidth_detail_bytes_per_s),
            "theoretical": self.theoretical.to_dict(),
            "peaks": {k: v.to_dict() for k, v in self.peaks.items()},
            "by_threads": {str(t): dict(r) for t, r in self.by_threads.items()},
            "naive_flops_per_s": dict(self.naive_flops_per_s),
            "trials": self.trials,
            "search_s": self.search_s,
            "notes": list(self.notes),
            "measured_dtypes": list(self.measured_dtypes),
            "probe_flops_per_s": dict(self.probe_flops_per_s),
            "not_searched": dict(self.not_searched),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Ceilings:
        """Validated inverse of :meth:`to_dict`; a missing or malformed key is a
        :class:`BadInputError` that names it."""
        if not isinstance(data, dict):
            raise BadInputError("ceilings: expected a JSON object")
        for key in ("device", "device_name", "environment_fingerprint", "measured_at"):
            if not isinstance(data.get(key), str):
                raise BadInputError(f"ceilings: {key!r} must be a string")
        by_threads = data.get("by_threads", {})
        peaks = data.get("peaks", {})
        if not isinstance(by_threads, dict) or not isinstance(peaks, dict):
            raise BadInputError("ceilings: 'by_threads' and 'peaks' must be objects")
        try:
            parsed_peaks = {str(k): KernelPeak.from_dict(v) for k, v in peaks.items()}
            threads_by = {int(t): _rates(by_threads, t, "ceilings.by_threads") for t in by_threads}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadInputError(f"ceilings: malformed 'peaks' or 'by_threads': {exc}") from None
        return cls(
            device=data["device"],
            device_name=data["device_name"],
            environment_fingerprint=data["environment_fingerprint"],
            measured_at=data["measured_at"],
            threads=int(_number(data, "threads", "ceilings")) if "threads" in data else 0,
            matmul_flops_per_s=_rates(data, "matmul_flops_per_s", "ceilings"),
            bandwidth_bytes_per_s=_number(data, "bandwidth_bytes_per_s", "ceilings"),
            bandwidth_detail_bytes_per_s=_rates(data, "bandwidth_detail_bytes_per_s", "ceilings"),
            theoretical=Theoretical.from_dict(data.get("theoretical")),  # type: ignore[arg-type]
            peaks=parsed_peaks,
            by_threads=threads_by,
            naive_flops_per_s=_rates(data, "naive_flops_per_s", "ceilings")
            if "naive_flops_per_s" in data
            else {},
            trials=int(data.get("trials", 0)),
            search_s=float(data.get("search_s", 0.0)),
            notes=tuple(str(n) for n in data.get("notes", [])),
            measured_dtypes=_dtypes(data),
            probe_flops_per_s=_rates(data, "probe_flops_per_s", "ceilings")
            if "probe_flops_per_s" in data
            else {},
            not_searched=_reasons(data),
        )
