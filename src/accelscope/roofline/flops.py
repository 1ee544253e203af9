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

__all__ = ["Category", "categorize", "flops_of", "op_base_name"]

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


_ELEMENTWISE = [
    "add",
    "sub",
    "mul",
    "div",
    "rsub",
    "neg",
    "abs",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "log2",
    "sqrt",
    "rsqrt",
    "pow",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "clamp",
    "clamp_min",
    "clamp_max",
    "leaky_relu",
    "elu",
    "selu",
    "celu",
    "erf",
    "erfc",
    "where",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "eq",
    "ne",
    "lt",
    "gt",
    "le",
    "ge",
    "masked_fill",
    "reciprocal",
    "sin",
    "cos",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "logical_not",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "square",
    "softplus",
    "mish",
    "threshold",
    "relu6",
    "prelu",
    "glu",
    "nan_to_num",
    "remainder",
    "fmod",
    "isnan",
    "isinf",
    "isfinite",
    "_add_relu",
    "hardshrink",
    "softshrink",
    "logit",
]
_FUSED_ELEMENTWISE = ["addcmul", "addcdiv", "lerp"]
_REDUCTIONS = [
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "argmax",
    "argmin",
    "prod",
    "any",
    "all",
    "cumsum",
    "cumprod",
]
_VARIANCE = ["var", "std", "var_mean", "std_mean"]
_NORMS = ["norm", "linalg_vector_norm", "frobenius_norm", "logsumexp"]
_MOVEMENT = [
    "copy",
    "_to_copy",
    "to",
    "clone",
    "contiguous",
    "cat",
    "stack",
    "index_select",
    "embedding",
    "gather",
    "scatter",
    "index",
    "index_put",
    "slice_scatter",
    "select_scatter",
    "constant_pad_nd",
    "pad",
    "reflection_pad2d",
    "replication_pad2d",
    "repeat",
    "expand_copy",
    "fill",
    "zero",
    "zeros",
    "ones",
    "empty",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full",
    "full_like",
    "arange",
    "new_zeros",
    "new_ones",
    "new_empty",
    "new_full",
    "new_empty_strided",
    "empty_strided",
    "lift_fresh",
    "detach",
    "alias",
    "reshape",
    "flatten",
    "unflatten",
    "tril",
    "triu",
    "flip",
    "roll",
    "masked_select",
    "nonzero",
    "_unsafe_view",
    "dropout",
    "native_dropout",
    "feature_dropout",
    "alpha_dropout",
    "_reshape_alias",
    "view",
    "view_as",
    "permute",
    "transpose",
    "t",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "select",
    "slice",
    "narrow",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "unfold",
    "as_strided",
    "movedim",
    "type_as",
    "_local_scalar_dense",
    "item",
    "scalar_tensor",
    "_index_put_impl",
    "one_hot",
    "is_nonzero",
    "equal",
    "_assert_async",
]

_RULES: dict[str, tuple[Category, FlopRule]] = {}


def _register(category: Category, rule: FlopRule, *names: str) -> None:
    for name in names:
        _RULES[name] = (category, rule)


_register("matmul", _matmul, "matmul", "_int_mm", "dot", "vdot", "inner")
_register("matmul", _mm_like(False), "mm", "bmm")
_register("matmul", _mm_like(True), "addmm", "baddbmm", "_addmm_activation")
_register("matmul", _mv, "mv", "addmv")
_register("matmul", _linear, "linear", "_linear", "mkldnn_linear")
_register(
    "conv",
    _conv,
    "convolution",
    "_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "mkldnn_convolution",
    "_mkldnn_convolution",
    "cudnn_convolution",
    "_convolution_mode",
    "_nnpack_spatial_convolution",
)
_register(
    "conv",
    _conv_transposed,
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cudnn_convolution_transpose",
    "mkldnn_convolution_transpose",
)
_register(
    "attention",
    _attention,
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
)
_register(
    "norm",
    _layer_norm,
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "native_group_norm",
    "instance_norm",
)
_register("norm", _rms_norm, "rms_norm", "_fused_rms_norm")
_register(
    "norm",
    _batch_norm,
    "batch_norm",
    "native_batch_norm",
    "_batch_norm_impl_index",
    "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit",
    "_batch_norm_with_update",
    "_batch_norm_no_update",
)
_register(
    "softmax", _per_output(5), "softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax"
)
_register(
    "pooling",
    _pool,
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "mkldnn_max_pool2d",
)
_register(
    "pooling",
    _per_input(1),
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d",
    "_adaptive_avg_pool3d",
    "adaptive_max_pool2d",
    "mkldnn_adaptive_avg_pool2d",
)
_register("elementwise", _per_output(1), *_ELEMENTWISE)
_register("elementwise", _per_output(2), *_FUSED_ELEMENTWISE)
_register("reduction", _per_input(1), *_REDUCTIONS)
_register("reduction", _per_input(3), *_VARIANCE)
_register("reduction", _per_input(2), *_NORMS)
_register("movement", _per_output(0), *_MOVEMENT)


def op_base_name(name: str) -> str:
    """``aten::add_`` → ``add``: namespace, overload and the in-place ``_`` suffix removed."""
    base = name.split("::", 1)[-1].split(".", 1)[0]
    if base.endswith("_") and not base.endswith("__") and base[:-1] in _RULES:
        return base[:-1]
    return base


def categorize(name: str) -> Category:
    """The op's category (see :data:`Category`); ``uncounted`` when there is no FLOP rule."""
    found = _RULES.get(op_base_name(name))
    return found[0] if found else "uncounted"


def flops_of(name: str, bound: Bound, out: Any) -> float | None:
    """FLOPs of one call of ``name`` (``aten::conv2d``) with arguments ``bound`` (by schema
    name) and result ``out``; ``None`` when accelscope has no rule for the op."""
    found = _RULES.get(op_base_name(name))
    if found is None:
        return None
    return float(found[1](bound, out))
