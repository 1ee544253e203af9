"""Memory pressure: the script's resident memory near the machine's, or the system swapping."""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext

RSS_FRACTION = 0.85
AVAILABLE_FRACTION = 0.05
SWAP_GROWTH_BYTES = 64 * 2**20


class MemoryPressure:
    """Fires when peak RSS >= 85 % of memory, available memory <= 5 %, or swap grew by 64 MiB."""

    name = "memory-pressure"

    def check(self, ctx: RuleContext) -> Finding:
        """Peak RSS, available memory and swap growth from telemetry."""
        threshold = (
            f"peak RSS >= {RSS_FRACTION:.0%} of memory, available <= "
            f"{AVAILABLE_FRACTION:.0%}, or swap grows >= 64 MiB"
        )
        telemetry = ctx.telemetry
        if telemetry is None or not telemetry.samples or ctx.memory_bytes <= 0:
            return Finding(
                rule=self.name,
                title="memory pressure",
                status=NOT_APPLICABLE,
                summary="no telemetry samples",
                threshold=threshold,
            )
        samples = telemetry.samples
        peak = max(s.process_rss_bytes for s in samples)
        least = min(s.available_bytes for s in samples)
        swap_growth = max(s.swap_used_bytes for s in samples) - samples[0].swap_used_bytes
        evidence = {
            "peak_rss_bytes": peak,
            "memory_bytes": ctx.memory_bytes,
            "min_available_bytes": least,
            "swap_growth_bytes": swap_growth,
        }
        reasons = []
        if peak >= RSS_FRACTION * ctx.memory_bytes:
            reasons.append(f"the script peaked at {peak / ctx.memory_bytes:.0%} of memory")
        if least <= AVAILABLE_FRACTION * ctx.memory_bytes:
            reasons.append(f"available memory fell to {least / ctx.memory_bytes:.1%}")
        if swap_growth >= SWAP_GROWTH_BYTES:
            reasons.append(f"swap use grew by {swap_growth / 2**20:.0f} MiB")
        if not reasons:
            return Finding(
                rule=self.name,
                title="memory pressure",
                status=CLEAR,
                summary=f"peak RSS {peak / 2**30:.2f} GiB of {ctx.memory_bytes / 2**30:.1f} GiB",
                threshold=threshold,
                evidence=evidence,
            )
        return Finding(
            rule=self.name,
            title="memory pressure",
            status=FIRED,
            summary="; ".join(reasons),
            threshold=threshold,
            share=None,
            severity="high" if swap_growth >= SWAP_GROWTH_BYTES else "medium",
            evidence=evidence,
            advice="Lower the batch size or the number of workers (each holds a copy of "
            "the dataset object), or cache less in memory.",
        )


RULE = MemoryPressure()
