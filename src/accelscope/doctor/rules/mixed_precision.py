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
from accelscope.doctor.rules.overhead_bound import wall_per_op_s
from accelscope.spec import Device, Precision

THRESHOLD = 0.30
HIGH = 0.50
MIN_OP_WALL_S = 50e-6
"""Below this average wall time per operator, overhead rather than arithmetic dominates."""


class MissingMixedPrecision:
    """Fires when fp32 matmul/conv work is >= 30 % of step time, autocast is off, and the
    device has a bf16 or fp16 fast path (from :mod:`accelscope.hardware.fastpaths`)."""

    name = "missing-mixed-precision"

    def check(self, ctx: RuleContext) -> Finding:
        """fp32 matmul share of step time against the threshold."""
        threshold = (
            f"fp32 matmul/conv time >= {THRESHOLD:.0%} of step time, autocast off, "
            "a bf16/fp16 fast path present"
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
        fast = [
            s
            for s in ctx.support
            if s.device is device and s.fast and s.precision in (Precision.BF16, Precision.FP16)
        ]
        autocast = (ctx.profile.facts.autocast if ctx.profile.facts else None) or next(
            (v for v in probe.autocast.values() if v != "off"), None
        )
        fp32_s = probe.matmul_time_s.get("float32", 0.0)
        matmul_s = sum(probe.matmul_time_s.values())
        if device is Device.CUDA:  # host-side times are launch times: use FLOPs
            flops = sum(probe.matmul_flops.values())
            fp32_fraction = probe.matmul_flops.get("float32", 0.0) / flops if flops else 0.0
            fp32_fraction *= min(1.0, matmul_s / probe.op_time_s) if probe.op_time_s else 0.0
        else:
            fp32_fraction = fp32_s / probe.op_time_s
        share = ctx.compute_share * fp32_fraction
        per_op = wall_per_op_s(ctx) or 0.0
        evidence: dict[str, object] = {
            "fp32_matmul_fraction_of_op_time": fp32_fraction,
            "compute_share": ctx.compute_share,
            "fp32_matmul_share": share,
            "matmul_calls": probe.matmul_calls,
            "fp32_matmul_gflop_per_step": probe.matmul_flops.get("float32", 0.0) / 1e9,
            "wall_per_op_s": per_op,
            "autocast": autocast or "off",
            "parameter_dtypes": ", ".join(
                ctx.profile.facts.main_model.get("parameter_dtypes", {})
                if ctx.profile.facts
                else {}
            ),
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
        if share < THRESHOLD or per_op < MIN_OP_WALL_S:
            why = (
                f"fp32 matmul/conv work is {share:.0%} of step time"
                if share < THRESHOLD
                else f"operators are small ({per_op * 1e6:.0f} us each): overhead, not "
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
        return Finding(
            rule=self.name,
            title=title,
            status=FIRED,
            summary=(
                f"fp32 matrix multiplies/convolutions take {share:.0%} of step time with autocast "
                f"off, while this {device.value} has a fast path ({units})"
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
