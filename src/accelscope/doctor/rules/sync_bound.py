"""Synchronisation-bound: the host keeps reading results back (``.item()``, ``.tolist()``...)."""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, Finding, RuleContext, severity

THRESHOLD = 0.15
HIGH = 0.40


class SyncBound:
    """Fires when device->host readbacks and explicit syncs take >= 15 % of step time."""

    name = "sync-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """Sync share and count per step against the threshold."""
        share = ctx.breakdown.shares["sync"]
        per_step = ctx.breakdown.counts_per_step.get("syncs", 0.0)
        sync_s = ctx.breakdown.phase_mean_s["sync"]
        threshold = (
            f"readbacks and syncs (.item/.tolist/.numpy/.cpu/bool()/synchronize) "
            f">= {THRESHOLD:.0%} of step time"
        )
        evidence = {"sync_share": share, "syncs_per_step": per_step, "sync_per_step_s": sync_s}
        if share < THRESHOLD:
            return Finding(
                rule=self.name,
                title="synchronisation-bound",
                status=CLEAR,
                summary=f"{per_step:.1f} readbacks per step, {share:.0%} of step time",
                threshold=threshold,
                share=share,
                evidence=evidence,
            )
        where = (
            "each one waits for the device's queue to drain"
            if ctx.device == "cuda"
            else "on the CPU nothing is queued, so this is the cost of converting tensors "
            "to Python values"
        )
        return Finding(
            rule=self.name,
            title="synchronisation-bound",
            status=FIRED,
            summary=(
                f"{per_step:.1f} readbacks per step take {sync_s * 1e3:.2f} ms, {share:.0%} of "
                f"step time; {where}"
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=(
                "Keep per-step values on the device (accumulate the loss in a tensor) and read "
                "them back every N steps; log whole-batch predictions rarely, not with .tolist() "
                "per step."
            ),
        )


RULE = SyncBound()
