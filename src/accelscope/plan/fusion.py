"""The fused roofline floor: what an optimising runtime's memory traffic looks like.

An eager profile counts every operator's inputs and outputs as DRAM traffic. An optimising
runtime (TensorRT, ``torch.compile``/inductor, OpenVINO, ONNX Runtime) folds batch norm into
the convolution weights and runs activations, residual adds, casts and views in the epilogue
of the neighbouring matrix kernel, so those intermediate tensors never reach DRAM. The rule,
by operator name (``aten::add_.Tensor`` → ``add``), over the groups of :mod:`accelscope.aten`:

- **anchor** (convolutions, ``mm``/``addmm``/``bmm``/``linear``/``matmul``, scaled-dot-product
  attention): a real kernel; FLOPs and bytes kept, and it runs at the configuration's
  precision (tensor cores / AMX / VNNI);
- **fused** (elementwise ops and activations, batch/layer/group/RMS norm, softmax, casts,
  views and layout copies): FLOPs kept at the operator's own dtype, bytes 0;
- **kept** (everything else: pooling, reductions, concatenation, embedding and index ops, and
  any name not listed): FLOPs and bytes kept, unfused.

This is a lower bound on traffic (a residual add's second input, a norm that a runtime runs as
its own reduction kernel, and re-reads of the anchor's weights are not counted); it is labelled
an estimate wherever it is used.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelscope import aten
from accelscope.documents import Operator, normalise_dtype
from accelscope.units import ELEMENT_BYTES

__all__ = [
    "ANCHOR",
    "FUSED",
    "FUSION_RULE",
    "KEPT",
    "at_precision",
    "fuse",
    "fusion_role",
]

ANCHOR, FUSED, KEPT = "anchor", "fused", "kept"

FUSION_RULE = (
    "fused floor: convolution/matmul/attention kernels keep their bytes; elementwise, "
    "activation, norm, softmax, cast and view operators are fused into them (FLOPs kept, "
    "bytes 0); pooling, reductions and data movement stay unfused"
)

_ANCHORS = frozenset(
    (
        *aten.MATMUL,
        *aten.MM,
        *aten.ADDMM,
        *aten.MV,
        *aten.LINEAR,
        *aten.EINSUM,
        *aten.CONVOLUTION,
        *aten.CONV_TRANSPOSE,
        *aten.ATTENTION,
    )
)
_FUSED = frozenset(
    (
        *aten.ELEMENTWISE,
        *aten.ELEMENTWISE_MULTIPLY_ADD,
        *aten.LAYER_NORM,
        *aten.RMS_NORM,
        *aten.BATCH_NORM,
        *aten.SOFTMAX,
        *aten.CASTS,
        *aten.VIEWS,
        *aten.DROPOUT,
        *aten.QUANTIZE,
    )
)


def fusion_role(name: str) -> str:
    """``anchor``, ``fused`` or ``kept`` for an operator name (see the module docstring)."""
    base = aten.op_base_name(name)
    if base in _ANCHORS:
        return ANCHOR
    return FUSED if base in _FUSED else KEPT


def _work(op: Operator, dtype: str, flops: float, bytes_: float) -> Operator:
    """``op``'s work as another configuration would run it (nothing measured of it)."""
    return Operator(name=op.name, category=op.category, dtype=dtype, flops=flops, bytes=bytes_)


def fuse(operators: Sequence[Operator]) -> tuple[Operator, ...]:
    """The operators as an optimising runtime runs them: fused operators move 0 bytes."""
    return tuple(
        _work(op, op.dtype, op.flops, 0.0) if fusion_role(op.name) == FUSED else op
        for op in operators
    )


def at_precision(
    operators: Sequence[Operator], precision: str, scale: float = 1.0
) -> tuple[Operator, ...]:
    """The same work run in ``precision`` and scaled ``scale`` times (batch ratio).

    FLOPs and bytes scale linearly with the batch (so weight traffic is scaled too: an
    approximation). Every operator's bytes are rescaled to ``precision``'s element size (the
    activations are stored in it; an operator of unknown element size keeps its bytes); anchor
    operators also take ``precision`` as their dtype, so they run at its peak.
    """
    size = ELEMENT_BYTES.get(precision)
    converted = []
    for op in operators:
        own = ELEMENT_BYTES.get(normalise_dtype(op.dtype) or "")
        ratio = size / own if size and own else 1.0
        dtype = precision if fusion_role(op.name) == ANCHOR else op.dtype
        converted.append(_work(op, dtype, op.flops * scale, op.bytes * scale * ratio))
    return tuple(converted)
