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

from collections.abc import Sequence
from typing import Any

import numpy as np

from accelscope.llm.records import RequestRecord
from accelscope.plan.llm_memory import ModelShape

__all__ = ["decode_floor", "decoding_batch", "read_bytes_per_step"]

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
    summary: dict[str, Any],
    peak_flops_per_s: float | None = None,
    peak_source: str = "",
) -> dict[str, Any]:
    """The floor of one trial (JSON-ready), with its inputs and their sources."""
    window = summary.get("window") or {}
    batch = decoding_batch(records, window.get("start_s", 0.0), window.get("end_s", 0.0))
    tokens = summary.get("tokens") or {}
    prompt = tokens.get("prompt_mean") or 0.0
    output = tokens.get("output_mean") or 0.0
    context = prompt + output / 2.0
    weights, active = read_bytes_per_step(shape, weight_bytes)
    kv_per_token = shape.kv_values_per_token() * kv_bytes
    step_bytes = weights + max(batch, 1.0) * context * kv_per_token
    tpot_floor = step_bytes / bandwidth_bytes_per_s
    found: dict[str, Any] = {
        "weights_read_bytes": weights,
        "active_parameters": active,
        "kv_bytes_per_token": kv_per_token,
        "decode_batch_mean": batch,
        "context_mean_tokens": context,
        "bandwidth_bytes_per_s": bandwidth_bytes_per_s,
        "bandwidth_source": bandwidth_source,
        "tpot_floor_s": tpot_floor,
        "estimated": True,
    }
    tpot = (summary.get("metrics") or {}).get("tpot_s", {}).get("p50")
    if tpot:
        efficiency = tpot_floor / tpot
        found["tpot_measured_p50_s"] = tpot
        found["decode_efficiency"] = efficiency
        found["bound"] = (
            "memory-bandwidth bound: near the decode floor; batch more or use a smaller dtype"
            if efficiency >= EFFICIENT
            else f"{1 / efficiency:.1f}x above the decode floor: overheads (scheduling, kernel "
            "launches, the server's own code) dominate, not memory bandwidth"
        )
    else:
        found["decode_efficiency"] = None
        found["bound"] = "not measured: no TPOT (requests of one output token, or none completed)"
    if peak_flops_per_s:
        found["ttft_floor_s"] = 2.0 * active * prompt / peak_flops_per_s
        found["peak_flops_per_s"] = peak_flops_per_s
        found["peak_source"] = peak_source
        ttft = (summary.get("metrics") or {}).get("ttft_s", {}).get("p50")
        if ttft:
            found["ttft_measured_p50_s"] = ttft
            found["prefill_efficiency"] = found["ttft_floor_s"] / ttft
    found["notes"] = [
        "floor = (weights read + batch x context x KV bytes/token) / bandwidth, per decode step",
        f"batch = mean requests decoding at once in the steady window ({batch:.2f}, measured)",
    ]
    if np.isnan(tpot_floor):
        found["tpot_floor_s"] = None
    return found
