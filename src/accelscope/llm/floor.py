"""The decode roofline: the fastest a server could decode this model on this memory, from the
model's shape and a bandwidth, beside what it measured.

Each decode step reads every weight once for the whole batch (the embedding table only for
the tokens' rows; the output projection in full) plus each sequence's KV cache, so

    TPOT floor = (weight bytes + batch x mean context x KV bytes per token) / bandwidth

with the batch the mean number of requests decoding at once during the steady window
(measured from the streams) and the context the mean prompt plus half the mean output. The
TTFT floor is the prefill's 2 x active parameters x prompt tokens over the peak FLOP/s.
Decode efficiency = TPOT floor / measured median TPOT: near 1 the server is bandwidth-bound
(batch more, or use a smaller dtype), far below it overheads dominate (scheduling, kernel
launches, the server's own code). KV bytes per token come from ``plan memory``'s model shape,
the bandwidth from ``ceilings`` (measured, for a server on this machine) or the catalog's
datasheet figure (estimated) or ``--bandwidth``; every input is stated with its source.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accelscope.documents import Ceilings, normalise_dtype
from accelscope.errors import BadInputError
from accelscope.llm.documents import DecodeFloor, RequestRecord, TrialSummary
from accelscope.plan.catalog import load_catalog
from accelscope.plan.llm_memory import (
    BYTES_PER_PARAM,
    ModelShape,
    load_model_config,
    shape_from_config,
)

__all__ = [
    "FloorInputs",
    "decode_floor",
    "decoding_batch",
    "dtype_bytes",
    "read_bytes_per_step",
    "resolve_floor_inputs",
]

EFFICIENT = 0.5
"""Decode efficiency at or above this: bandwidth-bound (near the floor)."""


def read_bytes_per_step(shape: ModelShape, weight_bytes: float) -> tuple[float, float]:
    """(bytes of weights one decode step reads, active parameters per token)."""
    params = shape.params()
    active_mlp = params["mlp"]
    if shape.experts and shape.experts_per_token:
        moe_layers = shape.layers - shape.dense_layers
        routed = shape.experts * shape.mlp_params(shape.expert_intermediate)
        active_mlp -= moe_layers * (
            routed - shape.experts_per_token * shape.mlp_params(shape.expert_intermediate)
        )
    head = params["lm_head"] or params["embeddings"]  # tied: the table is the head, read whole
    active = params["attention"] + active_mlp + params["norms"] + head
    return active * weight_bytes, float(active)


def decoding_batch(records: Sequence[RequestRecord], start_s: float, end_s: float) -> float:
    """Mean number of requests decoding at once in [start, end] (first token to stream end)."""
    length = end_s - start_s
    if length <= 0:
        return 0.0
    busy = 0.0
    for record in records:
        if record.first_token_s is None or record.error or record.cancelled:
            continue
        overlap = min(record.end_s, end_s) - max(record.first_token_s, start_s)
        busy += max(0.0, overlap)
    return busy / length


def decode_floor(
    shape: ModelShape,
    *,
    weight_bytes: float,
    kv_bytes: float,
    bandwidth_bytes_per_s: float,
    bandwidth_source: str,
    records: Sequence[RequestRecord],
    summary: TrialSummary,
    peak_flops_per_s: float | None = None,
    peak_source: str = "",
) -> DecodeFloor:
    """The floor of one trial, with its inputs and their sources."""
    window = summary.window
    batch = decoding_batch(records, window.start_s, window.end_s) if window else 0.0
    tokens = summary.tokens
    prompt = (tokens.prompt_mean if tokens else None) or 0.0
    output = (tokens.output_mean if tokens else None) or 0.0
    context = prompt + output / 2.0
    weights, active = read_bytes_per_step(shape, weight_bytes)
    kv_per_token = shape.kv_values_per_token() * kv_bytes
    step_bytes = weights + max(batch, 1.0) * context * kv_per_token
    tpot_floor = step_bytes / bandwidth_bytes_per_s
    tpot = summary.metrics.tpot_s.value("p50")
    efficiency = tpot_floor / tpot if tpot else None
    if efficiency is None:
        bound = "not measured: no TPOT (requests of one output token, or none completed)"
    elif efficiency >= EFFICIENT:
        bound = "memory-bandwidth bound: near the decode floor; batch more or use a smaller dtype"
    else:
        bound = (
            f"{1 / efficiency:.1f}x above the decode floor: overheads (scheduling, kernel "
            "launches, the server's own code) dominate, not memory bandwidth"
        )
    ttft_floor = prefill = None
    ttft = summary.metrics.ttft_s.value("p50")
    if peak_flops_per_s:
        ttft_floor = 2.0 * active * prompt / peak_flops_per_s
        prefill = ttft_floor / ttft if ttft else None
    return DecodeFloor(
        weights_read_bytes=weights,
        active_parameters=active,
        kv_bytes_per_token=kv_per_token,
        decode_batch_mean=batch,
        context_mean_tokens=context,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        bandwidth_source=bandwidth_source,
        tpot_floor_s=None if math.isnan(tpot_floor) else tpot_floor,
        tpot_measured_p50_s=tpot,
        decode_efficiency=efficiency,
        bound=bound,
        ttft_floor_s=ttft_floor,
        peak_flops_per_s=peak_flops_per_s,
        peak_source=peak_source if peak_flops_per_s else "",
        ttft_measured_p50_s=ttft if peak_flops_per_s else None,
        prefill_efficiency=prefill,
        notes=[
            "floor = (weights read + batch x context x KV bytes/token) / bandwidth, per decode "
            "step",
            f"batch = mean requests decoding at once in the steady window ({batch:.2f}, measured)",
        ],
    )


@dataclass(kw_only=True)
class FloorInputs:
    """What the decode floor needs, resolved once per run (``why`` when it cannot be
    computed): the model's shape, bytes per weight and per KV value, the bandwidth and the
    FLOP peak, each with its source."""

    shape: ModelShape | None = None
    weight_bytes: float = 0.0
    kv_bytes: float = 0.0
    bandwidth: float | None = None
    bandwidth_source: str = ""
    peak: float | None = None
    peak_source: str = ""
    why: str = ""

    @property
    def ready(self) -> bool:
        """Shape and bandwidth known: each trial gets a floor."""
        return self.shape is not None and bool(self.bandwidth)

    def floor(self, records: Sequence[RequestRecord], summary: TrialSummary) -> DecodeFloor | None:
        """The trial's floor, or None when the inputs are not all known."""
        if self.shape is None or not self.bandwidth:
            return None
        return decode_floor(
            self.shape,
            weight_bytes=self.weight_bytes,
            kv_bytes=self.kv_bytes,
            bandwidth_bytes_per_s=self.bandwidth,
            bandwidth_source=self.bandwidth_source,
            records=records,
            summary=summary,
            peak_flops_per_s=self.peak,
            peak_source=self.peak_source,
        )


def dtype_bytes(name: str | None, flag: str) -> float | None:
    """Bytes per value of a dtype name (``bf16``, ``torch.float16``, ``int4`` ...); None for
    None; one-line error for a name not known."""
    if name is None:
        return None
    key = normalise_dtype(name) or name.strip().lower()
    if key not in BYTES_PER_PARAM:
        known = ", ".join(BYTES_PER_PARAM)
        raise BadInputError(f"{flag} {name!r}: give one of {known}")
    return BYTES_PER_PARAM[key]


def resolve_floor_inputs(
    *,
    model_config: Path | None,
    weights_dtype: str | None = None,
    kv_dtype: str | None = None,
    bandwidth_bytes_per_s: float | None = None,
    peak_flops_per_s: float | None = None,
    instance: str | None = None,
    catalog_files: Sequence[Path] = (),
    ceilings: Ceilings | None = None,
    ceilings_source: str = "",
    local: bool = True,
) -> FloorInputs:
    """The floor's inputs from the model's ``config.json`` (a file or its directory), the
    dtypes, and a bandwidth from (in order) ``--bandwidth``, the catalog's datasheet of
    ``--instance``, or this machine's measured ``ceilings`` (a server on this machine only)."""
    found = FloorInputs()
    if model_config is None:
        found.why = "not measured: give --model-config (the model's config.json) for the floor"
        return found
    config_path = model_config / "config.json" if model_config.is_dir() else model_config
    config = load_model_config(config_path)
    found.shape = shape_from_config(config, str(config_path))
    dtype = weights_dtype or str(config.get("dtype") or config.get("torch_dtype") or "")
    found.weight_bytes = dtype_bytes(dtype or "bfloat16", "--weights-dtype") or 2.0
    found.kv_bytes = dtype_bytes(kv_dtype, "--kv-dtype") or min(found.weight_bytes, 2.0)
    if found.weight_bytes >= 4.0 and kv_dtype is None:
        found.kv_bytes = found.weight_bytes
    key = "bf16" if found.weight_bytes <= 2 else "fp32"
    if bandwidth_bytes_per_s is not None:
        found.bandwidth = bandwidth_bytes_per_s
        found.bandwidth_source = "--bandwidth (given)"
        found.peak = peak_flops_per_s
        found.peak_source = "--peak-flops (given)" if peak_flops_per_s else ""
    elif instance is not None:
        entry = load_catalog(tuple(catalog_files)).get(instance)
        found.bandwidth = entry.memory_bandwidth_bytes_per_s
        found.bandwidth_source = f"catalog {entry.type} ({entry.accelerator}) datasheet"
        found.peak = peak_flops_per_s or entry.peak_ops_per_s.get(key)
        found.peak_source = f"catalog {entry.type} {key} datasheet" if found.peak else ""
    elif not local:
        found.why = (
            "not measured: the server is not on this machine; give --instance (catalog "
            "datasheet) or --bandwidth for the decode floor"
        )
    elif ceilings is None:
        found.why = (
            "not measured: run `accelscope ceilings` once on this machine (or give "
            "--bandwidth) for the decode floor"
        )
    else:
        found.bandwidth = ceilings.bandwidth_bytes_per_s
        found.bandwidth_source = f"measured by ceilings on this machine ({ceilings_source})"
        found.peak = ceilings.peak(key) or ceilings.peak("fp32")
        found.peak_source = f"measured by ceilings ({key} matmul peak)" if found.peak else ""
    return found
