"""What a training loop's what-ifs need beyond speed: memory at a larger micro-batch, and whether
a lower-precision recipe's loss stays with fp32's.

Memory at ``K`` times the micro-batch is estimated from the baseline's **measured** peak, not
from a model of the network (doctor sees a script, not a model shape): what a training loop
holds between steps (parameters, gradients, optimizer states: measured as tensor bytes in its
process, :class:`~accelscope.doctor.profile.TrainState`) does not grow with the batch, the
rest of the peak (activations and their temporaries) grows linearly, so
``peak(K) = peak + (K - 1) x (peak - held)``. On CUDA the peak is the caching allocator's
``max_memory_allocated`` and ``held`` the tensors' bytes; on the CPU it is the process's RSS
peak (telemetry) and ``held`` the RSS before the first step plus gradients and optimizer states
(the RSS counts the allocator's slack too, so the estimate errs high). The budget is the share
of the device at which the memory-pressure rule fires.

Loss: the what-if run and the re-measured fp32 baseline start from the same seed (weights, data
order), so their losses over the same measured steps can be set side by side. The *relative
loss gap* is ``|mean(what-if) - mean(fp32)| / |mean(fp32)|`` over the steps both recorded; a
recipe whose gap exceeds :data:`LOSS_GAP_BOUND`, or whose loss became non-finite, is
*diverging* and is not recommended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelscope.doctor.findings import RuleContext
from accelscope.doctor.rules.memory_pressure import GPU_RESERVED_FRACTION, RSS_FRACTION

__all__ = [
    "LOSS_GAP_BOUND",
    "BatchMemory",
    "LossComparison",
    "accumulation_speedup",
    "batch_memory",
    "compare_losses",
    "is_training",
]

LOSS_GAP_BOUND = 0.05
"""A relative loss gap above this (5 %) over the measured steps names a recipe diverging."""

_GIB = 2**30


def is_training(ctx: RuleContext) -> bool:
    """The loop called ``backward()`` and ``optimizer.step()``."""
    facts = ctx.profile.facts
    return facts is not None and facts.backward_seen and facts.optimizer_seen


@dataclass(frozen=True, kw_only=True)
class BatchMemory:
    """A training step's memory at ``factor`` x the micro-batch (estimated, bytes; see the
    module doc). ``source`` names the measured peak it scales."""

    factor: int
    source: str
    peak_bytes: int
    held_bytes: int
    budget_bytes: float

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise ValueError(f"factor must be >= 1, got {self.factor}")
        if not self.peak_bytes > self.held_bytes >= 0:
            raise ValueError(
                f"the peak ({self.peak_bytes} B) must exceed what is held between steps "
                f"({self.held_bytes} B) for activations to be separated from it"
            )
        if not (math.isfinite(self.budget_bytes) and self.budget_bytes > 0):
            raise ValueError(f"budget_bytes must be finite and > 0, got {self.budget_bytes}")

    @property
    def activation_bytes(self) -> int:
        """The part of the measured peak that grows with the micro-batch."""
        return self.peak_bytes - self.held_bytes

    @property
    def estimated_bytes(self) -> int:
        """``peak + (factor - 1) x activations``."""
        return self.peak_bytes + (self.factor - 1) * self.activation_bytes

    @property
    def fits(self) -> bool:
        """The estimate is within the budget."""
        return self.estimated_bytes <= self.budget_bytes

    def largest_factor(self) -> int:
        """The largest whole factor whose estimate fits the budget (0: not even today's)."""
        room = self.budget_bytes - self.peak_bytes
        if room < 0:
            return 0
        return 1 + int(room // self.activation_bytes)

    def sentence(self) -> str:
        """``x4: ~3.1 GiB estimated (measured peak 1.2 GiB + 3 x 0.6 GiB activations) of a
        6.8 GiB budget``."""
        return (
            f"x{self.factor}: ~{self.estimated_bytes / _GIB:.2f} GiB estimated (measured "
            f"{self.source} {self.peak_bytes / _GIB:.2f} GiB + {self.factor - 1} x "
            f"{self.activation_bytes / _GIB:.2f} GiB activations) of a "
            f"{self.budget_bytes / _GIB:.2f} GiB budget"
        )


def batch_memory(ctx: RuleContext, factor: int) -> tuple[BatchMemory | None, str]:
    """The memory estimate at ``factor`` x the micro-batch, or ``None`` and why not."""
    facts = ctx.profile.facts
    state = facts.train_state if facts is not None else None
    if state is None:
        return None, "not estimated: no optimizer state was measured"
    gpu = ctx.profile.gpu_memory
    if gpu is not None:
        peak, held = gpu.allocated_peak_bytes, state.held_bytes
        budget = GPU_RESERVED_FRACTION * gpu.total_bytes
        source = "CUDA allocated peak"
    else:
        samples = ctx.telemetry.samples if ctx.telemetry is not None else ()
        if not samples:
            return None, "not estimated: no memory telemetry of the run"
        if state.rss_before_first_step_bytes is None:
            return None, "not estimated: the RSS before the first step was not measured"
        peak = max(s.process_rss_bytes for s in samples)
        held = state.rss_before_first_step_bytes + state.gradient_bytes
        held += state.optimizer_state_bytes
        budget = RSS_FRACTION * ctx.memory_bytes
        source = "RSS peak"
    if peak <= held:
        return None, (
            f"not estimated: the measured {source} ({peak / _GIB:.2f} GiB) does not exceed what "
            f"the loop holds between steps ({held / _GIB:.2f} GiB)"
        )
    memory = BatchMemory(
        factor=factor, source=source, peak_bytes=peak, held_bytes=held, budget_bytes=budget
    )
    return memory, ""


def accumulation_speedup(ctx: RuleContext, factor: int) -> float:
    """Samples/s of gradient accumulation over ``factor`` micro-batches relative to today
    (estimated from the measured phases: forward, backward and input per micro-batch are
    unchanged, the optimizer's mean time per step is paid once per ``factor``)."""
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    b = ctx.breakdown
    step_s = b.step_mean_s
    optimizer_s = b.phase_mean_s.get("optimizer", 0.0)
    if not 0 <= optimizer_s <= step_s or step_s <= 0:
        raise ValueError(f"optimizer time {optimizer_s} s is not within the step's {step_s} s")
    return step_s / (step_s - optimizer_s * (factor - 1) / factor)


@dataclass(frozen=True, kw_only=True)
class LossComparison:
    """A what-if's losses against the fp32 baseline's over the same measured steps."""

    steps: int
    baseline_mean: float
    what_if_mean: float | None
    """``None``: the what-if's loss was not finite at some step."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError("a loss comparison needs at least one common step")
        if not math.isfinite(self.baseline_mean):
            raise ValueError("the baseline's mean loss must be finite")

    @property
    def gap(self) -> float:
        """The relative loss gap (``inf`` when the what-if's loss was not finite or the
        baseline's mean is 0 while the what-if's is not)."""
        if self.what_if_mean is None:
            return math.inf
        diff = abs(self.what_if_mean - self.baseline_mean)
        if self.baseline_mean == 0:
            return 0.0 if diff == 0 else math.inf
        return diff / abs(self.baseline_mean)

    @property
    def diverging(self) -> bool:
        """Gap above :data:`LOSS_GAP_BOUND`."""
        return self.gap > LOSS_GAP_BOUND

    def sentence(self) -> str:
        """What was compared and the verdict."""
        if self.what_if_mean is None:
            return (
                f"the loss became non-finite within {self.steps} measured steps "
                f"(fp32: mean {self.baseline_mean:.4g}): diverging"
            )
        verdict = (
            f"diverging (> {LOSS_GAP_BOUND:.0%})"
            if self.diverging
            else f"within {LOSS_GAP_BOUND:.0%}"
        )
        return (
            f"mean loss {self.what_if_mean:.4g} vs fp32's {self.baseline_mean:.4g} over the "
            f"same {self.steps} measured steps, same seed: relative gap {self.gap:.2%}, {verdict}"
        )


def compare_losses(
    baseline: dict[int, float | None], what_if: dict[int, float | None]
) -> LossComparison | None:
    """Compare over the steps both recorded (``None`` when none, or the baseline's own loss
    was not finite: then there is nothing to compare against)."""
    common = sorted(set(baseline) & set(what_if))
    base = [baseline[i] for i in common]
    if not common or any(v is None for v in base):
        return None
    other = [what_if[i] for i in common]
    other_mean = (
        None if any(v is None for v in other) else math.fsum(v for v in other if v is not None)
    )
    return LossComparison(
        steps=len(common),
        baseline_mean=math.fsum(v for v in base if v is not None) / len(common),
        what_if_mean=None if other_mean is None else other_mean / len(common),
    )
