"""LLM serving projected to accelerators not at hand: concurrency, TPOT, TTFT and tokens/s per
device at a TTFT/TPOT SLO for each tensor-parallel degree, with an 80 % interval calibrated on
MLPerf Inference's LLM Server results (Llama-2-70B, Mixtral-8x7B, Llama-3.1-405B).

**The floor.** At concurrency ``B`` and tensor-parallel degree ``TP``, on a part whose datasheet
gives bandwidth ``BW``, dense peak ``F`` at the compute dtype and interconnect ``L`` (per
direction, per device, as a group of ``TP`` reaches it: :meth:`AcceleratorSpec.interconnect_at`),
with ``eta`` the share of all three the serving stack realises (the one fitted factor, below)::

    all-reduce(n)   = 2 (TP - 1) / TP x n x A / (L x eta)      (a ring; 0 at TP 1 or no L)
    decode step(B)  = max((W/TP + B x context x kv/TP) / (BW x eta),  2 x P x B / (TP x F x eta))
                      + all-reduce(B)
    prefill         = max(2 x P x input / (TP x F x eta),  W/TP / (BW x eta)) + all-reduce(input)
    TPOT(B)         = decode step(B) + (B / output) x prefill

``W`` the weights' bytes, ``kv`` the KV bytes per token, ``A`` the activation bytes one token
all-reduces (two all-reduces a layer of ``hidden`` values), ``P`` the parameters one token
multiplies (a MoE's routed experts only), ``context`` the mean context over the decode
(``input + output / 2``). Continuous batching with prefills interleaved: each step, ``B /
output`` requests finish and as many prefills take their place, so a step carries its share of
prefill. TTFT is the prefill plus the mean wait of an M/D/1 queue of prefills at the load
``rho = (B / output) x prefill / TPOT`` plus one decode step in flight::

    TTFT(B) = prefill x (1 + rho / (2 (1 - rho))) + decode step(B)

Simple on purpose: no per-call latency of a collective, no overlap of it with compute, no
attention FLOPs, no scheduler overhead (unless a user's run measured it: below), no tail
(MLPerf's bounds are on the 99th percentile, this is a mean): all of that is in ``eta``. A
degree is considered only where the weights and the KV cache of one whole sequence fit in
``memory x 0.9`` per device. The concurrency is the largest with TPOT and TTFT within their
bounds and the KV cache of every sequence in memory; the degree chosen is the one with the most
tokens/s per device (with the all-reduce priced, a higher degree can lose).

**The efficiency.** ``eta`` is solved, per published LLM Server row (MLPerf Inference
v4.0-v5.0, :mod:`.published`), so the floor at its benchmark's workload and SLO
(:func:`mlperf_benchmarks`: the models, bounds and mean prompt lengths, each sourced) gives the
row's tokens/s per device; ``log eta`` is fitted by the same mixed model as every other
projection (:func:`accelscope.plan.projection.efficiency.fit`), each benchmark a group and a
class, which gives a Student-t 80 % interval, wider for a family without a row. A projection
reads the level of the benchmark nearest the user's model (:meth:`ServingCalibration.level_for`).
The interval maps through the floor (monotone in ``eta``) to tokens/s and $ per million output
tokens. :func:`leave_one_out` checks it, each system left out and projected from the rest.

**Measured, then tightened** (:func:`tightened_serving`): a user's own run on an accelerator
the datasheets know (good output tokens/s per device at its workload and SLO, at the degree
it ran) gives its ``eta`` by the same solve as a published row, and is added to the model as
one more row of its family (:meth:`~.efficiency.EfficiencyModel.updated`, with a stored run's
run-to-run spread): that family's interval narrows, and says what narrowed it.

**A fixed cost per step, where the user measured two loads or more.** A serving stack pays
a cost per decode step that no bandwidth or peak explains (scheduling, sampling, launching
the step, the API server's share): on vLLM's CPU build ~58 ms of a 80-150 ms step
(docs/BENCHMARKS.md). One efficiency cannot hold it: it reads the step at one load and misses
the others (34 % median error beyond the measured loads). A run with the TPOT of two
concurrencies or more fits ``TPOT(B) = c + floor(B) / eta`` by least squares
(:func:`fit_step_overhead`): ``eta`` enters the model as the run's row, and ``c`` is added to
every decode step of the measured part's family (``_Floor``'s ``overhead_s``). The published
rows give one load per system, so the shipped calibration has no ``c`` (it is in ``eta``). A
fit whose cost is not positive, or whose ``eta`` falls outside the range a published row may
take (the loads do not tell the two apart), keeps the one efficiency.
"""

from __future__ import annotations

import functools
import math
import statistics
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, model_validator

from accelscope.errors import BadInputError
from accelscope.plan.accelerators import Accelerators, AcceleratorSpec, load_accelerators
from accelscope.plan.catalog import Catalog
from accelscope.plan.llm_memory import BYTES_PER_PARAM, ModelShape, shape_from_config
from accelscope.plan.projection.calibration import spec_for
from accelscope.plan.projection.efficiency import EfficiencyModel, Measured, Observation, fit
from accelscope.plan.projection.published import PublishedResult, PublishedTable, load_published
from accelscope.plan.projection.tighten import RUN_TO_RUN_LOG_SD
from accelscope.plan.projection.validation import COVERAGE, Holdout
from accelscope.plan.projection.workloads import BENCHMARKS
from accelscope.plan.projection.workloads import benchmark as published_benchmark
from accelscope.validation import FieldProblem, PositiveCount, PositiveNumber, Text, validate

__all__ = [
    "ACTIVATION_BYTES",
    "ALLREDUCES_PER_LAYER",
    "GPU_MEMORY_UTILIZATION",
    "MAX_FITTED_ETA",
    "MLPERF_GROUP",
    "MLPERF_SLO",
    "NEAR_BEST",
    "TP_DEGREES",
    "MlperfLlmBenchmark",
    "OperatingPoint",
    "ServedModel",
    "ServingCalibration",
    "ServingOption",
    "ServingPlan",
    "ServingProjection",
    "ServingRun",
    "ServingSlo",
    "ServingWorkload",
    "StepOverhead",
    "TpotPoint",
    "best_point",
    "calibrate_serving",
    "fit_step_overhead",
    "holdout",
    "leave_one_out",
    "llama2_70b_shape",
    "mlperf_benchmarks",
    "mlperf_workload",
    "operating_point",
    "project_serving",
    "served_model",
    "serving_plan",
    "serving_ranking",
    "shipped_serving_calibration",
    "tightened_serving",
    "tpot_floor",
    "widened",
]

ALLREDUCES_PER_LAYER = 2
"""Tensor parallelism as Megatron-LM splits a layer (attention heads and the MLP's columns,
then rows): one all-reduce after attention, one after the MLP."""
ACTIVATION_BYTES = 2
"""Bytes of an all-reduced activation: 16-bit (8-bit and 16-bit weights keep 16-bit activations
between layers); fp32 weights all-reduce fp32 (:data:`BYTES_PER_PARAM`)."""
GPU_MEMORY_UTILIZATION = 0.9
"""Share of device memory the server may use (vLLM's default ``gpu_memory_utilization``)."""
TP_DEGREES = (1, 2, 4, 8)
MAX_CONCURRENCY = 4096
"""The largest concurrency searched (a scheduler's batch limit, in practice far lower)."""
MLPERF_GROUP = "llama2-70b/Server"
"""The Llama-2-70B Server rows' group in the efficiency model (the most rows of the three)."""
MLPERF_DTYPE = "fp8"
"""Weights and KV cache of the MLPerf rows: closed-division submissions quantise to 8 bits
(assumed for the KV cache; the table does not say which submission kept it at 16 bits)."""
_MLPERF_LLM = "mlperf_llm_workloads.toml"
NEAR_BEST = 0.10
"""A degree within this share of the best tokens/s per device is named beside it: closer than
the floor can tell apart (its all-reduce is a bandwidth term only, no per-call latency, and none
at all on a part whose datasheet gives no interconnect figure), so it may win in practice."""
_ETA_RANGE = (1e-4, 1e2)
MAX_FITTED_ETA = 4.0
"""The largest efficiency a fixed-cost fit may give (:func:`fit_step_overhead`): over five times
the highest any of the 41 published LLM Server rows reached (0.76). Above it the TPOT barely
moves with the load, and the fit would read that as a fast stack with a large cost."""


@dataclass(frozen=True, kw_only=True)
class ServedModel:
    """What serving costs per token: the parameters, the bytes read per step, KV per token."""

    name: str
    params: float
    active_params: float
    """Parameters one token multiplies (all of a dense model; a MoE's routed experts only)."""
    weights_bytes: float
    kv_bytes_per_token: float
    allreduce_bytes_per_token: float
    """Activation bytes one token's forward pass all-reduces under tensor parallelism (two
    all-reduces a layer, :data:`ALLREDUCES_PER_LAYER`, of ``hidden`` values at
    :data:`ACTIVATION_BYTES`)."""
    dtype: str
    kv_dtype: str
    moe: bool = False
    """Routed experts (a mixture of experts): its efficiency is read at the MoE rows' level."""

    def __post_init__(self) -> None:
        for key in (
            "params",
            "active_params",
            "weights_bytes",
            "kv_bytes_per_token",
            "allreduce_bytes_per_token",
        ):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key} must be positive, got {getattr(self, key)}")
        if self.active_params > self.params:
            raise ValueError("active_params cannot exceed params")
        for key in ("dtype", "kv_dtype"):
            if getattr(self, key) not in BYTES_PER_PARAM:
                raise ValueError(f"{key} {getattr(self, key)!r} unknown")


def served_model(
    shape: ModelShape, dtype: str, kv_dtype: str | None = None, name: str = "model"
) -> ServedModel:
    """The serving costs of ``shape`` with weights at ``dtype`` (KV cache at ``kv_dtype``:
    that of the weights by default, bf16 for int4 weights)."""
    kv_dtype = kv_dtype or (dtype if dtype != "int4" else "bf16")
    parts = shape.params()
    params = math.fsum(parts.values())
    active = params
    moe_layers = shape.layers - shape.dense_layers if shape.experts else 0
    if moe_layers and shape.experts_per_token:
        idle = shape.experts - shape.experts_per_token
        active -= moe_layers * idle * shape.mlp_params(shape.expert_intermediate)
    active -= parts["embeddings"]  # a lookup, not a product (the lm_head is one)
    return ServedModel(
        name=name,
        params=params,
        active_params=max(active, 1.0),
        weights_bytes=params * BYTES_PER_PARAM[dtype],
        kv_bytes_per_token=shape.kv_values_per_token() * BYTES_PER_PARAM[kv_dtype],
        allreduce_bytes_per_token=shape.layers
        * ALLREDUCES_PER_LAYER
        * shape.hidden
        * (BYTES_PER_PARAM["fp32"] if dtype == "fp32" else ACTIVATION_BYTES),
        dtype=dtype,
        kv_dtype=kv_dtype,
        moe=bool(moe_layers and shape.experts_per_token),
    )


@functools.cache
def llama2_70b_shape() -> ModelShape:
    """Llama-2-70B (80 layers, hidden 8192, 64 heads, 8 KV heads, intermediate 28672,
    vocabulary 32000, untied embeddings): the MLPerf benchmark's model, from the shipped
    config values."""
    return next(b for b in mlperf_benchmarks() if b.benchmark == "llama2-70b").shape


@dataclass(frozen=True)
class ServingWorkload:
    """Mean prompt and output tokens per request."""

    input_tokens: float
    output_tokens: float

    def __post_init__(self) -> None:
        if not (self.input_tokens >= 1 and self.output_tokens >= 1):
            raise ValueError(
                f"token counts must be >= 1, got {self.input_tokens}, {self.output_tokens}"
            )

    @property
    def mean_context(self) -> float:
        """Tokens in a sequence's cache, averaged over its decode."""
        return self.input_tokens + self.output_tokens / 2

    @property
    def full_context(self) -> float:
        """Tokens in a sequence's cache at its last step (what memory must hold)."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class ServingSlo:
    """Bounds on time to first token and time per output token, in seconds."""

    ttft_s: float
    tpot_s: float

    def __post_init__(self) -> None:
        if not (self.ttft_s > 0 and self.tpot_s > 0):
            raise ValueError(f"SLO bounds must be positive, got {self.ttft_s}, {self.tpot_s}")


MLPERF_SLO = ServingSlo(ttft_s=2.0, tpot_s=0.2)
"""MLPerf Inference's Llama-2-70B and Mixtral Server bounds (``slo_source`` of
:func:`mlperf_benchmarks`), and ``plan llm``'s default SLO."""


class MlperfLlmBenchmark(BaseModel):
    """One MLPerf LLM benchmark as the calibration reads its Server rows (one
    ``[[benchmark]]`` of ``plan/data/mlperf_llm_workloads.toml``): the model's config, the
    Server bounds and the dataset's mean prompt length, each with its source."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    benchmark: Text
    """The benchmark's name in :mod:`.workloads` (``llama2-70b`` stands for the rows of
    ``llama2-70b-99`` and ``-99.9``)."""
    ttft_s: PositiveNumber
    tpot_s: PositiveNumber
    slo_source: Text
    samples: PositiveCount
    mean_input_tokens: PositiveNumber
    max_input_tokens: PositiveCount
    input_source: Text
    config: dict[str, Any]

    @model_validator(mode="after")
    def _known(self) -> Self:
        if self.mean_input_tokens > self.max_input_tokens:
            raise FieldProblem("mean_input_tokens", "above max_input_tokens")
        if self.benchmark not in BENCHMARKS:
            raise FieldProblem("benchmark", f"unknown (known: {', '.join(sorted(BENCHMARKS))})")
        return self

    @property
    def group(self) -> str:
        """Its rows' group in the efficiency model."""
        return f"{self.benchmark}/Server"

    @property
    def slo(self) -> ServingSlo:
        return ServingSlo(ttft_s=self.ttft_s, tpot_s=self.tpot_s)

    @property
    def shape(self) -> ModelShape:
        return shape_from_config(self.config, f"{_MLPERF_LLM} ({self.benchmark})")

    @property
    def model(self) -> ServedModel:
        """The model as the submissions served it (8-bit weights and KV cache)."""
        return served_model(self.shape, MLPERF_DTYPE, name=self.benchmark)

    def matches(self, benchmark: str) -> bool:
        """Whether a published row's ``benchmark`` directory is this one, by the table's own
        names (:func:`~.workloads.benchmark`: ``llama2-70b-99`` and ``-99.9``, v5.1's
        ``llama3.1-405b`` and v5.0's ``llama3_1-405b``); an interactive variant is another."""
        try:
            return published_benchmark(benchmark).name == self.benchmark
        except BadInputError:
            return False


@functools.cache
def mlperf_benchmarks() -> tuple[MlperfLlmBenchmark, ...]:
    """The shipped MLPerf LLM benchmarks (Llama-2-70B, Mixtral-8x7B, Llama-3.1-405B)."""
    text = resources.files("accelscope.plan").joinpath("data", _MLPERF_LLM).read_text("utf-8")
    data = tomllib.loads(text)
    return tuple(
        validate(MlperfLlmBenchmark, row, f"(shipped) {_MLPERF_LLM}") for row in data["benchmark"]
    )


Limit = Literal["tpot", "ttft", "memory", "search"]


@dataclass(frozen=True, kw_only=True)
class OperatingPoint:
    """One tensor-parallel degree at its largest concurrency within the SLO."""

    tp: int
    concurrency: int
    max_concurrency_memory: int
    """Sequences whose whole KV cache fits in memory at this degree."""
    limited_by: Limit
    decode_step_s: float
    prefill_s: float
    tpot_s: float
    ttft_s: float
    tokens_per_s_per_device: float

    def __post_init__(self) -> None:
        if self.tp not in TP_DEGREES:
            raise ValueError(f"tensor-parallel degree {self.tp} not in {TP_DEGREES}")
        if not 1 <= self.concurrency <= self.max_concurrency_memory:
            raise ValueError("concurrency must be within 1 and what memory holds")
        if self.tpot_s < self.decode_step_s or self.ttft_s < self.prefill_s:
            raise ValueError("TPOT includes the decode step, TTFT the prefill")
        if not self.tokens_per_s_per_device > 0:
            raise ValueError("tokens/s per device must be positive")


def compute_peak(spec: AcceleratorSpec, dtype: str) -> tuple[str, float]:
    """The dense peak the model's products run at: the weights' dtype where the part has it
    (8-bit weights on a part with only the other 8-bit format use that), else 16 bits."""
    order = {
        "fp8": ("fp8", "int8", "bf16", "fp16", "fp32"),
        "int8": ("int8", "fp8", "bf16", "fp16", "fp32"),
        "fp16": ("fp16", "bf16", "fp32"),
        "fp32": ("fp32", "tf32", "bf16"),
    }.get(dtype, ("bf16", "fp16", "fp32"))
    for candidate in order:
        peak = spec.peak(candidate)
        if peak is not None:
            return candidate, peak
    return spec.low_precision_peak


class _Floor:
    """The step-time model of one model, part, workload and degree at efficiency ``eta``."""

    def __init__(
        self,
        model: ServedModel,
        spec: AcceleratorSpec,
        workload: ServingWorkload,
        tp: int,
        eta: float,
        overhead_s: float = 0.0,
    ) -> None:
        if not (math.isfinite(overhead_s) and overhead_s >= 0):
            raise ValueError(f"the step overhead must be >= 0 s, got {overhead_s}")
        self.model, self.spec, self.workload, self.tp = model, spec, workload, tp
        self._bandwidth = spec.memory_bandwidth_bytes_per_s * eta
        self._flops = compute_peak(spec, model.dtype)[1] * eta
        link = spec.interconnect_at(tp) if tp > 1 else None
        self._link = None if link is None else link * eta
        self._overhead_s = overhead_s

    def allreduce(self, tokens: float) -> float:
        """The all-reduces of ``tokens`` tokens' activations through every layer: a ring's
        ``2 (TP - 1) / TP`` of the bytes over the link, per direction (0 at degree 1, or
        where the datasheet gives no interconnect figure)."""
        if self.tp == 1 or self._link is None:
            return 0.0
        size = tokens * self.model.allreduce_bytes_per_token
        return 2 * (self.tp - 1) / self.tp * size / self._link

    def decode_step(self, batch: int) -> float:
        m, w = self.model, self.workload
        read = (m.weights_bytes + batch * w.mean_context * m.kv_bytes_per_token) / self.tp
        work = 2 * m.active_params * batch / self.tp
        step = max(read / self._bandwidth, work / self._flops)
        return self._overhead_s + step + self.allreduce(batch)

    def prefill(self) -> float:
        m = self.model
        work = 2 * m.active_params * self.workload.input_tokens / self.tp
        step = max(work / self._flops, m.weights_bytes / self.tp / self._bandwidth)
        return step + self.allreduce(self.workload.input_tokens)

    def tpot(self, batch: int) -> float:
        return self.decode_step(batch) + batch / self.workload.output_tokens * self.prefill()

    def ttft(self, batch: int) -> float:
        prefill, tpot = self.prefill(), self.tpot(batch)
        rho = batch / self.workload.output_tokens * prefill / tpot
        return prefill * (1 + rho / (2 * (1 - rho))) + self.decode_step(batch)

    def memory_limit(self) -> int:
        """Sequences whose whole KV cache fits beside the weights (0: not even one)."""
        memory = self.spec.memory_bytes
        if memory is None:
            return 0
        room = memory * GPU_MEMORY_UTILIZATION - self.model.weights_bytes / self.tp
        per_sequence = self.workload.full_context * self.model.kv_bytes_per_token / self.tp
        return max(0, math.floor(room / per_sequence))


def tpot_floor(
    model: ServedModel,
    spec: AcceleratorSpec,
    workload: ServingWorkload,
    batch: int,
    *,
    tp: int = 1,
    eta: float = 1.0,
    overhead_s: float = 0.0,
) -> float:
    """The model's TPOT at ``batch`` sequences in flight (the module's ``TPOT(B)``): what a
    measured TPOT is set against to read its efficiency (``eta = tpot_floor(eta=1) /
    measured``, both terms scale as ``1 / eta``; ``overhead_s``, a fixed cost per decode step,
    does not)."""
    if batch < 1 or not eta > 0:
        raise ValueError(f"batch must be >= 1 and eta > 0, got {batch}, {eta}")
    return _Floor(model, spec, workload, tp, eta, overhead_s).tpot(batch)


@dataclass(frozen=True)
class TpotPoint:
    """A measured median TPOT at a concurrency (one trial of a user's run)."""

    concurrency: int
    tpot_s: float

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if not (math.isfinite(self.tpot_s) and self.tpot_s > 0):
            raise ValueError(f"TPOT must be positive, got {self.tpot_s}")


def fit_step_overhead(
    floors_s: Sequence[float], tpots_s: Sequence[float]
) -> tuple[float, float] | None:
    """``(c, eta)`` of ``TPOT = c + floor / eta`` by least squares over the measured points
    (each ``floor`` the model's TPOT at ``eta = 1`` and no overhead at that point's load).
    ``None`` where the loads do not tell ``c`` from ``eta``: fewer than two distinct floors, a
    fitted ``c`` that is not positive, or an ``eta`` above :data:`MAX_FITTED_ETA` (the TPOT
    barely moves with the load; the one-efficiency model then stands)."""
    if len(floors_s) != len(tpots_s):
        raise ValueError("one measured TPOT per floor")
    if len(set(floors_s)) < 2:
        return None
    mean_f, mean_t = statistics.fmean(floors_s), statistics.fmean(tpots_s)
    spread = sum((f - mean_f) ** 2 for f in floors_s)
    slope = sum((f - mean_f) * (t - mean_t) for f, t in zip(floors_s, tpots_s, strict=True))
    slope /= spread
    overhead = mean_t - slope * mean_f
    if not (slope > 0 and _ETA_RANGE[0] <= 1.0 / slope <= MAX_FITTED_ETA and overhead > 0):
        return None
    return overhead, 1.0 / slope


def operating_point(
    model: ServedModel,
    spec: AcceleratorSpec,
    workload: ServingWorkload,
    slo: ServingSlo,
    tp: int,
    eta: float = 1.0,
    overhead_s: float = 0.0,
) -> OperatingPoint | None:
    """The largest concurrency at degree ``tp`` within the SLO and memory; ``None`` where
    one sequence does not fit or does not meet the SLO."""
    if not eta > 0:
        raise ValueError(f"efficiency must be positive, got {eta}")
    floor = _Floor(model, spec, workload, tp, eta, overhead_s)
    memory = floor.memory_limit()

    def meets(batch: int) -> bool:
        return floor.tpot(batch) <= slo.tpot_s and floor.ttft(batch) <= slo.ttft_s

    if memory < 1 or not meets(1):
        return None
    low, high = 1, min(memory, MAX_CONCURRENCY)  # meets(low) holds; TPOT and TTFT grow with B
    if meets(high):
        low = high
    while high - low > 1:
        mid = (low + high) // 2
        if meets(mid):
            low = mid
        else:
            high = mid
    batch = low
    limit: Limit
    if batch == memory:
        limit = "memory"
    elif batch == MAX_CONCURRENCY:
        limit = "search"
    else:
        limit = "tpot" if floor.tpot(batch + 1) > slo.tpot_s else "ttft"
    tpot = floor.tpot(batch)
    return OperatingPoint(
        tp=tp,
        concurrency=batch,
        max_concurrency_memory=memory,
        limited_by=limit,
        decode_step_s=floor.decode_step(batch),
        prefill_s=floor.prefill(),
        tpot_s=tpot,
        ttft_s=floor.ttft(batch),
        tokens_per_s_per_device=batch / tpot / tp,
    )


def best_point(
    model: ServedModel,
    spec: AcceleratorSpec,
    workload: ServingWorkload,
    slo: ServingSlo,
    eta: float = 1.0,
    max_tp: int = max(TP_DEGREES),
    overhead_s: float = 0.0,
) -> OperatingPoint | None:
    """The degree (up to ``max_tp``) with the most tokens/s per device within the SLO."""
    points = [
        p
        for tp in TP_DEGREES
        if tp <= max_tp
        for p in [operating_point(model, spec, workload, slo, tp, eta, overhead_s)]
        if p is not None
    ]
    return max(points, key=lambda p: p.tokens_per_s_per_device, default=None)


def _rate(
    model: ServedModel,
    spec: AcceleratorSpec,
    workload: ServingWorkload,
    slo: ServingSlo,
    eta: float,
    max_tp: int,
    overhead_s: float = 0.0,
) -> float:
    point = best_point(model, spec, workload, slo, eta, max_tp, overhead_s)
    return point.tokens_per_s_per_device if point else 0.0


def solve_efficiency(
    model: ServedModel,
    spec: AcceleratorSpec,
    workload: ServingWorkload,
    slo: ServingSlo,
    tokens_per_s_per_device: float,
    max_tp: int = max(TP_DEGREES),
) -> float:
    """The ``eta`` at which the floor gives ``tokens_per_s_per_device`` (bisection on
    ``log eta``: the floor's tokens/s never falls as ``eta`` grows)."""
    low, high = (math.log(x) for x in _ETA_RANGE)
    if _rate(model, spec, workload, slo, math.exp(high), max_tp) < tokens_per_s_per_device:
        raise ValueError(
            f"{spec.name}: {tokens_per_s_per_device:g} tokens/s per device is beyond the model's "
            f"reach even at {_ETA_RANGE[1]:g}x the datasheet's efficiency (does the model fit "
            "at that degree, and is it the model the run served?)"
        )
    for _ in range(40):  # the range's log width / 2**40: 1e-11
        mid = (low + high) / 2
        if _rate(model, spec, workload, slo, math.exp(mid), max_tp) >= tokens_per_s_per_device:
            high = mid
        else:
            low = mid
    return math.exp(high)


def mlperf_workload(table: PublishedTable, benchmark: MlperfLlmBenchmark) -> ServingWorkload:
    """``benchmark``'s workload: its dataset's mean prompt tokens (sourced in the shipped
    file), and the output tokens per sample its rows generated (the median of tokens/s over
    samples/s of the table's rows of that benchmark)."""
    ratios = [
        r.value / r.samples_value
        for r in table.results
        if benchmark.matches(r.benchmark) and r.samples_value
    ]
    if not ratios:
        raise ValueError(f"no published {benchmark.benchmark} row gives its samples/s")
    return ServingWorkload(benchmark.mean_input_tokens, statistics.median(ratios))


@dataclass(frozen=True)
class ServingRow:
    """One published LLM Server row with its datasheet, its benchmark's workload and the
    efficiency fitted to it."""

    result: PublishedResult
    spec: AcceleratorSpec
    eta: float
    benchmark: MlperfLlmBenchmark
    workload: ServingWorkload

    @property
    def system(self) -> tuple[str, str, str]:
        """Round, submitter, system: the rows left out together."""
        return (self.result.round, self.result.submitter, self.result.system)

    @property
    def observation(self) -> Observation:
        return Observation(
            self.benchmark.group, self.result.family, self.benchmark.benchmark, math.log(self.eta)
        )


@dataclass(frozen=True)
class StepOverhead:
    """A fixed cost per decode step fitted on a user's run (:func:`fit_step_overhead`), with
    the points it was fitted on (each load's floor at ``eta = 1`` and its measured TPOT), so a
    projection can say how far it extrapolates them (:meth:`relative_sd`)."""

    seconds: float
    label: str
    floors_s: tuple[float, ...]
    tpots_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"a step overhead must be positive, got {self.seconds}")
        if len(self.floors_s) != len(self.tpots_s) or len(set(self.floors_s)) < 2:
            raise ValueError("a step overhead is fitted on two loads or more, one TPOT each")
        if not all(math.isfinite(x) and x > 0 for x in (*self.floors_s, *self.tpots_s)):
            raise ValueError("a step overhead's floors and TPOTs must be positive")

    def relative_sd(self, floor_s: float) -> float:
        """The fitted line's standard deviation at a load whose floor is ``floor_s``, over its
        value there: each measured TPOT carries a run's own spread
        (:data:`~.tighten.RUN_TO_RUN_LOG_SD` of it), and the least-squares line weighs them by
        their leverage (small between the measured loads, growing beyond them)."""
        if not (math.isfinite(floor_s) and floor_s > 0):
            raise ValueError(f"a floor must be positive, got {floor_s}")
        n = len(self.floors_s)
        mean = statistics.fmean(self.floors_s)
        spread = sum((f - mean) ** 2 for f in self.floors_s)
        weights = [1 / n + (f - mean) * (floor_s - mean) / spread for f in self.floors_s]
        line = sum(w * t for w, t in zip(weights, self.tpots_s, strict=True))
        sd = RUN_TO_RUN_LOG_SD * math.sqrt(
            sum((w * t) ** 2 for w, t in zip(weights, self.tpots_s, strict=True))
        )
        return sd / line


@dataclass(frozen=True)
class ServingCalibration:
    """The rows, the rows left out (with why), each benchmark's workload by group and the
    fitted model; ``overheads``: a fixed cost per decode step by family, where a user's run
    measured one."""

    rows: tuple[ServingRow, ...]
    left_out: tuple[tuple[PublishedResult, str], ...]
    workloads: Mapping[str, ServingWorkload]
    model: EfficiencyModel
    overheads: Mapping[str, StepOverhead] = field(default_factory=dict)

    def rows_of(self, family: str) -> int:
        """Published rows of ``family``."""
        return sum(r.result.family == family for r in self.rows)

    @property
    def benchmarks(self) -> tuple[MlperfLlmBenchmark, ...]:
        """The benchmarks with rows in the fit, in the shipped file's order."""
        fitted = {r.benchmark.benchmark for r in self.rows}
        return tuple(b for b in mlperf_benchmarks() if b.benchmark in fitted)

    def level_for(self, model: ServedModel, workload: ServingWorkload) -> MlperfLlmBenchmark:
        """The benchmark whose rows' level a projection of ``model`` at ``workload`` takes:
        a MoE's from the MoE benchmark (Mixtral), a dense model's from the dense benchmark
        nearest its mean prompt length on the log scale (Llama-2-70B's 222 tokens,
        Llama-3.1-405B's 9,429); where no benchmark of the model's kind has rows, the nearest
        of the others (the projection's basis names the level read). Each level is how far
        that benchmark's systems realise the floor; a family's overall effect is shared."""
        fitted = self.benchmarks
        if not fitted:
            raise ValueError("the serving calibration has no rows")
        same = [b for b in fitted if b.model.moe == model.moe] or list(fitted)
        return min(
            same,
            key=lambda b: abs(math.log(b.mean_input_tokens / workload.input_tokens)),
        )

    def rows_text(self) -> str:
        """How many rows of which benchmarks: ``29 Llama-2-70B, 9 Mixtral, 3 Llama-3.1-405B``."""
        counts = {b.benchmark: 0 for b in self.benchmarks}
        for r in self.rows:
            counts[r.benchmark.benchmark] += 1
        return ", ".join(f"{n} {name}" for name, n in counts.items())

    def overhead_s(self, family: str) -> float:
        """The fixed cost per decode step of ``family`` (0: none measured)."""
        found = self.overheads.get(family)
        return 0.0 if found is None else found.seconds


def serving_rows(
    table: PublishedTable, accelerators: Accelerators
) -> tuple[list[ServingRow], list[tuple[PublishedResult, str]], dict[str, ServingWorkload]]:
    """Each MLPerf LLM Server row with its efficiency, and each benchmark's workload by group
    (the ``-99``/``-99.9`` twins of one system, the same run in most rounds, count once: the
    ``-99`` one)."""
    rows: list[ServingRow] = []
    left_out: list[tuple[PublishedResult, str]] = []
    workloads: dict[str, ServingWorkload] = {}
    for benchmark in mlperf_benchmarks():
        chosen: dict[tuple[str, str, str], PublishedResult] = {}
        for r in table.results:
            if not benchmark.matches(r.benchmark) or r.scenario != "Server":
                continue
            key = (r.round, r.submitter, r.system)
            if key not in chosen or r.benchmark.endswith("-99"):
                chosen[key] = r
        if not chosen:
            continue
        try:
            workload = mlperf_workload(table, benchmark)
        except ValueError as exc:
            left_out.extend((result, str(exc)) for result in chosen.values())
            continue
        workloads[benchmark.group] = workload
        model = benchmark.model
        for result in chosen.values():
            spec = spec_for(result, accelerators)
            if spec is None:
                left_out.append((result, f"no datasheet for {result.accelerator!r} here"))
                continue
            max_tp = max(tp for tp in TP_DEGREES if tp <= result.accelerator_count)
            try:
                eta = solve_efficiency(
                    model, spec, workload, benchmark.slo, result.per_device, max_tp=max_tp
                )
            except ValueError as exc:
                left_out.append((result, str(exc)))
                continue
            rows.append(ServingRow(result, spec, eta, benchmark, workload))
    return rows, left_out, workloads


def calibrate_serving(table: PublishedTable, accelerators: Accelerators) -> ServingCalibration:
    """The efficiency model fitted to every MLPerf LLM Server row with a datasheet."""
    rows, left_out, workloads = serving_rows(table, accelerators)
    return ServingCalibration(
        tuple(rows), tuple(left_out), workloads, fit([r.observation for r in rows])
    )


@functools.cache
def shipped_serving_calibration() -> ServingCalibration:
    """The serving calibration of the shipped table and datasheets (once per process)."""
    return calibrate_serving(load_published(), load_accelerators())


@dataclass(frozen=True, kw_only=True)
class ServingRun:
    """A user's own measured serving run on an accelerator the datasheets know: good output
    tokens/s per device at its workload and SLO, at the degree it ran."""

    run_id: str
    spec: AcceleratorSpec
    model: ServedModel
    workload: ServingWorkload
    slo: ServingSlo
    tokens_per_s_per_device: float
    devices: int
    """The devices one server used (its tensor-parallel degree)."""
    points: tuple[TpotPoint, ...] = ()
    """The run's median TPOT per concurrency, where it measured them: with two loads or more,
    a fixed cost per step is fitted beside ``eta`` (:func:`fit_step_overhead`)."""

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("a user's run needs its id (the label names it)")
        if not self.tokens_per_s_per_device > 0:
            raise ValueError(
                f"run {self.run_id}: measured tokens/s per device must be positive, got "
                f"{self.tokens_per_s_per_device}"
            )
        if self.devices < 1:
            raise ValueError(f"run {self.run_id}: devices must be 1 or more, got {self.devices}")

    @property
    def label(self) -> str:
        """What the narrowed options say narrowed them."""
        return f"your run {self.run_id} on {self.spec.name}"


def tightened_serving(
    runs: Sequence[ServingRun], calibration: ServingCalibration | None = None
) -> ServingCalibration:
    """``calibration`` (the shipped one by default) with each run's efficiency added to its
    family as one more row (the module's "measured, then tightened"). A run whose tokens/s
    the floor cannot reach at any efficiency is refused in one line."""
    calibration = calibration or shipped_serving_calibration()
    points = []
    overheads = dict(calibration.overheads)
    for run in runs:
        max_tp = max(tp for tp in TP_DEGREES if tp <= run.devices)
        try:  # a run the floor cannot reach (the wrong model, or devices) is refused, fit or not
            eta = solve_efficiency(
                run.model, run.spec, run.workload, run.slo, run.tokens_per_s_per_device, max_tp
            )
        except ValueError as exc:
            raise ValueError(f"run {run.run_id}: {exc}") from None
        label = run.label
        fitted = _fit_run(run, max_tp)
        if fitted is not None:
            overhead, eta = fitted
            overheads[run.spec.family] = overhead
            label = overhead.label
        level = calibration.level_for(run.model, run.workload)
        observation = Observation(level.group, run.spec.family, level.benchmark, math.log(eta))
        points.append(Measured(observation, RUN_TO_RUN_LOG_SD**2, label))
    return replace(calibration, model=calibration.model.updated(points), overheads=overheads)


def _fit_run(run: ServingRun, max_tp: int) -> tuple[StepOverhead, float] | None:
    """The run's fixed step cost and ``eta`` from its median TPOT per concurrency (trials at
    one concurrency are one load), at the degree it ran; ``None``: no fit (see
    :func:`fit_step_overhead`)."""
    by_load: dict[int, list[float]] = {}
    for p in run.points:
        by_load.setdefault(p.concurrency, []).append(p.tpot_s)
    if len(by_load) < 2:
        return None
    loads = sorted(by_load)
    floors = tuple(tpot_floor(run.model, run.spec, run.workload, b, tp=max_tp) for b in loads)
    tpots = tuple(statistics.median(by_load[b]) for b in loads)
    fitted = fit_step_overhead(floors, tpots)
    if fitted is None:
        return None
    overhead_s, eta = fitted
    label = f"{run.label} ({len(loads)} loads: a fixed {overhead_s * 1e3:.3g} ms a step, fitted)"
    return StepOverhead(overhead_s, label, floors, tpots), eta


@dataclass(frozen=True, kw_only=True)
class ServingProjection:
    """One accelerator: the chosen degree at the point efficiency, and the 80 % interval of
    its tokens/s per device (each bound at its own best degree and concurrency)."""

    accelerator: str
    family: str
    point: OperatingPoint | None
    """``None``: no degree up to 8 holds the model and meets the SLO at the point efficiency."""
    eta: float
    eta_low: float
    eta_high: float
    low_tokens_per_s_per_device: float
    high_tokens_per_s_per_device: float
    coverage: float
    basis: str
    rows: int
    """MLPerf LLM Server rows of this family (0: calibrated on other families only)."""
    smallest_near_tp: int | None = None
    """The smallest degree within :data:`NEAR_BEST` of the chosen one's tokens/s per device."""

    def __post_init__(self) -> None:
        if not 0 < self.eta_low <= self.eta <= self.eta_high:
            raise ValueError("the efficiency's point must lie within its interval")
        if self.point is not None and not (
            self.low_tokens_per_s_per_device
            <= self.point.tokens_per_s_per_device
            <= self.high_tokens_per_s_per_device
        ):
            raise ValueError("the tokens/s point must lie within its interval")


def project_serving(
    model: ServedModel,
    spec: AcceleratorSpec,
    workload: ServingWorkload,
    slo: ServingSlo,
    calibration: ServingCalibration | None = None,
) -> ServingProjection:
    """``model`` served on ``spec``: the best degree, its concurrency, TPOT, TTFT and tokens/s
    per device at the calibrated efficiency, and the 80 % interval."""
    calibration = calibration or shipped_serving_calibration()
    level = calibration.level_for(model, workload)
    prediction = calibration.model.predict(level.group, spec.family, level.benchmark)
    low, high = prediction.interval(COVERAGE)
    rows = calibration.rows_of(spec.family)
    if rows:
        basis = f"{spec.family} calibrated on {rows} MLPerf LLM Server rows"
    else:
        basis = f"{spec.family}: no MLPerf LLM row, other families only (wider interval)"
    basis += f"; at the {level.benchmark} rows' level"
    narrowed = calibration.model.narrowed_by(spec.family)
    if narrowed:
        basis += f"; narrowed by {narrowed}"
    overhead = calibration.overhead_s(spec.family)
    point = best_point(model, spec, workload, slo, prediction.point, overhead_s=overhead)
    near = None
    if point is not None:
        near = min(
            tp
            for tp in TP_DEGREES
            for p in [operating_point(model, spec, workload, slo, tp, prediction.point, overhead)]
            if p is not None
            and p.tokens_per_s_per_device >= (1 - NEAR_BEST) * point.tokens_per_s_per_device
        )
    low_rate = _rate(model, spec, workload, slo, low, max(TP_DEGREES), overhead)
    high_rate = _rate(model, spec, workload, slo, high, max(TP_DEGREES), overhead)
    fitted = calibration.overheads.get(spec.family)
    if fitted is not None and point is not None:  # the fitted line's own spread, there
        floor_s = tpot_floor(model, spec, workload, point.concurrency, tp=point.tp)
        low_rate, high_rate = widened(
            point.tokens_per_s_per_device, low_rate, high_rate, fitted.relative_sd(floor_s)
        )
    return ServingProjection(
        accelerator=spec.name,
        family=spec.family,
        point=point,
        eta=prediction.point,
        eta_low=low,
        eta_high=high,
        low_tokens_per_s_per_device=low_rate,
        high_tokens_per_s_per_device=high_rate,
        coverage=COVERAGE,
        basis=basis,
        rows=rows,
        smallest_near_tp=near,
    )


def widened(point: float, low: float, high: float, relative_sd: float) -> tuple[float, float]:
    """The interval ``[low, high]`` around ``point`` with a relative spread ``relative_sd`` added
    in quadrature on the log scale (at the interval's coverage): a fitted step cost's own
    uncertainty beside the efficiency's. A ``low`` of 0 (nothing meets the SLO there) stays."""
    if not 0 <= low <= point <= high or not relative_sd >= 0:
        raise ValueError(
            f"need 0 <= low <= point <= high and a spread >= 0, got {low, point, high}"
        )
    z = statistics.NormalDist().inv_cdf(0.5 + COVERAGE / 2)
    up = math.hypot(math.log(high / point), z * relative_sd)
    down = math.hypot(math.log(point / low), z * relative_sd) if low > 0 else math.inf
    return point * math.exp(-down), point * math.exp(up)


def usd_per_device_hour(spec: AcceleratorSpec, catalog: Catalog) -> tuple[float, str] | None:
    """The cheapest catalog price of one ``spec`` device an hour, and the instance it is of."""
    offers = [
        (i.price_usd_per_hour / i.accelerator_count, i.type)
        for i in catalog.instances
        if i.part == spec.name and i.kind != "cpu"
    ]
    return min(offers) if offers else None


def holdout(
    row: ServingRow, model: EfficiencyModel, workload: ServingWorkload | None = None
) -> Holdout:
    """``row`` projected from ``model`` (a fit without it): the efficiency's 80 % interval,
    mapped through the floor at its benchmark's model, ``workload`` (the row's own by default)
    and SLO, up to its accelerator count as degree, to tokens/s per device."""
    b = row.benchmark
    prediction = model.predict(b.group, row.result.family, b.benchmark)
    low, high = prediction.interval(COVERAGE)
    max_tp = max(tp for tp in TP_DEGREES if tp <= row.result.accelerator_count)
    served, work = b.model, workload or row.workload

    def rate(eta: float) -> float:
        return _rate(served, row.spec, work, b.slo, eta, max_tp)

    return Holdout(
        key=row.result.key,
        family=row.result.family,
        workload_class=b.benchmark,
        published=row.result.per_device,
        point=rate(prediction.point),
        low=rate(low),
        high=rate(high),
        basis=prediction.basis,
    )


def leave_one_out(calibration: ServingCalibration) -> list[Holdout]:
    """Each system's rows projected from a fit to the other systems' rows (a system's rows of
    every benchmark left out together)."""
    return [
        holdout(row, fit([r.observation for r in calibration.rows if r.system != row.system]))
        for row in calibration.rows
    ]


@dataclass(frozen=True, kw_only=True)
class ServingOption:
    """One accelerator in a serving plan: the projection, priced where the catalog rents it."""

    accelerator: str
    family: str
    kind: str
    tp: int | None
    """``None``: no degree up to 8 holds the model and meets the SLO (``why`` says which)."""
    smallest_near_tp: int | None
    """The smallest degree within 10 % of ``tp``'s tokens/s per device."""
    concurrency: int | None
    limited_by: str | None
    tpot_s: float | None
    ttft_s: float | None
    tokens_per_s_per_device: float | None
    low_tokens_per_s_per_device: float
    high_tokens_per_s_per_device: float
    usd_per_device_hour: float | None
    priced_by: str | None
    """The catalog instance the price is of (the cheapest per device)."""
    usd_per_million_output_tokens: float | None
    low_usd_per_million_output_tokens: float | None
    high_usd_per_million_output_tokens: float | None
    basis: str
    calibration_rows: int
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class ServingPlan:
    """``plan llm``: the model, the workload and SLO, and one option per accelerator."""

    config: str
    dtype: str
    kv_dtype: str
    params: float
    weights_bytes: float
    kv_bytes_per_token: float
    input_tokens: float
    output_tokens: float
    ttft_s: float
    tpot_s: float
    coverage: float
    options: tuple[ServingOption, ...]
    assumptions: tuple[str, ...]
    ranking: str = ""
    """Whether the cheapest option per million output tokens is told apart from the
    runner-up within the intervals (:func:`serving_ranking`), and what would decide it."""
    mode: Literal["llm"] = "llm"


def serving_ranking(options: Sequence[ServingOption]) -> str:
    """The option with the lowest $ per million output tokens at its point, against the
    runner-up (of the others, the cheapest at its own best end: one that meets the SLO only
    high in its interval counts): decided where the first costs less even at its interval's
    worst end; else which measurement could decide it."""
    if options and all(o.tp is None for o in options):
        return (
            f"no option meets it: none of the {len(options)} accelerators holds the model and "
            "meets the SLO at any degree up to 8 (each row says why)"
        )
    pointed = [o for o in options if o.usd_per_million_output_tokens is not None]
    if not pointed:
        return ""
    first = min(pointed, key=lambda o: o.usd_per_million_output_tokens or math.inf)
    others = [
        o for o in options if o is not first and o.low_usd_per_million_output_tokens is not None
    ]
    if not others:
        return ""
    runner = min(others, key=lambda o: o.low_usd_per_million_output_tokens or math.inf)
    worst = first.high_usd_per_million_output_tokens
    best = runner.low_usd_per_million_output_tokens or 0.0
    if worst is not None and worst <= best:
        return (
            f"decided: {first.accelerator} serves a million output tokens for less than "
            f"{runner.accelerator} at every efficiency within their 80 % intervals"
        )
    return (
        f"not decided: {first.accelerator} and {runner.accelerator} cannot be told apart "
        "within their 80 % intervals; an `accelscope llm` run on either, then "
        "`plan llm --from-run RUN --measured-on PART`, narrows its family's"
    )


def _usd_per_million(usd_per_hour: float, tokens_per_s: float) -> float | None:
    return usd_per_hour * 1e6 / (tokens_per_s * 3600) if tokens_per_s > 0 else None


def _why_not(model: ServedModel, spec: AcceleratorSpec, workload: ServingWorkload) -> str:
    floor = _Floor(model, spec, workload, max(TP_DEGREES), 1.0)
    if floor.memory_limit() < 1:
        share = f"{GPU_MEMORY_UTILIZATION:.0%}"
        return f"does not fit: weights + one sequence's KV exceed {share} of 8 devices"
    return "misses the SLO at every degree up to 8, even with one sequence"


def serving_plan(
    model: ServedModel,
    specs: Sequence[AcceleratorSpec],
    workload: ServingWorkload,
    slo: ServingSlo,
    catalog: Catalog,
    config: str,
    calibration: ServingCalibration | None = None,
) -> ServingPlan:
    """The projection on each of ``specs``, priced from ``catalog``, with its assumptions."""
    calibration = calibration or shipped_serving_calibration()
    options = []
    for spec in specs:
        projection = project_serving(model, spec, workload, slo, calibration)
        point = projection.point
        price = usd_per_device_hour(spec, catalog)
        rate = point.tokens_per_s_per_device if point else None
        usd = _usd_per_million(price[0], rate) if price and rate else None
        options.append(
            ServingOption(
                accelerator=spec.name,
                family=spec.family,
                kind=spec.kind,
                tp=point.tp if point else None,
                smallest_near_tp=projection.smallest_near_tp,
                concurrency=point.concurrency if point else None,
                limited_by=point.limited_by if point else None,
                tpot_s=point.tpot_s if point else None,
                ttft_s=point.ttft_s if point else None,
                tokens_per_s_per_device=rate,
                low_tokens_per_s_per_device=projection.low_tokens_per_s_per_device,
                high_tokens_per_s_per_device=projection.high_tokens_per_s_per_device,
                usd_per_device_hour=price[0] if price else None,
                priced_by=price[1] if price else None,
                usd_per_million_output_tokens=usd,
                # the cost's interval: the tokens/s interval inverted (high rate, low cost)
                low_usd_per_million_output_tokens=_usd_per_million(
                    price[0], projection.high_tokens_per_s_per_device
                )
                if price
                else None,
                high_usd_per_million_output_tokens=_usd_per_million(
                    price[0], projection.low_tokens_per_s_per_device
                )
                if price
                else None,
                basis=projection.basis,
                calibration_rows=projection.rows,
                why="" if point else _why_not(model, spec, workload),
            )
        )
    level = calibration.level_for(model, workload)
    linked = [spec.name for spec in specs if spec.interconnect_bytes_per_s is None]
    assumptions = (
        "estimate: decode step = max(weights/TP + concurrency x context x KV/TP over "
        "bandwidth, 2 x params x concurrency / (TP x peak)) + its all-reduces, with the "
        "prefills interleaved (each step carries output/concurrency of them); TTFT = prefill "
        "with an M/D/1 queue's mean wait + one decode step; a mean, not a percentile",
        "one efficiency factor (share of the datasheet's bandwidth, peak and interconnect "
        f"realised) per family, fitted on {len(calibration.rows)} MLPerf Inference v4.0-v5.0 "
        f"LLM Server results ({calibration.rows_text()}; 8-bit weights and KV, the "
        "submitters' stacks: TensorRT-LLM, vLLM, Gaudi PyTorch), with an 80 % Student-t "
        f"interval, read at the {level.benchmark} rows' level "
        f"({'a MoE' if model.moe else 'dense'}, mean prompt {level.mean_input_tokens:,.0f} "
        "tokens: the MLPerf workload nearest yours); assumed to carry over to this model, "
        "dtype and workload",
        "MLPerf's workloads: each dataset's mean prompt tokens computed from its per-sample "
        "counts (plan/data/mlperf_llm_workloads.toml cites them), the output tokens its rows "
        "generated (tokens/s over samples/s), its Server bounds from loadgen/mlperf.conf",
        "tensor parallelism: two all-reduces a layer of 16-bit activations, a ring's "
        "2 (TP-1)/TP of them over the datasheet's interconnect, per direction (a mesh's links "
        "to the group's other members, a torus's two along one axis), not overlapped with "
        "compute; no per-call latency"
        + (
            f"; no interconnect figure for {', '.join(linked)}: no cost priced there"
            if linked
            else ""
        ),
        f"memory: {GPU_MEMORY_UTILIZATION:.0%} of each device; a degree counts where the weights "
        "and every sequence's whole KV cache fit; 'TP 8 (2 within 10%)' names the smallest "
        f"degree within {NEAR_BEST:.0%} of the best tokens/s per device: the floor cannot tell "
        "them apart",
        "$ per million output tokens: the catalog's cheapest on-demand price per device (also "
        "where the degree needs more devices than that instance has), every device busy; "
        "prompt tokens are not billed apart",
    )
    return ServingPlan(
        config=config,
        dtype=model.dtype,
        kv_dtype=model.kv_dtype,
        params=model.params,
        weights_bytes=model.weights_bytes,
        kv_bytes_per_token=model.kv_bytes_per_token,
        input_tokens=workload.input_tokens,
        output_tokens=workload.output_tokens,
        ttft_s=slo.ttft_s,
        tpot_s=slo.tpot_s,
        coverage=COVERAGE,
        options=tuple(options),
        assumptions=assumptions,
        ranking=serving_ranking(options),
    )
