"""Training memory per device: weights, gradients, master weights, optimizer states,
activations and a stated framework overhead, for one dense Llama-style decoder (RMSNorm,
rotary attention with grouped K/V heads, SwiGLU MLP) under a precision recipe, an optimizer,
activation checkpointing, ZeRO/FSDP sharding over ``dp`` devices and tensor parallelism over
``tp`` devices.

The activation term is not a remembered formula: it counts the tensors autograd saves in a
transformers ``LlamaDecoderLayer`` (verified with ``torch.autograd.graph.saved_tensors_hooks``
on real forwards, ``tests/plan/test_train_memory.py``), per token of a micro-batch, in bytes,
with ``H`` hidden, ``n`` heads, ``k`` K/V heads, ``d`` head dim, ``I`` MLP width, ``S`` the
sequence, ``b`` the compute element size, ``r`` the residual stream's (the parameters'
dtype), ``l`` what a linear layer saves of its input (``b``; fp8: 1):

- each RMSNorm: its input upcast to fp32 ``4H`` + ``rsqrt`` ``4`` + the normalised value in
  the input dtype ``rH``; its output as saved by the linears that read it: ``lH`` once when
  ``l == r``, else one cast per reader (3 for Q/K/V, 2 for gate/up);
- attention, ``sdpa`` (a fused kernel: no S x S matrix): Q, K, V after rotary and the output
  ``b(2nd + 2kd)`` + the fp32 log-sum-exp ``4n``; ``eager``: Q and the K, V repeated to ``n``
  heads ``3bnd``, the softmax probabilities ``nS(4 + b)`` (``4nS`` in fp32: the fp32 softmax
  and its cast are one tensor) and the output transposed for ``o_proj`` ``lnd``;
- SwiGLU: gate and up outputs, ``silu(gate)`` ``3bI`` + the product ``down_proj`` reads ``lI``;
- the model once: the final norm ``4H + 4 + rH``, ``lm_head``'s input ``lH``, the logits the
  output holds ``bV`` and the fp32 log-softmax the loss saves ``4V``, token ids and labels
  ``16``; rotary ``cos``/``sin`` ``2Sd r`` per sequence; the loss's fp32 weight total ``4``.

With checkpointing only each layer's input ``rH`` per token is kept, plus one layer's
activations while it is recomputed (and, under autocast, one layer's weight casts). The
step's peak is the largest of three phases: the start of the backward pass (all activations
+ the loss's two fp32 ``T x V`` gradients), its end (the logits the output still holds +
every gradient, or the first layer's activations + every gradient but the embedding's) and
the optimizer step (all gradients + the optimizer's temporaries). Weights, master weights
and optimizer states are held through all three; a mixed recipe's bf16 weight casts only
through the forward and backward. The CPU check (``benchmarks/train_memory_check.py``,
docs/BENCHMARKS.md) measures that peak with the profiler's allocator accounting.

Sharding: ZeRO-1 shards optimizer states (and a mixed recipe's fp32 master), ZeRO-2 also
gradients, ZeRO-3 (FSDP full shard) also weights, two layers gathered at a time. bf16_mixed
follows PyTorch autocast under DDP (fp32 parameters, bf16 casts of the linear weights during
forward and backward: measured) and DeepSpeed under ZeRO-1/2 (a replicated bf16 model beside the
sharded fp32 master: stated, not measured).

The forward is assumed called with ``use_cache=False``. transformers' default returns a KV
cache even in training; it costs nothing where the cached K and V are the tensors autograd
saves (fp32 and bf16_pure with ``sdpa``) but, measured under bf16 autocast, adds K and V in
fp32 (``8kd`` bytes per token and layer) that this model does not count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

from accelscope.plan.llm_memory import RUNTIME_FIXED_BYTES, ModelShape

__all__ = [
    "ADAM8BIT_BLOCK",
    "FRAMEWORK_FRACTION",
    "RECIPES",
    "Attention",
    "Optimizer",
    "Phase",
    "Precision",
    "PrecisionRecipe",
    "Sharding",
    "TrainMemory",
    "TrainSetup",
    "activation_bytes",
    "estimate_train_memory",
    "layer_activation_bytes",
    "max_micro_batch",
    "model_activation_bytes",
    "optimizer_state_bytes_per_param",
]

Optimizer = Literal["sgd", "sgd_momentum", "adamw", "adafactor", "adam8bit"]
Precision = Literal["fp32", "bf16_mixed", "bf16_pure", "fp8_mixed"]
Sharding = Literal["ddp", "zero1", "zero2", "zero3"]
Attention = Literal["sdpa", "eager"]
Phase = Literal["backward", "late_backward", "optimizer"]

ADAM8BIT_BLOCK = 2048
"""bitsandbytes' blockwise 8-bit Adam: one fp32 absmax per block of this many values and
state (``exp_avg`` and ``exp_avg_sq``)."""
FRAMEWORK_FRACTION = 0.10
"""Default allocator fragmentation and reserve on a GPU, as a fraction of the working bytes
(the caching allocator's unused blocks; the same reserve ``llm_memory`` states)."""


@dataclass(frozen=True, kw_only=True)
class PrecisionRecipe:
    """Bytes of one value in each role under a training precision recipe."""

    name: Precision
    weight: float
    """The copy the forward computes with (for mixed recipes, the low-precision cast)."""
    master: float
    """A separate fp32 master copy (0: the compute copy is the master)."""
    gradient: float
    state: float
    """One optimizer state value (Adam's ``exp_avg``, SGD's momentum)."""
    compute: float
    """Activations the layers compute (``b``)."""
    residual: float
    """The residual stream and the norms' output dtype (the parameters' dtype, ``r``)."""
    linear_input: float
    """What a linear layer saves of its input for backward (``l``: fp8 recipes save fp8)."""
    needs_fp8: bool = False

    def __post_init__(self) -> None:
        for name in ("weight", "gradient", "state", "compute", "residual", "linear_input"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"precision {self.name}: {name} bytes must be > 0, got {value}")
        if not (math.isfinite(self.master) and self.master >= 0):
            raise ValueError(f"precision {self.name}: master bytes must be >= 0")


RECIPES: Mapping[str, PrecisionRecipe] = MappingProxyType(
    {
        "fp32": PrecisionRecipe(
            name="fp32",
            weight=4.0,
            master=0.0,
            gradient=4.0,
            state=4.0,
            compute=4.0,
            residual=4.0,
            linear_input=4.0,
        ),
        # autocast over fp32 parameters: bf16 casts of the linear weights live from forward to
        # backward, gradients land on the fp32 parameters, states fp32.
        "bf16_mixed": PrecisionRecipe(
            name="bf16_mixed",
            weight=2.0,
            master=4.0,
            gradient=4.0,
            state=4.0,
            compute=2.0,
            residual=4.0,
            linear_input=2.0,
        ),
        "bf16_pure": PrecisionRecipe(
            name="bf16_pure",
            weight=2.0,
            master=0.0,
            gradient=2.0,
            state=2.0,
            compute=2.0,
            residual=2.0,
            linear_input=2.0,
        ),
        # Transformer-Engine style: fp32 master, an fp8 weight and its transpose cached for
        # backward, linear inputs saved in fp8, the rest bf16. Estimated, not checked here.
        "fp8_mixed": PrecisionRecipe(
            name="fp8_mixed",
            weight=2.0,
            master=4.0,
            gradient=4.0,
            state=4.0,
            compute=2.0,
            residual=4.0,
            linear_input=1.0,
            needs_fp8=True,
        ),
    }
)
"""The precision recipes by name."""


def _check_shape(shape: ModelShape, tp: int) -> None:
    if shape.mla or shape.experts or not shape.gated_mlp:
        raise ValueError(
            f"training memory models dense Llama-style decoders (gated MLP, no MLA, no MoE); "
            f"model_type {shape.model_type!r} is not one"
        )
    for name in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
        if getattr(shape, name) < 1:
            raise ValueError(f"model shape: {name} must be >= 1")
    if shape.heads % shape.kv_heads:
        raise ValueError(f"heads ({shape.heads}) not a multiple of kv_heads ({shape.kv_heads})")
    for name, value in (
        ("heads", shape.heads),
        ("kv_heads", shape.kv_heads),
        ("intermediate", shape.intermediate),
    ):
        if value % tp:
            raise ValueError(f"tensor parallel degree {tp} does not divide {name} ({value})")


def _positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def layer_activation_bytes(
    shape: ModelShape,
    *,
    batch: int,
    seq_len: int,
    precision: Precision,
    attention: Attention = "sdpa",
    tp: int = 1,
) -> float:
    """Bytes autograd saves in one decoder layer for ``batch`` sequences of ``seq_len`` (the
    module docstring's formula); heads and MLP width split over ``tp``, norms replicated."""
    _positive_int("batch", batch)
    _positive_int("seq_len", seq_len)
    _positive_int("tp", tp)
    _check_shape(shape, tp)
    rec = RECIPES[precision]
    b, r, li = rec.compute, rec.residual, rec.linear_input
    h, d, width = shape.hidden, shape.head_dim, shape.intermediate // tp
    n, k = shape.heads // tp, shape.kv_heads // tp
    shared = li == r
    norm = 4 * h + 4 + r * h
    attn_in = norm + (li * h if shared else 3 * li * h)
    mlp_in = norm + (li * h if shared else 2 * li * h)
    if attention == "sdpa":
        attn = b * (2 * n * d + 2 * k * d) + 4 * n + (0 if li == b else li * n * d)
    elif attention == "eager":
        probs = n * seq_len * (4 if b == 4 else 4 + b)
        attn = 3 * b * n * d + probs + li * n * d
    else:
        raise ValueError(f"attention {attention!r} unknown; choose one of {get_args(Attention)}")
    mlp = 3 * b * width + li * width
    return float(batch * seq_len * (attn_in + attn + mlp_in + mlp))


def model_activation_bytes(
    shape: ModelShape, *, batch: int, seq_len: int, precision: Precision, tp: int = 1
) -> float:
    """What the model saves or holds once, outside its layers: final norm, ``lm_head``'s input,
    the logits (vocab-parallel over ``tp``), the fp32 log-softmax, ids and labels, rotary
    tables, the loss's scalar weight total."""
    _positive_int("batch", batch)
    _positive_int("seq_len", seq_len)
    rec = RECIPES[precision]
    b, r, li = rec.compute, rec.residual, rec.linear_input
    h, v = shape.hidden, shape.vocab / tp
    per_token = 4 * h + 4 + r * h + li * h + (b + 4) * v + 16
    return float(batch * seq_len * per_token + 2 * seq_len * shape.head_dim * r + 4)


def activation_bytes(
    shape: ModelShape,
    *,
    batch: int,
    seq_len: int,
    precision: Precision,
    checkpointing: bool,
    attention: Attention = "sdpa",
    tp: int = 1,
) -> float:
    """All activations live at the start of the backward pass (checkpointing: each layer's
    input; its recomputation comes later, when the loss's tensors are gone)."""
    layer = layer_activation_bytes(
        shape, batch=batch, seq_len=seq_len, precision=precision, attention=attention, tp=tp
    )
    head = model_activation_bytes(shape, batch=batch, seq_len=seq_len, precision=precision, tp=tp)
    if checkpointing:
        kept = shape.layers * batch * seq_len * shape.hidden * RECIPES[precision].residual
        return kept + head
    return shape.layers * layer + head


def _matrices(shape: ModelShape) -> list[tuple[int, int]]:
    """Every weight as (rows, cols); vectors as (n, 1)."""
    h, d = shape.hidden, shape.head_dim
    layer = [
        (shape.heads * d, h),
        (shape.kv_heads * d, h),
        (shape.kv_heads * d, h),
        (h, shape.heads * d),
        (shape.intermediate, h),
        (shape.intermediate, h),
        (h, shape.intermediate),
        (h, 1),
        (h, 1),
    ]
    out = layer * shape.layers + [(shape.vocab, h), (h, 1)]
    if not shape.tied_embeddings:
        out.append((shape.vocab, h))
    return out


def optimizer_state_bytes_per_param(
    optimizer: Optimizer, shape: ModelShape, state_bytes: float
) -> float:
    """Optimizer state per parameter, averaged over the model: AdamW two values, SGD with
    momentum one, SGD none, 8-bit Adam two bytes plus an fp32 absmax per block and state,
    Adafactor (no first moment) factored row and column second moments of each matrix and a
    full one of each vector."""
    params = sum(r * c for r, c in _matrices(shape))
    if optimizer == "sgd":
        return 0.0
    if optimizer == "sgd_momentum":
        return state_bytes
    if optimizer == "adamw":
        return 2 * state_bytes
    if optimizer == "adam8bit":
        return 2.0 + 2 * 4.0 / ADAM8BIT_BLOCK
    if optimizer == "adafactor":
        values = sum(r + c if c > 1 else r for r, c in _matrices(shape))
        return 4.0 * values / params
    raise ValueError(f"optimizer {optimizer!r} unknown; choose one of {get_args(Optimizer)}")


def _workspace_per_param(optimizer: Optimizer, state_bytes: float) -> float:
    """Temporaries of the foreach (multi-tensor) optimizer step over all of a device's
    parameters: AdamW's ``sqrt(exp_avg_sq)``; SGD's updates are in place."""
    return state_bytes if optimizer == "adamw" else 0.0


@dataclass(frozen=True, kw_only=True)
class TrainSetup:
    """One training configuration on one device type."""

    shape: ModelShape
    optimizer: Optimizer
    precision: Precision
    micro_batch: int
    seq_len: int
    checkpointing: bool
    sharding: Sharding = "ddp"
    dp: int = 1
    tp: int = 1
    attention: Attention = "sdpa"
    fp8_supported: bool = False
    """Whether the accelerator multiplies in fp8 (``fp8_mixed`` needs it)."""
    overhead_fixed_bytes: float = float(RUNTIME_FIXED_BYTES)
    """Per device: CUDA context, cuBLAS/attention workspaces (0 for a CPU tensor count)."""
    overhead_fraction: float = FRAMEWORK_FRACTION

    def __post_init__(self) -> None:
        _positive_int("micro_batch", self.micro_batch)
        _positive_int("seq_len", self.seq_len)
        _positive_int("dp", self.dp)
        _positive_int("tp", self.tp)
        if self.optimizer not in get_args(Optimizer):
            raise ValueError(
                f"optimizer {self.optimizer!r} unknown; choose one of {get_args(Optimizer)}"
            )
        if self.precision not in RECIPES:
            raise ValueError(
                f"precision {self.precision!r} unknown; choose one of {tuple(RECIPES)}"
            )
        if self.sharding not in get_args(Sharding):
            raise ValueError(
                f"sharding {self.sharding!r} unknown; choose one of {get_args(Sharding)}"
            )
        if self.attention not in get_args(Attention):
            raise ValueError(
                f"attention {self.attention!r} unknown; choose one of {get_args(Attention)}"
            )
        if self.sharding != "ddp" and self.dp < 2:
            raise ValueError(f"{self.sharding} shards over dp >= 2 devices, got dp={self.dp}")
        if RECIPES[self.precision].needs_fp8 and not self.fp8_supported:
            raise ValueError(f"{self.precision} needs an accelerator with fp8 matrix units")
        if not (math.isfinite(self.overhead_fixed_bytes) and self.overhead_fixed_bytes >= 0):
            raise ValueError("overhead_fixed_bytes must be finite and >= 0")
        if not (math.isfinite(self.overhead_fraction) and 0 <= self.overhead_fraction < 1):
            raise ValueError("overhead_fraction must be in [0, 1)")
        _check_shape(self.shape, self.tp)

    def with_micro_batch(self, micro_batch: int) -> TrainSetup:
        """The same setup at another micro-batch."""
        return TrainSetup(
            shape=self.shape,
            optimizer=self.optimizer,
            precision=self.precision,
            micro_batch=micro_batch,
            seq_len=self.seq_len,
            checkpointing=self.checkpointing,
            sharding=self.sharding,
            dp=self.dp,
            tp=self.tp,
            attention=self.attention,
            fp8_supported=self.fp8_supported,
            overhead_fixed_bytes=self.overhead_fixed_bytes,
            overhead_fraction=self.overhead_fraction,
        )


_TERMS = (
    "weights_bytes",
    "weight_copies_bytes",
    "master_bytes",
    "gradient_bytes",
    "optimizer_state_bytes",
    "activation_bytes",
    "backward_transient_bytes",
    "late_activation_bytes",
    "optimizer_workspace_bytes",
    "overhead_bytes",
)


@dataclass(frozen=True, kw_only=True)
class TrainMemory:
    """Bytes per device for one training step of a :class:`TrainSetup` (estimated).

    ``total_bytes`` = the bytes held throughout (weights, master weights, optimizer states)
    + the largest of three phases + overhead: the start of the backward pass (activations +
    the loss's gradients), its end (every gradient + ``late_activation_bytes``: the logits the
    output still holds and what the first layer's backward holds beyond the embedding's
    gradient) and the optimizer step (gradients + the optimizer's temporaries).
    ``weight_copies_bytes`` count in the two backward phases, not in the held bytes."""

    setup: TrainSetup
    params: int
    params_per_device: float
    weights_bytes: float
    """Compute weights held through the step."""
    weight_copies_bytes: float
    """Weights that live from the forward to the end of the backward only: autocast's bf16
    casts (DDP, mixed recipes), the layers ZeRO-3 gathers."""
    master_bytes: float
    gradient_bytes: float
    optimizer_state_bytes: float
    activation_bytes: float
    backward_transient_bytes: float
    late_activation_bytes: float
    optimizer_workspace_bytes: float
    overhead_bytes: float
    peak_phase: Phase
    total_bytes: float
    assumptions: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in _TERMS:
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if self.params < 1 or not (0 < self.params_per_device <= self.params):
            raise ValueError("params_per_device must be in (0, params]")
        phases = self.phases
        if phases[self.peak_phase] != max(phases.values()):
            raise ValueError(f"peak_phase {self.peak_phase!r} is not the largest phase")
        expected = self.held_bytes + max(phases.values()) + self.overhead_bytes
        if not math.isclose(self.total_bytes, expected, rel_tol=1e-9, abs_tol=1.0):
            raise ValueError(f"total_bytes {self.total_bytes} != its parts {expected}")

    @property
    def held_bytes(self) -> float:
        """Held through the whole step: weights, master weights, optimizer states."""
        return self.weights_bytes + self.master_bytes + self.optimizer_state_bytes

    @property
    def backward_phase_bytes(self) -> float:
        """Above the held bytes when the backward pass starts."""
        return self.weight_copies_bytes + self.activation_bytes + self.backward_transient_bytes

    @property
    def late_backward_phase_bytes(self) -> float:
        """Above the held bytes at the end of the backward pass."""
        return self.weight_copies_bytes + self.late_activation_bytes + self.gradient_bytes

    @property
    def optimizer_phase_bytes(self) -> float:
        """Above the held bytes during the optimizer step."""
        return self.gradient_bytes + self.optimizer_workspace_bytes

    @property
    def phases(self) -> dict[Phase, float]:
        """Bytes above the held bytes in each phase of the step."""
        return {
            "backward": self.backward_phase_bytes,
            "late_backward": self.late_backward_phase_bytes,
            "optimizer": self.optimizer_phase_bytes,
        }

    def fits(self, memory_bytes: float) -> bool:
        """Whether the step fits a device of ``memory_bytes``."""
        if not (math.isfinite(memory_bytes) and memory_bytes > 0):
            raise ValueError(f"memory_bytes must be finite and > 0, got {memory_bytes}")
        return self.total_bytes <= memory_bytes


def _sharded_params(shape: ModelShape, tp: int) -> float:
    """Parameters one tensor-parallel rank holds (norms replicated)."""
    parts = shape.params()
    norms = parts["norms"]
    return (sum(parts.values()) - norms) / tp + norms


def estimate_train_memory(setup: TrainSetup) -> TrainMemory:
    """Bytes per device for one training step of ``setup``."""
    shape, rec, dp, tp = setup.shape, RECIPES[setup.precision], setup.dp, setup.tp
    params = sum(shape.params().values())
    local = _sharded_params(shape, tp)
    stage = ("ddp", "zero1", "zero2", "zero3").index(setup.sharding)
    states_split = dp if stage >= 1 else 1
    grads_split = dp if stage >= 2 else 1
    weights_split = dp if stage >= 3 else 1
    per_layer = (shape.attention_params() + shape.mlp_params(shape.intermediate)) / tp
    # ``weights``: compute weights held through the step; ``copies``: weights that live from
    # the forward to the end of the backward only (autocast's casts, FSDP's gathered layers)
    gathered = min(local, 2 * per_layer)  # ZeRO-3 gathers a layer and prefetches the next
    if rec.master:
        master = local / states_split * rec.master
        if stage in (1, 2):
            # DeepSpeed ZeRO-1/2: the low-precision model is replicated, its fp32 master
            # sharded with the optimizer states
            weights, copies = local * rec.weight, 0.0
        elif stage == 3:
            weights, copies = 0.0, gathered * rec.weight
        else:
            # DDP under autocast: the fp32 parameters are the master; autocast casts the
            # linear weights (not the embedding, not the norms) in the forward
            cast = local - shape.params()["norms"]
            cast -= 0 if shape.tied_embeddings else shape.vocab * shape.hidden / tp
            if setup.checkpointing:
                # a checkpointed layer's casts are freed after its forward and made again in
                # its recomputation: one layer's at a time, beside lm_head's
                cast -= (shape.layers - 1) * per_layer
            weights, copies = 0.0, cast * rec.weight
    else:
        master = 0.0
        weights = local / weights_split * rec.weight
        copies = gathered * rec.weight if stage == 3 else 0.0
    state_per_param = optimizer_state_bytes_per_param(setup.optimizer, shape, rec.state)
    states = local / states_split * state_per_param
    grads = local / grads_split * rec.gradient
    # the optimizer steps only its own shard of the states
    workspace = local / states_split * _workspace_per_param(setup.optimizer, rec.state)
    acts = activation_bytes(
        shape,
        batch=setup.micro_batch,
        seq_len=setup.seq_len,
        precision=setup.precision,
        checkpointing=setup.checkpointing,
        attention=setup.attention,
        tp=tp,
    )
    tokens = setup.micro_batch * setup.seq_len
    transient = 2 * 4.0 * tokens * shape.vocab / tp
    layer = layer_activation_bytes(
        shape,
        batch=setup.micro_batch,
        seq_len=setup.seq_len,
        precision=setup.precision,
        attention=setup.attention,
        tp=tp,
    )
    # the end of the backward pass, with the logits the output still holds: the first
    # layer's backward (its activations, recomputed under checkpointing, and every gradient
    # but the embedding's), then the embedding's gradient (every gradient)
    logits = tokens * shape.vocab / tp * rec.compute
    first = layer + (tokens * shape.hidden * rec.residual if setup.checkpointing else 0.0)
    embed_grads = shape.vocab * shape.hidden / tp / grads_split * rec.gradient
    late = logits + max(first - embed_grads, 0.0)
    held = weights + master + states
    phases: dict[Phase, float] = {
        "backward": copies + acts + transient,
        "late_backward": copies + late + grads,
        "optimizer": grads + workspace,
    }
    peak_phase = max(phases, key=lambda name: phases[name])
    working = held + phases[peak_phase]
    overhead = setup.overhead_fixed_bytes + setup.overhead_fraction * working
    assumptions = (
        f"precision {rec.name}: compute weights {rec.weight:g} B, master {rec.master:g} B, "
        f"gradients {rec.gradient:g} B, optimizer state values {rec.state:g} B per parameter",
        f"activations counted as autograd saves them in a Llama decoder layer "
        f"({setup.attention} attention"
        + (", checkpointed: layer inputs + one layer recomputed" if setup.checkpointing else "")
        + "); the loss keeps fp32 log-probabilities and two fp32 token x vocab gradients; "
        "the output keeps the logits through the backward pass",
        f"{setup.sharding} over dp={dp}: optimizer states"
        + (" and master weights" if rec.master else "")
        + (" sharded" if stage >= 1 else " replicated")
        + ("; gradients sharded" if stage >= 2 else "")
        + ("; weights sharded, two layers gathered at a time" if stage >= 3 else "")
        + (
            "; bf16 model replicated (DeepSpeed)"
            if rec.master and stage in (1, 2)
            else "; autocast casts the linear weights"
            if rec.master and stage == 0
            else ""
        ),
        f"tensor parallel over tp={tp}: matrices, heads, MLP width and vocab split; norms "
        "replicated; no sequence parallelism",
        "forward with use_cache=False (transformers' default KV cache adds K and V per layer "
        "under mixed precision)",
        "optimizer step as torch's foreach implementation (AdamW: one sqrt(exp_avg_sq) "
        "temporary per parameter); DDP with gradient_as_bucket_view (else one more copy of "
        "the gradients)",
        f"framework overhead {setup.overhead_fixed_bytes / 2**20:g} MiB + "
        f"{setup.overhead_fraction:.0%} of the working bytes",
    )
    return TrainMemory(
        setup=setup,
        params=params,
        params_per_device=local / weights_split,
        weights_bytes=weights,
        weight_copies_bytes=copies,
        master_bytes=master,
        gradient_bytes=grads,
        optimizer_state_bytes=states,
        activation_bytes=acts,
        backward_transient_bytes=transient,
        late_activation_bytes=late,
        optimizer_workspace_bytes=workspace,
        overhead_bytes=overhead,
        peak_phase=peak_phase,
        total_bytes=working + overhead,
        assumptions=assumptions,
    )


def max_micro_batch(setup: TrainSetup, memory_bytes: float, limit: int = 1 << 20) -> int:
    """The largest micro-batch (at ``setup``'s sequence length) whose step fits
    ``memory_bytes``; 0 when not even one sequence fits. Memory grows with the batch, so a
    doubling then a bisection finds it."""
    if not (math.isfinite(memory_bytes) and memory_bytes > 0):
        raise ValueError(f"memory_bytes must be finite and > 0, got {memory_bytes}")
    _positive_int("limit", limit)

    def fits(batch: int) -> bool:
        return estimate_train_memory(setup.with_micro_batch(batch)).fits(memory_bytes)

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low
