"""A model's capacity on a catalog instance, projected from published results with an interval.

The model's work per item (its roofline profile: FLOPs per item) is set against the published
benchmark of its workload class (a convolutional net against ResNet-50, anything else with
matrix work against BERT-large), in MLPerf's Server scenario (Poisson arrivals under a p99
bound): ``items/s = published efficiency on this part x its 8-bit peak / the model's work``.
The efficiency and its 80 % interval come from :func:`~.calibration.shipped_calibration`; a
part with no published row of its own gets the wider interval that says so.

What this assumes, and every projection states: the vendor's optimised 8-bit stack (TensorRT,
OpenVINO, ...) as submitted, not the user's; the model's efficiency that of the benchmark of its
class; MLPerf's latency bound for the benchmark, not the user's SLA.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from accelscope import aten
from accelscope.documents import Operator
from accelscope.plan.accelerators import load_accelerators
from accelscope.plan.catalog import Instance
from accelscope.plan.projection.calibration import group_of, shipped_calibration
from accelscope.plan.projection.efficiency import EfficiencyModel, Observation
from accelscope.plan.projection.validation import COVERAGE
from accelscope.plan.projection.workloads import BENCHMARKS, Benchmark

__all__ = [
    "SERVER_P99_S",
    "ModelWork",
    "PublishedCapacity",
    "class_benchmark",
    "measured_observation",
    "published_capacity",
]

SERVER_P99_S = {"resnet50": 0.015, "bert": 0.130}
"""MLPerf's Server-scenario p99 bound per benchmark (LoadGen's ``mlperf.conf``:
``resnet50.Server.target_latency = 15``, ``bert.Server.target_latency = 130``, in ms)."""

_SCENARIO = "Server"


class ModelWork(Protocol):
    """A model's work for one batch, per operator: what a projection reads of a stored roofline
    profile (:class:`~accelscope.documents.RooflineProfile`) or of work counted without a run
    (:class:`~accelscope.roofline.static_work.StaticWork`)."""

    @property
    def model(self) -> str: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def operators(self) -> Sequence[Operator]: ...


@dataclass(frozen=True, kw_only=True)
class PublishedCapacity:
    """Items/s one instance sustains, projected from published results: a point and its 80 %
    interval, per instance (every device of it serving)."""

    qps_per_instance: float
    low_qps_per_instance: float
    high_qps_per_instance: float
    coverage: float
    benchmark: str
    """The published benchmark and scenario the efficiency came from (``resnet50/Server``)."""
    part: str
    basis: str
    """What calibrated it (this family on this class, other classes only, or nothing)."""
    stack: str
    """The software the efficiency was measured with."""
    notes: tuple[str, ...]
    narrowed_by: str = ""
    """The user's own runs that narrowed this family's interval (``your run ID on TYPE``);
    ``""``: the published table alone."""

    @property
    def calibrated(self) -> bool:
        """False where no published row of this family informs it."""
        return not self.basis.startswith("no published calibration")


def _category(name: str) -> str:
    """``conv``, ``matmul`` or ``attention`` from an operator's aten name (profiles stored
    before operators carried their category); ``""`` for the rest."""
    base = aten.op_base_name(name)
    if base in aten.CONVOLUTION or base in aten.CONV_TRANSPOSE:
        return "conv"
    if base in (*aten.MATMUL, *aten.MM, *aten.ADDMM, *aten.MV, *aten.LINEAR, *aten.EINSUM):
        return "matmul"
    return "attention" if base in aten.ATTENTION else ""


def class_benchmark(profile: ModelWork) -> Benchmark | None:
    """The published benchmark of the profile's workload class: ResNet-50 when convolutions do
    most of its FLOPs, BERT-large when matrix products and attention do; ``None`` otherwise."""
    flops: dict[str, float] = {}
    for op in profile.operators:
        category = op.category or _category(op.name)
        flops[category] = flops.get(category, 0.0) + op.flops
    total = sum(flops.values())
    if total <= 0:
        return None
    if flops.get("conv", 0.0) / total > 0.5:
        return BENCHMARKS["resnet50"]
    if (flops.get("matmul", 0.0) + flops.get("attention", 0.0)) / total > 0.5:
        return BENCHMARKS["bert"]
    return None


@dataclass(frozen=True)
class _Footing:
    """What sets a model's items/s on an instance against its class benchmark's efficiency."""

    bench: Benchmark
    ops_per_sample: float
    """The benchmark's work per sample (ops)."""
    family: str
    part: str
    dtype: str
    peak_ops_per_s: float
    """The 8-bit peak per device (a CPU instance's share of its socket)."""
    work_ops: float
    """The model's work per item (FLOPs)."""

    @property
    def scale(self) -> float:
        """Items/s per device per unit of efficiency (``exp`` of the model's log scale)."""
        return self.peak_ops_per_s * self.ops_per_sample / self.work_ops


def _footing(profile: ModelWork, instance: Instance) -> _Footing | None:
    """The footing of ``profile`` on ``instance``; ``None`` where the instance names no
    datasheet or the model has no published class."""
    bench = class_benchmark(profile)
    if not instance.part or bench is None or bench.ops_per_sample is None:
        return None
    spec = load_accelerators().get(instance.part)
    dtype, part_peak = spec.low_precision_peak
    return _Footing(
        bench=bench,
        ops_per_sample=bench.ops_per_sample,
        family=spec.family,
        part=spec.name,
        dtype=dtype,
        peak_ops_per_s=instance.peak(dtype) or part_peak,
        work_ops=sum(op.flops for op in profile.operators) / profile.batch_size,
    )


def measured_observation(
    profile: ModelWork, instance: Instance, items_per_s_per_device: float, scenario: str
) -> Observation | None:
    """A capacity measured on ``instance`` (items/s per device) as a row of the efficiency
    model: the inverse of :func:`published_capacity`'s scale, in the class benchmark's
    ``scenario``. ``None`` where ``instance`` has no published projection."""
    if not items_per_s_per_device > 0:
        raise ValueError(f"a measured capacity is positive, got {items_per_s_per_device}")
    footing = _footing(profile, instance)
    if footing is None:
        return None
    return Observation(
        group=group_of(footing.bench, scenario),
        family=footing.family,
        workload_class=footing.bench.workload_class,
        log_value=math.log(items_per_s_per_device / footing.scale),
    )


def published_capacity(
    profile: ModelWork,
    instance: Instance,
    sla_p99_s: float,
    model: EfficiencyModel | None = None,
) -> PublishedCapacity | None:
    """The projection of ``profile``'s model onto ``instance``; ``None`` where the instance
    names no datasheet or the model has no published class. ``model``: the shipped
    calibration's, or that model updated with the user's own runs
    (:meth:`~.efficiency.EfficiencyModel.updated`)."""
    footing = _footing(profile, instance)
    if footing is None:
        return None
    bench, dtype, peak, work = (
        footing.bench,
        footing.dtype,
        footing.peak_ops_per_s,
        footing.work_ops,
    )
    model = model or shipped_calibration().model
    group = group_of(bench, _SCENARIO)
    prediction = model.predict(group, footing.family, bench.workload_class)
    scale = footing.scale * instance.devices
    low, high = prediction.interval(COVERAGE)
    bound = SERVER_P99_S[bench.name]
    notes = [
        f"efficiency of {bench.name} ({_SCENARIO} scenario, MLPerf Inference v4.0-v5.0) on "
        f"{footing.family}: {prediction.basis}",
        f"{profile.model}: {work / 1e9:.3g} GFLOP per item against {bench.name}'s "
        f"{footing.ops_per_sample / 1e9:.3g}; the same share of the {dtype} peak "
        f"({peak / 1e12:.4g} TOP/s per device) assumed",
        "the submitters' optimised 8-bit stacks (TensorRT, OpenVINO, vendor runtimes), not "
        "yours: measure yours with accelscope bench/load",
    ]
    narrowed = model.narrowed_by(footing.family)
    if narrowed:
        notes.append(
            f"interval narrowed by {narrowed}: measured on {footing.family}, added to the "
            "published rows as one more (docs/plan.md, measure then tighten)"
        )
    if sla_p99_s < bound:
        notes.append(
            f"MLPerf's {bench.name} Server bound is p99 {bound * 1e3:g} ms, looser than your "
            f"{sla_p99_s * 1e3:g} ms: an upper bound at your SLA"
        )
    return PublishedCapacity(
        qps_per_instance=math.exp(prediction.log_mean) * scale,
        low_qps_per_instance=low * scale,
        high_qps_per_instance=high * scale,
        coverage=COVERAGE,
        benchmark=group,
        part=footing.part,
        basis=prediction.basis,
        stack="vendor-optimised, as submitted to MLPerf"
        + (", and yours as measured" if narrowed else ""),
        notes=tuple(notes),
        narrowed_by=narrowed,
    )
