"""Capacity per instance at the SLA: measured where it was measured, otherwise projected.

Projection (always labelled ``estimate``): the roofline floor of one batch is
``Σ_ops max(flops / peak[dtype], bytes / bandwidth)``; the efficiency measured here
(``floor_here / measured_batch_time_here``, spec peaks on both sides where known) is assumed
to carry over, so ``time_target = floor_target / efficiency``. The calibrating measurement is
the fastest bench configuration here when there is one (its precision, batch, and a FUSED
floor when its runtime fuses: :mod:`accelscope.plan.fusion`), else the roofline profile's own
eager run against the unfused floor. One request's latency under dynamic batching is taken as
two batch times (wait for the running batch, then its own), which must fit the p99 SLA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelscope.documents import (
    LlmCapacity,
    LoadCapacity,
    Operator,
    RooflineProfile,
    normalise_dtype,
)
from accelscope.plan.catalog import Instance
from accelscope.plan.fusion import FUSION_RULE, at_precision, fuse
from accelscope.plan.projection.capacity import PublishedCapacity
from accelscope.units import ELEMENT_BYTES

__all__ = [
    "BATCH_LATENCY_FACTOR",
    "Calibration",
    "CapacityEstimate",
    "bench_capacity",
    "best_calibration",
    "floor_time_s",
    "given_capacity",
    "llm_capacity",
    "measured_capacity",
    "project_capacity",
    "published_estimate",
]

BATCH_LATENCY_FACTOR = 2.0
"""p99 latency of a request ≈ this many batch times (waiting for the running batch + its own)."""

ESTIMATE = "estimate"


@dataclass(frozen=True, kw_only=True)
class CapacityEstimate:
    """Requests/s one instance sustains within the SLA, with where the number comes from.

    ``basis``: ``measured`` (a load run's SLA-tested capacity), ``bench`` (closed-loop bench
    throughput whose p99 met the SLA, not SLA-tested under load), ``given`` (``--capacity``) or
    ``projected``. ``label`` is what every view prints next to the number (``estimate`` for
    projections). ``meets_sla`` is False when the projected latency alone breaks the SLA.
    """

    qps_per_instance: float
    basis: str
    label: str
    meets_sla: bool
    latency_s: float | None = None
    assumptions: tuple[str, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)
    published: PublishedCapacity | None = None
    """The projection from published results with its 80 % interval, where there is one (it
    then sets ``qps_per_instance``)."""

    @property
    def is_estimate(self) -> bool:
        """True for projections (never shown without the ``estimate`` label)."""
        return self.basis == "projected"


def measured_capacity(doc: LoadCapacity, sla_p99_s: float, devices: int = 1) -> CapacityEstimate:
    """A load run's capacity. Valid for this SLA only if it was measured under an SLA at least
    as strict (a capacity at a stricter p99 is a safe lower bound for a looser one)."""
    strict_enough = doc.valid and doc.sla_p99_s <= sla_p99_s * (1 + 1e-9)
    notes = [
        f"load run '{doc.label}': p99 met {doc.sla_p99_s * 1e3:.4g} ms up to "
        f"{doc.capacity_qps:.4g} qps on this machine"
    ]
    if doc.sla_p99_s < sla_p99_s:
        notes.append("measured under a stricter SLA than asked: a lower bound")
    if not doc.valid:
        notes.append("the load run was not valid")
    return CapacityEstimate(
        qps_per_instance=doc.capacity_qps * devices if strict_enough else 0.0,
        basis="measured",
        label="measured (SLA-tested)",
        meets_sla=strict_enough and doc.capacity_qps > 0,
        assumptions=tuple(notes),
        detail={"load_label": doc.label, "load_sla_p99_s": doc.sla_p99_s},
    )


def bench_capacity(
    throughput_per_s: float, p99_s: float, label: str, sla_p99_s: float
) -> CapacityEstimate:
    """A bench configuration's closed-loop throughput, usable when its p99 met the SLA."""
    return CapacityEstimate(
        qps_per_instance=throughput_per_s if p99_s <= sla_p99_s else 0.0,
        basis="bench",
        label="bench throughput, not SLA-tested",
        meets_sla=p99_s <= sla_p99_s,
        latency_s=p99_s,
        assumptions=(
            f"bench '{label}': {throughput_per_s:.4g} items/s back to back, p99 "
            f"{p99_s * 1e3:.4g} ms per call; open-loop arrivals queue, so the rate "
            "that keeps p99 within the SLA is lower (run accelscope load to test it)",
        ),
        detail={"bench_label": label},
    )


def given_capacity(qps: float) -> CapacityEstimate:
    """A capacity the user states (``--capacity``)."""
    return CapacityEstimate(
        qps_per_instance=qps,
        basis="given",
        label="given (--capacity)",
        meets_sla=True,
        assumptions=("capacity per instance as given on the command line",),
    )


def llm_capacity(measured: LlmCapacity) -> CapacityEstimate:
    """The requests/s an ``llm`` (or ``tune``) run measured its server to sustain at the run's
    SLO: the capacity of a rate search, or the good requests/s measured at the capacity of a
    concurrency search."""
    slo = measured.slo.label if measured.slo else "no SLO"
    good = measured.good_output_tokens_per_s or 0.0
    qps = measured.capacity if measured.unit == "req/s" else measured.good_requests_per_s
    at = (
        ""
        if measured.unit == "req/s"
        else f" (good requests/s at concurrency {measured.capacity or 0:g})"
    )
    return CapacityEstimate(
        qps_per_instance=float(qps or 0.0),
        basis="measured",
        label=f"measured by llm at {slo}{at}",
        meets_sla=True,
        assumptions=(
            f"capacity at the LLM SLO ({slo}) measured by `accelscope llm`, "
            f"{good:.4g} good output tokens/s; --sla-p99 does not "
            "apply to token streams",
        ),
        detail={"good_output_tokens_per_s": good},
    )


def _peak_for(dtype: str, peaks: Mapping[str, float]) -> tuple[float | None, str | None]:
    """The rate an operator of ``dtype`` runs at, and a note when it falls back to fp32."""
    known = normalise_dtype(dtype) or "fp32"
    if known in peaks:
        return peaks[known], None
    if "fp32" in peaks:
        return peaks["fp32"], f"no {known} peak: {known} work assumed to run at the fp32 rate"
    return None, None


def floor_time_s(
    operators: Sequence[Operator], peaks: Mapping[str, float], bandwidth_bytes_per_s: float
) -> tuple[float, tuple[str, ...]]:
    """Roofline floor of one batch: Σ max(flops / peak, bytes / bandwidth), and the notes."""
    total, notes = 0.0, []
    for op in operators:
        peak, note = _peak_for(op.dtype, peaks)
        if note and note not in notes:
            notes.append(note)
        compute = op.flops / peak if peak else 0.0
        total += max(compute, op.bytes / bandwidth_bytes_per_s)
    return total, tuple(notes)


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """A configuration measured here that calibrates projections: the fastest bench result.

    ``batch_time_s`` is its median time per call (one batch of ``batch_size`` items) on
    ``device``; ``backend`` says whether it ran eagerly (unfused) or through an optimising
    runtime (fused).
    """

    label: str
    backend: str
    precision: str
    batch_size: int
    batch_time_s: float
    device: str = "cpu"

    @property
    def fused(self) -> bool:
        """True when the runtime fuses operators (anything but eager PyTorch)."""
        return self.backend != "eager"


def best_calibration(candidates: Sequence[Calibration], device: str) -> Calibration | None:
    """The fastest (items/s) configuration measured on ``device``; ``None`` if there is none."""
    usable = [c for c in candidates if c.device == device and c.batch_time_s > 0]
    return max(usable, key=lambda c: c.batch_size / c.batch_time_s) if usable else None


def _reference(
    profile: RooflineProfile, here: Instance | None
) -> tuple[Mapping[str, float], float, str]:
    """Peaks and bandwidth of THIS machine, as close as possible to the footing of the
    catalog's spec figures: the ``--here`` entry, else the roofline's theoretical ceilings,
    else (each part separately) the measured ones."""
    if here is not None:
        return (
            dict(here.peak_ops_per_s),
            here.memory_bandwidth_bytes_per_s,
            f"this machine's spec peaks from its catalog entry {here.type}",
        )
    if profile.theoretical_peaks:
        peaks, peak_note = dict(profile.theoretical_peaks), "theoretical peaks"
    else:
        peaks = dict(profile.measured_peaks)
        peak_note = (
            "MEASURED peaks (optimistic against the target's spec peaks by its "
            "achievable/spec ratio)"
        )
    if profile.theoretical_bandwidth_bytes_per_s:
        bandwidth, bw_note = profile.theoretical_bandwidth_bytes_per_s, "theoretical bandwidth"
    else:
        bandwidth = profile.measured_bandwidth_bytes_per_s
        bw_note = "MEASURED bandwidth (optimistic against a spec bandwidth there)"
    return (
        peaks,
        bandwidth,
        (
            f"this machine's {peak_note} and {bw_note} from the roofline "
            "ceilings; give --here TYPE to compare spec with spec"
        ),
    )


@dataclass(frozen=True, kw_only=True)
class _Method:
    """How one projection is made: the work per batch, the time it took here, and why."""

    operators: tuple[Operator, ...]
    batch_size: int
    measured_here_s: float
    floor: str
    notes: tuple[str, ...]


def _method(profile: RooflineProfile, calibration: Calibration | None) -> _Method:
    if calibration is None:
        return _Method(
            operators=profile.operators,
            batch_size=profile.batch_size,
            measured_here_s=profile.measured_time_s,
            floor="unfused",
            notes=(
                f"calibrated by the roofline profile's own eager run ({profile.precision}, batch "
                f"{profile.batch_size}, {profile.measured_time_s * 1e3:.4g} ms per batch); no "
                "bench result of an optimised configuration to calibrate with "
                "(run accelscope bench)",
                "unfused floor: every operator's inputs and outputs cross memory (eager PyTorch)",
            ),
        )
    scale = calibration.batch_size / profile.batch_size
    operators = at_precision(profile.operators, calibration.precision, scale)
    size = ELEMENT_BYTES.get(calibration.precision)
    size_text = "?" if size is None else f"{size:g}"
    notes = [
        f"calibrated by the fastest configuration measured here, bench '{calibration.label}' "
        f"({calibration.batch_time_s * 1e3:.4g} ms per batch of {calibration.batch_size}); the "
        f"same runtime quality assumed there at {calibration.precision}",
        f"work of the {profile.precision} batch-{profile.batch_size} roofline profile mapped to "
        f"{calibration.precision} (matrix/conv/attention at its peak, "
        f"{size_text} byte(s) per element)"
        + (f" and scaled linearly to batch {calibration.batch_size}" if scale != 1 else ""),
    ]
    if size is None:
        notes.append(f"element size of {calibration.precision} unknown: bytes kept as profiled")
    if calibration.fused:
        notes.append(FUSION_RULE + f" ({calibration.backend} fuses)")
        return _Method(
            operators=fuse(operators),
            batch_size=calibration.batch_size,
            measured_here_s=calibration.batch_time_s,
            floor="fused",
            notes=tuple(notes),
        )
    notes.append("unfused floor: the calibrating configuration runs eagerly")
    return _Method(
        operators=operators,
        batch_size=calibration.batch_size,
        measured_here_s=calibration.batch_time_s,
        floor="unfused",
        notes=tuple(notes),
    )


def project_capacity(
    profile: RooflineProfile,
    target: Instance,
    sla_p99_s: float,
    here: Instance | None = None,
    calibration: Calibration | None = None,
) -> CapacityEstimate:
    """Project the model onto ``target``; always an ``estimate``.

    With a ``calibration`` (the fastest bench configuration here), the profile's work is mapped
    to its precision and batch, fused when its runtime fuses, and its measured batch time sets
    the efficiency; without one, the eager roofline run does (unfused).
    """
    method = _method(profile, calibration)
    ref_peaks, ref_bw, ref_note = _reference(profile, here)
    floor_here, here_notes = floor_time_s(method.operators, ref_peaks, ref_bw)
    efficiency = min(1.0, floor_here / method.measured_here_s)
    floor_there, notes = floor_time_s(
        method.operators, dict(target.peak_ops_per_s), target.memory_bandwidth_bytes_per_s
    )
    batch_time = floor_there / efficiency if efficiency > 0 else float("inf")
    per_device = method.batch_size / batch_time if batch_time > 0 else 0.0
    latency = BATCH_LATENCY_FACTOR * batch_time
    meets = latency <= sla_p99_s
    assumptions = (
        f"projected from a roofline profile of {profile.model} ({profile.precision}, batch "
        f"{profile.batch_size}) measured on {profile.device_name}",
        *method.notes,
        f"efficiency here {efficiency:.1%} of the {method.floor} roofline floor ({ref_note}) "
        f"assumed to carry over to {target.accelerator}",
        f"one replica per device ({target.devices}); request p99 ≈ {BATCH_LATENCY_FACTOR:g} x "
        "batch time (dynamic batching); no host, network or pre-processing cost",
        *(f"here: {n}" for n in here_notes),
        *notes,
    )
    if (profile.device == "cpu") != (target.kind == "cpu"):
        assumptions += (
            f"efficiency carried across device types ({profile.device} here, {target.kind} "
            "there): large errors are likely (the ResNet-50 CPU-to-GPU error is measured by "
            "benchmarks/plan_projection.py)",
        )
    if not meets:
        assumptions += (
            f"batch {method.batch_size} takes {batch_time * 1e3:.3g} ms there: "
            f"p99 ≈ {latency * 1e3:.3g} ms > SLA (calibrate with a smaller batch)",
        )
    return CapacityEstimate(
        qps_per_instance=per_device * target.devices if meets else 0.0,
        basis="projected",
        label=ESTIMATE,
        meets_sla=meets,
        latency_s=latency,
        assumptions=assumptions,
        detail={
            "floor": method.floor,
            "calibration": calibration.label if calibration else "roofline eager run",
            "precision": calibration.precision if calibration else profile.precision,
            "floor_here_s": floor_here,
            "measured_here_s": method.measured_here_s,
            "efficiency": efficiency,
            "floor_target_s": floor_there,
            "batch_time_target_s": batch_time,
            "batch_size": method.batch_size,
            "per_device_items_per_s": per_device,
        },
    )


def published_estimate(
    published: PublishedCapacity, carried: CapacityEstimate | None
) -> CapacityEstimate:
    """The capacity of an option projected from published results; the projection that carries
    this machine's efficiency over (``carried``) is kept among the assumptions, for comparison."""
    low, high = published.low_qps_per_instance, published.high_qps_per_instance
    notes = [
        f"projected from published results: {published.qps_per_instance:.4g} qps per instance, "
        f"{published.coverage:.0%} interval {low:.4g}-{high:.4g}",
        *published.notes,
    ]
    if carried is not None and not carried.meets_sla:
        notes.append("this machine's efficiency carried over instead would miss the SLA")
    elif carried is not None:
        notes.append(
            f"this machine's efficiency carried over instead would give "
            f"{carried.qps_per_instance:.4g} qps"
            + ("" if low <= carried.qps_per_instance <= high else " (outside the interval)")
        )
    return CapacityEstimate(
        qps_per_instance=published.qps_per_instance,
        basis="projected",
        label=ESTIMATE + (", MLPerf-calibrated" if published.calibrated else ", uncalibrated"),
        meets_sla=True,
        assumptions=tuple(notes),
        detail={
            "method": "published",
            "benchmark": published.benchmark,
            "part": published.part,
            "low_qps_per_instance": low,
            "high_qps_per_instance": high,
            "carried": None if carried is None else dict(carried.detail),
        },
        published=published,
    )
