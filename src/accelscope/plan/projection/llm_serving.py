"""LLM serving projected to accelerators not at hand: concurrency, TPOT, TTFT and tokens/s per
device at a TTFT/TPOT SLO for each tensor-parallel degree, with an 80 % interval calibrated on
MLPerf Inference's Llama-2-70B Server results.

**The floor.** At concurrency ``B`` and tensor-parallel degree ``TP``, on a part whose datasheet
gives bandwidth ``BW`` and dense peak ``F`` at the compute dtype, with ``eta`` the share of both
the serving stack realises (the one fitted factor, below)::

    decode step(B)  = max((W/TP + B x context x kv/TP) / (BW x eta),  2 x P x B / (TP x F x eta))
    prefill         = max(2 x P x input / (TP x F x eta),  W/TP / (BW x eta))
    TPOT(B)         = decode step(B) + (B / output) x prefill

``W`` the weights' bytes, ``kv`` the KV bytes per token, ``P`` the parameters one token
multiplies (a MoE's routed experts only), ``context`` the mean context over the decode
(``input + output / 2``). Continuous batching with prefills interleaved: each step, ``B /
output`` requests finish and as many prefills take their place, so a step carries its share of
prefill. TTFT is the prefill plus the mean wait of an M/D/1 queue of prefills at the load
``rho = (B / output) x prefill / TPOT`` plus one decode step in flight::

    TTFT(B) = prefill x (1 + rho / (2 (1 - rho))) + decode step(B)

Simple on purpose: no communication cost of tensor parallelism, no attention FLOPs, no
scheduler overhead (unless a user's run measured it: below), no tail (MLPerf's bounds are on
the 99th percentile, this is a mean): all of that is in ``eta``. A degree is considered only
where the weights and the KV cache of one whole sequence fit in ``memory x 0.9`` per device.
The concurrency is the largest with TPOT and TTFT within their bounds and the KV cache of every
sequence in memory; the degree chosen is the one with the most tokens/s per device.

**The efficiency.** ``eta`` is solved, per published Llama-2-70B Server row (MLPerf Inference
v4.0-v5.0, :mod:`.published`), so the floor at MLPerf's workload and SLO gives the row's tokens/s
per device; ``log eta`` is fitted per accelerator family by the same mixed model as every other
projection (:func:`accelscope.plan.projection.efficiency.fit`), which gives a Student-t 80 %
interval, wider for a family without a row. The interval maps through the floor (monotone in
``eta``) to tokens/s and $ per million output tokens. :func:`leave_one_out` checks it, each
system left out and projected from the rest.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from accelscope.plan.accelerators import Accelerators, AcceleratorSpec, load_accelerators
from accelscope.plan.catalog import Catalog
from accelscope.plan.llm_memory import BYTES_PER_PARAM, ModelShape
from accelscope.plan.projection.calibration import spec_for
from accelscope.plan.projection.efficiency import EfficiencyModel, Measured, Observation, fit
from accelscope.plan.projection.published import PublishedResult, PublishedTable, load_published
from accelscope.plan.projection.tighten import RUN_TO_RUN_LOG_SD
from accelscope.plan.projection.validation import COVERAGE, Holdout

__all__ = [
    "GPU_MEMORY_UTILIZATION",
    "MAX_FITTED_ETA",
    "MLPERF_GROUP",
    "MLPERF_SLO",
    "NEAR_BEST",
    "TP_DEGREES",
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
    "leave_one_out",
    "llama2_70b_shape",
    "mlperf_workload",
    "operating_point",
    "project_serving",
    "served_model",
    "serving_plan",
    "shipped_serving_calibration",
    "tightened_serving",
    "tpot_floor",
    "widened",
]

GPU_MEMORY_UTILIZATION = 0.9
"""Share of device memory the server may use (vLLM's default ``gpu_memory_utilization``)."""
TP_DEGREES = (1, 2, 4, 8)
MAX_CONCURRENCY = 4096
"""The largest concurrency searched (a scheduler's batch limit, in practice far lower)."""
MLPERF_BENCHMARK = "llama2-70b"
MLPERF_GROUP = "llama2-70b/Server"
MLPERF_DTYPE = "fp8"
"""Weights and KV cache of the MLPerf rows: closed-division submissions quantise to 8 bits
(assumed for the KV cache; the table does not say which submission kept it at 16 bits)."""
MLPERF_SLO_SOURCE = (
    "mlcommons/inference@001712e9 loadgen/mlperf.conf: llama2-70b.Server.ttft_latency = 2000, "
    "tpot_latency = 200 (ms, 99th percentile; read at that commit, not at each round's tag)"
)
MLPERF_INPUT_TOKENS_ASSUMED = 1024
"""Mean prompt tokens of MLPerf's Llama-2-70B (OpenOrca) queries: **assumed**, not recorded in
the shipped sources. The fitted efficiency absorbs an error in it for the MLPerf workload; for
another workload it is the prefill share that would be off."""
NEAR_BEST = 0.10
"""A degree within this share of the best tokens/s per device is named beside it: the floor
prices no all-reduce (the datasheets give no interconnect bandwidth), so the best degree is
the highest that pays before communication, and a smaller one close to it may win in practice."""
_ETA_RANGE = (1e-4, 1e2)
MAX_FITTED_ETA = 4.0
"""The largest efficiency a fixed-cost fit may give (:func:`fit_step_overhead`): over twice the
highest any of the 29 published Llama-2-70B Server systems reached (1.74). Above it the TPOT
barely moves with the load, and the fit would read that as a fast stack with a large cost."""


@dataclass(frozen=True, kw_only=True)
class ServedModel:
    """What serving costs per token: the parameters, the bytes read per step, KV per token."""

    name: str
    params: float
    active_params: float
    """Parameters one token multiplies (all of a dense model; a MoE's routed experts only)."""
    weights_bytes: float
    kv_bytes_per_token: float
    dtype: str
    kv_dtype: str

    def __post_init__(self) -> None:
        for key in ("params", "active_params", "weights_bytes", "kv_bytes_per_token"):
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
        dtype=dtype,
        kv_dtype=kv_dtype,
    )


@functools.cache
def llama2_70b_shape() -> ModelShape:
    """Llama-2-70B from its public config values (80 layers, hidden 8192, 64 heads, 8 KV
    heads, intermediate 28672, vocabulary 32000, untied embeddings)."""
    return ModelShape(
        model_type="llama",
        hidden=8192,
        layers=80,
        heads=64,
        kv_heads=8,
        head_dim=128,
        intermediate=28672,
        vocab=32000,
        tied_embeddings=False,
        gated_mlp=True,
    )


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
"""MLPerf Inference's Llama-2-70B Server bounds (:data:`MLPERF_SLO_SOURCE`)."""

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
        self._overhead_s = overhead_s

    def decode_step(self, batch: int) -> float:
        m, w = self.model, self.workload
        read = (m.weights_bytes + batch * w.mean_context * m.kv_bytes_per_token) / self.tp
        work = 2 * m.active_params * batch / self.tp
        return self._overhead_s + max(read / self._bandwidth, work / self._flops)

    def prefill(self) -> float:
        m = self.model
        work = 2 * m.active_params * self.workload.input_tokens / self.tp
        return max(work / self._flops, m.weights_bytes / self.tp / self._bandwidth)

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


def mlperf_workload(table: PublishedTable) -> ServingWorkload:
    """MLPerf's Llama-2-70B workload: the output tokens per sample are the table's own (median
    of tokens/s over samples/s of its rows); the input tokens are assumed
    (:data:`MLPERF_INPUT_TOKENS_ASSUMED`)."""
    ratios = [
        r.value / r.samples_value
        for r in table.results
        if r.benchmark.startswith(MLPERF_BENCHMARK) and r.samples_value
    ]
    if not ratios:
        raise ValueError("no published Llama-2-70B row gives its samples/s")
    return ServingWorkload(MLPERF_INPUT_TOKENS_ASSUMED, statistics.median(ratios))


@dataclass(frozen=True)
class ServingRow:
    """One published Llama-2-70B Server row with its datasheet and fitted efficiency."""

    result: PublishedResult
    spec: AcceleratorSpec
    eta: float

    @property
    def system(self) -> tuple[str, str, str]:
        """Round, submitter, system: the rows left out together."""
        return (self.result.round, self.result.submitter, self.result.system)

    @property
    def observation(self) -> Observation:
        return Observation(MLPERF_GROUP, self.result.family, "llm", math.log(self.eta))


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
    """The rows, the rows left out (with why), the workload assumed and the fitted model;
    ``overheads``: a fixed cost per decode step by family, where a user's run measured one."""

    rows: tuple[ServingRow, ...]
    left_out: tuple[tuple[PublishedResult, str], ...]
    workload: ServingWorkload
    model: EfficiencyModel
    overheads: Mapping[str, StepOverhead] = field(default_factory=dict)

    def rows_of(self, family: str) -> int:
        """Published rows of ``family``."""
        return sum(r.result.family == family for r in self.rows)

    def overhead_s(self, family: str) -> float:
        """The fixed cost per decode step of ``family`` (0: none measured)."""
        found = self.overheads.get(family)
        return 0.0 if found is None else found.seconds


def _mlperf_model() -> ServedModel:
    return served_model(llama2_70b_shape(), MLPERF_DTYPE, name="llama2-70b")


def serving_rows(
    table: PublishedTable, accelerators: Accelerators
) -> tuple[list[ServingRow], list[tuple[PublishedResult, str]], ServingWorkload]:
    """Each Llama-2-70B Server row with its efficiency (the ``-99``/``-99.9`` twins of one
    system, the same run in most rounds, count once: the ``-99`` one)."""
    workload = mlperf_workload(table)
    model = _mlperf_model()
    chosen: dict[tuple[str, str, str], PublishedResult] = {}
    for r in table.results:
        if not r.benchmark.startswith(MLPERF_BENCHMARK) or r.scenario != "Server":
            continue
        key = (r.round, r.submitter, r.system)
        if key not in chosen or r.benchmark.endswith("-99"):
            chosen[key] = r
    rows: list[ServingRow] = []
    left_out: list[tuple[PublishedResult, str]] = []
    for result in chosen.values():
        spec = spec_for(result, accelerators)
        if spec is None:
            left_out.append((result, f"no datasheet for {result.accelerator!r} here"))
            continue
        max_tp = max(tp for tp in TP_DEGREES if tp <= result.accelerator_count)
        try:
            eta = solve_efficiency(
                model, spec, workload, MLPERF_SLO, result.per_device, max_tp=max_tp
            )
        except ValueError as exc:
            left_out.append((result, str(exc)))
            continue
        rows.append(ServingRow(result, spec, eta))
    return rows, left_out, workload


def calibrate_serving(table: PublishedTable, accelerators: Accelerators) -> ServingCalibration:
    """The efficiency model fitted to every Llama-2-70B Server row with a datasheet."""
    rows, left_out, workload = serving_rows(table, accelerators)
    return ServingCalibration(
        tuple(rows), tuple(left_out), workload, fit([r.observation for r in rows])
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
        observation = Observation(MLPERF_GROUP, run.spec.family, "llm", math.log(eta))
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
    """MLPerf Llama-2-70B Server rows of this family (0: calibrated on other families only)."""
    smallest_near_tp: int | None = None
    """The smallest degree within :data:`NEAR_BEST` of the chosen one's tokens/s per device:
    the floor has no cost of tensor parallelism, so a higher degree never loses here."""

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
    prediction = calibration.model.predict(MLPERF_GROUP, spec.family, "llm")
    low, high = prediction.interval(COVERAGE)
    rows = calibration.rows_of(spec.family)
    if rows:
        basis = f"{spec.family} calibrated on {rows} MLPerf Llama-2-70B Server rows"
    else:
        basis = f"{spec.family}: no MLPerf LLM row, other families only (wider interval)"
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


def leave_one_out(calibration: ServingCalibration) -> list[Holdout]:
    """Each system's row projected from a fit to the other systems' rows: the efficiency's
    80 % interval, mapped through the floor at MLPerf's workload and SLO to tokens/s."""
    model = _mlperf_model()
    held: list[Holdout] = []
    for row in calibration.rows:
        rest = [r.observation for r in calibration.rows if r.system != row.system]
        prediction = fit(rest).predict(MLPERF_GROUP, row.result.family, "llm")
        low, high = prediction.interval(COVERAGE)
        max_tp = max(tp for tp in TP_DEGREES if tp <= row.result.accelerator_count)

        def rate(eta: float, spec: AcceleratorSpec = row.spec, max_tp: int = max_tp) -> float:
            return _rate(model, spec, calibration.workload, MLPERF_SLO, eta, max_tp)

        held.append(
            Holdout(
                key=row.result.key,
                family=row.result.family,
                workload_class="llm",
                published=row.result.per_device,
                point=rate(prediction.point),
                low=rate(low),
                high=rate(high),
                basis=prediction.basis,
            )
        )
    return held


@dataclass(frozen=True, kw_only=True)
class ServingOption:
    """One accelerator in a serving plan: the projection, priced where the catalog rents it."""

    accelerator: str
    family: str
    kind: str
    tp: int | None
    """``None``: no degree up to 8 holds the model and meets the SLO (``why`` says which)."""
    smallest_near_tp: int | None
    """The smallest degree within 10 % of ``tp``'s tokens/s per device (no TP cost modelled)."""
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
    mode: Literal["llm"] = "llm"


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
                if price and usd
                else None,
                high_usd_per_million_output_tokens=_usd_per_million(
                    price[0], projection.low_tokens_per_s_per_device
                )
                if price and usd
                else None,
                basis=projection.basis,
                calibration_rows=projection.rows,
                why="" if point else _why_not(model, spec, workload),
            )
        )
    assumptions = (
        "estimate: decode step = max(weights/TP + concurrency x context x KV/TP over "
        "bandwidth, 2 x params x concurrency / (TP x peak)), with the prefills interleaved "
        "(each step carries output/concurrency of them); TTFT = prefill with an M/D/1 "
        "queue's mean wait + one decode step; a mean, not a percentile",
        "one efficiency factor (share of the datasheet's bandwidth and peak realised) per "
        f"family, fitted on {len(calibration.rows)} MLPerf Inference v4.0-v5.0 Llama-2-70B "
        "Server results (8-bit weights and KV, the submitters' stacks: TensorRT-LLM, vLLM, "
        "Gaudi PyTorch), with an 80 % Student-t interval; assumed to carry over to this "
        "model, dtype and workload",
        f"MLPerf's bounds: {MLPERF_SLO_SOURCE}; its output tokens per sample "
        f"({calibration.workload.output_tokens:.0f}) from the table's tokens/s over samples/s; "
        f"its input tokens assumed {MLPERF_INPUT_TOKENS_ASSUMED:,} (not recorded in the sources)",
        f"memory: {GPU_MEMORY_UTILIZATION:.0%} of each device; a degree counts where the weights "
        "and every sequence's whole KV cache fit; no communication cost for tensor parallelism "
        f"(no interconnect figures): 'TP 8 (2 within 10%)' names the smallest degree within "
        f"{NEAR_BEST:.0%} of the best tokens/s per device, which its all-reduces may make the "
        "better choice",
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
    )
