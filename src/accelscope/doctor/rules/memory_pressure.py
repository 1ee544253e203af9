"""Memory pressure: the script's resident memory near the machine's, the system swapping, or
the GPU's memory nearly full.

Host memory comes from telemetry sampled outside the script (RSS of the script and its
workers, available memory, swap). GPU memory is read inside the loop's process at the end
(:mod:`accelscope.doctor.inprocess.gpu_memory`): the caching allocator's reserved peak against
the device's memory, and its retries: each time a ``cudaMalloc`` failed, it freed its whole
cache, synchronised and tried again, which slows the step long before an out-of-memory error.
"""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext
from accelscope.doctor.profile import GpuMemory

RSS_FRACTION = 0.85
AVAILABLE_FRACTION = 0.05
SWAP_GROWTH_BYTES = 64 * 2**20
GPU_RESERVED_FRACTION = 0.90
"""Reserved peak at or above this fraction of the device's memory: little room left."""
FRAGMENTED_FRACTION = 0.25
"""Reserved beyond allocated by this fraction of the device: the cache is fragmented."""
_TITLE = "memory pressure"
_GIB = 2**30


def _gpu_evidence(memory: GpuMemory) -> dict[str, object]:
    return {
        "gpu": memory.device,
        "gpu_allocated_peak_bytes": memory.allocated_peak_bytes,
        "gpu_reserved_peak_bytes": memory.reserved_peak_bytes,
        "gpu_memory_bytes": memory.total_bytes,
        "gpu_alloc_retries": memory.alloc_retries,
        "gpu_ooms": memory.ooms,
    }


def _gpu_reasons(memory: GpuMemory) -> list[str]:
    reasons = []
    total = memory.total_bytes
    if total > 0 and memory.reserved_peak_bytes >= GPU_RESERVED_FRACTION * total:
        reasons.append(
            f"GPU memory peaked at {memory.reserved_peak_bytes / total:.0%} of "
            f"{total / _GIB:.0f} GiB reserved ({memory.allocated_peak_bytes / _GIB:.1f} GiB held "
            "by tensors)"
        )
    if memory.alloc_retries:
        reasons.append(
            f"the CUDA caching allocator had to free its cache and retry {memory.alloc_retries} "
            "time(s) (each retry synchronises the GPU)"
        )
    if memory.ooms:
        reasons.append(f"{memory.ooms} CUDA out-of-memory error(s) were raised")
    return reasons


class MemoryPressure:
    """Fires when peak RSS >= 85 % of memory, available memory <= 5 %, swap grew by 64 MiB,
    the GPU's reserved peak >= 90 % of its memory, or the CUDA allocator retried."""

    name = "memory-pressure"

    def check(self, ctx: RuleContext) -> Finding:
        """Host memory from telemetry and GPU memory from the loop's process."""
        threshold = (
            f"peak RSS >= {RSS_FRACTION:.0%} of memory, available <= "
            f"{AVAILABLE_FRACTION:.0%}, or swap grows >= 64 MiB; GPU reserved peak >= "
            f"{GPU_RESERVED_FRACTION:.0%} of its memory, or CUDA allocator retries"
        )
        telemetry = ctx.telemetry
        host = telemetry is not None and bool(telemetry.samples) and ctx.memory_bytes > 0
        gpu = ctx.profile.gpu_memory
        if not host and gpu is None:
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=NOT_APPLICABLE,
                summary="no telemetry samples"
                + (f"; GPU memory {ctx.profile.gpu_memory_status}" if ctx.device == "cuda" else ""),
                threshold=threshold,
            )
        evidence: dict[str, object] = {}
        reasons: list[str] = []
        clear: list[str] = []
        swapped = False
        if host:
            assert telemetry is not None
            samples = telemetry.samples
            peak = max(s.process_rss_bytes for s in samples)
            least = min(s.available_bytes for s in samples)
            swap_growth = max(s.swap_used_bytes for s in samples) - samples[0].swap_used_bytes
            evidence |= {
                "peak_rss_bytes": peak,
                "memory_bytes": ctx.memory_bytes,
                "min_available_bytes": least,
                "swap_growth_bytes": swap_growth,
            }
            if peak >= RSS_FRACTION * ctx.memory_bytes:
                reasons.append(f"the script peaked at {peak / ctx.memory_bytes:.0%} of memory")
            if least <= AVAILABLE_FRACTION * ctx.memory_bytes:
                reasons.append(f"available memory fell to {least / ctx.memory_bytes:.1%}")
            if swap_growth >= SWAP_GROWTH_BYTES:
                swapped = True
                reasons.append(f"swap use grew by {swap_growth / 2**20:.0f} MiB")
            clear.append(f"peak RSS {peak / _GIB:.2f} GiB of {ctx.memory_bytes / _GIB:.1f} GiB")
        else:
            evidence["host_memory"] = "not measured: no telemetry samples"
        gpu_reasons: list[str] = []
        if gpu is not None:
            evidence |= _gpu_evidence(gpu)
            gpu_reasons = _gpu_reasons(gpu)
            reasons += gpu_reasons
            clear.append(
                f"GPU {gpu.allocated_peak_bytes / _GIB:.1f} GiB allocated / "
                f"{gpu.reserved_peak_bytes / _GIB:.1f} GiB reserved of "
                f"{gpu.total_bytes / _GIB:.0f} GiB"
            )
        elif ctx.device == "cuda":
            evidence["gpu_memory"] = ctx.profile.gpu_memory_status
        if not reasons:
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=CLEAR,
                summary="; ".join(clear),
                threshold=threshold,
                evidence=evidence,
            )
        advice = []
        if len(reasons) > len(gpu_reasons):
            advice.append(
                "Lower the batch size or the number of workers (each holds a copy of the "
                "dataset object), or cache less in memory."
            )
        if gpu_reasons:
            assert gpu is not None
            fragmented = (
                gpu.reserved_peak_bytes - gpu.allocated_peak_bytes
                >= FRAGMENTED_FRACTION * gpu.total_bytes
            )
            advice.append(
                "On the GPU: a smaller batch, activation checkpointing, or bf16 autocast (half "
                "the activation memory)"
                + (
                    "; the allocator holds far more than the tensors need, so try "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation."
                    if fragmented or gpu.alloc_retries
                    else "."
                )
            )
        high = swapped or (gpu is not None and bool(gpu.alloc_retries or gpu.ooms))
        return Finding(
            rule=self.name,
            title=_TITLE,
            status=FIRED,
            summary="; ".join(reasons),
            threshold=threshold,
            share=None,
            severity="high" if high else "medium",
            evidence=evidence,
            advice=" ".join(advice),
        )


RULE = MemoryPressure()
