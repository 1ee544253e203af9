"""GPU busy, tensor cores idle: the GPU's arithmetic runs off its matrix units.

Read from NVML GPM (Hopper and newer), sampled from outside the loop: SM activity (the share of
time the SMs had work) and tensor-core activity (the share of time the tensor pipes did). A
busy GPU whose tensor cores idle is doing its arithmetic on the CUDA cores: fp32 matrix
multiplies (IEEE fp32 never uses them), or elementwise and memory-bound kernels. A metric the
driver refused is "not measured", and the rule is then not applicable: never read as 0 %.
"""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, NOT_APPLICABLE, Finding, RuleContext

SM_BUSY_PERCENT = 50.0
TENSOR_IDLE_PERCENT = 10.0
DRAM_BUSY_PERCENT = 60.0
"""DRAM bandwidth activity above which the busy kernels are called memory-bound."""
_TITLE = "GPU busy, tensor cores idle"


class TensorCoresIdle:
    """Fires when GPM SM activity is >= 50 % while tensor-core activity is < 10 %, averaged
    over the measured steps."""

    name = "tensor-cores-idle"

    def check(self, ctx: RuleContext) -> Finding:
        """SM and tensor-core activity against the thresholds."""
        threshold = (
            f"GPM SM activity >= {SM_BUSY_PERCENT:.0f} % while tensor-core activity < "
            f"{TENSOR_IDLE_PERCENT:.0f} % (NVML GPM, over the measured steps)"
        )
        activity = ctx.gpu_activity
        if ctx.device != "cuda" or activity is None:
            why = (
                "the loop ran on the CPU"
                if ctx.device != "cuda"
                else "not measured: "
                + (
                    ctx.telemetry.gpu_status.removeprefix("not available: ")
                    if ctx.telemetry is not None
                    else "no telemetry was sampled"
                )
            )
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=NOT_APPLICABLE,
                summary=why,
                threshold=threshold,
            )
        sm, tensor = activity.sm_active_percent, activity.tensor_active_percent
        evidence = activity.evidence() | {"autocast": ctx.autocast or "off"}
        if sm is None or tensor is None:
            missing = "sm_active_percent" if sm is None else "tensor_active_percent"
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=NOT_APPLICABLE,
                summary=f"{missing.removesuffix('_percent').replace('_', ' ')}: "
                + activity.missing.get(missing, "not measured"),
                threshold=threshold,
                evidence=evidence,
            )
        if sm < SM_BUSY_PERCENT or tensor >= TENSOR_IDLE_PERCENT:
            return Finding(
                rule=self.name,
                title=_TITLE,
                status=CLEAR,
                summary=f"SM activity {sm:.0f} %, tensor-core activity {tensor:.1f} % (NVML GPM)",
                threshold=threshold,
                evidence=evidence,
            )
        dram = activity.dram_active_percent
        memory_bound = dram is not None and dram >= DRAM_BUSY_PERCENT
        where = (
            "fp32 matrix multiplies, or elementwise and memory-bound kernels"
            if not ctx.autocast
            else "autocast is on, so the busy kernels are not matrix multiplies: elementwise, "
            "normalisation or memory-bound ones"
        )
        summary = (
            f"the GPU's SMs are active {sm:.0f} % of the time but its tensor cores only "
            f"{tensor:.1f} %: its arithmetic runs on the CUDA cores ({where})"
            + (f"; DRAM bandwidth activity {dram:.0f} %" if dram is not None else "")
        )
        if not ctx.autocast and ctx.fast_low_precisions():
            advice = (
                "Run the forward under torch.autocast with bf16 (or fp16 with a GradScaler) so "
                "matrix multiplies and convolutions use the tensor cores; where fp32 must stay, "
                "torch.set_float32_matmul_precision('high') lets matmuls use TF32 tensor cores."
            )
        else:
            advice = "Fuse the elementwise and normalisation kernels with torch.compile" + (
                ": they are bound by memory bandwidth, so fewer passes over memory is what helps."
                if memory_bound
                else "."
            )
        return Finding(
            rule=self.name,
            title=_TITLE,
            status=FIRED,
            summary=summary,
            threshold=threshold,
            share=None,
            severity="high" if sm >= 80.0 and tensor < 2.0 else "medium",
            evidence=evidence,
            advice=advice,
            what_ifs=ctx.cheaper_math_what_ifs(),
        )


RULE = TensorCoresIdle()
