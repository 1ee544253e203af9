"""Device idle: how much of each step the GPU ran nothing, and behind what, from its own
timeline (torch.profiler: the union of its kernel and copy intervals, the idle rest split by
what the host was doing meanwhile).

This finding names how idle the GPU is and the largest cause; the time itself is at stake in
the cause's own finding (input-bound, sync-bound, overhead-bound), so this one carries no share
and ranks after them. Its advice and what-ifs are those of the largest idle cause reported at
its own threshold (:mod:`accelscope.doctor.causes`); none when no cause reaches its own (time
no event explains gets no advice of a cause it is not).
"""

from __future__ import annotations

from accelscope.doctor.causes import CAUSES, describe, sentence
from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity
from accelscope.doctor.rules._timeline import timeline_evidence, without_gpu_time

THRESHOLD = 0.20
HIGH = 0.50
_TITLE = "device idle"


class DeviceIdle:
    """Fires when the GPU's own timeline shows it idle >= 20 % of the step."""

    name = "device-idle"

    def check(self, ctx: RuleContext) -> Finding:
        """Idle share of the GPU's own timeline against the threshold, with its causes."""
        threshold = f"the GPU idle >= {THRESHOLD:.0%} of the step on its own timeline"
        if ctx.device != "cuda":
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=NOT_APPLICABLE,
                summary="the loop ran on the CPU",
                threshold=threshold,
            )
        missing = without_gpu_time(ctx, rule=self.name, title=_TITLE, threshold=threshold)
        timeline = ctx.timeline
        if missing is not None or timeline is None:
            assert missing is not None
            return missing
        share = timeline.idle_share
        shares = dict(timeline.ranked)
        causes = {key: shares.get(key, 0.0) for key, c in CAUSES.items() if c.gpu_idle}
        parts = ", ".join(
            f"{v:.0%} behind {describe(k)}"
            for k, v in sorted(causes.items(), key=lambda kv: -kv[1])
            if v >= 0.005
        )
        evidence = timeline_evidence(ctx) | {
            "device_idle_share": share,
            "device_idle_per_step_s": share * timeline.step_s,
        }
        if share < THRESHOLD:
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=CLEAR,
                summary=f"the GPU is idle {share:.0%} of each step (its own timeline)"
                + (f": {parts}" if parts else ""),
                threshold=threshold,
                evidence=evidence,
            )
        # the largest idle cause that is itself reported (at its threshold) gives the advice
        reported = {k: v for k, v in timeline.reported if CAUSES[k].gpu_idle}
        top = max(reported, key=lambda k: reported[k]) if reported else None
        cause = CAUSES[top] if top is not None else None
        return Finding(
            rule=self.name,
            title=_TITLE,
            status=FIRED,
            summary=(
                f"the GPU sits idle {share * timeline.step_s * 1e3:.1f} ms per step "
                f"({share:.0%}): {parts} (its own timeline)"
            ),
            threshold=threshold,
            share=None,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=sentence(cause.advice) if cause is not None else "",
            what_ifs=cause.what_ifs if cause is not None else (),
        )


RULE = DeviceIdle()
