"""``audit --sample 10m``: this host's GPUs (NVML, with GPM SM/tensor activity where the GPU
has it; the sampler doctor uses) and its CPUs (psutil), sampled for a while and turned into the
same series an exporter would give, so the same analysis reads them.

Mapping: NVML utilisation → ``DCGM_FI_DEV_GPU_UTIL`` (percent), GPM SM and tensor activity →
``DCGM_FI_PROF_SM_ACTIVE`` / ``_PIPE_TENSOR_ACTIVE`` (GPM's percent as 0..1 ratios),
memory → ``FB_USED``/``FB_FREE`` (MiB), power → ``POWER_USAGE``; CPU busy shares →
``node_cpu_seconds_total{mode="idle"}`` counters. NVML has no graphics-engine activity: idle is
then judged on GPU_UTIL, as the definitions say.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import numpy as np

from accelscope.audit.telemetry import Series
from accelscope.hardware.telemetry import NvmlSource, TelemetrySampler

__all__ = ["sample_here"]

MIB = 1024 * 1024


def _ratio(percent: float | None) -> float | None:
    """GPM reports percent; the profiling fields are 0..1 ratios."""
    return None if percent is None else percent / 100.0


def _names(source: NvmlSource) -> dict[int, str]:
    names = {}
    for index, handle in source.handles:
        try:
            name = source.nvml.nvmlDeviceGetName(handle)
            names[index] = name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # noqa: BLE001 - an old driver: the name is unknown, not fatal
            names[index] = "unknown NVIDIA GPU"
    return names


def sample_here(duration_s: float, step_s: float, *, nvml: Any = None) -> tuple[list[Series], str]:
    """Sample this host for ``duration_s`` every ``step_s``; the series and what was measured
    (NVML's status)."""
    gpu = NvmlSource(nvml)
    names = _names(gpu)
    sampler = TelemetrySampler(os.getpid(), interval_s=step_s, gpu=gpu if gpu.handles else None)
    began = time.time()
    sampler.start()
    try:
        time.sleep(duration_s)
    finally:
        telemetry = sampler.stop()
    host = socket.gethostname()
    samples = telemetry.samples
    times = np.array([began + s.t_s for s in samples], dtype=np.float64)
    series: list[Series] = []
    for index, name in names.items():
        labels = {"Hostname": host, "gpu": str(index), "UUID": f"local-{index}", "modelName": name}
        columns: dict[str, list[float]] = {}
        for s in samples:
            reading = next((g for g in s.gpus if g.index == index), None)
            values = {
                "DCGM_FI_DEV_GPU_UTIL": reading.utilisation_percent if reading else None,
                "DCGM_FI_PROF_SM_ACTIVE": _ratio(reading.sm_active_percent if reading else None),
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": _ratio(
                    reading.tensor_active_percent if reading else None
                ),
                "DCGM_FI_DEV_POWER_USAGE": reading.power_w if reading else None,
                "DCGM_FI_DEV_FB_USED": (
                    reading.memory_used_bytes / MIB
                    if reading and reading.memory_used_bytes is not None
                    else None
                ),
                "DCGM_FI_DEV_FB_FREE": (
                    (reading.memory_total_bytes - reading.memory_used_bytes) / MIB
                    if reading
                    and reading.memory_total_bytes is not None
                    and reading.memory_used_bytes is not None
                    else None
                ),
            }
            for metric, value in values.items():
                columns.setdefault(metric, []).append(np.nan if value is None else float(value))
        for metric, column in columns.items():
            values_array = np.array(column, dtype=np.float64)
            keep = ~np.isnan(values_array)
            if keep.any():
                series.append(Series(metric, dict(labels), times[keep], values_array[keep]))
    if samples:
        cores = len(samples[0].cpu_percent)
        dt = np.diff(np.concatenate(([0.0], [s.t_s for s in samples])))
        for core in range(cores):
            idle = np.cumsum(
                [(1 - s.cpu_percent[core] / 100) * d for s, d in zip(samples, dt, strict=True)]
            )
            labels = {"instance": host, "cpu": str(core), "mode": "idle"}
            series.append(
                Series("node_cpu_seconds_total", labels, times, np.asarray(idle, dtype=np.float64))
            )
    return series, f"{gpu.status}; GPM: {gpu.sm_status}"
