"""Capacity per instance at the SLA: measured where it was measured, otherwise projected.

Projection (always labelled ``estimate``): the roofline floor of one batch on the target is
``Σ_ops max(flops / peak[dtype], bytes / bandwidth)`` with the catalog's spec peaks; the
efficiency measured here (``floor_here / measured_time_here``, both on spec peaks) is assumed
to carry over, so ``time_target = floor_target / efficiency``. One request's latency under
dynamic batching is taken as two batch times (wait for the running batch, then its own), which
must fit the p99 SLA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelscope.plan.catalog import Instance
from accelscope.plan.documents import LoadCapacity, Operator, RooflineProfile, normalise_dtype

__all__ = [
    "BATCH_LATENCY_FACTOR",
    "CapacityEstimate",
    "bench_capacity",
    "floor_time_s",
    "given_capacity",
    "measured_capacity",
    "project_capacity",
]

BATCH_LATENCY_FACTOR = 2.0
"""p99 latency of a request ≈ this many batch times (waiting for the running batch + its own)."""

ESTIMATE = "estimate"


@dataclass(frozen=True)
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

    @property
    def is_estimate(self) -> bool:
        """True for projections (never shown without the ``estimate`` label)."""
        return self.basis == "projected"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"qps_per_instance": self.qps_per_instance, "basis": self.basis,
                "label": self.label, "meets_sla": self.meets_sla, "latency_s": self.latency_s,
                "assumptions": list(self.assumptions), "detail": dict(self.detail)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CapacityEstimate:
        """Inverse of :meth:`to_dict`."""
        latency = data.get("latency_s")
        return cls(float(data["qps_per_instance"]), str(data["basis"]), str(data["label"]),
                   bool(data["meets_sla"]), None if latency is None else float(latency),
                   tuple(str(a) for a in data.get("assumptions", ())),
                   dict(data.get("detail", {})))  # fmt: skip


def measured_capacity(doc: LoadCapacity, sla_p99_s: float, devices: int = 1) -> CapacityEstimate:
    """A load run's capacity. Valid for this SLA only if it was measured under an SLA at least
    as strict (a capacity at a stricter p99 is a safe lower bound for a looser one)."""
    strict_enough = doc.valid and doc.sla_p99_s <= sla_p99_s * (1 + 1e-9)
    notes = [f"load run '{doc.label}': p99 met {doc.sla_p99_s * 1e3:.4g} ms up to "
             f"{doc.capacity_qps:.4g} qps on this machine"]  # fmt: skip
    if doc.sla_p99_s < sla_p99_s:
        notes.append("measured under a stricter SLA than asked: a lower bound")
    if not doc.valid:
        notes.append("the load run was not valid")
    return CapacityEstimate(
        qps_per_instance=doc.capacity_qps * devices if strict_enough else 0.0,
        basis="measured", label="measured (SLA-tested)",
        meets_sla=strict_enough and doc.capacity_qps > 0, assumptions=tuple(notes),
        detail={"load_label": doc.label, "load_sla_p99_s": doc.sla_p99_s},
    )  # fmt: skip


def bench_capacity(throughput_per_s: float, p99_s: float, label: str, sla_p99_s: float) -> (
        CapacityEstimate):  # fmt: skip
    """A bench configuration's closed-loop throughput, usable when its p99 met the SLA."""
    return CapacityEstimate(
        qps_per_instance=throughput_per_s if p99_s <= sla_p99_s else 0.0,
        basis="bench", label="bench throughput, not SLA-tested", meets_sla=p99_s <= sla_p99_s,
        latency_s=p99_s,
        assumptions=(f"bench '{label}': {throughput_per_s:.4g} items/s back to back, p99 "
                     f"{p99_s * 1e3:.4g} ms per call; open-loop arrivals queue, so the rate "
                     "that keeps p99 within the SLA is lower (run accelscope load to test it)",),
    )  # fmt: skip


def given_capacity(qps: float) -> CapacityEstimate:
    """A capacity the user states (``--capacity``)."""
    return CapacityEstimate(
        qps,
        "given",
        "given (--capacity)",
        True,
        assumptions=("capacity per instance as given on the command line",),
    )


def _peak_for(dtype: str, peaks: Mapping[str, float]) -> tuple[float | None, str | None]:
    """The rate an operator of ``dtype`` runs at, and a note when it falls back to fp32."""
    known = normalise_dtype(dtype) or "fp32"
    if known in peaks:
        return peaks[known], None
    if "fp32" in peaks:
        return peaks["fp32"], f"no {known} peak: {known} work assumed to run at the fp32 rate"
    return None, None


def floor_time_s(operators: Sequence[Operator], peaks: Mapping[str, float],
                 bandwidth_bytes_per_s: float) -> tuple[float, tuple[str, ...]]:  # fmt: skip
    """Roofline floor of one batch: Σ max(flops / peak, bytes / bandwidth), and the notes."""
    total, notes = 0.0, []
    for op in operators:
        peak, note = _peak_for(op.dtype, peaks)
        if note and note not in notes:
            notes.append(note)
        compute = op.flops / peak if peak else 0.0
        total += max(compute, op.bytes / bandwidth_bytes_per_s)
    return total, tuple(notes)


def _reference(profile: RooflineProfile, here: Instance | None) -> tuple[
        Mapping[str, float], float, str]:  # fmt: skip
    """Peaks and bandwidth of THIS machine on the same footing as the catalog's spec figures."""
    if here is not None:
        return (dict(here.peak_ops_per_s), here.memory_bandwidth_bytes_per_s,
                f"this machine's spec peaks from its catalog entry {here.type}")  # fmt: skip
    if profile.theoretical_peaks and profile.theoretical_bandwidth_bytes_per_s:
        return (dict(profile.theoretical_peaks), profile.theoretical_bandwidth_bytes_per_s,
                "this machine's theoretical peaks from the roofline ceilings")  # fmt: skip
    return (
        dict(profile.measured_peaks),
        profile.measured_bandwidth_bytes_per_s,
        "this machine's MEASURED ceilings against the target's SPEC peaks: optimistic by "
        "the target's achievable/spec ratio (give --here TYPE to compare spec with spec)",
    )


def project_capacity(profile: RooflineProfile, target: Instance, sla_p99_s: float,
                     here: Instance | None = None) -> CapacityEstimate:  # fmt: skip
    """Project ``profile`` (measured here) onto ``target``; always an ``estimate``."""
    ref_peaks, ref_bw, ref_note = _reference(profile, here)
    floor_here, _ = floor_time_s(profile.operators, ref_peaks, ref_bw)
    efficiency = min(1.0, floor_here / profile.measured_time_s)
    floor_there, notes = floor_time_s(profile.operators, dict(target.peak_ops_per_s),
                                      target.memory_bandwidth_bytes_per_s)  # fmt: skip
    batch_time = floor_there / efficiency if efficiency > 0 else float("inf")
    per_device = profile.batch_size / batch_time if batch_time > 0 else 0.0
    latency = BATCH_LATENCY_FACTOR * batch_time
    meets = latency <= sla_p99_s
    assumptions = (
        f"projected from a roofline profile of {profile.model} ({profile.precision}, batch "
        f"{profile.batch_size}) measured on {profile.device_name}",
        f"efficiency here {efficiency:.1%} of the roofline floor ({ref_note}) assumed to carry "
        f"over to {target.accelerator}",
        f"one replica per device ({target.devices}); request p99 ≈ {BATCH_LATENCY_FACTOR:g} x "
        "batch time (dynamic batching); no host, network or pre-processing cost",
        *notes,
    )
    if (profile.device == "cpu") != (target.kind == "cpu"):
        assumptions += (f"efficiency carried across device types ({profile.device} here, "
                        f"{target.kind} there): large errors are likely (ResNet-50 from a CPU "
                        "eager profile to published L4/H100 figures: -86% to -99%)",)  # fmt: skip
    if not meets:
        assumptions += (
            f"batch {profile.batch_size} takes {batch_time * 1e3:.3g} ms there: "
            f"p99 ≈ {latency * 1e3:.3g} ms > SLA (profile a smaller batch)",
        )
    return CapacityEstimate(
        qps_per_instance=per_device * target.devices if meets else 0.0, basis="projected",
        label=ESTIMATE, meets_sla=meets, latency_s=latency, assumptions=assumptions,
        detail={"floor_here_s": floor_here, "measured_here_s": profile.measured_time_s,
                "efficiency": efficiency, "floor_target_s": floor_there,
                "batch_time_target_s": batch_time, "batch_size": profile.batch_size,
                "per_device_items_per_s": per_device},
    )  # fmt: skip
