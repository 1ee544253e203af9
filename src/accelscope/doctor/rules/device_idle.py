"""Device idle: the GPU waits for the host, and behind what (measured with CUDA events).

The events see the GPU idle while the host waits for input, during readbacks once the GPU's
queue has drained, and during blocking copies (:mod:`accelscope.doctor.inprocess.device`).
This finding names how idle the GPU is and the largest cause; the time itself is at stake in
the cause's own finding (input-bound, sync-bound, pageable copies), so this one carries no
share and ranks after them. Gaps between kernels while the host runs Python or launches work
are inferred (step time minus the GPU's work and the idle seen), reported as evidence.
"""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity

THRESHOLD = 0.20
HIGH = 0.50
_TITLE = "device idle"


class DeviceIdle:
    """Fires when the GPU is seen idle >= 20 % of step time (input waits, readbacks and copies
    after the queue drained)."""

    name = "device-idle"

    def check(self, ctx: RuleContext) -> Finding:
        """Idle share of the device timeline against the threshold, with its causes."""
        threshold = (
            f"GPU idle while the host waits (input, readbacks, copies) >= {THRESHOLD:.0%} of "
            "step time"
        )
        pace = ctx.pace
        if pace is None:
            status = ctx.profile.device_status or "not available: no CUDA device"
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=NOT_APPLICABLE,
                summary=status,
                threshold=threshold,
            )
        step_s = pace.step_s
        share = pace.idle_share
        causes = {
            "input": pace.input_idle_share,
            "readbacks": pace.sync_idle_share or 0.0,
            "host->device copies": pace.copy_idle_share or 0.0,
        }
        evidence = pace.evidence() | {"device_idle_per_step_s": share * step_s}
        parts = ", ".join(f"{v:.0%} behind {k}" for k, v in causes.items() if v >= 0.005)
        unseen = pace.unseen_share
        between = (
            f"; between kernels, while the host ran Python or launched work, a further "
            f"{unseen:.0%} (inferred)"
            if unseen is not None and unseen >= 0.05
            else ""
        )
        if share < THRESHOLD:
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=CLEAR,
                summary=f"the GPU is seen idle {share:.0%} of each step (CUDA events)"
                + (f": {parts}" if parts else "")
                + between,
                threshold=threshold,
                evidence=evidence,
            )
        cause = max(causes, key=lambda k: causes[k])
        advice, what_ifs = {
            "input": (
                "Feed the GPU faster: more DataLoader workers, pinned memory and non-blocking "
                "copies, or prefetch the next batch to the device.",
                ("workers", "pin_memory"),
            ),
            "readbacks": (
                "Read values back less often: each readback drains the GPU's queue and leaves "
                "it idle until the host queues more (accumulate on the device, log every N "
                "steps).",
                (),
            ),
            "host->device copies": (
                "Copy from pinned memory with non_blocking=True (DataLoader(pin_memory=True)), "
                "so copies overlap with GPU work instead of stalling it.",
                ("pin_memory",),
            ),
        }[cause]
        return Finding(
            rule=self.name,
            title=_TITLE,
            status=FIRED,
            summary=(
                f"the GPU sits idle {share * step_s * 1e3:.1f} ms per step ({share:.0%}): "
                f"{parts} (measured with CUDA events){between}"
            ),
            threshold=threshold,
            share=None,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=advice,
            what_ifs=what_ifs,
        )


RULE = DeviceIdle()
