"""Under-filled GPU: kernels cover the step but the SMs are mostly idle (GPM SM activity), so
the GPU is kept busy by tiny or under-filled kernels (batch 1, small grids). Named only from the
GPU's own timeline (:attr:`~accelscope.doctor.findings.RuleContext.timeline`) with GPM SM
activity beside it; lower precision does not help here."""

from __future__ import annotations

from accelscope.doctor.causes import VERDICT_ADVICE, sentence
from accelscope.doctor.device_timeline import DEVICE_BOUND_COMPUTE, UNDERFILLED_SM_ACTIVE
from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity
from accelscope.doctor.rules._timeline import timeline_evidence, without_gpu_time

HIGH = 0.8
_TITLE = "under-filled GPU"


class Underfilled:
    """Fires when the GPU's timeline is busy >= 80 % of the step while GPM SM activity is
    < 20 %."""

    name = "underfilled"

    def check(self, ctx: RuleContext) -> Finding:
        """Busy share against SM activity."""
        threshold = (
            f"the GPU busy >= {DEVICE_BOUND_COMPUTE:.0%} of the step on its own timeline while "
            f"GPM SM active < {UNDERFILLED_SM_ACTIVE:.0%}"
        )
        if ctx.device == "cuda":
            missing = without_gpu_time(ctx, rule=self.name, title=_TITLE, threshold=threshold)
            if missing is not None:
                return missing
        timeline = ctx.timeline
        if timeline is None or timeline.sm_active is None:
            why = "the loop ran on the CPU" if timeline is None else "GPM SM activity not measured"
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=NOT_APPLICABLE,
                summary=why,
                threshold=threshold,
            )
        evidence = timeline_evidence(ctx)
        if ctx.gpu_activity is not None:
            evidence |= ctx.gpu_activity.evidence()
        summary = (
            f"the GPU is busy {timeline.busy_share:.0%} of the step (its own timeline) at GPM "
            f"SM active {timeline.sm_active:.0%}"
        )
        if timeline.bottleneck != "underfilled":
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=CLEAR,
                summary=summary,
                threshold=threshold,
                evidence=evidence,
            )
        items = ctx.breakdown.items_per_step
        return Finding(
            rule=self.name,
            title=_TITLE,
            status=FIRED,
            summary=summary + ": tiny or under-filled kernels, not compute-bound",
            threshold=threshold,
            share=timeline.busy_share,
            severity=severity(timeline.busy_share, HIGH),
            evidence=evidence,
            advice=sentence(VERDICT_ADVICE["underfilled"]),
            what_ifs=(("batch",) if items <= 64 else ()) + ("compile",),
        )


RULE = Underfilled()
