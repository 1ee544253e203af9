"""What "fp32" means on a CUDA device: whether matrix products (cuBLAS) and convolutions (cuDNN)
may run on TF32 tensor cores, read and set through torch's process-wide flags.

torch's defaults differ by library: cuBLAS matrix products are IEEE fp32, cuDNN convolutions are
TF32. So an unset process measures a convolution's "fp32" at TF32 rates (several times the fp32
datasheet figure on an H100) and a matrix product's at IEEE rates. accelscope sets both flags
explicitly for every CUDA measurement (:func:`tf32_mode`; IEEE unless the user asks for TF32) and
records what was in force (:func:`numerics`) in each result's environment.

torch 2.9 added a second API (``torch.backends.cuda.matmul.fp32_precision``) beside the legacy
booleans (``allow_tf32``), and reading one after the other was set can raise ("a mix of the legacy
and new APIs"). The legacy setters keep both views consistent, so they set the flags here when
torch has them; reading tries the legacy getters and falls back to the new ones. Nothing here
initialises CUDA: the flags are host-side state, so it all works (and is tested) on a CPU build.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BENCHMARK_KEY",
    "CONV_KEY",
    "MATMUL_KEY",
    "Fp32Math",
    "apply_cudnn_benchmark",
    "apply_tf32",
    "numerics",
    "read_fp32_math",
    "restore_fp32_math",
    "tf32_mode",
]

MATMUL_KEY = "cuda_matmul_fp32"
"""Environment key: how fp32 matrix products run on CUDA (``ieee`` or ``tf32``)."""
CONV_KEY = "cudnn_conv_fp32"
"""Environment key: how fp32 cuDNN convolutions run on CUDA (``ieee`` or ``tf32``)."""
BENCHMARK_KEY = "cudnn_benchmark"
"""Environment key: whether cuDNN autotunes convolution algorithms (``on``/``off``)."""

IEEE, TF32 = "ieee", "tf32"


@dataclass(frozen=True)
class Fp32Math:
    """How fp32 runs on CUDA: ``ieee``, ``tf32``, or ``unknown: why`` for each library."""

    matmul: str
    conv: str

    @property
    def tf32(self) -> bool | None:
        """True when both may use TF32, False when both are IEEE, None otherwise."""
        if self.matmul == self.conv and self.matmul in (IEEE, TF32):
            return self.matmul == TF32
        return None


def _torch() -> Any:
    import torch

    return torch


def _legacy_read(torch: Any) -> Fp32Math:
    matmul = TF32 if torch._C._get_cublas_allow_tf32() else IEEE
    conv = TF32 if torch._C._get_cudnn_allow_tf32() else IEEE
    return Fp32Math(matmul=matmul, conv=conv)


def _resolved(torch: Any, op: str) -> str:
    """The new API's value for ``op``, ``none`` resolved through its parents (``none`` at the
    top is torch's default for an op left unset: IEEE)."""
    getter = torch._C._get_fp32_precision_getter
    for backend, name in (("cuda", op), ("cuda", "all"), ("generic", "all")):
        value = str(getter(backend, name))
        if value != "none":
            return value
    return IEEE


def read_fp32_math(torch: Any = None) -> Fp32Math:
    """The fp32 math in force for CUDA matrix products and convolutions; never raises."""
    try:
        torch = torch or _torch()
    except Exception as exc:  # noqa: BLE001 - a broken torch install is "unknown", not a crash
        why = f"unknown: torch cannot be imported ({type(exc).__name__})"
        return Fp32Math(matmul=why, conv=why)
    try:
        return _legacy_read(torch)
    except Exception:  # noqa: BLE001 - mixed legacy/new flags, or no legacy API: try the new
        pass
    try:
        return Fp32Math(matmul=_resolved(torch, "matmul"), conv=_resolved(torch, "conv"))
    except Exception as exc:  # noqa: BLE001 - neither API answers
        why = f"unknown: torch's TF32 flags cannot be read ({type(exc).__name__})"
        return Fp32Math(matmul=why, conv=why)


def apply_tf32(enabled: bool, torch: Any = None) -> None:
    """Allow (``True``) or forbid (``False``) TF32 for both fp32 matrix products and cuDNN
    convolutions, process-wide."""
    torch = torch or _torch()
    if hasattr(torch._C, "_set_cublas_allow_tf32") and hasattr(torch._C, "_set_cudnn_allow_tf32"):
        torch._C._set_cublas_allow_tf32(enabled)
        torch._C._set_cudnn_allow_tf32(enabled)
        return
    value = TF32 if enabled else IEEE
    for op in ("matmul", "conv", "rnn"):
        torch._C._set_fp32_precision_setter("cuda", op, value)


@contextmanager
def tf32_mode(enabled: bool, torch: Any = None) -> Iterator[None]:
    """Run the block with TF32 allowed or forbidden (see :func:`apply_tf32`); the flags in force
    before are set back afterwards when they could be read as one state per library."""
    torch = torch or _torch()
    before = read_fp32_math(torch)
    apply_tf32(enabled, torch)
    try:
        yield
    finally:
        restore_fp32_math(before, torch)


def restore_fp32_math(before: Fp32Math, torch: Any = None) -> None:
    """Set the flags back to ``before`` (read with :func:`read_fp32_math`); nothing when it was
    unreadable. Matrix products and convolutions are set separately when they differed
    (torch's default: IEEE products, TF32 convolutions)."""
    if before.matmul not in (IEEE, TF32) or before.conv not in (IEEE, TF32):
        return
    torch = torch or _torch()
    if before.tf32 is not None:
        apply_tf32(before.tf32, torch)
        return
    if hasattr(torch._C, "_set_cublas_allow_tf32") and hasattr(torch._C, "_set_cudnn_allow_tf32"):
        torch._C._set_cublas_allow_tf32(before.matmul == TF32)
        torch._C._set_cudnn_allow_tf32(before.conv == TF32)
        return
    torch._C._set_fp32_precision_setter("cuda", "matmul", before.matmul)
    for op in ("conv", "rnn"):
        torch._C._set_fp32_precision_setter("cuda", op, before.conv)


def apply_cudnn_benchmark(enabled: bool, torch: Any = None) -> bool:
    """Set ``torch.backends.cudnn.benchmark`` (cuDNN times its convolution algorithms for each
    new input shape and keeps the fastest) and return the value it had, so the caller can set
    it back: like TF32 it is process-wide, and a runner must not leave it changed for the next
    configuration. Host-side state only: nothing here initialises CUDA."""
    torch = torch or _torch()
    before = bool(torch.backends.cudnn.benchmark)
    torch.backends.cudnn.benchmark = enabled
    return before


def numerics(torch: Any = None) -> tuple[tuple[str, str], ...]:
    """Sorted ``(key, value)`` of the settings that decide what an fp32 measurement on CUDA
    means: :data:`MATMUL_KEY`, :data:`CONV_KEY` (``ieee``/``tf32``) and :data:`BENCHMARK_KEY`
    (``on``/``off``); ``unknown: why`` where unreadable. Never raises."""
    math = read_fp32_math(torch)
    try:
        torch = torch or _torch()
        benchmark = "on" if bool(torch.backends.cudnn.benchmark) else "off"
    except Exception as exc:  # noqa: BLE001 - a broken torch install is "unknown", not a crash
        benchmark = f"unknown: cudnn.benchmark cannot be read ({type(exc).__name__})"
    return tuple(
        sorted({MATMUL_KEY: math.matmul, CONV_KEY: math.conv, BENCHMARK_KEY: benchmark}.items())
    )
