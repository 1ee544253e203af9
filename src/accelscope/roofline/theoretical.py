"""The theoretical peak from the ISA: cores x clock x operations per cycle of the unit.

Per-core, per-cycle figures (dense multiply-accumulate = 2 operations):

- AVX-512 FMA fp32: 2 FMA units x 16 lanes x 2 = 64 FLOP/cycle (AVX2: 2 x 8 x 2 = 32);
- AMX-BF16: 1024 FLOP/cycle, AMX-INT8: 2048 OP/cycle (Intel's figures for 4th-gen Xeon, quoted
  in PyTorch's AMX recipe, https://pytorch.org/tutorials/recipes/amx.html: "2,048 INT8
  operations per cycle … 1,024 BF16 operations per cycle, as compared to 64 FP32");
- AVX512-BF16 ``vdpbf16ps`` 128, AVX512-FP16 2 x 32 x 2 = 128, AVX-512 VNNI 256 (2 x 64 x 2);
- NVIDIA per SM per cycle: sm_90 (H100/H200) bf16/fp16 tensor cores 4096, int8 8192, fp32 256;
  sm_80 (A100) 2048 / 4096 / 128 (dense, no sparsity).

The clock is the cpufreq maximum when the system exposes it, else ``/proc/cpuinfo`` "cpu MHz"
(under a hypervisor usually the nominal clock: turbo can beat it, so a measured fraction above
100 % means the cores ran faster than the clock used here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accelscope.hardware.cpu import CpuInfo
from accelscope.roofline.ceilings import Theoretical

__all__ = ["CpuTopology", "parse_topology", "theoretical_cpu", "theoretical_gpu"]


@dataclass(frozen=True, kw_only=True)
class CpuTopology:
    """What ``/proc/cpuinfo`` says about SMT and the clock."""

    logical: int
    distinct_cores: int
    siblings: int | None
    cores_per_package: int | None
    mhz: float | None
    hypervisor: bool


def parse_topology(text: str) -> CpuTopology:
    """Parse ``/proc/cpuinfo`` text: logical CPUs, distinct (package, core id) pairs,
    ``siblings``, ``cpu cores``, the first ``cpu MHz`` and the ``hypervisor`` flag."""
    blocks = [b for b in text.split("\n\n") if "processor" in b]
    cores, siblings, per_package, mhz, hypervisor = set(), None, None, None, False
    for block in blocks:
        fields = dict(
            (k.strip(), v.strip())
            for k, _, v in (line.partition(":") for line in block.splitlines())
            if k.strip()
        )
        cores.add((fields.get("physical id"), fields.get("core id")))
        if siblings is None and fields.get("siblings", "").isdigit():
            siblings = int(fields["siblings"])
        if per_package is None and fields.get("cpu cores", "").isdigit():
            per_package = int(fields["cpu cores"])
        if mhz is None and re.fullmatch(r"[\d.]+", fields.get("cpu MHz", "")):
            mhz = float(fields["cpu MHz"])
        hypervisor = hypervisor or " hypervisor" in f" {fields.get('flags', '')} "
    distinct = len({c for c in cores if c[1] is not None}) or len(blocks)
    return CpuTopology(
        logical=len(blocks),
        distinct_cores=distinct,
        siblings=siblings,
        cores_per_package=per_package,
        mhz=mhz,
        hypervisor=hypervisor,
    )


def _cpu_rates(cpu: CpuInfo) -> dict[str, tuple[int, str]]:
    fp32 = (
        (64, "AVX-512 FMA: 2 units x 16 fp32 lanes x 2")
        if cpu.has("avx512f")
        else (
            (32, "AVX2 FMA: 2 units x 8 lanes x 2") if cpu.has("fma") else (8, "SSE: 4 lanes x 2")
        )
    )
    rates = {"fp32": fp32}
    if cpu.has("amx_bf16"):
        rates["bf16"] = (1024, "AMX-BF16 tiles")
    elif cpu.has("avx512_bf16"):
        rates["bf16"] = (128, "AVX512-BF16 vdpbf16ps: 2 units x 32 bf16 x 2")
    if cpu.has("amx_fp16"):
        rates["fp16"] = (1024, "AMX-FP16 tiles")
    elif cpu.has("avx512_fp16"):
        rates["fp16"] = (128, "AVX512-FP16: 2 units x 32 lanes x 2")
    if cpu.has("amx_int8"):
        rates["int8"] = (2048, "AMX-INT8 tiles")
    elif cpu.has("avx512_vnni"):
        rates["int8"] = (256, "AVX-512 VNNI: 2 units x 64 int8 x 2")
    elif cpu.has("avx_vnni"):
        rates["int8"] = (128, "AVX-VNNI: 2 units x 32 int8 x 2")
    return rates


def theoretical_cpu(cpu: CpuInfo, topology: CpuTopology, threads: int) -> Theoretical:
    """ISA peak of ``threads`` cores (at most the physical cores) with the derivation text."""
    if cpu.max_freq_mhz:
        mhz, source = cpu.max_freq_mhz, "cpufreq cpuinfo_max_freq (maximum clock)"
    elif topology.mhz:
        mhz, source = (
            topology.mhz,
            ("/proc/cpuinfo 'cpu MHz' (no cpufreq here: the nominal clock; turbo may run higher)"),
        )
    else:
        return Theoretical(derivation="unknown: the clock is not exposed (no cpufreq, no cpu MHz)")
    cores = max(1, min(threads, cpu.physical_cores))
    rates = _cpu_rates(cpu)
    flops = {d: cores * mhz * 1e6 * per_cycle for d, (per_cycle, _) in rates.items()}
    smt = (
        "SMT visible: siblings > cpu cores, so some logical CPUs share a core"
        if topology.siblings
        and topology.cores_per_package
        and topology.siblings > topology.cores_per_package
        else f"{topology.distinct_cores} distinct core ids for {topology.logical} logical "
        f"CPUs (siblings = cpu cores: no SMT visible)"
    )
    if topology.hypervisor:
        smt += (
            "; under a hypervisor, which may still place vCPUs on hyperthreads of one "
            "physical core (not visible from inside; a measured fp32 rate above one core's "
            "peak rules it out)"
        )
    units = "; ".join(f"{d} {per} ({why})" for d, (per, why) in rates.items())
    derivation = (
        f"{cores} core(s) x {mhz / 1000:.2f} GHz [{source}] x FLOP/cycle/core: "
        f"{units}. Topology: {smt}. Sources: Intel via pytorch.org/tutorials/recipes/"
        f"amx.html (AMX 1024 bf16 / 2048 int8, AVX-512 64 fp32 per cycle)."
    )
    return Theoretical(flops_per_s=flops, derivation=derivation)


_SM_RATES = {  # compute capability major.minor -> (bf16/fp16, int8, fp32) per SM per cycle
    "9.0": (4096, 8192, 256),
    "8.0": (2048, 4096, 128),
}


def theoretical_gpu(
    name: str,
    compute_capability: str,
    sms: int | None,
    clock_khz: int | None,
    memory_clock_khz: int | None,
    bus_width_bits: int | None,
) -> Theoretical:
    """ISA peak of an NVIDIA GPU from its SM count and clocks (dense tensor-core rates)."""
    bandwidth = (
        2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8
        if memory_clock_khz and bus_width_bits
        else None
    )
    rates = _SM_RATES.get(compute_capability)
    if rates is None or not sms or not clock_khz:
        why = f"no per-SM table for sm_{compute_capability}" if rates is None else "clock unknown"
        return Theoretical(
            bandwidth_bytes_per_s=bandwidth, derivation=f"{name}: FLOP peak unknown ({why})"
        )
    half, int8, fp32 = rates
    hz = clock_khz * 1e3
    flops = {
        "bf16": sms * hz * half,
        "fp16": sms * hz * half,
        "int8": sms * hz * int8,
        "fp32": sms * hz * fp32,
    }
    derivation = (
        f"{name}: {sms} SMs x {hz / 1e9:.2f} GHz x per-SM-cycle (sm_{compute_capability}"
        f" dense): bf16/fp16 {half}, int8 {int8}, fp32 {fp32}; memory: 2 x "
        f"{(memory_clock_khz or 0) / 1e6:.2f} GHz x {bus_width_bits or 0}-bit bus"
    )
    return Theoretical(flops_per_s=flops, bandwidth_bytes_per_s=bandwidth, derivation=derivation)
