"""Which precisions have a hardware fast path here, and which unit provides it.

A precision is *fast* when the device has a unit that computes in it natively (AMX tiles, VNNI,
tensor cores); otherwise it is emulated or widened and usually no faster than fp32. The reason
string says which unit was found or which one is missing, so a report can quote it verbatim.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from accelscope.hardware.cpu import CpuInfo
from accelscope.hardware.gpu import GpuInfo
from accelscope.spec import Device, Precision

__all__ = ["PrecisionSupport", "cpu_support", "gpu_support", "precision_support"]

_NONE = "none"


@dataclass(frozen=True, kw_only=True)
class PrecisionSupport:
    """Whether ``precision`` has a native fast path on ``device``; ``unit`` names it."""

    precision: Precision
    device: Device
    fast: bool
    unit: str
    reason: str


def _first(cpu: CpuInfo, candidates: Iterable[tuple[str, str]]) -> str | None:
    for feature, unit in candidates:
        if cpu.has(feature):
            return unit
    return None


def _is_arm(cpu: CpuInfo) -> bool:
    return cpu.arch in ("aarch64", "arm64") or cpu.has("neon") or cpu.has("sve")


def _cpu_fp32(cpu: CpuInfo) -> PrecisionSupport:
    if cpu.has("avx512f"):
        unit = "AVX-512 FMA"
    elif cpu.has("avx2") and cpu.has("fma"):
        unit = "AVX2 FMA"
    elif cpu.has("sve"):
        unit = "SVE FMA"
    elif cpu.has("neon"):
        unit = "NEON FMA"
    else:
        unit = "scalar/SSE"
    reason = f"fp32 is the CPU's native precision; matmuls run on its {unit} units"
    return PrecisionSupport(
        precision=Precision.FP32, device=Device.CPU, fast=True, unit=unit, reason=reason
    )


def _cpu_bf16(cpu: CpuInfo) -> PrecisionSupport:
    unit = _first(
        cpu,
        (
            ("amx_bf16", "AMX-BF16 tiles"),
            ("avx512_bf16", "AVX512-BF16"),
            ("arm_bf16", "ARM BF16 (BFMMLA)"),
        ),
    )
    if unit:
        reason = f"bf16 matmuls run natively on {unit}"
        return PrecisionSupport(
            precision=Precision.BF16, device=Device.CPU, fast=True, unit=unit, reason=reason
        )
    missing = "the BF16 extension (FEAT_BF16)" if _is_arm(cpu) else "AVX512-BF16 or AMX-BF16"
    reason = f"no {missing} on this CPU: bf16 would be emulated, usually slower than fp32"
    return PrecisionSupport(
        precision=Precision.BF16, device=Device.CPU, fast=False, unit=_NONE, reason=reason
    )


def _cpu_fp16(cpu: CpuInfo) -> PrecisionSupport:
    unit = _first(cpu, (("amx_fp16", "AMX-FP16 tiles"), ("avx512_fp16", "AVX512-FP16")))
    if unit:
        reason = f"fp16 arithmetic runs natively on {unit}"
        return PrecisionSupport(
            precision=Precision.FP16, device=Device.CPU, fast=True, unit=unit, reason=reason
        )
    reason = (
        "no AVX512-FP16 or AMX-FP16 on this CPU: fp16 would be converted to fp32 for compute, "
        "usually slower than fp32"
    )
    return PrecisionSupport(
        precision=Precision.FP16, device=Device.CPU, fast=False, unit=_NONE, reason=reason
    )


def _cpu_int8(cpu: CpuInfo) -> PrecisionSupport:
    unit = _first(
        cpu,
        (
            ("amx_int8", "AMX-INT8 tiles"),
            ("avx512_vnni", "AVX512-VNNI"),
            ("avx_vnni", "AVX-VNNI"),
            ("arm_i8mm", "ARM I8MM (SMMLA)"),
        ),
    )
    if unit:
        reason = f"int8 dot products run natively on {unit}"
        return PrecisionSupport(
            precision=Precision.INT8, device=Device.CPU, fast=True, unit=unit, reason=reason
        )
    if _is_arm(cpu):
        reason = (
            "no I8MM extension on this CPU: int8 matmuls use widening NEON dot products, "
            "often no faster than fp32"
        )
    else:
        reason = (
            "no AVX512-VNNI, AVX-VNNI or AMX-INT8 on this CPU: int8 matmuls use widening "
            "AVX2/SSE multiplies, often no faster than fp32"
        )
    return PrecisionSupport(
        precision=Precision.INT8, device=Device.CPU, fast=False, unit=_NONE, reason=reason
    )


def _cpu_fp8(cpu: CpuInfo) -> PrecisionSupport:
    reason = "no FP8 unit on CPUs: fp8 would be emulated through fp32/bf16, slower than fp32"
    return PrecisionSupport(
        precision=Precision.FP8, device=Device.CPU, fast=False, unit=_NONE, reason=reason
    )


def cpu_support(cpu: CpuInfo) -> tuple[PrecisionSupport, ...]:
    """Fast-path verdict for every :class:`Precision` on ``cpu``, in enum order."""
    rules = {
        Precision.FP32: _cpu_fp32,
        Precision.BF16: _cpu_bf16,
        Precision.FP16: _cpu_fp16,
        Precision.INT8: _cpu_int8,
        Precision.FP8: _cpu_fp8,
    }
    return tuple(rules[p](cpu) for p in Precision)


# precision -> (minimum compute capability, unit label, what it is / what is missing)
_GPU_RULES: dict[Precision, tuple[tuple[int, int], str, str]] = {
    Precision.FP16: ((7, 0), "tensor cores", "fp16 tensor cores need sm_70 (Volta) or newer"),
    Precision.BF16: (
        (8, 0),
        "tensor cores",
        "bf16 needs sm_80 (Ampere) or newer; older GPUs emulate it, usually slower than fp16",
    ),
    Precision.INT8: (
        (7, 5),
        "int8 tensor cores",
        "int8 tensor cores need sm_75 (Turing) or newer; older GPUs use DP4A at best",
    ),
    Precision.FP8: (
        (8, 9),
        "FP8 tensor cores",
        "FP8 tensor cores need sm_89 (Ada) or sm_90 (Hopper) or newer; older GPUs emulate fp8",
    ),
}


def gpu_support(gpu: GpuInfo) -> tuple[PrecisionSupport, ...]:
    """Fast-path verdict for every :class:`Precision` on one CUDA device, in enum order."""
    cc = gpu.cc_tuple
    out: list[PrecisionSupport] = []
    for precision in Precision:
        if precision is Precision.FP32:
            tf32 = " (matmuls may use TF32 tensor cores)" if cc and cc >= (8, 0) else ""
            unit = f"CUDA cores ({gpu.sm})"
            reason = f"fp32 is native on {gpu.name} ({gpu.sm}){tf32}"
            out.append(
                PrecisionSupport(
                    precision=precision, device=Device.CUDA, fast=True, unit=unit, reason=reason
                )
            )
            continue
        minimum, label, requirement = _GPU_RULES[precision]
        if cc is None:
            reason = (
                f"compute capability {gpu.compute_capability!r} of {gpu.name} is unknown: "
                f"cannot tell whether {precision.value} has a fast path ({requirement})"
            )
            out.append(
                PrecisionSupport(
                    precision=precision, device=Device.CUDA, fast=False, unit=_NONE, reason=reason
                )
            )
        elif cc >= minimum:
            unit = f"{label} ({gpu.sm})"
            reason = f"{precision.value} runs natively on {gpu.name}'s {unit}"
            out.append(
                PrecisionSupport(
                    precision=precision, device=Device.CUDA, fast=True, unit=unit, reason=reason
                )
            )
        else:
            reason = f"{gpu.name} is {gpu.sm}: {requirement}"
            out.append(
                PrecisionSupport(
                    precision=precision, device=Device.CUDA, fast=False, unit=_NONE, reason=reason
                )
            )
    return tuple(out)


def precision_support(cpu: CpuInfo, gpus: Iterable[GpuInfo] = ()) -> tuple[PrecisionSupport, ...]:
    """Fast-path verdict for every (precision, device present): CPU always, CUDA if any GPU.

    The CUDA verdicts describe the lowest-ordinal visible GPU, the one ``cuda`` runs on.
    """
    visible = sorted(gpus, key=lambda g: g.index)
    cuda = gpu_support(visible[0]) if visible else ()
    return cpu_support(cpu) + cuda
