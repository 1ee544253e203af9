"""Busy vs useful GPU-hours per device, what the waste costs, and what to do about it.

Definitions (every output states them; "utilisation" means different things across tools):

- **observed** hours: slots with any sample of the device; **held** hours: slots a pod held it
  (dcgm-exporter's pod label); with no pod label anywhere in the data, held = observed and the
  audit says so.
- **busy** hours: Σ GPU_UTIL x slot, what nvidia-smi shows (a kernel ran at some point of the
  sample window); not measured under MIG, where the field is not supported.
- **active** hours: Σ GR_ENGINE_ACTIVE x slot; **SM-, tensor-, DRAM-active** hours likewise.
- **useful** hours = SM-active hours; **useful share** = useful / held (or observed).
- **idle** slots: engine activity (GR_ENGINE_ACTIVE, else GPU_UTIL) below 5 %.
- **busy but not useful** slots: GPU_UTIL ≥ 50 % while SM_ACTIVE < 25 %.
- **busy minus useful** hours: Σ max(0, GPU_UTIL - SM_ACTIVE) x slot, over slots with both:
  the hours nvidia-smi counts busy that the SMs did not work, whatever side of any threshold
  (GR_ENGINE_ACTIVE stands in for GPU_UTIL where that is not measured: MIG).
- **held-idle streaks**: held and idle for ≥ 30 min in a row.
- A MIG instance's profiling fields are relative to its own slice (a saturated instance reads
  ~1.0); its hours and dollars are its share of the GPU: g/7 of it (g/4 on an A30).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from accelscope.audit.telemetry import Device, Grid

__all__ = [
    "BUSY_NOT_USEFUL",
    "IDLE_BELOW",
    "STREAK_MIN_S",
    "DeviceFigures",
    "Streak",
    "device_figures",
    "fleet_figures",
    "gpu_slices",
    "slice_share",
]

IDLE_BELOW = 0.05
BUSY_NOT_USEFUL = (0.5, 0.25)
"""(GPU_UTIL at least, SM_ACTIVE below): busy as nvidia-smi shows it, little SM work."""
STREAK_MIN_S = 1800.0

_ACTIVITY = ("gpu_util", "gr_active", "sm_active", "tensor_active", "dram_active")


def slice_share(device: Device) -> float:
    """The share of its GPU a device is: 1 for a whole GPU, g/7 for a MIG instance (g/4 on an
    A30)."""
    if not device.mig_profile:
        return 1.0
    match = re.match(r"(\d+)g\.", device.mig_profile)
    return min(1.0, int(match.group(1)) / gpu_slices(device.model)) if match else 1.0


def gpu_slices(model: str) -> int:
    """Compute slices of a MIG-capable GPU: 4 on an A30, 7 on A100/H100/H200."""
    return 4 if "A30" in model.upper() else 7


@dataclass(frozen=True)
class Streak:
    """A run of held-and-idle slots."""

    start_s: float
    hours: float
    holder: str


@dataclass(frozen=True)
class DeviceFigures:
    """Every figure of one device over the window. ``hours`` holds the hour counts by name;
    a name in ``not_measured`` has no figure, with the reason."""

    key: str
    host: str
    model: str
    mig_profile: str
    share: float
    holders: tuple[str, ...]
    coverage: dict[str, float]
    hours: dict[str, float]
    streaks: tuple[Streak, ...]
    not_measured: dict[str, str]
    memory_p99_fraction: float | None
    memory_total_mib: float | None
    power_mean_w: float | None
    sm_p95: float | None
    tensor_median: float | None
    dram_median: float | None
    hourly_activity: tuple[float, ...] | None
    """Mean engine activity per hour of day (UTC), when measured."""
    gap_basis: str = ""
    """Which field stood for "busy" in ``busy_minus_useful``: ``gpu_util`` or ``gr_active``."""
    timeline: tuple[float | None, ...] = ()
    """Mean engine activity in each hour of the window (None: no data), for the heat map."""
    duplicated_slots: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def useful_share(self) -> float | None:
        """SM-active hours over held hours (observed, without allocation data)."""
        base = self.hours.get("held", 0.0)
        if "useful" not in self.hours or base <= 0:
            return None
        return self.hours["useful"] / base

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "key": self.key,
            "host": self.host,
            "model": self.model,
            "mig_profile": self.mig_profile,
            "share_of_gpu": self.share,
            "holders": list(self.holders),
            "coverage": self.coverage,
            "hours": self.hours,
            "useful_share": self.useful_share,
            "held_idle_streaks": [
                {"start_s": s.start_s, "hours": s.hours, "holder": s.holder} for s in self.streaks
            ],
            "not_measured": self.not_measured,
            "memory_p99_fraction": self.memory_p99_fraction,
            "memory_total_mib": self.memory_total_mib,
            "power_mean_w": self.power_mean_w,
            "sm_p95": self.sm_p95,
            "tensor_median": self.tensor_median,
            "dram_median": self.dram_median,
            "hourly_activity": list(self.hourly_activity) if self.hourly_activity else None,
            "timeline": list(self.timeline),
            "unattributable_slots": self.duplicated_slots,
            "busy_minus_useful_basis": self.gap_basis or None,
            "notes": list(self.notes),
        }


def _runs(mask: NDArray[np.bool_]) -> list[tuple[int, int]]:
    """(start, length) of each run of True."""
    padded = np.concatenate(([False], mask, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def _reason(device: Device, name: str, any_profiling: bool, why_missing: Mapping[str, str]) -> str:
    if name == "gpu_util" and device.is_mig:
        return "GPU_UTIL is not supported for MIG instances (the profiling fields are used)"
    if name in why_missing:
        return why_missing[name]
    if name in ("gr_active", "sm_active", "tensor_active", "dram_active"):
        if not any_profiling:
            return (
                "no DCGM profiling (DCP) fields for this GPU: the profiling module is not "
                "loaded, or the exporter's counters CSV leaves them out"
            )
        return f"{name} is not in the exporter's counters CSV for this GPU"
    return f"{name} was not exported for this GPU"


def device_figures(
    device: Device,
    grid: Grid,
    *,
    allocation_known: bool,
    energy_elsewhere: bool = False,
    why_missing: Mapping[str, str] | None = None,
) -> DeviceFigures:
    """The hour counts, coverage, streaks and distributions of one device. ``why_missing``:
    the source's own reason a field is absent (by field name), where it knows better than the
    exporter's usual ones (local NVML sampling)."""
    why_missing = why_missing or {}
    h = grid.slot_h
    values = device.values
    present = np.zeros(grid.slots, dtype=bool)
    for array in values.values():
        present |= ~np.isnan(array)
    holders = device.holders if device.holders is not None else np.full(grid.slots, "", object)
    held = (holders != "") if allocation_known else present
    coverage = {name: float(np.mean(~np.isnan(array))) for name, array in values.items()}
    any_profiling = any(n in values for n in ("gr_active", "sm_active"))
    not_measured = {
        name: _reason(device, name, any_profiling, why_missing)
        for name in _ACTIVITY
        if name not in values
    }
    hours: dict[str, float] = {
        "observed": float(np.count_nonzero(present)) * h,
        "held": float(np.count_nonzero(held & present)) * h,
    }
    names = {
        "gpu_util": "busy",
        "gr_active": "active",
        "sm_active": "useful",
        "tensor_active": "tensor_active",
        "dram_active": "dram_active",
    }
    for source, name in names.items():
        if source in values:
            hours[name] = float(np.nansum(np.clip(values[source], 0.0, 1.0))) * h
    engine = values.get("gr_active", values.get("gpu_util"))
    streaks: list[Streak] = []
    if engine is not None:
        idle = present & (np.nan_to_num(engine, nan=1.0) < IDLE_BELOW)
        hours["idle"] = float(np.count_nonzero(idle)) * h
        held_idle = idle & held
        hours["held_idle"] = 0.0
        for start, length in _runs(held_idle):
            if length * grid.step_s >= STREAK_MIN_S:
                streaks.append(
                    Streak(
                        start_s=grid.start_s + start * grid.step_s,
                        hours=length * h,
                        holder=str(holders[start]) or "(observed; no allocation data)",
                    )
                )
                hours["held_idle"] += length * h
    else:
        not_measured["idle"] = "neither GR_ENGINE_ACTIVE nor GPU_UTIL was exported"
    if "gpu_util" in values and "sm_active" in values:
        util, sm = values["gpu_util"], values["sm_active"]
        low = (np.nan_to_num(util) >= BUSY_NOT_USEFUL[0]) & (
            np.nan_to_num(sm, nan=1.0) < BUSY_NOT_USEFUL[1]
        )
        hours["busy_not_useful"] = float(np.count_nonzero(low)) * h
    else:
        why = (
            "GPU_UTIL is not supported for MIG instances"
            if device.is_mig
            else "needs both GPU_UTIL and SM_ACTIVE"
        )
        not_measured["busy_not_useful"] = why
    gap_basis = next((n for n in ("gpu_util", "gr_active") if n in values), "")
    if gap_basis and "sm_active" in values:
        busy, sm = values[gap_basis], values["sm_active"]
        both = ~np.isnan(busy) & ~np.isnan(sm)
        gap = np.clip(np.clip(busy, 0.0, 1.0) - np.clip(sm, 0.0, 1.0), 0.0, None)
        hours["busy_minus_useful"] = float(np.sum(gap[both])) * h
    else:
        gap_basis = ""
        not_measured["busy_minus_useful"] = "needs SM_ACTIVE and GPU_UTIL (or GR_ENGINE_ACTIVE)"
    memory = None
    memory_total = None
    if "fb_used_mib" in values and "fb_free_mib" in values:
        total = values["fb_used_mib"] + values["fb_free_mib"]
        if np.any(~np.isnan(total)):
            memory_total = float(np.nanmedian(total))
        fraction = values["fb_used_mib"] / np.where(total > 0, total, np.nan)
        if np.any(~np.isnan(fraction)):
            memory = float(np.nanpercentile(fraction, 99))
    else:
        not_measured["memory"] = "needs DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE"

    def stat(name: str, q: float) -> float | None:
        array = values.get(name)
        if array is None or np.all(np.isnan(array)):
            return None
        return float(np.nanpercentile(np.clip(array, 0.0, 1.0), q))

    energy = values.get("energy_mj")
    if energy is not None:
        readings = energy[~np.isnan(energy)]
        if readings.size >= 2:
            step = np.diff(readings)
            hours["energy_kwh"] = float(np.sum(np.where(step < 0, readings[1:], step))) / 3.6e9
    elif energy_elsewhere:
        not_measured["energy"] = "GPU-wide: counted once, on this GPU's first MIG instance"
    elif "energy" in why_missing:
        not_measured["energy"] = why_missing["energy"]
    else:
        not_measured["energy"] = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION was not exported"
    hourly: tuple[float, ...] | None = None
    timeline: tuple[float | None, ...] = ()
    if engine is not None and np.any(~np.isnan(engine)):
        slot_s = grid.start_s + np.arange(grid.slots) * grid.step_s
        seen = (~np.isnan(engine)).astype(float)
        hour = (slot_s // 3600 % 24).astype(int)
        sums = np.bincount(hour, weights=np.nan_to_num(engine), minlength=24)
        counts = np.bincount(hour, weights=seen, minlength=24)
        if np.all(counts > 0):  # a profile by hour of day needs data in every hour
            hourly = tuple(float(v / c) for v, c in zip(sums, counts, strict=True))
        bins = ((slot_s - grid.start_s) // 3600).astype(int)
        width = int(bins[-1]) + 1
        totals = np.bincount(bins, weights=np.nan_to_num(engine), minlength=width)
        present_n = np.bincount(bins, weights=seen, minlength=width)
        timeline = tuple(
            float(round(v / n, 4)) if n else None for v, n in zip(totals, present_n, strict=True)
        )
    notes = []
    if not allocation_known:
        notes.append("held = observed: no pod labels in the data (allocation not known)")
    if device.duplicated_slots:
        notes.append(
            f"{device.duplicated_slots} slot(s) reported by two pods at once (time-slicing): "
            "per-pod figures for them are unattributable"
        )
    return DeviceFigures(
        key=device.key,
        host=device.host,
        model=device.model,
        mig_profile=device.mig_profile,
        share=slice_share(device),
        holders=tuple(sorted({str(x) for x in holders if x})),
        coverage=coverage,
        hours=hours,
        streaks=tuple(streaks),
        not_measured=not_measured,
        memory_p99_fraction=memory,
        memory_total_mib=memory_total,
        power_mean_w=(
            float(np.nanmean(values["power_w"]))
            if "power_w" in values and np.any(~np.isnan(values["power_w"]))
            else None
        ),
        sm_p95=stat("sm_active", 95),
        tensor_median=stat("tensor_active", 50),
        dram_median=stat("dram_active", 50),
        hourly_activity=hourly,
        gap_basis=gap_basis,
        timeline=timeline,
        duplicated_slots=device.duplicated_slots,
        notes=tuple(notes),
    )


def fleet_figures(
    devices: Sequence[Device], grid: Grid, *, why_missing: Mapping[str, str] | None = None
) -> list[DeviceFigures]:
    """Every device's figures; allocation is known when any device carries a pod label. GPU-
    wide energy repeats on each MIG instance of a GPU, so only its first instance keeps it.
    ``why_missing``: see :func:`device_figures`."""
    known = any(d.holders is not None and bool(np.any(d.holders != "")) for d in devices)
    seen: set[tuple[str, str]] = set()
    figures = []
    for device in devices:
        gpu = (device.host, device.uuid or device.gpu)
        repeat = device.is_mig and gpu in seen and "energy_mj" in device.values
        if repeat:
            device.values.pop("energy_mj")
        seen.add(gpu)
        figures.append(
            device_figures(
                device,
                grid,
                allocation_known=known,
                energy_elsewhere=repeat,
                why_missing=why_missing,
            )
        )
    return figures
