"""The GPU's side of a doctor run in a few lines of text, for the terminal and the report:
what the CUDA timeline attributed, what NVML/GPM saw during the measured steps, and the GPU
memory peaks. Nothing here for a run on the CPU."""

from __future__ import annotations

from accelscope.doctor.device_timeline import timeline_verdict
from accelscope.doctor.diagnose import DoctorResult
from accelscope.doctor.gpu import gpu_activity, gpu_pace, steps_window
from accelscope.report.format import format_bytes, format_seconds

__all__ = ["gpu_lines", "phase_notes"]


def _pct(value: float | None, why: str = "not measured") -> str:
    return why if value is None else f"{value:.0%}"


def _used_cuda(result: DoctorResult) -> bool:
    facts, probe = result.profile.facts, result.profile.probe
    record = result.profile.device_trace
    if record is not None and record.usable:
        return True
    return bool(facts is not None and facts.cuda_initialized) or bool(
        probe is not None and "cuda" in probe.devices
    )


def gpu_lines(result: DoctorResult) -> list[str]:
    """``[timeline, activity, memory]`` lines (empty when the loop did not use CUDA)."""
    profile = result.profile
    if not _used_cuda(result) and result.diagnosis.breakdown.device is None:
        return []
    lines: list[str] = []
    pace = gpu_pace(result.diagnosis.breakdown, profile.probe)
    if pace is None:
        lines.append(f"GPU timeline: {profile.device_status}")
    else:
        work = (
            f"GPU operators {format_seconds(pace.work_share * pace.step_s)} per step "
            f"({pace.work_share:.0%}, census step)"
            if pace.work_share is not None
            else f"GPU operators per step: {pace.work_status}"
        )
        timeline = profile.device_trace is not None and profile.device_trace.usable
        lines.append(
            (
                "GPU timeline (CUDA events; the verdict uses the GPU's own timeline below): "
                if timeline
                else "GPU timeline (CUDA events): "
            )
            + f"host waits for queued GPU work "
            f"{_pct(pace.wait_share)} of each step (readbacks {_pct(pace.sync_wait_share)}, "
            f"copies {_pct(pace.copy_wait_share)}) · {work} · GPU seen idle "
            f"{pace.idle_share:.0%} (input {pace.input_idle_share:.0%}, readbacks "
            f"{_pct(pace.sync_idle_share)}, copies {_pct(pace.copy_idle_share)})"
        )
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
    if record is not None and record.usable:
        sm = activity.sm_active_percent if activity is not None else None
        util = activity.utilisation_percent if activity is not None else None
        verdict = timeline_verdict(
            record.timeline,
            sm_active=None if sm is None else sm / 100.0,
            nvml_utilisation=None if util is None else util / 100.0,
        )
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
    elif record is not None and record.status != "not recorded: the loop did not use CUDA":
        lines.append(f"GPU's own timeline: {record.status}")
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


def phase_notes(result: DoctorResult) -> dict[str, str]:
    """Per host phase, what the GPU did meanwhile (CUDA events), where measured: the input
    wait's idle part, and the parts of copies and readbacks spent waiting for queued GPU
    work. Empty without a device timeline."""
    pace = gpu_pace(result.diagnosis.breakdown, result.profile.probe)
    if pace is None:
        return {}
    notes = {"input": f"GPU idle {pace.input_idle_share:.1%}"}
    if pace.copy_wait_share is not None:
        notes["copy"] = f"waiting for GPU work {pace.copy_wait_share:.1%}"
    if pace.sync_wait_share is not None:
        notes["sync"] = f"waiting for GPU work {pace.sync_wait_share:.1%}"
    return notes
