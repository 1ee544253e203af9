"""Precision fast-path rules for CPUs (AMX, VNNI, AVX512-BF16/FP16, ARM) and GPUs (by cc)."""

from __future__ import annotations

import pytest

from accelscope.hardware import CpuInfo, GpuInfo, PrecisionSupport, precision_support
from accelscope.hardware.fastpaths import cpu_support, gpu_support
from accelscope.spec import Device, Precision


def make_cpu(*isa: str, arch: str = "x86_64") -> CpuInfo:
    return CpuInfo(
        model_name="test cpu",
        vendor="Intel",
        arch=arch,
        logical_cores=8,
        physical_cores=4,
        usable_cores=8,
        sockets=1,
        max_freq_mhz=None,
        l2_cache_bytes=None,
        l3_cache_bytes=None,
        isa=tuple(sorted(isa)),
    )


def make_gpu(cc: str, name: str = "GPU", index: int = 0) -> GpuInfo:
    return GpuInfo(index=index, name=name, memory_bytes=80 << 30, compute_capability=cc)


SPR = make_cpu(
    "avx2",
    "fma",
    "avx512f",
    "avx512_bw",
    "avx512_vl",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
ZEN3 = make_cpu("avx2", "fma")
ZEN4 = make_cpu("avx2", "fma", "avx512f", "avx512_bw", "avx512_vl", "avx512_vnni", "avx512_bf16")
GRANITE = make_cpu(*SPR.isa, "amx_fp16")
GRAVITON3 = make_cpu("neon", "sve", "arm_bf16", "arm_i8mm", arch="aarch64")
GRAVITON2 = make_cpu("neon", arch="aarch64")


def by_precision(items: tuple[PrecisionSupport, ...]) -> dict[Precision, PrecisionSupport]:
    return {s.precision: s for s in items}


def test_sapphire_rapids_uses_amx_for_bf16_and_int8() -> None:
    s = by_precision(cpu_support(SPR))
    assert (s[Precision.FP32].fast, s[Precision.FP32].unit) == (True, "AVX-512 FMA")
    assert (s[Precision.BF16].fast, s[Precision.BF16].unit) == (True, "AMX-BF16 tiles")
    assert (s[Precision.INT8].fast, s[Precision.INT8].unit) == (True, "AMX-INT8 tiles")
    assert (s[Precision.FP16].fast, s[Precision.FP16].unit) == (True, "AVX512-FP16")
    assert not s[Precision.FP8].fast and "no FP8 unit on CPUs" in s[Precision.FP8].reason


def test_granite_rapids_prefers_amx_fp16() -> None:
    s = by_precision(cpu_support(GRANITE))
    assert s[Precision.FP16].unit == "AMX-FP16 tiles"


def test_zen3_has_only_fp32_fast_with_specific_reasons() -> None:
    s = by_precision(cpu_support(ZEN3))
    assert s[Precision.FP32].fast and s[Precision.FP32].unit == "AVX2 FMA"
    bf16 = s[Precision.BF16]
    assert not bf16.fast and bf16.unit == "none"
    assert bf16.reason == (
        "no AVX512-BF16 or AMX-BF16 on this CPU: bf16 would be emulated, usually slower than fp32"
    )
    assert "AVX512-FP16" in s[Precision.FP16].reason and not s[Precision.FP16].fast
    assert "AVX512-VNNI" in s[Precision.INT8].reason and not s[Precision.INT8].fast


def test_zen4_avx512_bf16_and_vnni_without_amx() -> None:
    s = by_precision(cpu_support(ZEN4))
    assert s[Precision.BF16].unit == "AVX512-BF16"
    assert s[Precision.INT8].unit == "AVX512-VNNI"
    assert not s[Precision.FP16].fast


def test_avx_vnni_alone_makes_int8_fast() -> None:
    s = by_precision(cpu_support(make_cpu("avx2", "fma", "avx_vnni")))
    assert s[Precision.INT8].fast and s[Precision.INT8].unit == "AVX-VNNI"


def test_arm_bf16_and_i8mm() -> None:
    s = by_precision(cpu_support(GRAVITON3))
    assert s[Precision.FP32].unit == "SVE FMA"
    assert s[Precision.BF16].fast and "BF16" in s[Precision.BF16].unit
    assert s[Precision.INT8].fast and "I8MM" in s[Precision.INT8].unit
    old = by_precision(cpu_support(GRAVITON2))
    assert not old[Precision.BF16].fast and "FEAT_BF16" in old[Precision.BF16].reason
    assert not old[Precision.INT8].fast and "I8MM" in old[Precision.INT8].reason
    assert old[Precision.FP32].unit == "NEON FMA"


@pytest.mark.parametrize(
    ("cc", "fast"),
    [
        ("6.0", {"fp32"}),
        ("7.0", {"fp32", "fp16"}),
        ("7.5", {"fp32", "fp16", "int8"}),
        ("8.0", {"fp32", "fp16", "int8", "bf16"}),
        ("8.6", {"fp32", "fp16", "int8", "bf16"}),
        ("8.9", {"fp32", "fp16", "int8", "bf16", "fp8"}),
        ("9.0", {"fp32", "fp16", "int8", "bf16", "fp8"}),
        ("10.0", {"fp32", "fp16", "int8", "bf16", "fp8"}),
    ],
)
def test_gpu_rules_by_compute_capability(cc: str, fast: set[str]) -> None:
    verdicts = gpu_support(make_gpu(cc))
    assert {v.precision.value for v in verdicts if v.fast} == fast
    assert all(v.device is Device.CUDA for v in verdicts)
    assert all(v.unit == "none" for v in verdicts if not v.fast)


def test_gpu_units_and_reasons_name_the_architecture() -> None:
    s = by_precision(gpu_support(make_gpu("9.0", "NVIDIA H200")))
    assert s[Precision.FP16].unit == "tensor cores (sm_90)"
    assert s[Precision.FP8].unit == "FP8 tensor cores (sm_90)"
    assert s[Precision.INT8].unit == "int8 tensor cores (sm_90)"
    assert "TF32" in s[Precision.FP32].reason
    old = by_precision(gpu_support(make_gpu("7.0", "Tesla V100")))
    assert old[Precision.BF16].reason.startswith("Tesla V100 is sm_70: bf16 needs sm_80")
    assert "sm_89" in old[Precision.FP8].reason


def test_unknown_capability_is_not_claimed_fast() -> None:
    s = by_precision(gpu_support(make_gpu("gfx942")))
    assert s[Precision.FP32].fast
    assert not any(s[p].fast for p in (Precision.FP16, Precision.BF16, Precision.FP8))
    assert "unknown" in s[Precision.BF16].reason


def test_precision_support_covers_every_precision_per_device_present() -> None:
    cpu_only = precision_support(SPR, ())
    assert {(s.precision, s.device) for s in cpu_only} == {(p, Device.CPU) for p in Precision}
    both = precision_support(SPR, [make_gpu("7.5", "T4", 1), make_gpu("9.0", "H200", 0)])
    assert len(both) == 2 * len(Precision)
    cuda = by_precision(tuple(s for s in both if s.device is Device.CUDA))
    assert cuda[Precision.FP8].fast  # judged on ordinal 0, the H200
    assert "H200" in cuda[Precision.FP8].reason
