"""Compute-bound on the device: the GPU, not the host, sets the pace of each step.

In a GPU-bound loop the host queues a step's kernels quickly and then waits, usually inside the
one readback it makes per step (``loss.item()``), for the GPU to finish them. Host wall time
calls that wait a synchronisation; the CUDA events around it say the GPU was computing all along
(:mod:`accelscope.doctor.gpu`). What helps then is cheaper GPU work (bf16/fp16 tensor cores,
fused kernels), not fewer readbacks.
"""

from __future__ import annotations

from accelscope.doctor.device_timeline import (
    DEVICE_BOUND_COMPUTE,
    DEVICE_BOUND_SM_ACTIVE,
    TimelineVerdict,
)
from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity
from accelscope.doctor.gpu import WAIT_BOUND, WORK_BOUND
from accelscope.doctor.rules._timeline import timeline_evidence
from accelscope.doctor.rules.tensor_idle import DRAM_BUSY_PERCENT

HIGH = 0.8
_TITLE = "compute-bound on the device"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


class DeviceBound:
    """Fires when the host waits for queued GPU work >= 50 % of step time, or the GPU's
    operators (timed on the census step) take >= 80 % of it."""

    name = "device-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """The GPU's pace figures against the thresholds, with GPU telemetry as evidence."""
        threshold = (
            f"the host waits for queued GPU work >= {WAIT_BOUND:.0%} of step time, or the "
            f"GPU's operators take >= {WORK_BOUND:.0%} of it (CUDA events)"
        )
        if ctx.timeline is not None:
            return _from_timeline(ctx, ctx.timeline)
        pace = ctx.pace
        if ctx.device != "cuda" or pace is None:
            why = (
                "the loop ran on the CPU"
                if ctx.device != "cuda"
                else ctx.profile.device_status or "not available: no CUDA timeline"
            )
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=NOT_APPLICABLE,
                summary=why,
                threshold=threshold,
            )
        evidence = pace.evidence()
        if ctx.gpu_activity is not None:
            evidence |= ctx.gpu_activity.evidence()
        step_s = pace.step_s
        wait = pace.wait_share or 0.0
        work = pace.work_share
        work_text = (
            f"the GPU's operators take {_ms(work * step_s)} of each {_ms(step_s)} step "
            f"({work:.0%}, measured on the census step)"
            if work is not None
            else f"the GPU's work per step is {pace.work_status}"
        )
        if not pace.bound:
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=CLEAR,
                summary=(
                    f"the host waits for queued GPU work {wait:.0%} of step time; " + work_text
                ),
                threshold=threshold,
                share=pace.share,
                evidence=evidence,
            )
        activity = ctx.gpu_activity
        sm = activity.sm_active_percent if activity is not None else None
        if sm is not None and sm < DEVICE_BOUND_SM_ACTIVE * 100:
            return Finding(  # a figure another signal contradicts is not a verdict
                rule=self.name,
                title=_TITLE,
                status=CLEAR,
                summary=(
                    f"not device-bound: GPM SM active is {sm:.0f} % (< "
                    f"{DEVICE_BOUND_SM_ACTIVE:.0%}), which contradicts the event figures ("
                    + work_text
                    + "); the GPU is idle or kept busy by tiny kernels"
                ),
                threshold=threshold + f", and GPM SM active >= {DEVICE_BOUND_SM_ACTIVE:.0%}",
                share=pace.share,
                evidence=evidence,
            )
        if wait >= WAIT_BOUND:
            syncs = ctx.breakdown.counts_per_step.get("syncs", 0.0)
            inside = (
                f"inside readbacks ({syncs:.1f} per step: .item(), .cpu(), synchronize)"
                if (pace.sync_wait_share or 0.0) >= (pace.copy_wait_share or 0.0)
                else "inside blocking host->device copies, which drain the queue first"
            )
            summary = (
                f"the GPU sets the pace: the host waits {_ms(wait * step_s)} per step "
                f"({wait:.0%}) for work it had queued on the GPU, {inside}; that wait is GPU "
                "compute, not a synchronisation cost; " + work_text
            )
        else:
            summary = f"the GPU sets the pace: {work_text}"
        what_ifs = ctx.cheaper_math_what_ifs()
        dram = activity.dram_active_percent if activity is not None else None
        memory_bound = dram is not None and dram >= DRAM_BUSY_PERCENT
        advice = (
            "The GPU is busy: make its work cheaper. "
            + (
                f"Its memory bandwidth is busy {dram:.0f} % of the time, so fewer bytes help "
                "most: lower precision halves them, fusion saves whole passes. "
                if memory_bound
                else ""
            )
            + (
                "Run the forward under torch.autocast with bf16 (or fp16 with a GradScaler) so "
                "matrix multiplies and convolutions use the tensor cores; "
                if not ctx.autocast and ctx.fast_low_precisions()
                else ""
            )
            + "fuse elementwise kernels with torch.compile. Readbacks that wait for the GPU "
            "cost nothing extra: removing them would not shorten the step."
        )
        return Finding(
            rule=self.name,
            title=_TITLE,
            status=FIRED,
            summary=summary,
            threshold=threshold,
            share=pace.share,
            severity=severity(pace.share, HIGH),
            evidence=evidence,
            advice=advice,
            what_ifs=what_ifs,
        )


def _from_timeline(ctx: RuleContext, timeline: TimelineVerdict) -> Finding:
    """Device-bound from the GPU's own timeline: kernel time (a union of the GPU's own
    intervals, never summed event pairs) over the step, and GPM SM activity where measured."""
    threshold = (
        f"kernels cover >= {DEVICE_BOUND_COMPUTE:.0%} of the step on the GPU's own timeline "
        f"(torch.profiler), and GPM SM active >= {DEVICE_BOUND_SM_ACTIVE:.0%} where measured"
    )
    evidence = timeline_evidence(ctx)
    if ctx.gpu_activity is not None:
        evidence |= ctx.gpu_activity.evidence()
    notes = "; ".join(timeline.notes)
    if timeline.bottleneck not in ("compute", "memory"):
        return Finding(
            rule=DeviceBound.name,
            title=_TITLE,
            status=CLEAR,
            summary=(
                f"kernels run {timeline.kernel_share:.0%} of the step on the GPU's own timeline "
                f"(it names {timeline.bottleneck})" + (f"; {notes}" if notes else "")
            ),
            threshold=threshold,
            share=timeline.kernel_share,
            evidence=evidence,
        )
    cheaper = ctx.cheaper_math_what_ifs()
    if timeline.bottleneck == "memory" or timeline.matrix_precision == "reduced":
        what_ifs = tuple(w for w in cheaper if w == "compile")  # never lower precision
    else:
        what_ifs = cheaper
    advice = timeline.advice[0].upper() + timeline.advice[1:] + "."
    return Finding(
        rule=DeviceBound.name,
        title="memory-bound on the device" if timeline.bottleneck == "memory" else _TITLE,
        status=FIRED,
        summary=timeline.headline + " (the GPU's own timeline)" + (f"; {notes}" if notes else ""),
        threshold=threshold,
        share=timeline.kernel_share,
        severity=severity(timeline.kernel_share, HIGH),
        evidence=evidence,
        advice=advice,
        what_ifs=what_ifs,
    )


RULE = DeviceBound()
