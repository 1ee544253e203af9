"""Synchronisation-bound: the host keeps reading results back (``.item()``, ``.tolist()``...).

On the CPU a readback costs the conversion to a Python value. On CUDA it first waits for every
kernel queued before it; the CUDA events around each readback split that wait from the readback
itself (:mod:`accelscope.doctor.inprocess.device`). The wait is the GPU computing, which
``device-bound`` attributes; only the part after the GPU drained, the round trip during which
the GPU idles, is at stake here.
"""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, Finding, RuleContext, severity
from accelscope.doctor.rules._timeline import timeline_finding

THRESHOLD = 0.15
HIGH = 0.40
_TITLE = "synchronisation-bound"
_ADVICE = (
    "Keep per-step values on the device (accumulate the loss in a tensor) and read "
    "them back every N steps; log whole-batch predictions rarely, not with .tolist() "
    "per step."
)


class SyncBound:
    """Fires when readbacks and explicit syncs take >= 15 % of step time: on CUDA, their time
    after the GPU's queue drained (the wait for queued GPU work is device compute)."""

    name = "sync-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """Sync share (on CUDA: its own cost) and count per step against the threshold."""
        if ctx.timeline is not None:
            return timeline_finding(
                ctx,
                rule=self.name,
                title=_TITLE,
                causes=("sync",),
                threshold=THRESHOLD,
                high=HIGH,
                advice=_ADVICE,
            )
        host_share = ctx.breakdown.shares["sync"]
        per_step = ctx.breakdown.counts_per_step.get("syncs", 0.0)
        sync_s = ctx.breakdown.phase_mean_s["sync"]
        threshold = (
            f"readbacks and syncs (.item/.tolist/.numpy/.cpu/bool()/synchronize) "
            f">= {THRESHOLD:.0%} of step time (on CUDA: after the GPU's queue drained)"
        )
        evidence: dict[str, object] = {
            "sync_share": host_share,
            "syncs_per_step": per_step,
            "sync_per_step_s": sync_s,
        }
        pace = ctx.pace
        waited = pace.sync_wait_share if pace is not None else None
        share, split = host_share, ""
        if ctx.device == "cuda" and waited is not None:
            share = max(0.0, host_share - waited)
            evidence |= {
                "sync_waiting_for_gpu_work_share": waited,
                "sync_own_share": share,
                "sync_own_per_step_s": share * ctx.breakdown.step_mean_s,
            }
            split = (
                f", of which {waited * ctx.breakdown.step_mean_s * 1e3:.2f} ms wait for GPU "
                "work queued before them (device compute)"
                if waited > 0
                else ""
            )
        elif ctx.device == "cuda":
            evidence["sync_split"] = (
                "not measured: "
                + (ctx.profile.device_status or "no CUDA timeline").removeprefix("not available: ")
                + " (host wall time used: it includes waiting for the GPU)"
            )
        summary = (
            f"{per_step:.1f} readbacks per step take {sync_s * 1e3:.2f} ms{split}; "
            f"the readbacks themselves cost {share:.0%} of step time"
            if split
            else f"{per_step:.1f} readbacks per step, {share:.0%} of step time"
        )
        if share < THRESHOLD:
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=CLEAR,
                summary=summary,
                threshold=threshold,
                share=share,
                evidence=evidence,
            )
        where = (
            "each one waits for the GPU's queue to drain and leaves it idle until the host "
            "queues more"
            if ctx.device == "cuda"
            else "on the CPU nothing is queued, so this is the cost of converting tensors "
            "to Python values"
        )
        return Finding(
            rule=self.name,
            title=_TITLE,
            status=FIRED,
            summary=(
                f"{per_step:.1f} readbacks per step take {sync_s * 1e3:.2f} ms{split}: "
                f"{share:.0%} of step time; {where}"
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=_ADVICE,
        )


RULE = SyncBound()
