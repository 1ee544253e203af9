"""Per-operator roofline and the model-level gap to the floor.

For each operator (aggregated by name and dtype, one batch):

- arithmetic intensity ``AI = FLOPs / bytes`` (bytes: the lower bound of :mod:`.counting`);
- attainable rate ``min(peak[dtype], AI x bandwidth)``; achieved rate ``FLOPs / measured time``;
- floor time ``max(FLOPs / peak, bytes / bandwidth)``; efficiency ``floor / measured`` (equal to
  achieved / attainable, and defined for 0-FLOP data movement too);
- class: ``compute-bound`` when AI is at or right of the dtype's ridge point
  (``peak / bandwidth``), else ``memory-bound``; ``overhead-bound`` overrides both when the op
  reaches less than :data:`OVERHEAD_EFFICIENCY` (10 %) of its floor **and** a call takes less
  than :data:`OVERHEAD_CALL_S` (50 µs): such calls are dominated by fixed per-call costs
  (dispatch, allocation, thread wake-up), not by either roof.

Dtypes without a measured matrix peak (int64, bool, fp64 …) use the fp32 peak as a stand-in.
Operators above their roof are listed: above the compute roof means the ceiling search missed a
faster kernel; above the memory roof is normal for data that stays in cache.

:class:`RooflineAnalysis` is the analysis (live figures); the ``roofline`` document it stores is
:class:`accelscope.documents.RooflineProfile`, built by :meth:`RooflineAnalysis.document` and read
back by :meth:`RooflineAnalysis.from_document`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from accelscope.documents import Ceilings, Operator
from accelscope.documents import RooflineProfile as RooflineDocument
from accelscope.errors import BadInputError
from accelscope.roofline.counting import OpRecord
from accelscope.spec import Device
from accelscope.validation import validate

__all__ = [
    "CONVENTIONS",
    "OVERHEAD_CALL_S",
    "OVERHEAD_EFFICIENCY",
    "OperatorRoofline",
    "RooflineAnalysis",
    "build_profile",
    "classify",
    "peak_for",
]

OVERHEAD_EFFICIENCY = 0.10
OVERHEAD_CALL_S = 50e-6
_PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "int8")
CONVENTIONS = {
    "bytes": "lower bound: distinct input + output storages per op, no cache effects",
    "overhead_bound": f"efficiency < {OVERHEAD_EFFICIENCY:.0%} and < "
    f"{OVERHEAD_CALL_S * 1e6:.0f} us per call",
    "elementwise_flops": "1 per output element",
}
"""How the figures were counted, stored with every roofline document."""


def peak_for(ceilings: Ceilings, dtype: str, threads: int | None = None) -> tuple[float, str]:
    """The compute roof for ``dtype`` and the dtype whose peak it is (fp32 stands in for
    dtypes without one, tf32 included when the ceilings have no tf32 row)."""
    for candidate in (dtype, "fp32"):
        if candidate in _PEAK_DTYPES:
            value = ceilings.peak(candidate, threads)
            if value:
                return value, candidate
    if not ceilings.matmul_flops_per_s:
        raise BadInputError("the ceilings hold no matrix peak; rerun `accelscope ceilings`")
    best = max(ceilings.matmul_flops_per_s, key=lambda d: ceilings.matmul_flops_per_s[d])
    return ceilings.matmul_flops_per_s[best], best


def classify(
    flops: float, bytes_: float, time_s: float, calls: int, peak: float, bandwidth: float
) -> str:
    """``compute-bound``, ``memory-bound``, ``overhead-bound`` or ``unmeasured``."""
    if time_s <= 0 or calls <= 0:
        return "unmeasured"
    floor = max(flops / peak, bytes_ / bandwidth)
    if floor / time_s < OVERHEAD_EFFICIENCY and time_s / calls < OVERHEAD_CALL_S:
        return "overhead-bound"
    ridge = peak / bandwidth
    if bytes_ <= 0:
        return "compute-bound" if flops > 0 else "memory-bound"
    return "compute-bound" if flops / bytes_ >= ridge else "memory-bound"


@dataclass(frozen=True, kw_only=True)
class OperatorRoofline:
    """One operator (name + dtype), summed over its calls in one batch."""

    name: str
    category: str
    dtype: str
    calls: int
    flops: float
    flops_counted: bool
    bytes: float
    measured_time_s: float
    peak_flops_per_s: float
    peak_dtype: str
    bandwidth_bytes_per_s: float
    unmatched_calls: int = 0

    @property
    def intensity_flops_per_byte(self) -> float | None:
        """FLOPs per byte (``None`` when no bytes moved)."""
        return self.flops / self.bytes if self.bytes > 0 else None

    @property
    def floor_time_s(self) -> float:
        """``max(FLOPs / peak, bytes / bandwidth)``."""
        return max(self.flops / self.peak_flops_per_s, self.bytes / self.bandwidth_bytes_per_s)

    @property
    def attainable_flops_per_s(self) -> float:
        """``min(peak, AI x bandwidth)``."""
        ai = self.intensity_flops_per_byte
        return (
            self.peak_flops_per_s
            if ai is None
            else min(self.peak_flops_per_s, ai * self.bandwidth_bytes_per_s)
        )

    @property
    def achieved_flops_per_s(self) -> float:
        """FLOPs over measured time (0 when unmeasured)."""
        return self.flops / self.measured_time_s if self.measured_time_s > 0 else 0.0

    @property
    def achieved_bytes_per_s(self) -> float:
        """Bytes over measured time (0 when unmeasured)."""
        return self.bytes / self.measured_time_s if self.measured_time_s > 0 else 0.0

    @property
    def efficiency(self) -> float | None:
        """Floor time / measured time (``None`` when unmeasured)."""
        return self.floor_time_s / self.measured_time_s if self.measured_time_s > 0 else None

    @property
    def lost_time_s(self) -> float:
        """Measured time minus floor time."""
        return self.measured_time_s - self.floor_time_s

    @property
    def bound(self) -> str:
        """The class; see :func:`classify`."""
        return classify(
            self.flops,
            self.bytes,
            self.measured_time_s,
            self.calls,
            self.peak_flops_per_s,
            self.bandwidth_bytes_per_s,
        )

    @property
    def above_compute_roof(self) -> bool:
        """True when the achieved rate beats the measured peak (the ceiling search missed)."""
        return self.achieved_flops_per_s > self.peak_flops_per_s

    def document(self) -> Operator:
        """The operator row of the ``roofline`` document: the work, the time, the roofs used,
        and the derived figures."""
        return Operator(
            name=self.name,
            category=self.category,
            dtype=self.dtype,
            calls=self.calls,
            flops=self.flops,
            flops_counted=self.flops_counted,
            bytes=self.bytes,
            measured_time_s=self.measured_time_s,
            peak_flops_per_s=self.peak_flops_per_s,
            peak_dtype=self.peak_dtype,
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
            unmatched_calls=self.unmatched_calls,
            intensity_flops_per_byte=self.intensity_flops_per_byte,
            floor_time_s=self.floor_time_s,
            attainable_flops_per_s=self.attainable_flops_per_s,
            achieved_flops_per_s=self.achieved_flops_per_s,
            efficiency=self.efficiency,
            bound=self.bound,
        )

    @classmethod
    def from_document(
        cls, row: Operator, ceilings: Ceilings, threads: int | None = None
    ) -> OperatorRoofline:
        """Inverse of :meth:`document` (derived figures are recomputed); roofs a row does not
        carry are taken from ``ceilings``."""
        if row.peak_flops_per_s is not None:
            peak, peak_dtype = row.peak_flops_per_s, row.peak_dtype or row.dtype
        else:
            peak, peak_dtype = peak_for(ceilings, row.dtype, threads)
        return cls(
            name=row.name,
            category=row.category,
            dtype=row.dtype,
            calls=row.calls,
            flops=row.flops,
            flops_counted=row.flops_counted,
            bytes=row.bytes,
            measured_time_s=row.measured_time_s or 0.0,
            peak_flops_per_s=peak,
            peak_dtype=peak_dtype,
            bandwidth_bytes_per_s=row.bandwidth_bytes_per_s or ceilings.bandwidth_bytes_per_s,
            unmatched_calls=row.unmatched_calls,
        )


@dataclass(frozen=True, kw_only=True)
class RooflineAnalysis:
    """A model's roofline: operators, totals, the floor, the measured time, MFU. Stored as the
    ``roofline`` document (:meth:`document`)."""

    model: str
    backend: str
    precision: str
    batch_size: int
    device: str
    threads: int
    environment_fingerprint: str
    measured_time_s: float
    measured_ci_rel: float
    ceilings: Ceilings
    operators: tuple[OperatorRoofline, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_flops(self) -> float:
        """Counted FLOPs of one batch."""
        return sum(op.flops for op in self.operators)

    @property
    def total_bytes(self) -> float:
        """Bytes read + written of one batch (lower bound)."""
        return sum(op.bytes for op in self.operators)

    @property
    def floor_time_s(self) -> float:
        """Σ over operators of ``max(FLOPs / peak, bytes / bandwidth)``."""
        return sum(op.floor_time_s for op in self.operators)

    @property
    def profiled_time_s(self) -> float:
        """Σ of the operators' profiled times (excludes Python and framework glue)."""
        return sum(op.measured_time_s for op in self.operators)

    @property
    def gap(self) -> float:
        """Measured time / floor time."""
        return self.measured_time_s / self.floor_time_s if self.floor_time_s > 0 else float("inf")

    @property
    def model_peak_flops_per_s(self) -> float:
        """The peak of the run's precision (the MFU denominator)."""
        return peak_for(self.ceilings, self.precision, self.threads)[0]

    @property
    def mfu(self) -> float:
        """Achieved FLOP/s (counted FLOPs / measured time) / the precision's peak."""
        return self.total_flops / self.measured_time_s / self.model_peak_flops_per_s

    @property
    def uncounted(self) -> list[str]:
        """Operators with no FLOP formula (their FLOPs are unknown, not 0)."""
        return sorted({op.name for op in self.operators if not op.flops_counted})

    @property
    def above_ceiling(self) -> list[OperatorRoofline]:
        """Operators faster than their compute roof (a ceiling-search miss)."""
        return [op for op in self.operators if op.above_compute_roof]

    def top_lost(self, count: int = 5) -> list[OperatorRoofline]:
        """Operators with the most measured time above their floor."""
        return sorted(self.operators, key=lambda op: -op.lost_time_s)[:count]

    def document(self) -> RooflineDocument:
        """The ``roofline`` document: the run, the model-level figures, the ceilings and the
        operators (:class:`accelscope.documents.RooflineProfile`)."""
        return RooflineDocument(
            model=self.model,
            backend=self.backend,
            precision=self.precision,
            batch_size=self.batch_size,
            device=Device(self.device),
            threads=self.threads,
            environment_fingerprint=self.environment_fingerprint,
            measured_time_s=self.measured_time_s,
            measured_ci_rel=self.measured_ci_rel,
            floor_time_s=self.floor_time_s,
            total_flops=self.total_flops,
            total_bytes=self.total_bytes,
            profiled_time_s=self.profiled_time_s,
            gap=self.gap if math.isfinite(self.gap) else None,
            mfu=self.mfu,
            uncounted_ops=tuple(self.uncounted),
            above_ceiling=tuple(op.name for op in self.above_ceiling),
            ceilings=self.ceilings,
            operators=tuple(op.document() for op in self.operators),
            notes=self.notes,
            conventions=CONVENTIONS,
        )

    @classmethod
    def from_document(cls, doc: RooflineDocument) -> RooflineAnalysis:
        """Inverse of :meth:`document` (derived figures are recomputed)."""
        threads = doc.threads or None
        return cls(
            model=doc.model,
            backend=doc.backend,
            precision=doc.precision,
            batch_size=doc.batch_size,
            device=doc.device,
            threads=doc.threads,
            environment_fingerprint=doc.environment_fingerprint,
            measured_time_s=doc.measured_time_s,
            measured_ci_rel=doc.measured_ci_rel,
            ceilings=doc.ceilings,
            operators=tuple(
                OperatorRoofline.from_document(row, doc.ceilings, threads) for row in doc.operators
            ),
            notes=doc.notes,
        )

    @classmethod
    def from_stored(cls, data: object) -> RooflineAnalysis:
        """:meth:`from_document` of a stored payload, validated as a stored (not necessarily
        usable by plan) roofline document."""
        return cls.from_document(validate(RooflineDocument, data, "roofline document"))


def build_operators(
    records: Sequence[OpRecord],
    times_s: Sequence[float | None],
    ceilings: Ceilings,
    threads: int | None = None,
    tf32: bool = False,
) -> list[OperatorRoofline]:
    """Aggregate calls by (name, dtype) in first-seen order; views (0 bytes, 0 FLOPs) are
    dropped. ``times_s[i]`` is call ``i``'s measured seconds (``None``: no profiler match).
    With ``tf32`` (the model ran with TF32 allowed) fp32 operators get the tf32 roof."""
    if len(records) != len(times_s):
        raise ValueError("one time per record expected")
    bandwidth = ceilings.bandwidth_bytes_per_s
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for record, seconds in zip(records, times_s, strict=True):
        if record.category == "view":
            continue
        group = groups.setdefault(
            (record.name, record.dtype),
            {
                "category": record.category,
                "calls": 0,
                "flops": 0.0,
                "counted": True,
                "bytes": 0.0,
                "time": 0.0,
                "unmatched": 0,
            },
        )
        group["calls"] += 1
        group["flops"] += record.flops or 0.0
        group["counted"] = group["counted"] and record.flops is not None
        group["bytes"] += record.bytes
        group["time"] += seconds or 0.0
        group["unmatched"] += seconds is None
    operators = []
    for (name, dtype), group in groups.items():
        roof = "tf32" if tf32 and dtype == "fp32" else dtype
        peak, peak_dtype = peak_for(ceilings, roof, threads)
        operators.append(
            OperatorRoofline(
                name=name,
                category=group["category"],
                dtype=dtype,
                calls=group["calls"],
                flops=group["flops"],
                flops_counted=group["counted"],
                bytes=group["bytes"],
                measured_time_s=group["time"],
                peak_flops_per_s=peak,
                peak_dtype=peak_dtype,
                bandwidth_bytes_per_s=bandwidth,
                unmatched_calls=group["unmatched"],
            )
        )
    return operators


def build_profile(
    *,
    model: str,
    backend: str,
    precision: str,
    batch_size: int,
    device: str,
    threads: int,
    ceilings: Ceilings,
    records: Sequence[OpRecord],
    times_s: Sequence[float | None],
    measured_time_s: float,
    measured_ci_rel: float = 0.0,
    notes: Sequence[str] = (),
    tf32: bool = False,
) -> RooflineAnalysis:
    """The :class:`RooflineAnalysis` of one batch from counted records and their times
    (``tf32``: the model ran with TF32 allowed, so fp32 operators have the tf32 roof)."""
    operators = build_operators(records, times_s, ceilings, threads, tf32)
    unmatched = sum(op.unmatched_calls for op in operators)
    extra = (
        [f"{unmatched} call(s) had no profiler event; their time counts as 0"] if unmatched else []
    )
    return RooflineAnalysis(
        model=model,
        backend=backend,
        precision=precision,
        batch_size=batch_size,
        device=device,
        threads=threads,
        environment_fingerprint=ceilings.environment_fingerprint,
        measured_time_s=measured_time_s,
        measured_ci_rel=measured_ci_rel,
        ceilings=ceilings,
        operators=tuple(operators),
        notes=tuple(notes) + tuple(extra),
    )
