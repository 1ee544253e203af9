"""``audit --sample 10m``: this host's GPUs (NVML, with GPM activity where the GPU has it; the
sampler doctor uses) and its CPUs (psutil), sampled for a while and turned into the same series
an exporter would give, so the same analysis reads them.

Mapping: NVML utilisation → ``DCGM_FI_DEV_GPU_UTIL`` (percent); GPM SM, tensor,
graphics-engine and DRAM activity → ``DCGM_FI_PROF_SM_ACTIVE`` / ``_PIPE_TENSOR_ACTIVE`` /
``_GR_ENGINE_ACTIVE`` / ``_DRAM_ACTIVE`` (GPM's percent as 0..1 ratios; a metric NVML refuses
is left out, never 0); memory (v2: the driver's reservation left out) → ``FB_USED``/``FB_FREE``
(MiB); power → ``POWER_USAGE``; the total-energy counter → ``TOTAL_ENERGY_CONSUMPTION`` (mJ);
CPU busy shares → ``node_cpu_seconds_total{mode="idle"}`` counters. Without GPM, idle is judged
on GPU_UTIL, as the definitions say.

A GPU in MIG mode is sampled per MIG instance, with dcgm-exporter's ``GPU_I_ID`` and
``GPU_I_PROFILE`` labels: utilisation is not supported there (not measured), GPM and memory are
the instance's own, and the GPU-wide power and energy repeat on each instance (the analysis
counts energy once per GPU).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelscope.audit.telemetry import Series
from accelscope.errors import BadInputError
from accelscope.hardware.telemetry import GpuSample, NvmlSource, TelemetrySampler

__all__ = ["LocalSampling", "check_gpus", "sample_here"]

MIB = 1024 * 1024
_PROFILING = ("gr_active", "sm_active", "tensor_active", "dram_active")


@dataclass(frozen=True)
class LocalSampling:
    """What sampling this host gave: the series, what was measured (one line), and why each
    field that is missing is missing (by the analysis' field names)."""

    series: list[Series]
    status: str
    why_missing: dict[str, str] = field(default_factory=dict)


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


def check_gpus(source: NvmlSource, gpus: Sequence[int] | None) -> None:
    """Refuse GPU indices NVML does not have (one line, before anything is sampled)."""
    if gpus is None:
        return
    if not source.count:
        raise BadInputError(f"--gpus {_listed(gpus)}: no GPU to sample here ({source.status})")
    if source.missing:
        raise BadInputError(
            f"--gpus {_listed(gpus)}: no GPU {_listed(source.missing)} here "
            f"(NVML sees {source.count}: {_listed(range(source.count))})"
        )


def _listed(indices: Sequence[int] | range) -> str:
    return ",".join(str(i) for i in indices)


def _columns(reading: GpuSample | None, parent: GpuSample | None) -> dict[str, float | None]:
    """One sample of a device as exported fields; power and energy are the GPU's own."""
    if reading is None:
        return {}
    used, total = reading.memory_used_bytes, reading.memory_total_bytes
    whole = parent or reading
    return {
        "DCGM_FI_DEV_GPU_UTIL": reading.utilisation_percent,
        "DCGM_FI_PROF_SM_ACTIVE": _ratio(reading.sm_active_percent),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": _ratio(reading.tensor_active_percent),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": _ratio(reading.gr_active_percent),
        "DCGM_FI_PROF_DRAM_ACTIVE": _ratio(reading.dram_active_percent),
        "DCGM_FI_DEV_POWER_USAGE": whole.power_w,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (
            None if whole.energy_mj is None else float(whole.energy_mj)
        ),
        "DCGM_FI_DEV_FB_USED": None if used is None else used / MIB,
        "DCGM_FI_DEV_FB_FREE": (None if used is None or total is None else (total - used) / MIB),
    }


def _why_missing(source: NvmlSource, series: list[Series]) -> dict[str, str]:
    exported = {s.field for s in series}
    why: dict[str, str] = {}
    refused = "; ".join(n for n in source.notes if "refused" in n)
    if not source.handles:
        return {}
    for name, metric in zip(
        _PROFILING,
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_PROF_SM_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_DRAM_ACTIVE",
        ),
        strict=True,
    ):
        if metric not in exported:
            why[name] = f"NVML GPM: {source.sm_status}" + (f"; {refused}" if refused else "")
    if "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in exported:
        why["energy"] = "NVML gave no total-energy counter (needs Volta or newer)"
    return why


def sample_here(
    duration_s: float,
    step_s: float,
    *,
    nvml: Any = None,
    gpus: Sequence[int] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> LocalSampling:
    """Sample this host for ``duration_s`` every ``step_s``: the series, what was measured
    (NVML's status and notes) and why missing fields are missing. ``gpus``: NVML indices to
    sample (default every GPU); one NVML does not have is bad input, refused before sampling.
    ``nvml`` (a fake module) and ``sleep`` are seams for tests."""
    gpu = NvmlSource(nvml, indices=None if gpus is None else tuple(gpus), mig=True)
    check_gpus(gpu, gpus)
    names = _names(gpu)
    sampler = TelemetrySampler(os.getpid(), interval_s=step_s, gpu=gpu if gpu.handles else None)
    began = time.time()
    sampler.start()
    try:
        sleep(duration_s)
    finally:
        telemetry = sampler.stop()
    host = socket.gethostname()
    samples = telemetry.samples
    times = np.array([began + s.t_s for s in samples], dtype=np.float64)
    keys = sorted(
        {(g.index, g.gpu_instance_id, g.mig_profile) for s in samples for g in s.gpus},
        key=lambda k: (k[0], k[1] or 0),
    )
    mig_gpus = {index for index, instance, _ in keys if instance is not None}
    series: list[Series] = []
    for index, instance, profile in keys:
        if instance is None and index in mig_gpus:
            continue  # the GPU's own readings repeat on each of its instances
        labels = {
            "Hostname": host,
            "gpu": str(index),
            "UUID": f"local-{index}",
            "modelName": names.get(index, "unknown NVIDIA GPU"),
        }
        if instance is not None:
            labels.update(GPU_I_ID=str(instance), GPU_I_PROFILE=profile)
        columns: dict[str, list[float]] = {}
        for s in samples:
            reading = next(
                (g for g in s.gpus if g.index == index and g.gpu_instance_id == instance), None
            )
            parent = next(
                (g for g in s.gpus if g.index == index and g.gpu_instance_id is None), None
            )
            for metric, value in _columns(
                reading, parent if instance is not None else None
            ).items():
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
    status = f"{gpu.status}; GPM: {gpu.sm_status}"
    if gpu.notes:
        status += "; " + "; ".join(dict.fromkeys(gpu.notes))
    return LocalSampling(series, status, _why_missing(gpu, series))
