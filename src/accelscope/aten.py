"""The aten operator vocabulary: which operators are matrix products, convolutions, attention,
norms, softmax, elementwise, reductions, pooling, data movement, casts and views.

One list, read by :mod:`accelscope.roofline.flops` (a FLOP rule for each group below: the
groups split where the rule's arguments differ, ``mm`` against ``addmm``) and by
:mod:`accelscope.plan.fusion` (which operators an optimising runtime fuses into its matrix
kernels). Names are base names (:func:`op_base_name`): no namespace, overload or in-place
suffix. An operator in no group is unknown to both: no FLOP rule, and unfused.
"""

from __future__ import annotations

__all__ = [
    "ADAPTIVE_POOLING",
    "ADDMM",
    "ATTENTION",
    "BATCH_NORM",
    "CASTS",
    "CONVOLUTION",
    "CONV_TRANSPOSE",
    "DATA_MOVEMENT",
    "DROPOUT",
    "EINSUM",
    "ELEMENTWISE",
    "ELEMENTWISE_MULTIPLY_ADD",
    "LAUNCH_NOTHING",
    "LAYER_NORM",
    "LINEAR",
    "MATMUL",
    "MM",
    "MV",
    "QUANTIZE",
    "REDUCTION",
    "RMS_NORM",
    "SOFTMAX",
    "VARIANCE",
    "VECTOR_NORM",
    "VIEWS",
    "WINDOW_POOLING",
    "op_base_name",
]


def op_base_name(name: str) -> str:
    """``aten::add_.Tensor`` → ``add``: namespace, overload and the in-place ``_`` suffix
    removed (``__and__`` keeps its underscores)."""
    base = name.split("::", 1)[-1].split(".", 1)[0].strip().lower()
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    return base


# --- matrix products, convolutions, attention: the kernels that do the arithmetic -----------

MATMUL = ("matmul", "_int_mm", "dot", "vdot", "inner")
"""Products whose inner dimension is the first argument's last one."""
MM = ("mm", "bmm")
ADDMM = ("addmm", "baddbmm", "_addmm_activation")
"""``mm``/``bmm`` plus a bias added to every output element."""
MV = ("mv", "addmv")
LINEAR = ("linear", "_linear", "mkldnn_linear")
EINSUM = ("einsum",)
"""A matrix kernel with no FLOP rule (its equation decides the count)."""
CONVOLUTION = (
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
CONV_TRANSPOSE = (
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cudnn_convolution_transpose",
    "mkldnn_convolution_transpose",
)
ATTENTION = (
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
)

# --- norms and softmax ------------------------------------------------------------------------

LAYER_NORM = ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm")
RMS_NORM = ("rms_norm", "_fused_rms_norm")
BATCH_NORM = (
    "batch_norm",
    "native_batch_norm",
    "_batch_norm_impl_index",
    "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit",
    "_batch_norm_with_update",
    "_batch_norm_no_update",
)
SOFTMAX = ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax")

# --- elementwise ------------------------------------------------------------------------------

ELEMENTWISE = (
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
)
"""One arithmetic operation per output element, activations included."""
ELEMENTWISE_MULTIPLY_ADD = ("addcmul", "addcdiv", "lerp")
"""Two operations per output element."""

# --- reductions and pooling -------------------------------------------------------------------

REDUCTION = (
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
)
VARIANCE = ("var", "std", "var_mean", "std_mean")
VECTOR_NORM = ("norm", "linalg_vector_norm", "frobenius_norm", "logsumexp")
WINDOW_POOLING = (
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
ADAPTIVE_POOLING = (
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d",
    "_adaptive_avg_pool3d",
    "adaptive_max_pool2d",
    "mkldnn_adaptive_avg_pool2d",
)

# --- no arithmetic: data movement, casts, views, inference no-ops ----------------------------

DATA_MOVEMENT = (
    "copy",
    "clone",
    "cat",
    "stack",
    "index_select",
    "embedding",
    "gather",
    "scatter",
    "index",
    "index_put",
    "_index_put_impl",
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
    "tril",
    "triu",
    "flip",
    "roll",
    "masked_select",
    "nonzero",
    "one_hot",
    "_local_scalar_dense",
    "item",
    "scalar_tensor",
    "is_nonzero",
    "equal",
    "_assert_async",
)
"""Copies, concatenation, indexing, padding, fills and host reads: bytes, no arithmetic."""
CASTS = ("to", "_to_copy", "type_as", "contiguous")
"""Dtype casts and layout copies."""
VIEWS = (
    "view",
    "view_as",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "flatten",
    "unflatten",
    "permute",
    "transpose",
    "t",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "movedim",
    "select",
    "slice",
    "narrow",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "unfold",
    "as_strided",
    "detach",
    "alias",
    "lift_fresh",
)
"""Views of a tensor's storage (and aliases): no data moved."""
LAUNCH_NOTHING = (
    "detach_",
    "empty",
    "empty_like",
    "empty_strided",
    "resize_",
    "contiguous",
    "result_type",
    "is_nonzero",
    "set_",
    "record_stream",
)
"""Besides the views: operators that on a device tensor launch no kernel (allocations, metadata,
a contiguous tensor's ``contiguous``) or whose launches a trace may not nest."""
DROPOUT = ("dropout", "native_dropout", "feature_dropout", "alpha_dropout")
"""No-ops in inference."""
QUANTIZE = ("quantize_per_tensor", "dequantize")
"""Casts to and from a quantized dtype (no FLOP rule: their cost is the bytes)."""
