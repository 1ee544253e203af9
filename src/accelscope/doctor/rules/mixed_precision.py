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
    device has a bf16 or fp16 fast path (from :mod:`accelscope.hardware.fastpaths`).

    On CUDA the fp32 work is the GPU time of the census step's fp32 matrix multiplies and
    convolutions (CUDA events around each operator) over the measured step time: host times
    there are launch times, and a host phase share would miss a GPU-bound loop whose host
    waits in a readback. Without GPU operator times it is estimated: the fp32 FLOP share times
    the share of step time the GPU sets (:mod:`accelscope.doctor.gpu`). It stays clear where
    the host, not the GPU, sets the pace: cheaper GPU work would not shorten the step.
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
        timeline = ctx.timeline if device is Device.CUDA else None
        if timeline is not None:
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
        elif device is Device.CUDA:
            share, fp32_fraction, basis = _gpu_share(ctx, evidence)
            pace = ctx.pace
            # GPU times already weigh small operators by what they cost the GPU
            small_ops_matter = probe.op_device_s is None and not (pace is not None and pace.bound)
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
        pace = ctx.pace if device is Device.CUDA else None
        host_paced = pace is not None and not pace.bound
        if timeline is not None:  # the timeline decides whether the GPU's matmuls set the pace
            host_paced = timeline.bottleneck != "compute"
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
            elif host_paced:
                assert pace is not None
                why = (
                    f"fp32 matmul/conv GPU work is {share:.0%} of step time, but the host sets "
                    f"the pace (it waits for the GPU {pace.wait_share or 0.0:.0%} of the step): "
                    "cheaper GPU work would not shorten the step"
                )
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


def _gpu_share(ctx: RuleContext, evidence: dict[str, object]) -> tuple[float, float, str]:
    """``(share of step time, fp32 fraction of operator time, basis)`` on CUDA."""
    probe = ctx.profile.probe
    assert probe is not None
    step_s = ctx.breakdown.step_mean_s
    if probe.op_device_s is not None and probe.op_device_s > 0 and step_s > 0:
        fp32_s = probe.matmul_device_s.get("float32", 0.0)
        evidence |= {
            "fp32_matmul_gpu_s_per_step": fp32_s,
            "gpu_op_s_per_step": probe.op_device_s,
        }
        return (
            min(1.0, fp32_s / step_s),
            fp32_s / probe.op_device_s,
            "measured: GPU time of each operator in the census step (CUDA events) over the "
            "mean measured step",
        )
    flops = sum(probe.matmul_flops.values())
    matmul_s = sum(probe.matmul_time_s.values())
    fraction = probe.matmul_flops.get("float32", 0.0) / flops if flops else 0.0
    fraction *= min(1.0, matmul_s / probe.op_time_s) if probe.op_time_s else 0.0
    pace = ctx.pace
    pace_share = pace.share if pace is not None else ctx.compute_share
    evidence["gpu_pace_share"] = pace_share
    why = probe.device_status.removeprefix("not measured: ")
    return (
        pace_share * fraction,
        fraction,
        "estimated: fp32 FLOP share x host launch-time share x the share of step time the GPU "
        f"sets (GPU operator times not measured: {why})",
    )
