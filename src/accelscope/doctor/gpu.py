"""What NVML/GPM saw of the GPU during the measured steps, in the terms the rules reason in.

Telemetry sampled from outside the loop (:mod:`accelscope.hardware.telemetry`) is folded into
:class:`GpuActivity`: utilisation, SM activity, tensor-core activity and DRAM bandwidth
activity, averaged over the samples taken while the measured steps ran. A metric the driver
refused is ``None`` with the reason, never 0. The GPU's time itself comes from its own
records (the device trace, :mod:`.device_timeline`), never from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from accelscope.doctor.profile import Profile
from accelscope.hardware.telemetry import GpuSample, Telemetry

__all__ = ["GpuActivity", "gpu_activity", "steps_window"]

MIN_SAMPLES = 2
"""Telemetry samples needed inside a window before its means are reported."""


def steps_window(profile: Profile, steps_at_s: float | None) -> tuple[float, float] | None:
    """The measured steps on the telemetry clock (seconds since sampling began), given where
    the first recorded step started on it; ``None`` when unknown."""
    measured = profile.measured
    if steps_at_s is None or not measured:
        return None
    last = measured[-1]
    return steps_at_s + measured[0].start_s, steps_at_s + last.start_s + last.duration_s


@dataclass(frozen=True, kw_only=True)
class GpuActivity:
    """NVML/GPM activity of the GPU the loop ran on (percent, means over ``samples``).

    ``None`` where not measured; :attr:`missing` says why for each such metric. The GPU is the
    busiest one sampled (NVML sees every GPU, the loop ran on one).
    """

    gpu: str
    samples: int
    window: str
    utilisation_percent: float | None
    sm_active_percent: float | None
    tensor_active_percent: float | None
    dram_active_percent: float | None
    missing: dict[str, str] = field(default_factory=dict)

    def evidence(self) -> dict[str, object]:
        """The figures, named with their unit ("not measured: why" where missing)."""
        out: dict[str, object] = {"gpu": self.gpu, "telemetry_window": self.window}
        for name in (
            "utilisation_percent",
            "sm_active_percent",
            "tensor_active_percent",
            "dram_active_percent",
        ):
            value = getattr(self, name)
            out[f"gpu_{name}"] = self.missing.get(name, "not measured") if value is None else value
        return out


_METRICS = (
    "utilisation_percent",
    "sm_active_percent",
    "tensor_active_percent",
    "dram_active_percent",
)


def _mean(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return math.fsum(measured) / len(measured) if measured else None


def _label(sample: GpuSample, groups: int) -> str:
    name = f"GPU {sample.index}"
    if sample.gpu_instance_id is not None:
        name += f" MIG instance {sample.gpu_instance_id}"
        if sample.mig_profile:
            name += f" ({sample.mig_profile})"
    return name + (f" (the busiest of {groups} sampled)" if groups > 1 else "")


def gpu_activity(
    telemetry: Telemetry | None, window: tuple[float, float] | None
) -> GpuActivity | None:
    """Means over the telemetry samples inside ``window`` (all samples when ``window`` is
    ``None``); ``None`` when no GPU was sampled at all."""
    if telemetry is None or not any(s.gpus for s in telemetry.samples):
        return None
    samples = telemetry.samples
    where = "the whole run (the steps could not be placed on the telemetry clock)"
    if window is not None:
        start, end = window
        inside = [s for s in samples if start <= s.t_s <= end]
        where = f"the measured steps ({end - start:.2f} s)"
        if len(inside) < MIN_SAMPLES:
            return GpuActivity(
                gpu="GPU",
                samples=len(inside),
                window=where,
                utilisation_percent=None,
                sm_active_percent=None,
                tensor_active_percent=None,
                dram_active_percent=None,
                missing={
                    name: f"not measured: the measured steps lasted {end - start:.2f} s, "
                    f"under {MIN_SAMPLES} telemetry samples (run more --steps)"
                    for name in _METRICS
                },
            )
        samples = tuple(inside)
    groups: dict[tuple[int, int | None], list[GpuSample]] = {}
    for sample in samples:
        for gpu in sample.gpus:
            groups.setdefault((gpu.index, gpu.gpu_instance_id), []).append(gpu)

    def busy(readings: list[GpuSample]) -> float:
        sm = _mean([g.sm_active_percent for g in readings])
        util = _mean([g.utilisation_percent for g in readings])
        return sm if sm is not None else (util if util is not None else -1.0)

    readings = max(groups.values(), key=busy)
    means = {name: _mean([getattr(g, name) for g in readings]) for name in _METRICS}
    gpm_why = (
        telemetry.sm_activity_status
        if telemetry.sm_activity_status.startswith("not")
        else "not measured: the driver refused this GPM metric"
    )
    missing = {
        name: (
            "not measured: NVML refused utilisation (MIG mode?)"
            if name == "utilisation_percent"
            else gpm_why
        )
        for name, value in means.items()
        if value is None
    }
    return GpuActivity(
        gpu=_label(readings[0], len(groups)),
        samples=len(readings),
        window=where,
        utilisation_percent=means["utilisation_percent"],
        sm_active_percent=means["sm_active_percent"],
        tensor_active_percent=means["tensor_active_percent"],
        dram_active_percent=means["dram_active_percent"],
        missing=missing,
    )
