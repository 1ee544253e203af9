"""LLM serving memory from a Hugging Face ``config.json``: weights, KV cache, activations,
runtime overhead; which catalog GPUs it fits on and how many sequences fit at the context.

Weights are counted from the config's shapes: embeddings, attention (GQA: separate K/V head
count; MLA: DeepSeek's low-rank projections), MLP (gated = 3 matrices, else 2; MoE experts,
shared experts and router), norms, and ``lm_head`` unless tied. Biases are ignored (< 0.1 %).

KV cache per token = 2 x layers x kv_heads x head_dim x bytes; layers with sliding-window
attention cache at most ``sliding_window`` tokens; MLA caches one latent of
``kv_lora_rank + qk_rope_head_dim`` values per layer instead of K and V.

The config keys read are validated by :class:`ModelConfig` (pydantic); a bad one is one error
line naming the file and the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

from accelscope.errors import BadInputError
from accelscope.plan.catalog import Catalog
from accelscope.units import ELEMENT_BYTES
from accelscope.validation import Count, FieldProblem, PositiveCount, validate

__all__ = [
    "BYTES_PER_PARAM",
    "MemoryEstimate",
    "ModelConfig",
    "ModelShape",
    "estimate_memory",
    "load_model_config",
    "shape_from_config",
]

BYTES_PER_PARAM: Mapping[str, float] = MappingProxyType(
    {name: size for name, size in ELEMENT_BYTES.items() if name != "tf32"}
)
"""The precisions weights and KV values are stored in, and the bytes of one value in each
(:data:`accelscope.units.ELEMENT_BYTES`; ``tf32`` is a way to multiply fp32 values, not a way
to store them)."""
PREFILL_CHUNK_TOKENS = 2048
"""Activations are estimated for a chunked prefill of this many tokens per step (vLLM-style)."""
RUNTIME_FIXED_BYTES = 1 << 30
"""Per GPU: CUDA context, cuBLAS/attention workspaces, graphs."""
RUNTIME_FRACTION = 0.10
"""Per GPU: allocator fragmentation and reserve (vLLM's default leaves 10 % of the device)."""
_GATED_TYPES = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "deepseek_v2",
    "deepseek_v3",
    "olmo",
    "olmo2",
    "granite",
    "cohere",
    "cohere2",
    "exaone",
    "internlm2",
}
_GATED_ACTS = {"silu", "swiglu", "geglu", "gelu_pytorch_tanh_gated"}


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """The numbers memory depends on, read from a config (see :func:`shape_from_config`)."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    gated_mlp: bool
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    dense_layers: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0
    notes: tuple[str, ...] = ()

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    def attention_params(self) -> int:
        """Attention weights of one layer."""
        h, n = self.hidden, self.heads
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (
                h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * n * qk
                if self.q_lora_rank
                else h * n * qk
            )
            kv = (
                h * (self.kv_lora_rank + self.qk_rope_head_dim)
                + self.kv_lora_rank
                + self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
            )
            return q + kv + n * self.v_head_dim * h
        d = self.head_dim
        return h * n * d + 2 * h * self.kv_heads * d + n * d * h

    def mlp_params(self, width: int) -> int:
        """One MLP of inner ``width``."""
        return (3 if self.gated_mlp else 2) * self.hidden * width

    def params(self) -> dict[str, int]:
        """Parameter counts by part."""
        moe_layers = self.layers - self.dense_layers if self.experts else 0
        dense_layers = self.layers - moe_layers
        mlp = dense_layers * self.mlp_params(self.intermediate)
        if moe_layers:
            per_layer = (
                self.experts * self.mlp_params(self.expert_intermediate)
                + self.mlp_params(self.shared_expert_intermediate)
                + self.hidden * self.experts
            )  # router
            mlp += moe_layers * per_layer
        embed = self.vocab * self.hidden
        return {
            "embeddings": embed,
            "attention": self.layers * self.attention_params(),
            "mlp": mlp,
            "norms": (2 * self.layers + 1) * self.hidden,
            "lm_head": 0 if self.tied_embeddings else embed,
        }

    def kv_values_per_token(self) -> int:
        """Cached values per token over all layers (K and V, or MLA's latent)."""
        if self.mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim)
        return 2 * self.layers * self.kv_heads * self.head_dim

    def kv_values_per_sequence(self, tokens: int) -> int:
        """Cached values for one sequence of ``tokens`` (sliding-window layers capped)."""
        if self.mla or not self.sliding_window or not self.sliding_layers:
            return self.kv_values_per_token() * tokens
        per_layer = 2 * self.kv_heads * self.head_dim
        full = self.layers - self.sliding_layers
        return per_layer * (full * tokens + self.sliding_layers * min(tokens, self.sliding_window))


def _window(value: Any) -> int | None:
    """``sliding_window``: anything but a positive integer means none (configs write null,
    0 or false for it)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


class ModelConfig(BaseModel):
    """The keys of a Hugging Face text-model ``config.json`` that memory depends on (a
    ``text_config`` overrides the top level; other keys are ignored). Optional sizes may be
    null or absent."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    model_type: str = "unknown"
    hidden_size: PositiveCount
    num_hidden_layers: PositiveCount
    num_attention_heads: PositiveCount
    num_key_value_heads: PositiveCount | None = None
    head_dim: Count | None = None
    intermediate_size: PositiveCount
    vocab_size: PositiveCount
    tie_word_embeddings: bool | None = None
    hidden_act: str | None = None
    hidden_activation: str | None = None
    num_local_experts: Count | None = None
    n_routed_experts: Count | None = None
    num_experts: Count | None = None
    num_experts_per_tok: Count | None = None
    n_shared_experts: Count | None = None
    moe_intermediate_size: Count | None = None
    shared_expert_intermediate_size: Count | None = None
    first_k_dense_replace: Count | None = None
    kv_lora_rank: Count | None = None
    q_lora_rank: Count | None = None
    qk_rope_head_dim: Count | None = None
    qk_nope_head_dim: Count | None = None
    v_head_dim: Count | None = None
    sliding_window: Annotated[int | None, BeforeValidator(_window)] = None
    use_sliding_window: bool | None = None
    layer_types: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _text_config(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("text_config"), Mapping):
            return {**data, **data["text_config"]}
        return data

    @model_validator(mode="after")
    def _heads(self) -> Self:
        if self.num_attention_heads % self.kv_heads:
            raise FieldProblem(
                "num_key_value_heads",
                f"num_attention_heads ({self.num_attention_heads}) is not a multiple "
                f"of num_key_value_heads ({self.kv_heads})",
            )
        if not self.head_dim and self.hidden_size < self.num_attention_heads:
            raise FieldProblem(
                "head_dim", "missing, and hidden_size / num_attention_heads is below 1"
            )
        return self

    @property
    def kv_heads(self) -> int:
        """K/V heads (= attention heads without GQA)."""
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def experts(self) -> int:
        """Routed experts per MoE layer (0: dense)."""
        return self.num_local_experts or self.n_routed_experts or self.num_experts or 0


def _sliding(config: ModelConfig, layers: int, model_type: str) -> tuple[int | None, int, str]:
    window = config.sliding_window
    if window is None:
        return None, 0, ""
    types = config.layer_types
    if types is not None and len(types) == layers:
        count = sum(1 for t in types if str(t).startswith("sliding"))
        return window, count, f"{count} of {layers} layers use a {window}-token sliding window"
    if config.use_sliding_window is False:
        return None, 0, "sliding_window present but use_sliding_window is false: ignored"
    if model_type.startswith("gemma2") or model_type.startswith("gemma3"):
        count = layers // 2 if model_type.startswith("gemma2") else layers - layers // 6
        return window, count, f"{count} of {layers} layers assumed sliding ({model_type} pattern)"
    return window, layers, f"every layer uses a {window}-token sliding window"


def shape_from_config(config: Mapping[str, Any], origin: str = "config.json") -> ModelShape:
    """Read a Hugging Face config (text models; a ``text_config`` is used when present)."""
    cfg = validate(ModelConfig, config, f"config {origin}")
    model_type = cfg.model_type
    hidden, layers, heads = cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads
    notes = []
    act = (cfg.hidden_act or cfg.hidden_activation or "").lower()
    gated = model_type in _GATED_TYPES or act in _GATED_ACTS
    notes.append(
        f"MLP {'gated (3 matrices)' if gated else 'not gated (2 matrices)'} "
        f"for model_type {model_type!r}"
    )
    if cfg.tie_word_embeddings is None:
        notes.append("tie_word_embeddings absent: tied (the transformers default)")
    experts = cfg.experts
    intermediate = cfg.intermediate_size
    shared = 0
    if cfg.n_shared_experts:
        shared = cfg.n_shared_experts * (cfg.moe_intermediate_size or intermediate)
    elif cfg.shared_expert_intermediate_size:
        shared = cfg.shared_expert_intermediate_size
    window, sliding_layers, window_note = _sliding(cfg, layers, model_type)
    if window_note:
        notes.append(window_note)
    kv_lora = cfg.kv_lora_rank or 0
    if kv_lora:
        notes.append(
            "MLA: the KV cache holds one latent (kv_lora_rank + qk_rope_head_dim) per "
            "layer and token"
        )
    if experts:
        notes.append(f"MoE: {experts} experts per MoE layer, all resident in memory")
    return ModelShape(
        model_type=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=cfg.kv_heads,
        head_dim=cfg.head_dim or hidden // heads,
        intermediate=intermediate,
        vocab=cfg.vocab_size,
        tied_embeddings=cfg.tie_word_embeddings is not False,
        gated_mlp=gated,
        experts=experts,
        experts_per_token=cfg.num_experts_per_tok or 0,
        expert_intermediate=cfg.moe_intermediate_size or intermediate,
        shared_expert_intermediate=shared,
        dense_layers=(cfg.first_k_dense_replace or 0) if experts else 0,
        kv_lora_rank=kv_lora,
        q_lora_rank=cfg.q_lora_rank or 0,
        qk_rope_head_dim=cfg.qk_rope_head_dim or 0,
        qk_nope_head_dim=cfg.qk_nope_head_dim or 0,
        v_head_dim=cfg.v_head_dim or 0,
        sliding_window=window,
        sliding_layers=sliding_layers,
        notes=tuple(notes),
    )


def load_model_config(path: Path) -> dict[str, Any]:
    """Read a model's local Hugging Face ``config.json`` as a JSON object (never downloads);
    :func:`shape_from_config` validates the keys memory depends on."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError(
            f"config {path}: no such file (a local config.json is needed)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"config {path}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"config {path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInputError(f"config {path}: not a JSON object")
    return data


@dataclass(frozen=True, kw_only=True)
class GpuFit:
    """One GPU instance: does it hold the model at this context and batch, and how many
    sequences of that context fit at most."""

    instance: str
    accelerator: str
    gpus: int
    device_memory_bytes: int
    gpus_needed: int | None
    max_sequences: int
    price_usd_per_hour: float


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Bytes by part for serving ``batch`` sequences of ``context`` tokens."""

    config: str
    precision: str
    kv_precision: str
    context_tokens: int
    batch: int
    params: dict[str, int]
    weights_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_sequence: float
    kv_bytes: float
    activation_bytes: float
    overhead_bytes: float
    total_bytes: float
    mode: Literal["memory"] = "memory"
    """Which ``plan`` document this is (stored: :func:`accelscope.serialise.dump`)."""
    fits: tuple[GpuFit, ...]
    assumptions: tuple[str, ...]


def _activations(shape: ModelShape, batch: int, context: int, act_bytes: float) -> float:
    """One layer's live intermediates for a prefill chunk, plus the last-token logits."""
    tokens = min(PREFILL_CHUNK_TOKENS, batch * context)
    width = shape.expert_intermediate if shape.experts else shape.intermediate
    per_token = 4 * shape.hidden + (3 if shape.gated_mlp else 2) * width
    return tokens * per_token * act_bytes + batch * shape.vocab * 4.0


def _fit(usable_per_gpu: float, gpus: int, need_shared: float, need_per_gpu: float) -> int | None:
    n = 1
    while n <= gpus:
        if need_shared / n + need_per_gpu <= usable_per_gpu:
            return n
        n *= 2
    return None


def estimate_memory(
    shape: ModelShape,
    *,
    context: int,
    batch: int,
    precision: str,
    catalog: Catalog,
    kv_precision: str | None = None,
    origin: str = "config.json",
) -> MemoryEstimate:
    """Memory to serve ``batch`` sequences of ``context`` tokens at ``precision``."""
    if precision not in BYTES_PER_PARAM:
        raise BadInputError(
            f"precision {precision!r} unknown; choose one of {', '.join(BYTES_PER_PARAM)}"
        )
    kv_precision = kv_precision or (precision if precision != "int4" else "bf16")
    if kv_precision not in BYTES_PER_PARAM or kv_precision == "int4":
        raise BadInputError(
            f"KV cache precision {kv_precision!r} unknown; choose fp32, bf16, fp16, fp8 or int8"
        )
    params = shape.params()
    weights = math.fsum(params.values()) * BYTES_PER_PARAM[precision]
    kv_bytes = BYTES_PER_PARAM[kv_precision]
    per_token = shape.kv_values_per_token() * kv_bytes
    per_sequence = shape.kv_values_per_sequence(context) * kv_bytes
    act_bytes = 2.0 if precision in ("bf16", "fp16", "fp8", "int8", "int4") else 4.0
    activations = _activations(shape, batch, context, act_bytes)
    kv = per_sequence * batch
    fixed, fraction = float(RUNTIME_FIXED_BYTES), RUNTIME_FRACTION
    working = weights + kv + activations
    overhead = fixed + fraction * working
    fits = []
    for gpu in catalog.gpus():
        usable = gpu.device_memory_bytes * (1 - fraction) - fixed
        needed = _fit(usable, gpu.accelerator_count, weights + kv, activations)
        room = gpu.accelerator_count * usable - weights - activations * gpu.accelerator_count
        fits.append(
            GpuFit(
                instance=gpu.type,
                accelerator=gpu.accelerator,
                gpus=gpu.accelerator_count,
                device_memory_bytes=gpu.device_memory_bytes,
                gpus_needed=needed,
                max_sequences=max(0, math.floor(room / per_sequence)) if per_sequence else 0,
                price_usd_per_hour=gpu.price_usd_per_hour,
            )
        )
    assumptions = (
        *shape.notes,
        f"weights at {precision} ({BYTES_PER_PARAM[precision]:g} B/param), KV cache at "
        f"{kv_precision}; biases ignored",
        f"activations: one layer's intermediates for a {PREFILL_CHUNK_TOKENS}-token prefill "
        "chunk (flash attention: no context x context scores) + fp32 logits of the last token",
        f"runtime overhead: {RUNTIME_FIXED_BYTES >> 20} MiB per GPU + {RUNTIME_FRACTION:.0%} "
        "(allocator, reserve)",
        "multi-GPU: weights and KV cache split evenly by tensor parallelism over 1, 2, 4, 8 GPUs",
    )
    return MemoryEstimate(
        config=origin,
        precision=precision,
        kv_precision=kv_precision,
        context_tokens=context,
        batch=batch,
        params=params,
        weights_bytes=weights,
        kv_bytes_per_token=per_token,
        kv_bytes_per_sequence=per_sequence,
        kv_bytes=kv,
        activation_bytes=activations,
        overhead_bytes=overhead,
        total_bytes=working + overhead,
        fits=tuple(fits),
        assumptions=assumptions,
    )
