"""The GPU's side of a doctor run in a few lines of text, for the terminal and the report:
what NVML/GPM saw during the measured steps, what the GPU's own timeline attributed (its
verdict as stored with the diagnosis, never drawn again here), and the GPU memory peaks.
Nothing here for a run on the CPU."""

from __future__ import annotations

from accelscope.doctor.diagnose import DoctorResult
from accelscope.doctor.gpu import gpu_activity, steps_window
from accelscope.report.format import format_bytes, format_seconds

__all__ = ["gpu_lines"]


def _pct(value: float | None, why: str = "not measured") -> str:
    return why if value is None else f"{value:.0%}"


def gpu_lines(result: DoctorResult) -> list[str]:
    """``[timeline, activity, memory]`` lines (empty when the loop did not use CUDA)."""
    profile = result.profile
    if profile.device != "cuda":
        return []
    lines: list[str] = []
    window = steps_window(profile, result.telemetry_steps_at_s)
    activity = gpu_activity(result.telemetry, window)
    if activity is not None:

        def metric(name: str, label: str) -> str:
            value = getattr(activity, name)
            if value is None:
                return f"{label} {activity.missing.get(name, 'not measured')}"
            return f"{label} {value:.0f} %"

        lines.append(
            f"GPU activity (NVML, {activity.gpu}, {activity.samples} samples over "
            f"{activity.window}): "
            + ", ".join(
                metric(name, label)
                for name, label in (
                    ("utilisation_percent", "utilisation"),
                    ("sm_active_percent", "SM active"),
                    ("tensor_active_percent", "tensor cores"),
                    ("dram_active_percent", "DRAM bandwidth"),
                )
            )
        )
    record = profile.device_trace
    verdict = result.diagnosis.timeline  # drawn once, stored with the diagnosis
    if record is not None and record.usable and verdict is not None:
        causes = ", ".join(f"{c} {v:.0%}" for c, v in verdict.ranked if v >= 0.005)
        lines.append(
            f"GPU's own timeline (torch.profiler, {len(record.timeline)} steps after the "
            f"warm-up, not measured): busy {verdict.busy_share:.0%} (kernels "
            f"{verdict.kernel_share:.0%}, matrix precision {verdict.matrix_precision or 'none'})"
            f" beside NVML utilisation {_pct(verdict.nvml_utilisation)} and GPM SM active "
            f"{_pct(verdict.sm_active)} · {causes} · names {verdict.bottleneck} · profiling "
            f"cost {format_seconds(record.profiled_s)} over its steps + "
            f"{format_seconds(record.stop_s)} to export, outside the measured steps"
        )
    elif record is not None and record.usable:
        lines.append(
            f"GPU's own timeline: {len(record.timeline)} steps recorded (this diagnosis was "
            "stored before its timeline's verdict was kept)"
        )
    elif record is not None and record.status != "not recorded: the loop did not use CUDA":
        lines.append(f"GPU's own timeline: {record.status}")
    else:
        lines.append("GPU's own timeline: not recorded")
    memory = profile.gpu_memory
    if memory is None:
        lines.append(f"GPU memory: {profile.gpu_memory_status}")
    else:
        lines.append(
            f"GPU memory ({memory.device}): peaks {format_bytes(memory.allocated_peak_bytes)} "
            f"allocated, {format_bytes(memory.reserved_peak_bytes)} reserved of "
            f"{format_bytes(memory.total_bytes)}; allocator retries {memory.alloc_retries}"
        )
    return lines
