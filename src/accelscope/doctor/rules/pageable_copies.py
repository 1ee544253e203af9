"""Host-to-device copies from pageable (unpinned) memory: synchronous and slower.

A blocking copy first waits for the GPU's queue to drain. The CUDA events around each copy
split that wait (GPU compute, attributed by ``device-bound``) from the copy's own cost, the
transfer and its staging, which is what pinning memory shortens.
"""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity
from accelscope.doctor.rules._timeline import timeline_finding

THRESHOLD = 0.05
HIGH = 0.25
_ADVICE = (
    "Pin the source: DataLoader(pin_memory=True) and .to(device, non_blocking=True), "
    "so copies run asynchronously from page-locked memory."
)


class PageableCopies:
    """Fires when copies to the device come from pageable memory and take >= 5 % of a step."""

    name = "pageable-copies"

    def check(self, ctx: RuleContext) -> Finding:
        """Copy share and pageable copy count against the threshold."""
        threshold = (
            f"host->device copies from pageable memory, >= {THRESHOLD:.0%} of step time "
            "(after the GPU's queue drained)"
        )
        counts = ctx.breakdown.counts_per_step
        copies, pageable = counts.get("copies", 0.0), counts.get("pageable_copies", 0.0)
        if ctx.timeline is not None:
            facts = ctx.profile.facts
            return timeline_finding(
                ctx,
                rule=self.name,
                title="pageable host->device copies",
                causes=("h2d_pageable",),
                threshold=THRESHOLD,
                high=HIGH,
                advice=_ADVICE,
                what_ifs=("pin_memory",) if facts is not None and facts.loaders else (),
            )
        if ctx.device != "cuda" or copies == 0:
            why = (
                "the loop ran on the CPU: no host->device copies"
                if ctx.device != "cuda"
                else "no host->device copies were seen"
            )
            return Finding(
                rule=self.name,
                title="pageable host->device copies",
                status=NOT_APPLICABLE,
                summary=why,
                threshold=threshold,
            )
        share = host_share = ctx.breakdown.shares["copy"]
        evidence: dict[str, object] = {
            "copies_per_step": copies,
            "pageable_copies_per_step": pageable,
            "copy_bytes_per_step": counts.get("copy_bytes", 0.0),
            "copy_share": host_share,
        }
        pace = ctx.pace
        waited = pace.copy_wait_share if pace is not None else None
        if waited is not None:
            share = max(0.0, host_share - waited)
            evidence |= {"copy_waiting_for_gpu_work_share": waited, "copy_own_share": share}
        else:
            evidence["copy_split"] = (
                "not measured: "
                + (ctx.profile.device_status or "no CUDA timeline").removeprefix("not available: ")
                + " (host wall time used: it includes waiting for the GPU)"
            )
        if pageable == 0 or share < THRESHOLD:
            return Finding(
                rule=self.name,
                title="pageable host->device copies",
                status=CLEAR,
                summary=f"{pageable:.1f} pageable copies per step, {share:.0%} of step time"
                + (f" after the GPU drained ({waited:.0%} waiting for GPU work)" if waited else ""),
                threshold=threshold,
                share=share,
                evidence=evidence,
            )
        facts = ctx.profile.facts
        has_loader = facts is not None and bool(facts.loaders)
        return Finding(
            rule=self.name,
            title="pageable host->device copies",
            status=FIRED,
            summary=(
                f"{pageable:.1f} of {copies:.1f} host->device copies per step come from pageable "
                f"memory; copies take {share:.0%} of step time"
                + (
                    f" beyond the {waited:.0%} they wait for queued GPU work (device compute)"
                    if waited
                    else ""
                )
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=_ADVICE,
            what_ifs=("pin_memory",) if has_loader else (),
        )


RULE = PageableCopies()
