"""Shared by the rules: a finding read from the GPU's own timeline (the steps torch.profiler
recorded after the warm-up, :attr:`~accelscope.doctor.findings.RuleContext.timeline`). Every
share there is a part of its step by construction (exclusive causes, unions of the GPU's own
intervals), so the rules that use it rank like the timeline's verdict does."""

from __future__ import annotations

from accelscope.doctor.device_timeline import CAUSES
from accelscope.doctor.findings import CLEAR, FIRED, Finding, RuleContext, severity

__all__ = ["timeline_evidence", "timeline_finding"]


def timeline_evidence(ctx: RuleContext) -> dict[str, object]:
    """The timeline's figures, beside NVML utilisation and GPM SM activity."""
    timeline = ctx.timeline
    record = ctx.profile.device_trace
    if timeline is None or record is None:
        return {}
    out: dict[str, object] = {
        "device_timeline": (
            f"torch.profiler over {len(record.timeline)} steps after the warm-up "
            "(not measured steps): the GPU's own kernel and copy timestamps"
        ),
        "device_timeline_verdict": timeline.bottleneck,
        "device_timeline_busy_share": timeline.busy_share,
        "device_timeline_kernel_share": timeline.kernel_share,
    }
    for cause, share in timeline.ranked:
        if share > 0:
            out[f"device_timeline_{cause}_share"] = share
    if timeline.matrix_precision is not None:
        out["device_timeline_matrix_precision"] = timeline.matrix_precision
    for check in timeline.figures:
        if not check.used:
            out[check.name.replace(" ", "_")] = check.note
    return out


def timeline_finding(
    ctx: RuleContext,
    *,
    rule: str,
    title: str,
    causes: tuple[str, ...],
    threshold: float,
    high: float,
    advice: str,
    what_ifs: tuple[str, ...] = (),
) -> Finding:
    """Fire when ``causes`` hold at least ``threshold`` of the profiled steps."""
    share = ctx.timeline_share(*causes) or 0.0
    named = " + ".join(CAUSES[c] for c in causes)
    rule_threshold = (
        f"{named} >= {threshold:.0%} of the step on the GPU's own timeline (torch.profiler)"
    )
    evidence = timeline_evidence(ctx)
    summary = f"{named}: {share:.0%} of each step, the GPU idle meanwhile (the GPU's timeline)"
    if share < threshold:
        return Finding(
            rule=rule,
            title=title,
            status=CLEAR,
            summary=summary,
            threshold=rule_threshold,
            share=share,
            evidence=evidence,
        )
    return Finding(
        rule=rule,
        title=title,
        status=FIRED,
        summary=summary,
        threshold=rule_threshold,
        share=share,
        severity=severity(share, high),
        evidence=evidence,
        advice=advice,
        what_ifs=what_ifs,
    )
