"""Overhead/launch-bound: steps made of many tiny operators, where the fixed cost of each
operator (Python, dispatch, autograd bookkeeping, kernel launch) outweighs its arithmetic."""

from __future__ import annotations

from accelscope.doctor.causes import CAUSES, sentence
from accelscope.doctor.findings import (
    CLEAR,
    FIRED,
    NOT_APPLICABLE,
    Finding,
    RuleContext,
    severity,
)
from accelscope.doctor.rules._timeline import timeline_finding

TINY_OP_S = 20e-6
"""Average host wall time per operator below which fixed per-op costs dominate."""
TINY_OP_FACTOR = 25.0
"""... or below this many times the trivial-op cost measured in the same run: on a busy machine
every operator, the trivial one included, takes longer, and the rule should not flip with it."""


def tiny_op_limit_s(ctx: RuleContext) -> float:
    """The per-operator wall time below which the step counts as overhead-bound."""
    trivial = ctx.profile.op_overhead_s
    return max(TINY_OP_S, TINY_OP_FACTOR * trivial) if trivial else TINY_OP_S


CAUSE = CAUSES["launch"]
SMALL_BATCH = 8


def wall_per_op_s(ctx: RuleContext) -> float | None:
    """Step time outside input waits, copies and syncs, per operator of the census step."""
    probe = ctx.profile.probe
    if probe is None or probe.ops == 0:
        return None
    b = ctx.breakdown
    busy = b.step_mean_s - b.phase_mean_s["input"] - b.phase_mean_s["sync"] - b.phase_mean_s["copy"]
    return max(0.0, busy) / probe.ops


class OverheadBound:
    """On CUDA: fires when launching kernels and Python between them (the ``launch`` cause of
    the GPU's own timeline) hold at least that cause's threshold of the step. On the CPU:
    when operators average < 20 us of wall time each (or < 25x the trivial-op cost measured in
    the run; measured step time over the census' operator count) and the operator-running
    part of the step is at least that threshold."""

    name = "overhead-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """Wall time per operator and the share of step time it concerns."""
        items = ctx.breakdown.items_per_step
        if ctx.device == "cuda":
            return timeline_finding(
                ctx,
                rule=self.name,
                causes=("launch",),
                what_ifs=(("batch",) if items <= 64 else ()) + ("compile",),
            )
        limit = tiny_op_limit_s(ctx)
        threshold = (
            f"operators average < {limit * 1e6:.0f} us of wall time each (20 us, or "
            f"{TINY_OP_FACTOR:g}x a trivial op here), over >= {CAUSE.reported_at:.0%} of step "
            "time"
        )
        probe = ctx.profile.probe
        per_op = wall_per_op_s(ctx)
        if probe is None or per_op is None:
            return Finding(
                rule=self.name,
                title=CAUSE.title,
                status=NOT_APPLICABLE,
                summary="no operator census (use --warmup >= 1)",
                threshold=threshold,
            )
        shares = ctx.breakdown.shares
        share = 1.0 - shares["input"] - shares["sync"] - shares["copy"]
        evidence: dict[str, object] = {
            "ops_per_step": probe.ops,
            "forward_ops": probe.forward_ops,
            "wall_per_op_s": per_op,
            "operator_share": share,
            "items_per_step": items,
        }
        if ctx.profile.op_overhead_s is not None:
            evidence["trivial_op_cost_s"] = ctx.profile.op_overhead_s
        if per_op >= limit or share < CAUSE.reported_at:
            if per_op >= limit:
                why = f"operators average {per_op * 1e6:.0f} us each"
            else:
                why = f"operator work is {share:.0%} of step time"
            return Finding(
                rule=self.name,
                title=CAUSE.title,
                status=CLEAR,
                summary=why,
                threshold=threshold,
                share=share,
                evidence=evidence,
            )
        what_ifs = ["batch"] if items <= 64 else []
        what_ifs.append("compile")
        small = f" at batch size {items:g}" if items <= SMALL_BATCH else ""
        trivial = (
            f"; a trivial op alone costs {ctx.profile.op_overhead_s * 1e6:.1f} us here"
            if ctx.profile.op_overhead_s
            else ""
        )
        return Finding(
            rule=self.name,
            title=CAUSE.title,
            status=FIRED,
            summary=(
                f"{probe.ops} operators per step{small} average {per_op * 1e6:.1f} us of wall time "
                f"each{trivial}: fixed per-operator costs, not arithmetic, set the pace of "
                f"{share:.0%} of the step"
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, CAUSE.high),
            evidence=evidence,
            advice=sentence(CAUSE.advice),
            what_ifs=tuple(what_ifs),
        )


RULE = OverheadBound()
