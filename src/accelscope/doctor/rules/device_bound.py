"""Compute-bound on the device: the GPU, not the host, sets the pace of each step.

Read from the GPU's own timeline: kernels (matrix and memory-bound together, a union of the
GPU's own intervals) cover at least :data:`~accelscope.doctor.device_timeline.DEVICE_BOUND_COMPUTE`
of the step and, where GPM measured it, the SMs are active. A readback that waits for queued
kernels is kernel time there, not a synchronisation cost. What helps then is cheaper GPU work
(bf16/fp16 tensor cores, fused kernels), not fewer readbacks.
"""

from __future__ import annotations

from accelscope.doctor.causes import CAUSES, sentence
from accelscope.doctor.device_timeline import (
    DEVICE_BOUND_COMPUTE,
    DEVICE_BOUND_SM_ACTIVE,
    TimelineVerdict,
)
from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity
from accelscope.doctor.rules._timeline import timeline_evidence, without_gpu_time

HIGH = 0.8
_TITLE = "compute-bound on the device"
_THRESHOLD = (
    f"kernels cover >= {DEVICE_BOUND_COMPUTE:.0%} of the step on the GPU's own timeline "
    f"(torch.profiler), and GPM SM active >= {DEVICE_BOUND_SM_ACTIVE:.0%} where measured"
)


class DeviceBound:
    """Fires when the GPU's own timeline names the device (compute or memory-bound kernels)."""

    name = "device-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """The timeline's device test, with GPU telemetry as evidence."""
        if ctx.device != "cuda":
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=NOT_APPLICABLE,
                summary="the loop ran on the CPU",
                threshold=_THRESHOLD,
            )
        missing = without_gpu_time(ctx, rule=self.name, title=_TITLE, threshold=_THRESHOLD)
        if missing is not None or ctx.timeline is None:
            assert missing is not None
            return missing
        return _from_timeline(ctx, ctx.timeline)


def _from_timeline(ctx: RuleContext, timeline: TimelineVerdict) -> Finding:
    """Device-bound from the GPU's own timeline: kernel time (a union of the GPU's own
    intervals, never summed event pairs) over the step, and GPM SM activity where measured."""
    threshold = _THRESHOLD
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
    # the cause's what-ifs that apply here (a fast path present, autocast off, not compiled)
    cause = CAUSES[timeline.bottleneck]
    allowed = ("compile",) if timeline.matrix_precision == "reduced" else cause.what_ifs
    what_ifs = tuple(w for w in ctx.cheaper_math_what_ifs() if w in allowed)
    advice = sentence(timeline.advice)
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
