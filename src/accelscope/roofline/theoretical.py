"""The theoretical peak from the ISA: cores x clock x operations per cycle of the unit.

Per-core, per-cycle figures (dense multiply-accumulate = 2 operations):

- AVX-512 FMA fp32: 2 FMA units x 16 lanes x 2 = 64 FLOP/cycle (AVX2: 2 x 8 x 2 = 32);
- AMX-BF16: 1024 FLOP/cycle, AMX-INT8: 2048 OP/cycle (Intel's figures for 4th-gen Xeon, quoted
  in PyTorch's AMX recipe, https://pytorch.org/tutorials/recipes/amx.html: "2,048 INT8
  operations per cycle … 1,024 BF16 operations per cycle, as compared to 64 FP32");
- AVX512-BF16 ``vdpbf16ps`` 128, AVX512-FP16 2 x 32 x 2 = 128, AVX-512 VNNI 256 (2 x 64 x 2);
- NVIDIA GPUs: the datasheet's dense figures for the GPUs it knows by name (:data:`DATASHEETS`:
  H100, H200, A100, L40S, L4; the datasheets quote tensor rates with sparsity, halved here), at the
  clock the datasheet assumes. Otherwise per SM per cycle x the SM clock the driver reports:
  sm_90 (Hopper) bf16/fp16 4096, tf32 2048, int8 8192, fp32 256; sm_89 (Ada) 1024 / 512 / 2048 /
  256; sm_80 (A100) 2048 / 1024 / 4096 / 128 (dense). CUDA 13 reports no clock: then the peak is
  "not known". fp32 is IEEE fp32 on the CUDA cores, tf32 the tensor cores' TF32.

The clock is the cpufreq maximum when the system exposes it, else ``/proc/cpuinfo`` "cpu MHz"
(under a hypervisor usually the nominal clock: turbo can beat it, so a measured fraction above
100 % means the cores ran faster than the clock used here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accelscope.hardware.cpu import CpuInfo
from accelscope.roofline.ceilings import Theoretical

__all__ = [
    "DATASHEETS",
    "CpuTopology",
    "Datasheet",
    "datasheet_for",
    "parse_topology",
    "theoretical_cpu",
    "theoretical_gpu",
]


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


@dataclass(frozen=True)
class Datasheet:
    """A GPU's published dense peaks (FLOP/s per dtype; the datasheet's sparsity figures
    halved), memory bandwidth (bytes/s), SM count, and where the figures come from."""

    product: str
    flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float
    sms: int
    source: str


def _sheet(
    product: str,
    tera: tuple[float, float, float, float | None, float],
    bandwidth_tb_s: float,
    sms: int,
    page: str,
) -> Datasheet:
    """``tera``: dense fp32, tf32, bf16 (= fp16), fp8 (None: no fp8 unit) and int8 in T(FL)OP/s."""
    fp32, tf32, half, fp8, int8 = tera
    flops = {"fp32": fp32, "tf32": tf32, "bf16": half, "fp16": half, "int8": int8}
    if fp8 is not None:
        flops["fp8"] = fp8
    return Datasheet(
        product=product,
        flops_per_s={k: v * 1e12 for k, v in flops.items()},
        bandwidth_bytes_per_s=bandwidth_tb_s * 1e12,
        sms=sms,
        source=f"NVIDIA {product} datasheet ({page})",
    )


_H100_PAGE = "nvidia.com/en-us/data-center/h100"
_H200_PAGE = "nvidia.com/en-us/data-center/h200"
_A100_PAGE = "nvidia.com/en-us/data-center/a100"
DATASHEETS: tuple[tuple[tuple[str, ...], Datasheet], ...] = (
    (("h200", "nvl"), _sheet("H200 NVL", (60, 417.5, 835.5, 1670.5, 1670.5), 4.8, 132, _H200_PAGE)),
    (("h200",), _sheet("H200 SXM", (67, 494.5, 989.5, 1979, 1979), 4.8, 132, _H200_PAGE)),
    (("h100", "nvl"), _sheet("H100 NVL", (60, 417.5, 835.5, 1670.5, 1670.5), 3.9, 132, _H100_PAGE)),
    (("h100", "pcie"), _sheet("H100 PCIe", (51, 378, 756.5, 1513, 1513), 2.0, 114, _H100_PAGE)),
    (("h100",), _sheet("H100 SXM", (67, 494.5, 989.5, 1979, 1979), 3.35, 132, _H100_PAGE)),
    (
        ("a100", "pcie", "80gb"),
        _sheet("A100 80GB PCIe", (19.5, 156, 312, None, 624), 1.935, 108, _A100_PAGE),
    ),
    (
        ("a100", "80gb"),
        _sheet("A100 80GB SXM", (19.5, 156, 312, None, 624), 2.039, 108, _A100_PAGE),
    ),
    (("a100",), _sheet("A100 40GB", (19.5, 156, 312, None, 624), 1.555, 108, _A100_PAGE)),
    (
        ("l40s",),
        _sheet("L40S", (91.6, 183, 362, 733, 733), 0.864, 142, "nvidia.com/en-us/data-center/l40s"),
    ),
    (
        ("l4",),
        _sheet("L4", (30.3, 60, 121, 242.5, 242.5), 0.3, 58, "nvidia.com/en-us/data-center/l4"),
    ),
)
"""Known GPUs by words of their device name (the first entry whose words all occur wins)."""


def datasheet_for(name: str) -> Datasheet | None:
    """The datasheet of the GPU named ``name`` (``NVIDIA H100 80GB HBM3``), or ``None``: the
    first entry of :data:`DATASHEETS` whose words are all words of the name."""
    words = set(re.split(r"[\s\-_]+", name.lower()))
    return next((sheet for keys, sheet in DATASHEETS if set(keys) <= words), None)


_SM_RATES = {  # compute capability -> per SM per cycle, dense: bf16/fp16, tf32, int8, fp32
    "9.0": (4096, 2048, 8192, 256),
    "8.9": (1024, 512, 2048, 256),
    "8.0": (2048, 1024, 4096, 128),
}


def theoretical_gpu(
    name: str,
    compute_capability: str,
    sms: int | None,
    clock_khz: int | None,
    memory_clock_khz: int | None,
    bus_width_bits: int | None,
) -> Theoretical:
    """The peak of an NVIDIA GPU: its datasheet's dense figures when the name is known (at the
    clock the datasheet assumes; scaled by SM count for a partition such as a MIG slice), else
    SMs x the SM clock the driver reports x the per-SM tensor-core rate. ``None`` for a figure
    the device does not report (CUDA 13 removed the clock fields from ``cudaDeviceProp``) makes
    that figure "not known", never 0.
    """
    sheet = datasheet_for(name)
    if sheet is not None:
        return _from_datasheet(name, sheet, sms)
    bandwidth = (
        2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8
        if memory_clock_khz and bus_width_bits
        else None
    )
    memory = (
        f"memory: 2 x {memory_clock_khz / 1e6:.2f} GHz x {bus_width_bits}-bit bus (the device's "
        "reported memory clock)"
        if bandwidth and memory_clock_khz
        else "memory bandwidth not known (no memory clock or bus width reported)"
    )
    rates = _SM_RATES.get(compute_capability)
    if rates is None or not sms or not clock_khz:
        if rates is None:
            why = f"no datasheet entry for it and no per-SM table for sm_{compute_capability}"
        elif not sms:
            why = "the SM count is not reported"
        else:
            why = (
                "no datasheet entry for it, and its device properties carry no SM clock "
                "(CUDA 13 removed cudaDeviceProp.clockRate)"
            )
        return Theoretical(
            bandwidth_bytes_per_s=bandwidth,
            derivation=f"{name}: FLOP peak not known: {why}; {memory}",
        )
    half, tf32, int8, fp32 = rates
    hz = clock_khz * 1e3
    flops = {
        "fp32": sms * hz * fp32,
        "tf32": sms * hz * tf32,
        "bf16": sms * hz * half,
        "fp16": sms * hz * half,
        "int8": sms * hz * int8,
    }
    derivation = (
        f"{name}: {sms} SMs x {hz / 1e9:.2f} GHz (the maximum SM clock the driver reports; "
        "a datasheet may quote tensor rates at a lower clock) x per-SM-cycle "
        f"(sm_{compute_capability} dense): bf16/fp16 {half}, tf32 {tf32}, int8 {int8}, "
        f"fp32 {fp32} (no datasheet entry for this name); {memory}"
    )
    return Theoretical(flops_per_s=flops, bandwidth_bytes_per_s=bandwidth, derivation=derivation)


def _from_datasheet(name: str, sheet: Datasheet, sms: int | None) -> Theoretical:
    scale = sms / sheet.sms if sms and sms < sheet.sms else 1.0
    flops = {dtype: rate * scale for dtype, rate in sheet.flops_per_s.items()}
    figures = ", ".join(
        f"{dtype} {rate / 1e12:,.1f} T{'OP' if dtype == 'int8' else 'FLOP'}/s"
        for dtype, rate in flops.items()
    )
    partition = (
        f"; scaled by {sms}/{sheet.sms} SMs (a partition of the full GPU)" if scale < 1 else ""
    )
    derivation = (
        f"{name}: {sheet.source}, at the clock the datasheet assumes; dense rates (sparsity "
        f"figures halved): {figures}{partition}; memory {sheet.bandwidth_bytes_per_s / 1e12:.2f}"
        " TB/s (datasheet). fp32 is the CUDA cores' IEEE rate; tf32 the tensor cores'."
    )
    return Theoretical(
        flops_per_s=flops, bandwidth_bytes_per_s=sheet.bandwidth_bytes_per_s, derivation=derivation
    )
