"""Shared by the rules: a finding read from the GPU's own timeline (the steps torch.profiler
recorded after the warm-up, :attr:`~accelscope.doctor.findings.RuleContext.timeline`), the
one model of GPU time. Every share there is a part of its step by construction (exclusive
causes, unions of the GPU's own intervals); thresholds, titles and advice come from the cause
table (:mod:`accelscope.doctor.causes`), the one ``doctor --trace`` reports with."""

from __future__ import annotations

from accelscope.doctor.causes import CAUSES, sentence
from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext, severity

__all__ = ["timeline_evidence", "timeline_finding", "without_gpu_time"]


def without_gpu_time(ctx: RuleContext, *, rule: str, title: str, threshold: str) -> Finding | None:
    """On CUDA, a not-applicable finding where the GPU's own timeline is missing (why, in
    words: no other model of GPU time stands in for it) or holds no steady step (one-off work
    is never judged as a steady state); ``None`` where the rule can read the timeline."""
    timeline = ctx.timeline
    if timeline is not None and timeline.bottleneck != "not_diagnosed":
        return None
    if timeline is not None:
        summary = timeline.headline
    else:
        record = ctx.profile.device_trace
        status = record.status if record is not None else "not recorded"
        summary = f"the GPU's own timeline (torch.profiler) is missing: {status}"
    return Finding(
        rule=rule, title=title, status=NOT_APPLICABLE, summary=summary, threshold=threshold
    )


def timeline_evidence(ctx: RuleContext) -> dict[str, object]:
    """The timeline's figures, beside NVML utilisation and GPM SM activity."""
    timeline = ctx.timeline
    record = ctx.profile.device_trace
    if timeline is None or record is None:
        return {}
    steady = len(record.quality_gate.steady)
    out: dict[str, object] = {
        "device_timeline": (
            f"torch.profiler over {len(record.timeline)} steps after the warm-up "
            f"({steady} steady; not measured steps): the GPU's own kernel and copy timestamps"
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
    if record.quality:
        out["device_timeline_quality"] = list(record.quality)
    return out


def timeline_finding(
    ctx: RuleContext,
    *,
    rule: str,
    causes: tuple[str, ...],
    what_ifs: tuple[str, ...] | None = None,
) -> Finding:
    """Fire when ``causes`` hold at least the first one's threshold of the profiled steps; the
    title, threshold, severity and advice are the first cause's (:data:`CAUSES`), the
    what-ifs its own unless given. Not applicable without a steady timeline
    (:func:`without_gpu_time`)."""
    cause = CAUSES[causes[0]]
    named = " + ".join(CAUSES[c].description for c in causes)
    rule_threshold = (
        f"{named} >= {cause.reported_at:.0%} of the step on the GPU's own timeline (torch.profiler)"
    )
    missing = without_gpu_time(ctx, rule=rule, title=cause.title, threshold=rule_threshold)
    if missing is not None:
        return missing
    share = ctx.timeline_share(*causes) or 0.0
    evidence = timeline_evidence(ctx)
    idle = all(CAUSES[c].gpu_idle for c in causes)
    meanwhile = ", the GPU idle meanwhile" if idle else ""
    summary = f"{named}: {share:.0%} of each step{meanwhile} (the GPU's timeline)"
    # fired exactly where the timeline reports one of the causes (one rule of reporting)
    timeline = ctx.timeline
    if timeline is None or not set(causes) & dict(timeline.reported).keys():
        return Finding(
            rule=rule,
            title=cause.title,
            status=CLEAR,
            summary=summary,
            threshold=rule_threshold,
            share=share,
            evidence=evidence,
        )
    return Finding(
        rule=rule,
        title=cause.title,
        status=FIRED,
        summary=summary,
        threshold=rule_threshold,
        share=share,
        severity=severity(share, cause.high),
        evidence=evidence,
        advice=sentence(cause.advice),
        what_ifs=cause.what_ifs if what_ifs is None else what_ifs,
    )
