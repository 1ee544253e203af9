"""Host-to-device copies from pageable (unpinned) memory: synchronous and slower.

Read from the GPU's own timeline: the ``h2d_pageable`` cause, the copies' own time on the
device (a blocking copy's wait for the queue to drain is kernel time). Threshold and advice
are the cause table's (:mod:`accelscope.doctor.causes`).
"""

from __future__ import annotations

from accelscope.doctor.causes import CAUSES
from accelscope.doctor.findings import NOT_APPLICABLE, Finding, RuleContext
from accelscope.doctor.rules._timeline import timeline_finding

CAUSE = CAUSES["h2d_pageable"]


class PageableCopies:
    """Fires when copies to the device from pageable memory take at least the
    ``h2d_pageable`` cause's threshold of a step on the GPU's own timeline."""

    name = "pageable-copies"

    def check(self, ctx: RuleContext) -> Finding:
        """Pageable copy share of the GPU's timeline against the threshold."""
        if ctx.device != "cuda":
            return Finding(
                rule=self.name,
                title=CAUSE.title,
                status=NOT_APPLICABLE,
                summary="the loop ran on the CPU: no host->device copies",
                threshold=f"host->device copies from pageable memory >= {CAUSE.reported_at:.0%} "
                "of the step",
            )
        facts = ctx.profile.facts
        return timeline_finding(
            ctx,
            rule=self.name,
            causes=("h2d_pageable",),
            what_ifs=CAUSE.what_ifs if facts is not None and facts.loaders else (),
        )


RULE = PageableCopies()
