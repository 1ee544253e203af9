"""FLOP formulas for aten operators: one documented convention for every op a model runs.

Conventions (what "1 FLOP" means here, so counts are comparable across ops and models):

- matrix products and convolutions: 2 FLOPs per multiply-accumulate (``2·M·N·K``); a fused bias
  add is 1 FLOP per output element; grouped and depthwise convolutions count only the channels
  each group sees (``C_in / groups``);
- scaled-dot-product attention: its two matrix products (``2·L·S·E`` and ``2·L·S·E_v`` per
  head), plus 1 FLOP per score for the scaling, 1 for an attention mask or causal masking, and
  5 for the softmax — exactly what the explicit ``matmul → scale → softmax → matmul`` form counts;
  causal attention is counted dense (kernels that skip the masked half beat the count);
- softmax / log-softmax: 5 FLOPs per element (max, subtract, exp, sum, divide);
- layer / group / instance norm: 5 FLOPs per element (mean, subtract, square, variance sum,
  scale by 1/sigma) plus 1 each for the affine weight and bias; RMS norm 3 (+1 weight);
  batch norm in inference 2 per element (subtract mean, scale) plus the affine 1 + 1, and 3 more
  when it computes batch statistics; per-row terms (the ``rsqrt``) are ignored;
- elementwise ops, activations included (relu, gelu, tanh, exp, …): 1 FLOP per output element,
  whatever the transcendental costs in instructions; fused ``addcmul``/``addcdiv`` 2;
- reductions (sum, mean, max, argmax, …): 1 FLOP per input element; var/std 3; norms 2;
- pooling: max/avg pooling 1 FLOP per output element per window element; adaptive pooling 1
  per input element;
- data movement (copy, cast, cat, index, embedding lookup, pad, fill …) and views: 0 FLOPs by
  definition — their cost is bytes, not arithmetic.

Ops with no rule here are **not** counted as 0: :func:`flops_of` returns ``None`` for them and
the roofline lists them by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from accelscope import aten

__all__ = ["Category", "categorize", "flops_of"]

Category = str
"""One of ``matmul``, ``conv``, ``attention``, ``norm``, ``softmax``, ``elementwise``,
``reduction``, ``pooling``, ``movement``, ``view``, ``uncounted``."""

Bound = Mapping[str, Any]
FlopRule = Callable[[Bound, Any], float]


def _numel(shape: Any) -> int:
    return math.prod(int(d) for d in shape)


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in value.shape)


def _first_tensor(value: Any) -> Any:
    if isinstance(value, list | tuple):
        for item in value:
            if hasattr(item, "shape"):
                return item
        return None
    return value if hasattr(value, "shape") else None


def _out_numel(out: Any) -> int:
    tensor = _first_tensor(out)
    return 0 if tensor is None else tensor.numel()


def _present(bound: Bound, name: str) -> bool:
    return hasattr(bound.get(name), "shape")


def _matmul(bound: Bound, out: Any) -> float:
    a = bound.get("self", bound.get("input"))
    k = _shape(a)[-1] if a is not None and a.dim() >= 1 else 1
    return 2.0 * _out_numel(out) * k


def _mm_like(bias: bool) -> FlopRule:
    def rule(bound: Bound, out: Any) -> float:
        a = bound["mat1"] if "mat1" in bound else bound.get("batch1", bound.get("self"))
        k = _shape(a)[-1]
        n = _out_numel(out)
        return 2.0 * n * k + (n if bias else 0)

    return rule


def _mv(bound: Bound, out: Any) -> float:
    mat = bound.get("mat", bound.get("self"))
    bias = _out_numel(out) if "mat" in bound else 0  # addmv(self, mat, vec) adds a bias
    return float(2.0 * mat.numel() + bias)


def _linear(bound: Bound, out: Any) -> float:
    n = _out_numel(out)
    k = _shape(bound["weight"])[-1]
    return 2.0 * n * k + (n if _present(bound, "bias") else 0)


def _conv(bound: Bound, out: Any, transposed: bool | None = None) -> float:
    x, w = bound["input"], bound["weight"]
    is_transposed = bool(bound.get("transposed", False)) if transposed is None else transposed
    per_element = _shape(w)[1] * _numel(_shape(w)[2:])
    # transposed conv: every *input* element is scattered to C_out/groups x kernel outputs
    macs = (x.numel() if is_transposed else _out_numel(out)) * per_element
    return 2.0 * macs + (_out_numel(out) if _present(bound, "bias") else 0)


def _conv_transposed(bound: Bound, out: Any) -> float:
    return _conv(bound, out, transposed=True)


_MASK_NAMES = ("attn_mask", "attn_bias")


def _attention(bound: Bound, out: Any) -> float:
    q, k, v = bound["query"], bound["key"], bound["value"]
    length, embed = _shape(q)[-2], _shape(q)[-1]
    source, value_embed = _shape(k)[-2], _shape(v)[-1]
    first = _first_tensor(out)
    heads = _numel(_shape(first)[:-2]) if first is not None else _numel(_shape(q)[:-2])
    scores = heads * length * source
    masked = any(_present(bound, name) for name in _MASK_NAMES) or bool(
        bound.get("is_causal", False)
    )
    return 2.0 * scores * embed + 2.0 * scores * value_embed + scores * (1 + 5 + int(masked))


def _per_input(factor: float) -> FlopRule:
    def rule(bound: Bound, out: Any) -> float:
        x = bound.get("self", bound.get("input"))
        return factor * (x.numel() if x is not None else _out_numel(out))

    return rule


def _per_output(factor: float) -> FlopRule:
    def rule(bound: Bound, out: Any) -> float:
        return factor * _out_numel(out)

    return rule


def _affine(bound: Bound) -> int:
    return int(_present(bound, "weight")) + int(_present(bound, "bias"))


def _layer_norm(bound: Bound, out: Any) -> float:
    return float(bound["input"].numel() * (5 + _affine(bound)))


def _rms_norm(bound: Bound, out: Any) -> float:
    return float(bound["input"].numel() * (3 + int(_present(bound, "weight"))))


def _batch_norm(bound: Bound, out: Any) -> float:
    training = bool(bound.get("training", False))
    return float(bound["input"].numel() * (2 + _affine(bound) + (3 if training else 0)))


def _pool(bound: Bound, out: Any) -> float:
    kernel = bound.get("kernel_size", 1)
    x = bound["self"]
    spatial = max(1, x.dim() - 2)
    sizes = [int(kernel)] * spatial if isinstance(kernel, int) else [int(s) for s in kernel]
    if len(sizes) == 1 and spatial > 1:
        sizes *= spatial
    return float(_out_numel(out) * math.prod(sizes))


_RULES: dict[str, tuple[Category, FlopRule]] = {}


def _register(category: Category, rule: FlopRule, *names: str) -> None:
    for name in names:
        _RULES[name] = (category, rule)


_register("matmul", _matmul, *aten.MATMUL)
_register("matmul", _mm_like(False), *aten.MM)
_register("matmul", _mm_like(True), *aten.ADDMM)
_register("matmul", _mv, *aten.MV)
_register("matmul", _linear, *aten.LINEAR)
_register("conv", _conv, *aten.CONVOLUTION)
_register("conv", _conv_transposed, *aten.CONV_TRANSPOSE)
_register("attention", _attention, *aten.ATTENTION)
_register("norm", _layer_norm, *aten.LAYER_NORM)
_register("norm", _rms_norm, *aten.RMS_NORM)
_register("norm", _batch_norm, *aten.BATCH_NORM)
_register("softmax", _per_output(5), *aten.SOFTMAX)
_register("pooling", _pool, *aten.WINDOW_POOLING)
_register("pooling", _per_input(1), *aten.ADAPTIVE_POOLING)
_register("elementwise", _per_output(1), *aten.ELEMENTWISE)
_register("elementwise", _per_output(2), *aten.ELEMENTWISE_MULTIPLY_ADD)
_register("reduction", _per_input(1), *aten.REDUCTION)
_register("reduction", _per_input(3), *aten.VARIANCE)
_register("reduction", _per_input(2), *aten.VECTOR_NORM)
# data movement, casts and views: 0 FLOPs by definition (their cost is bytes)
_register("movement", _per_output(0), *aten.DATA_MOVEMENT, *aten.CASTS, *aten.VIEWS, *aten.DROPOUT)


def categorize(name: str) -> Category:
    """The op's category (see :data:`Category`); ``uncounted`` when there is no FLOP rule."""
    found = _RULES.get(aten.op_base_name(name))
    return found[0] if found else "uncounted"


def flops_of(name: str, bound: Bound, out: Any) -> float | None:
    """FLOPs of one call of ``name`` (``aten::conv2d``) with arguments ``bound`` (by schema
    name) and result ``out``; ``None`` when accelscope has no rule for the op."""
    found = _RULES.get(aten.op_base_name(name))
    if found is None:
        return None
    return float(found[1](bound, out))
