"""Synchronisation-bound: the host keeps reading results back (``.item()``, ``.tolist()``...).

On CUDA the time at stake is the GPU's own timeline's ``sync`` cause: readbacks and
synchronisations after the GPU's queue drained, the round trips during which it idles (the
wait for work queued before them is kernel time, which ``device-bound`` attributes). On the CPU
a readback costs the conversion to a Python value: its host time. Threshold and advice are the
cause table's (:mod:`accelscope.doctor.causes`).
"""

from __future__ import annotations

from accelscope.doctor.causes import CAUSES, sentence
from accelscope.doctor.findings import CLEAR, FIRED, Finding, RuleContext, severity
from accelscope.doctor.rules._timeline import timeline_finding

CAUSE = CAUSES["sync"]


class SyncBound:
    """Fires when readbacks and explicit syncs take at least the ``sync`` cause's threshold of
    the step: on CUDA on the GPU's own timeline, on the CPU in host time."""

    name = "sync-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """Sync share (on CUDA: from the GPU's timeline) against the threshold."""
        if ctx.device == "cuda":
            return timeline_finding(ctx, rule=self.name, causes=("sync",))
        share = ctx.breakdown.shares["sync"]
        per_step = ctx.breakdown.counts_per_step.get("syncs", 0.0)
        sync_s = ctx.breakdown.phase_mean_s["sync"]
        threshold = (
            f"readbacks and syncs (.item/.tolist/.numpy/.cpu/bool()/synchronize) "
            f">= {CAUSE.reported_at:.0%} of step time"
        )
        evidence: dict[str, object] = {
            "sync_share": share,
            "syncs_per_step": per_step,
            "sync_per_step_s": sync_s,
        }
        summary = f"{per_step:.1f} readbacks per step, {share:.0%} of step time"
        if share < CAUSE.reported_at:
            return Finding(
                rule=self.name,
                title=CAUSE.title,
                status=CLEAR,
                summary=summary,
                threshold=threshold,
                share=share,
                evidence=evidence,
            )
        return Finding(
            rule=self.name,
            title=CAUSE.title,
            status=FIRED,
            summary=(
                f"{per_step:.1f} readbacks per step take {sync_s * 1e3:.2f} ms: {share:.0%} of "
                "step time; on the CPU nothing is queued, so this is the cost of converting "
                "tensors to Python values"
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, CAUSE.high),
            evidence=evidence,
            advice=sentence(CAUSE.advice),
        )


RULE = SyncBound()
