"""Missing mixed precision: fp32 matrix work on hardware with a faster bf16/fp16 path."""

from __future__ import annotations

from accelscope.doctor.findings import (
    CLEAR,
    FIRED,
    NOT_APPLICABLE,
    Finding,
    RuleContext,
    severity,
)
from accelscope.doctor.rules._timeline import without_gpu_time
from accelscope.doctor.rules.overhead_bound import wall_per_op_s
from accelscope.spec import Device, Precision

THRESHOLD = 0.30
HIGH = 0.50
MIN_OP_WALL_S = 50e-6
"""Below this average wall time per operator, overhead rather than arithmetic dominates."""


class MissingMixedPrecision:
    """Fires when fp32 matmul/conv work is >= 30 % of step time, autocast is off, and the
    device has a bf16 or fp16 fast path (from :mod:`accelscope.hardware.fastpaths`).

    On CUDA the fp32 work is read from the GPU's own timeline: the time of matrix kernels
    whose names say fp32 (or do not give their precision), within the step's compute share;
    it stays clear unless that timeline names compute as the bottleneck (where the host sets
    the pace, cheaper GPU work would not shorten the step). On the CPU it is the census step's
    fp32 matmul host time within forward + backward + optimizer.
    """

    name = "missing-mixed-precision"

    def check(self, ctx: RuleContext) -> Finding:
        """fp32 matmul share of step time against the threshold."""
        threshold = (
            f"fp32 matmul/conv time >= {THRESHOLD:.0%} of step time (on CUDA: their GPU time), "
            "autocast off, a bf16/fp16 fast path present"
        )
        title = "missing mixed precision"
        probe = ctx.profile.probe
        if probe is None or probe.op_time_s <= 0:
            return Finding(
                rule=self.name,
                title=title,
                status=NOT_APPLICABLE,
                summary="no operator census (use --warmup >= 1)",
                threshold=threshold,
            )
        device = Device.CUDA if ctx.device == "cuda" else Device.CPU
        fast = ctx.fast_low_precisions()
        autocast = ctx.autocast
        per_op = wall_per_op_s(ctx) or 0.0
        evidence: dict[str, object] = {
            "matmul_calls": probe.matmul_calls,
            "fp32_matmul_gflop_per_step": probe.matmul_flops.get("float32", 0.0) / 1e9,
            "autocast": autocast or "off",
            "parameter_dtypes": ", ".join(
                ctx.profile.facts.main_model.get("parameter_dtypes", {})
                if ctx.profile.facts
                else {}
            ),
        }
        small_ops_matter = True
        timeline = None
        if device is Device.CUDA:
            missing = without_gpu_time(ctx, rule=self.name, title=title, threshold=threshold)
            if missing is not None or ctx.timeline is None:
                assert missing is not None
                return missing
            timeline = ctx.timeline
            classes = timeline.kernel_classes
            share = min(
                dict(timeline.ranked).get("compute", 0.0),
                classes.get("matrix fp32", 0.0) + classes.get("matrix unknown", 0.0),
            )
            fp32_fraction = share / timeline.kernel_share if timeline.kernel_share > 0 else 0.0
            basis = (
                "measured: fp32 matrix kernels (or kernels whose names do not give their "
                "precision) on the GPU's own timeline (torch.profiler)"
            )
            small_ops_matter = False
            evidence["device_timeline_matrix_precision"] = timeline.matrix_precision or "none"
            activity = ctx.gpu_activity
            if activity is not None:
                evidence["gpu_tensor_active_percent"] = (
                    activity.tensor_active_percent
                    if activity.tensor_active_percent is not None
                    else activity.missing.get("tensor_active_percent", "not measured")
                )
        else:
            fp32_fraction = probe.matmul_time_s.get("float32", 0.0) / probe.op_time_s
            share = ctx.compute_share * fp32_fraction
            basis = "measured: host time of each operator in the census step"
            evidence["compute_share"] = ctx.compute_share
        evidence |= {
            "fp32_matmul_fraction_of_op_time": fp32_fraction,
            "fp32_matmul_share": share,
            "fp32_matmul_share_basis": basis,
            "wall_per_op_s": per_op,
        }
        if autocast:
            return Finding(
                rule=self.name,
                title=title,
                status=CLEAR,
                summary=f"autocast is on ({autocast})",
                threshold=threshold,
                evidence=evidence,
            )
        if not fast:
            reasons = "; ".join(
                s.reason
                for s in ctx.support
                if s.device is device and s.precision in (Precision.BF16, Precision.FP16)
            )
            return Finding(
                rule=self.name,
                title=title,
                status=NOT_APPLICABLE,
                summary=f"no bf16/fp16 fast path on {device.value}: {reasons}",
                threshold=threshold,
                evidence=evidence,
            )
        units = ", ".join(f"{s.precision.value} on {s.unit}" for s in fast)
        evidence["fast_paths"] = units
        # the timeline decides whether the GPU's matmuls set the pace
        host_paced = timeline is not None and timeline.bottleneck != "compute"
        if share < THRESHOLD or (small_ops_matter and per_op < MIN_OP_WALL_S) or host_paced:
            if timeline is not None and timeline.bottleneck != "compute":
                why = (
                    f"the GPU's own timeline names {timeline.bottleneck}, not fp32 matrix "
                    "kernels: lower precision would not shorten the step"
                )
            elif timeline is not None and timeline.matrix_precision == "reduced":
                why = (
                    "the matrix kernels already run in reduced precision on the tensor cores "
                    "(the GPU's own timeline)"
                )
            elif share < THRESHOLD:
                why = f"fp32 matmul/conv work is {share:.0%} of step time"
            else:
                why = (
                    f"operators are small ({per_op * 1e6:.0f} us each): overhead, not "
                    "arithmetic, dominates"
                )
            return Finding(
                rule=self.name,
                title=title,
                status=CLEAR,
                summary=why,
                threshold=threshold,
                share=share,
                evidence=evidence,
            )
        what_ifs = tuple(s.precision.value for s in fast)
        where = "GPU time" if device is Device.CUDA else "step time"
        return Finding(
            rule=self.name,
            title=title,
            status=FIRED,
            summary=(
                f"fp32 matrix multiplies/convolutions take {share:.0%} of step time ({where}) "
                f"with autocast off, while this {device.value} has a fast path ({units})"
            ),
            threshold=threshold,
            share=share,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=(
                "Run the forward under torch.autocast with bf16 (or fp16 with a GradScaler), and "
                "check the accuracy (accelscope bench guards it)."
            ),
            what_ifs=what_ifs,
        )


RULE = MissingMixedPrecision()
