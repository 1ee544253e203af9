"""The one table of causes a GPU step's time is split into: for each, what it is, the share of
the step at which it is reported (a finding worth fixing), the rule that reports it live, its
advice and the what-ifs that test that advice. The device timeline's verdict
(:mod:`.device_timeline`), the live rules (:mod:`.rules`) and every view read it from here, so
``doctor SCRIPT`` and ``doctor --trace`` cannot disagree on a threshold or a text.

Two levels, both here:

* a cause at or above its own :attr:`Cause.threshold` is **reported** (a fired finding live, a
  listed cause in ``--trace``);
* the verdict **names** one bottleneck only when the largest cause holds at least
  :data:`BOTTLENECK_SHARE` of the step (for kernels: the device-bound test of
  :mod:`.device_timeline`); below that it is ``mixed``, and the reported causes say where to
  start.

On the CPU (no GPU time) the host-side rules use the same thresholds and advice for the same
causes (readbacks, input waits, launch overhead)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BOTTLENECK_SHARE",
    "CAUSES",
    "VERDICT_ADVICE",
    "Cause",
    "advice_for",
    "describe",
    "sentence",
]

BOTTLENECK_SHARE = 0.4
"""The largest cause is named the bottleneck only at or above this share of the step."""


@dataclass(frozen=True, kw_only=True)
class Cause:
    """One cause of step time.

    Attributes:
        key: Its name in a step's partition (``sync``, ``launch`` ...).
        title: How a verdict names it (``synchronisation-bound``).
        description: What its time is, in a few words.
        threshold: The share of the step at or above which it is reported; ``None``: never
            reported on its own (time no event explains, or a remainder).
        high: The share at or above which a reported cause is of high severity.
        rule: The live rule that reports it (a module of :mod:`accelscope.doctor.rules`);
            ``None``: named by the timeline's verdict only.
        advice: What to change (lower case, no final stop: views make it a sentence).
        what_ifs: What-ifs that test the advice (names from :mod:`accelscope.doctor.whatif`).
        gpu_idle: Its time is the GPU running nothing, the host busy with it (readbacks, the
            DataLoader, launches...); False where the device itself works (kernels, copies,
            NCCL). ``other`` counts as idle: mostly short host gaps.
    """

    key: str
    title: str
    description: str
    threshold: float | None
    high: float
    rule: str | None
    advice: str
    what_ifs: tuple[str, ...] = ()
    gpu_idle: bool = True

    @property
    def reported_at(self) -> float:
        """:attr:`threshold`, for a cause that has one (raises for one that is never
        reported)."""
        if self.threshold is None:
            raise ValueError(f"cause {self.key} is never reported on its own")
        return self.threshold

    def __post_init__(self) -> None:
        if self.threshold is not None and not 0.0 < self.threshold <= self.high <= 1.0:
            raise ValueError(f"cause {self.key}: threshold {self.threshold}, high {self.high}")


_CAUSES = (
    Cause(
        key="compute",
        gpu_idle=False,
        title="compute-bound on the device",
        description="matrix kernels (GEMM, convolution, attention) and unclassified kernels",
        threshold=0.8,
        high=0.8,
        rule="device-bound",
        advice=(
            "the GPU's matrix kernels set the pace and run in fp32 (or a precision the kernel "
            "names do not give): lower precision (bf16/fp16 autocast) for the tensor cores, "
            "compiled kernels (torch.compile), or a larger GPU"
        ),
        what_ifs=("bf16", "fp16", "compile"),
    ),
    Cause(
        key="memory",
        gpu_idle=False,
        title="memory-bound on the device",
        description=(
            "memory-bound kernels (elementwise, normalisation, softmax, reductions, copies)"
        ),
        threshold=0.8,
        high=0.8,
        rule="device-bound",
        advice=(
            "memory-bound kernels (elementwise, normalisation, softmax, reductions) set the "
            "pace: fuse them (torch.compile, fused kernels: fused LayerNorm/attention, "
            "foreach/fused optimizers) so each tensor is read once; lower precision of the "
            "matmuls will not help"
        ),
        what_ifs=("compile",),
    ),
    Cause(
        key="communication",
        gpu_idle=False,
        title="communication-bound",
        description="NCCL communication on the device",
        threshold=BOTTLENECK_SHARE,
        high=0.6,
        rule=None,
        advice="overlap communication with compute (bucketing, gradient accumulation)",
    ),
    Cause(
        key="h2d_pageable",
        gpu_idle=False,
        title="pageable host->device copies",
        description="host->device copies from pageable memory",
        threshold=0.05,
        high=0.25,
        rule="pageable-copies",
        advice=(
            "copies from pageable memory: use a DataLoader with pin_memory=True and "
            ".to(device, non_blocking=True), keep the data on the device, or send uint8 and "
            "convert on the device"
        ),
        what_ifs=("pin_memory",),
    ),
    Cause(
        key="h2d_pinned",
        gpu_idle=False,
        title="host->device copies",
        description="host->device copies from pinned memory",
        threshold=BOTTLENECK_SHARE,
        high=0.6,
        rule=None,
        advice=(
            "host->device copies set the pace: keep the data on the device, send smaller "
            "dtypes (uint8), overlap copies with compute (non_blocking=True on a side stream)"
        ),
    ),
    Cause(
        key="sync",
        title="synchronisation-bound",
        description="readbacks and synchronisations (.item(), .cpu(), synchronize)",
        threshold=0.15,
        high=0.40,
        rule="sync-bound",
        advice=(
            "per-step readbacks stall the step (on a GPU each one drains its queue): keep "
            "values as tensors (accumulate losses and norms on the device) and read them "
            "every N steps; avoid .item()/.cpu()/.tolist()/print per step"
        ),
    ),
    Cause(
        key="dataloader",
        title="input-bound",
        description="waiting for the DataLoader",
        threshold=0.20,
        high=0.50,
        rule="input-bound",
        advice=(
            "the input pipeline starves the loop: more DataLoader workers (num_workers), "
            "persistent_workers, prefetching, cheaper transforms, or cache decoded samples"
        ),
        what_ifs=("workers", "prefetch"),
    ),
    Cause(
        key="launch",
        title="overhead-bound",
        description="launching kernels and Python between them (launch-bound)",
        threshold=0.25,
        high=0.50,
        rule="overhead-bound",
        advice=(
            "fixed per-operator costs (Python, dispatch and, on a GPU, kernel launches) set the "
            "pace: a larger batch, torch.compile (on a GPU with mode='reduce-overhead': CUDA "
            "graphs), foreach/fused optimizers, fewer tiny operators"
        ),
        what_ifs=("batch", "compile"),
    ),
    Cause(
        key="allocator",
        title="allocator-bound",
        description="the allocator (cudaMalloc/cudaFree)",
        threshold=BOTTLENECK_SHARE,
        high=0.6,
        rule=None,
        advice=(
            "allocations stall the step: avoid per-step tensor creation of changing sizes, "
            "keep the caching allocator warm (expandable_segments)"
        ),
    ),
    Cause(
        key="host_compute",
        title="input-bound",
        description=("the host's own work between steps (preprocessing, Python on CPU tensors)"),
        threshold=0.20,
        high=0.50,
        rule="input-bound",
        advice=(
            "the host's own work (preprocessing on CPU tensors, Python) leaves the GPU idle: "
            "move it into DataLoader workers (num_workers > 0) or onto the GPU (copy the "
            "uint8 batch and augment there)"
        ),
        what_ifs=("workers",),
    ),
    Cause(
        key="other",
        title="other",
        description="other (device copies and memsets, short host gaps no event explains)",
        threshold=None,
        high=1.0,
        rule=None,
        advice="no single cause: look at the trace around the largest gaps",
    ),
    Cause(
        key="unexplained",
        title="unexplained",
        description=(
            "host time no recorded event explains, the GPU idle (a compile, an import or "
            "Python outside the profiler's reach): never named a bottleneck"
        ),
        threshold=None,
        high=1.0,
        rule=None,
        advice="no single cause: look at the trace around the largest gaps",
    ),
)

CAUSES: dict[str, Cause] = {c.key: c for c in _CAUSES}
"""Every cause a step's time is split into, by key."""

VERDICT_ADVICE: dict[str, str] = {
    "compute_reduced": (
        "the GPU's matrix kernels set the pace and already run in reduced precision on the "
        "tensor cores: fp8 (e4m3) matmuls where the GPU has them (Hopper and later), "
        "torch.compile, a larger batch, or less work (a smaller model)"
    ),
    "underfilled": (
        "the GPU is kept busy by tiny or under-filled kernels: a larger batch, fused operators "
        "(torch.compile), CUDA graphs to cut launch gaps; lower precision will not help here"
    ),
    "mixed": "no single cause dominates: the ranked shares say where to start",
    "not_diagnosed": (
        "profile steady steps: run a few steps before profiling (or "
        "torch.profiler.schedule(wait=1, warmup=2, active=5), calling prof.step() each step), "
        "so context creation, compilation and autotuning fall outside the recorded window"
    ),
}
"""Advice for the verdicts that are not a cause (``compute_reduced``: compute whose matrix
kernels already run in reduced precision); bf16 appears only under ``compute``."""


def advice_for(verdict: str) -> str:
    """The advice of a verdict: a cause's, else one of :data:`VERDICT_ADVICE`."""
    known = CAUSES.get(verdict)
    return known.advice if known is not None else VERDICT_ADVICE[verdict]


def describe(cause: str) -> str:
    """The description of ``cause`` (a cause this version does not know: its own name)."""
    known = CAUSES.get(cause)
    return known.description if known is not None else cause


def sentence(text: str) -> str:
    """``text`` as a sentence: capitalised, with a final stop."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
