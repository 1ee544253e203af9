"""Host-to-device copies from pageable (unpinned) memory: synchronous and slower."""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity

THRESHOLD = 0.05
HIGH = 0.25


class PageableCopies:
    """Fires when copies to the device come from pageable memory and take >= 5 % of a step."""

    name = "pageable-copies"

    def check(self, ctx: RuleContext) -> Finding:
        """Copy share and pageable copy count against the threshold."""
        threshold = f"host->device copies from pageable memory, >= {THRESHOLD:.0%} of step time"
        counts = ctx.breakdown.counts_per_step
        copies, pageable = counts.get("copies", 0.0), counts.get("pageable_copies", 0.0)
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
        share = ctx.breakdown.shares["copy"]
        evidence = {
            "copies_per_step": copies,
            "pageable_copies_per_step": pageable,
            "copy_bytes_per_step": counts.get("copy_bytes", 0.0),
            "copy_share": share,
        }
        if pageable == 0 or share < THRESHOLD:
            return Finding(
                rule=self.name,
                title="pageable host->device copies",
                status=CLEAR,
                summary=f"{pageable:.1f} pageable copies per step, {share:.0%} of step time",
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
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=(
                "Pin the source: DataLoader(pin_memory=True) and .to(device, non_blocking=True), "
                "so copies run asynchronously from page-locked memory."
            ),
            what_ifs=("pin_memory",) if has_loader else (),
        )


RULE = PageableCopies()
