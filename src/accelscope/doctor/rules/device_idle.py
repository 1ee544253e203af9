"""Device idle between steps: the GPU waits for the host (measured with CUDA events)."""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity

THRESHOLD = 0.20
HIGH = 0.50


class DeviceIdle:
    """Fires when the device is idle >= 20 % of its step time while the host waits for input."""

    name = "device-idle"

    def check(self, ctx: RuleContext) -> Finding:
        """Idle share of the device timeline against the threshold."""
        threshold = f"GPU idle while the host waits for input >= {THRESHOLD:.0%} of step time"
        share = ctx.breakdown.device_idle_share
        if share is None:
            status = ctx.profile.device_status or "not available: no CUDA device"
            return Finding(
                rule=self.name,
                title="device idle between steps",
                status=NOT_APPLICABLE,
                summary=status,
                threshold=threshold,
            )
        step_s = ctx.breakdown.device_step_mean_s or 0.0
        evidence = {
            "device_idle_share": share,
            "device_step_mean_s": step_s,
            "device_idle_per_step_s": share * step_s,
        }
        if share < THRESHOLD:
            return Finding(
                rule=self.name,
                title="device idle between steps",
                status=CLEAR,
                summary=f"the GPU is idle {share:.0%} of each step (measured)",
                threshold=threshold,
                share=share,
                evidence=evidence,
            )
        return Finding(
            rule=self.name,
            title="device idle between steps",
            status=FIRED,
            summary=(
                f"the GPU sits idle {share * step_s * 1e3:.1f} ms per step ({share:.0%}) while the "
                "host waits for the next batch (measured with CUDA events)"
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=(
                "Feed the device faster: more DataLoader workers, pinned memory and non-blocking "
                "copies, or prefetch the next batch to the device."
            ),
            what_ifs=("workers", "pin_memory"),
        )


RULE = DeviceIdle()
