"""Overhead/launch-bound: steps made of many tiny operators, where the fixed cost of each
operator (Python, dispatch, autograd bookkeeping, kernel launch) outweighs its arithmetic."""

from __future__ import annotations

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


THRESHOLD = 0.25
HIGH = 0.50
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
    """Fires when operators average < 20 us of wall time each (or < 25x the trivial-op cost
    measured in the run; measured step time over the census' operator count) and the
    operator-running part of the step is >= 25 % of it; on CUDA, not when the GPU sets the
    pace (the host then launches faster than the GPU runs, see :mod:`accelscope.doctor.gpu`)."""

    name = "overhead-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """Wall time per operator and the share of step time it concerns."""
        limit = tiny_op_limit_s(ctx)
        threshold = (
            f"operators average < {limit * 1e6:.0f} us of wall time each (20 us, or "
            f"{TINY_OP_FACTOR:g}x a trivial op here), over >= {THRESHOLD:.0%} of step "
            "time"
        )
        probe = ctx.profile.probe
        per_op = wall_per_op_s(ctx)
        if ctx.timeline is not None:
            items = ctx.breakdown.items_per_step
            return timeline_finding(
                ctx,
                rule=self.name,
                title="overhead-bound",
                causes=("launch",),
                threshold=THRESHOLD,
                high=HIGH,
                advice=(
                    "The host cannot launch kernels fast enough: capture the step in CUDA "
                    "graphs or torch.compile(mode='reduce-overhead'), give each kernel more "
                    "work (a larger batch), use foreach/fused optimizers and fewer tiny "
                    "operators."
                ),
                what_ifs=(("batch",) if items <= 64 else ()) + ("compile",),
            )
        if probe is None or per_op is None:
            return Finding(
                rule=self.name,
                title="overhead-bound",
                status=NOT_APPLICABLE,
                summary="no operator census (use --warmup >= 1)",
                threshold=threshold,
            )
        shares = ctx.breakdown.shares
        share = 1.0 - shares["input"] - shares["sync"] - shares["copy"]
        items = ctx.breakdown.items_per_step
        evidence: dict[str, object] = {
            "ops_per_step": probe.ops,
            "forward_ops": probe.forward_ops,
            "wall_per_op_s": per_op,
            "operator_share": share,
            "items_per_step": items,
        }
        if ctx.profile.op_overhead_s is not None:
            evidence["trivial_op_cost_s"] = ctx.profile.op_overhead_s
        pace = ctx.pace
        ahead = pace is not None and pace.bound  # the host outruns the GPU: launches are hidden
        if pace is not None:
            evidence["gpu_sets_the_pace"] = pace.bound
            evidence["gpu_pace_share"] = pace.share
        if per_op >= limit or share < THRESHOLD or ahead:
            if ahead:
                assert pace is not None
                why = (
                    f"the GPU sets the pace ({pace.share:.0%} of the step): the host's "
                    f"{probe.ops} launches per step ({per_op * 1e6:.0f} us each) are hidden "
                    "behind GPU work"
                )
            elif per_op >= limit:
                why = f"operators average {per_op * 1e6:.0f} us each"
            else:
                why = f"operator work is {share:.0%} of step time"
            return Finding(
                rule=self.name,
                title="overhead-bound",
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
            title="overhead-bound",
            status=FIRED,
            summary=(
                f"{probe.ops} operators per step{small} average {per_op * 1e6:.1f} us of wall time "
                f"each{trivial}: fixed per-operator costs, not arithmetic, set the pace of "
                f"{share:.0%} of the step"
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice="Give each operator more work: batch requests together, or fuse operators with "
            "torch.compile (on CUDA, CUDA graphs remove launch overhead too).",
            what_ifs=tuple(what_ifs),
        )


RULE = OverheadBound()
