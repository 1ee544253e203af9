"""The dense kernels the ceiling search tries: matrix products and convolutions in several
layouts and library paths, per dtype and device.

Families (``Candidate.family``), shape ``(M, N, K)`` for products, ``(batch, C, H)`` for
convolutions (C in = C out, H x H pixels, 'same' padding):

- ``mm``: ``torch.mm(x[M,K], w[K,N])``, both row-major;
- ``mm_wT``: ``torch.mm(x, w.t())`` with ``w[N,K]`` row-major (the ``nn.Linear`` weight layout);
- ``linear``: ``F.linear(x, w)`` (oneDNN/MKL pick their own packing);
- ``mkldnn_linear``: weights prepacked once into oneDNN's blocked layout
  (``torch.utils.mkldnn.to_mkldnn``), the path inductor's freezing takes;
- ``conv1x1_nhwc`` / ``conv3x3_nhwc``: channels-last convolutions (oneDNN direct convolution,
  AMX/VNNI on Sapphire Rapids; cuDNN on GPU) — a convolution is a matrix product in another
  layout, and ResNet's 3x3 convolutions run faster than any plain GEMM here, so they belong in a
  ceiling that no model operator may exceed;
- int8: ``int_mm`` / ``int_mm_wT`` (``torch._int_mm``, int8 x int8 → int32) and
  ``qlinear_onednn`` (``torch.ops.quantized.linear`` with weights prepacked for the oneDNN engine,
  uint8 activations x int8 weights: the AMX-INT8 path on CPU).

FLOPs are ``2·M·N·K`` (int8: integer operations counted the same way). ``tf32`` kernels are the
fp32 ones run with TF32 allowed (CUDA); the search runs every other dtype with it off, so its
``fp32`` is IEEE fp32 (cuDNN would otherwise run fp32 convolutions on TF32 tensor cores).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelscope.roofline.kernel_search import Candidate
from accelscope.units import ELEMENT_BYTES

__all__ = [
    "MAX_OPERAND_BYTES",
    "Kernel",
    "build_kernel",
    "families",
    "kernel_flops",
    "neighbors",
    "probe_ladder",
    "seeds",
]

MAX_OPERAND_BYTES = 1 << 30
"""Candidates whose operands and result exceed this are not tried."""

_GEMM = ("mm", "mm_wT", "linear", "mkldnn_linear")
_CONV = ("conv1x1_nhwc", "conv3x3_nhwc")
_INT8 = ("int_mm", "int_mm_wT", "qlinear_onednn")
_GEMM_RANGE = (64, 16384)
_CONV_RANGES = ((1, 64), (16, 2048), (7, 112))
_PROBE_GEMM_SIDES = (256, 512, 1024, 2048)
_PROBE_CONV_CHANNELS = (32, 64, 128, 256, 512)
_PROBE_CONV_BATCH, _PROBE_CONV_SIDE = 8, 14


@dataclass(frozen=True)
class Kernel:
    """A ready-to-run kernel: ``fn`` does one call of ``flops`` operations via ``path``."""

    fn: Callable[[], object]
    flops: float
    path: str


def families(dtype: str, device: str = "cpu") -> tuple[str, ...]:
    """Kernel families worth trying for ``dtype`` on ``device`` (``tf32``: fp32 operands on
    TF32 tensor cores, CUDA only; the caller sets the TF32 mode while they run)."""
    if dtype == "int8":
        return _INT8 if device == "cpu" else ("int_mm", "int_mm_wT")
    if device == "cpu":
        return () if dtype == "tf32" else (*_GEMM, *_CONV)
    return ("mm", "mm_wT", "linear", *_CONV)


def _is_conv(family: str) -> bool:
    return family.startswith("conv")


def kernel_flops(candidate: Candidate) -> float:
    """Operations of one call of ``candidate`` (2 per multiply-accumulate)."""
    if _is_conv(candidate.family):
        batch, channels, height = candidate.shape
        taps = 9 if candidate.family.startswith("conv3x3") else 1
        return 2.0 * batch * height * height * channels * channels * taps
    m, n, k = candidate.shape
    return 2.0 * m * n * k


def _operand_bytes(candidate: Candidate, dtype: str) -> float:
    item = ELEMENT_BYTES.get(dtype, 4.0)
    if _is_conv(candidate.family):
        batch, channels, height = candidate.shape
        return item * (2 * batch * channels * height * height + 9 * channels * channels)
    m, n, k = candidate.shape
    return item * (m * k + k * n) + 4 * m * n


def seeds(dtype: str, device: str = "cpu") -> list[Candidate]:
    """Starting points: square and skinny products sized for AMX tiles / oneDNN blocking, model
    shapes (BERT's 768/3072 projections) and ResNet-like convolutions."""
    gemm_shapes = [
        (4096, 4096, 4096),
        (8192, 1024, 1024),
        (4096, 1024, 4096),
        (2048, 4096, 1024),
        (1024, 3072, 768),
        (1024, 1024, 1024),
    ]
    conv_shapes = [(8, 256, 14), (8, 128, 28), (8, 64, 56), (8, 512, 7)]
    found = []
    for family in families(dtype, device):
        shapes = conv_shapes if _is_conv(family) else gemm_shapes
        found += [Candidate(family, shape) for shape in shapes]
    return found


def probe_ladder(family: str) -> list[Candidate]:
    """Probe shapes of ``family``, smallest first, each step 8x (products: every side doubled,
    256³ to 2048³) or 4x (convolutions: channels doubled, 8 x 32..512 x 14²) the operations of
    the one before. A probe climbs it until one call is long enough to amortise call overhead,
    so a slow path costs one small call, not one search-sized call."""
    if _is_conv(family):
        return [
            Candidate(family, (_PROBE_CONV_BATCH, channels, _PROBE_CONV_SIDE))
            for channels in _PROBE_CONV_CHANNELS
        ]
    return [Candidate(family, (side, side, side)) for side in _PROBE_GEMM_SIDES]


def neighbors(candidate: Candidate, dtype: str, device: str = "cpu") -> list[Candidate]:
    """The same shape in the other families, and each dimension doubled or halved (within
    range and :data:`MAX_OPERAND_BYTES`)."""
    conv = _is_conv(candidate.family)
    same_kind = [f for f in families(dtype, device) if _is_conv(f) == conv]
    found = [Candidate(f, candidate.shape) for f in same_kind if f != candidate.family]
    ranges = _CONV_RANGES if conv else (_GEMM_RANGE,) * 3
    for axis, (low, high) in enumerate(ranges):
        for factor in (2.0, 0.5):
            shape = list(candidate.shape)
            shape[axis] = int(shape[axis] * factor)
            if low <= shape[axis] <= high:
                found.append(Candidate(candidate.family, tuple(shape)))
    return [c for c in found if _operand_bytes(c, dtype) <= MAX_OPERAND_BYTES]


def _torch_dtype(dtype: str) -> Any:
    import torch

    return {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "int8": torch.int8,
    }[dtype]


def _gemm(candidate: Candidate, dtype: str, device: str) -> Kernel | None:
    import torch
    import torch.nn.functional as F

    m, n, k = candidate.shape
    kind = _torch_dtype(dtype)
    x = torch.randn(m, k, device=device).to(kind)
    family = candidate.family
    if family == "mm":
        w = torch.randn(k, n, device=device).to(kind)
        return Kernel(lambda: torch.mm(x, w), kernel_flops(candidate), "torch.mm")
    w = torch.randn(n, k, device=device).to(kind)
    if family == "mm_wT":
        return Kernel(lambda: torch.mm(x, w.t()), kernel_flops(candidate), "torch.mm (w.t())")
    if family == "linear":
        return Kernel(lambda: F.linear(x, w), kernel_flops(candidate), "F.linear")
    if family == "mkldnn_linear" and device == "cpu" and dtype in ("fp32", "bf16"):
        import torch.utils.mkldnn as mkldnn_utils

        layer = torch.nn.Linear(k, n, bias=False).to(kind)
        with torch.no_grad():
            layer.weight.copy_(w)
        packed = mkldnn_utils.to_mkldnn(layer, kind)  # type: ignore[no-untyped-call]
        return Kernel(lambda: packed(x), kernel_flops(candidate), "oneDNN prepacked linear")
    return None


def _conv(candidate: Candidate, dtype: str, device: str) -> Kernel | None:
    import torch
    import torch.nn.functional as F

    batch, channels, height = candidate.shape
    size = 3 if candidate.family.startswith("conv3x3") else 1
    kind = _torch_dtype(dtype)
    last = torch.channels_last
    x = torch.randn(batch, channels, height, height, device=device).to(kind)
    x = x.contiguous(memory_format=last)
    w = torch.randn(channels, channels, size, size, device=device).to(kind)
    w = w.contiguous(memory_format=last)
    pad = size // 2

    def run() -> object:
        return F.conv2d(x, w, padding=pad)

    return Kernel(run, kernel_flops(candidate), f"conv2d {size}x{size} channels-last")


def _int8(candidate: Candidate, device: str) -> Kernel | None:
    import torch

    m, n, k = candidate.shape
    if candidate.family == "qlinear_onednn":
        if device != "cpu" or "onednn" not in torch.backends.quantized.supported_engines:
            return None
        engine = torch.backends.quantized.engine
        torch.backends.quantized.engine = "onednn"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # quantized tensors: deprecated, not gone
                qx = torch.quantize_per_tensor(torch.randn(m, k), 0.05, 64, torch.quint8)
                qw = torch.quantize_per_tensor(torch.randn(n, k), 0.05, 0, torch.qint8)
            packed = torch.ops.quantized.linear_prepack(qw, None)
        finally:
            torch.backends.quantized.engine = engine

        def run() -> object:
            previous = torch.backends.quantized.engine
            torch.backends.quantized.engine = "onednn"
            try:
                return torch.ops.quantized.linear(qx, packed, 0.1, 0)
            finally:
                torch.backends.quantized.engine = previous

        return Kernel(run, kernel_flops(candidate), "quantized.linear (oneDNN, prepacked)")
    a = torch.randint(-128, 127, (m, k), dtype=torch.int8, device=device)
    if candidate.family == "int_mm":
        b = torch.randint(-128, 127, (k, n), dtype=torch.int8, device=device)
        return Kernel(lambda: torch._int_mm(a, b), kernel_flops(candidate), "torch._int_mm")
    b = torch.randint(-128, 127, (n, k), dtype=torch.int8, device=device)
    return Kernel(lambda: torch._int_mm(a, b.t()), kernel_flops(candidate), "torch._int_mm (w.t())")


def build_kernel(candidate: Candidate, dtype: str, device: str = "cpu") -> Kernel | None:
    """Allocate operands and return the kernel, or ``None`` when this family does not run this
    dtype here (or the operands are too large). Runs one call to prove it works."""
    if _operand_bytes(candidate, dtype) > MAX_OPERAND_BYTES:
        return None
    try:
        if dtype == "int8":
            kernel = _int8(candidate, device)
        elif _is_conv(candidate.family):
            kernel = _conv(candidate, dtype, device)
        else:
            kernel = _gemm(candidate, dtype, device)
        if kernel is not None:
            kernel.fn()
    except (RuntimeError, NotImplementedError, ValueError, TypeError):
        return None  # this library path does not run this dtype/shape here
    return kernel
