"""Where the measured steps' time went: phase shares, step-time statistics, rates with bounds.

Shares are time-weighted over the measured steps (Σ phase / Σ step), so they add up to 1 with
``other``. Rates are throughputs, Σ items / Σ time over the measured steps (per-step rates would
mislead for pipelines that deliver in bursts: with two DataLoader workers, steps alternate
between a long wait and none), bounded by the distribution-free 95 % interval of the median
throughput of consecutive blocks of steps. items/s compares runs whatever their batch size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelscope.doctor.profile import PHASES, DeviceStep, Step
from accelscope.measurement.stats import median_ci, summarise
from accelscope.serialise import load

__all__ = ["ALL_PHASES", "Breakdown", "DeviceBreakdown", "Rate", "breakdown", "rate"]

ALL_PHASES: tuple[str, ...] = (*PHASES, "other")


@dataclass(frozen=True)
class Rate:
    """A measured per-second throughput and its 95 % bounds (see the module doc)."""

    median: float
    low: float
    high: float


def rate(amounts: Sequence[float], durations_s: Sequence[float]) -> Rate:
    """Σ amounts / Σ durations, bounded by the 95 % interval of the median block throughput
    (blocks of consecutive steps: 1 step each below 8 steps, else n // 8, at least 2)."""
    total = math.fsum(durations_s)
    if not durations_s or total <= 0:
        return Rate(0.0, 0.0, 0.0)
    central = math.fsum(amounts) / total
    n = len(durations_s)
    size = 1 if n < 8 else max(2, n // 8)
    blocks = [
        math.fsum(amounts[i : i + size]) / math.fsum(durations_s[i : i + size])
        for i in range(0, n - size + 1, size)
    ]
    ordered = sorted(b for b in blocks if math.isfinite(b))
    low, high = median_ci(ordered) if ordered else (central, central)
    return Rate(central, min(low, central), max(high, central))


@dataclass(frozen=True, kw_only=True)
class DeviceBreakdown:
    """The measured steps on the CUDA timeline: per-step means in seconds, over the steps with
    a device record (see :class:`~accelscope.doctor.profile.DeviceStep` for each definition).

    Shares (:meth:`share`) divide by the *host* step time of the same steps, so they sit beside
    the phase shares: ``sync_wait_s`` is the part of the ``sync`` phase during which the host
    waited for queued device work, ``input_idle_s`` the part of ``input`` during which the
    device sat idle. A split that was not measured (profiles recorded before it) is ``None``.
    """

    steps: int
    host_step_mean_s: float
    device_step_mean_s: float
    input_idle_s: float
    sync_wait_s: float | None = None
    sync_idle_s: float | None = None
    copy_wait_s: float | None = None
    copy_idle_s: float | None = None

    def share(self, seconds: float | None) -> float | None:
        """``seconds`` per step as a fraction of the host step time (``None`` stays)."""
        if seconds is None:
            return None
        return seconds / self.host_step_mean_s if self.host_step_mean_s > 0 else 0.0

    @property
    def idle_s(self) -> float:
        """Device idle seen per step: input waits, readbacks and copies after the drain."""
        return self.input_idle_s + (self.sync_idle_s or 0.0) + (self.copy_idle_s or 0.0)

    @property
    def idle_share(self) -> float:
        """:attr:`idle_s` as a share of step time."""
        return self.share(self.idle_s) or 0.0

    @property
    def wait_s(self) -> float | None:
        """Host time per step waiting for queued device work (readbacks and copies)."""
        if self.sync_wait_s is None and self.copy_wait_s is None:
            return None
        return (self.sync_wait_s or 0.0) + (self.copy_wait_s or 0.0)

    @property
    def wait_share(self) -> float | None:
        """:attr:`wait_s` as a share of step time (``None``: not measured)."""
        return self.share(self.wait_s)


def device_breakdown(steps: Sequence[Step]) -> DeviceBreakdown | None:
    """Per-step means over the steps that have a device record; ``None`` if none has one."""
    pairs = [(s, s.device) for s in steps if s.device is not None]
    if not pairs:
        return None
    n = len(pairs)
    devices: list[DeviceStep] = [d for _, d in pairs]

    def mean(values: Sequence[float | None]) -> float | None:
        if any(v is None for v in values):
            return None
        return math.fsum(v for v in values if v is not None) / n

    return DeviceBreakdown(
        steps=n,
        host_step_mean_s=math.fsum(s.duration_s for s, _ in pairs) / n,
        device_step_mean_s=math.fsum(d.device_s for d in devices) / n,
        input_idle_s=math.fsum(d.idle_s for d in devices) / n,
        sync_wait_s=mean([d.sync_wait_s for d in devices]),
        sync_idle_s=mean([d.sync_idle_s for d in devices]),
        copy_wait_s=mean([d.copy_wait_s for d in devices]),
        copy_idle_s=mean([d.copy_idle_s for d in devices]),
    )


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """The measured steps summarised (seconds; shares are fractions of step time)."""

    steps: int
    step_median_s: float
    step_mean_s: float
    step_iqr_s: float
    step_ci_low_s: float
    step_ci_high_s: float
    shares: dict[str, float]
    phase_mean_s: dict[str, float]
    counts_per_step: dict[str, float]
    items_per_step: float
    steps_per_s: Rate
    items_per_s: Rate
    device: DeviceBreakdown | None = None
    """The steps on the CUDA timeline; ``None`` where there was none (CPU, CUDA unused)."""

    @property
    def iqr_ratio(self) -> float:
        """IQR / median of step times: the run's own noise."""
        return self.step_iqr_s / self.step_median_s if self.step_median_s > 0 else math.inf

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Breakdown:
        """Read back what :func:`accelscope.serialise.dump` stored. Documents stored before the
        device split held only ``device_idle_share`` (of device time) and
        ``device_step_mean_s``: read as input idle, the one idle they measured, with the waits
        not measured."""
        if data.get("device") is None and data.get("device_idle_share") is not None:
            step_s = float(data.get("device_step_mean_s") or 0.0)
            device = DeviceBreakdown(
                steps=int(data["steps"]),
                host_step_mean_s=step_s,
                device_step_mean_s=step_s,
                input_idle_s=float(data["device_idle_share"]) * step_s,
            )
            data = {**data, "device": device}
        return load(cls, data)


def breakdown(steps: Sequence[Step]) -> Breakdown:
    """Summarise measured ``steps`` (at least one)."""
    if not steps:
        raise ValueError("no measured steps to summarise")
    durations = [max(s.duration_s, 1e-12) for s in steps]
    total = math.fsum(durations)
    summary = summarise(durations)
    phase_totals = {p: math.fsum(s.phases_s[p] for s in steps) for p in PHASES}
    phase_totals["other"] = math.fsum(s.other_s for s in steps)
    shares = {p: phase_totals[p] / total for p in ALL_PHASES}
    n = len(steps)
    counts = {k: sum(s.counts.get(k, 0) for s in steps) / n for k in steps[0].counts}
    items = [s.items if s.items > 0 else 1 for s in steps]
    return Breakdown(
        steps=n,
        step_median_s=summary.median_s,
        step_mean_s=summary.mean_s,
        step_iqr_s=summary.iqr_s,
        step_ci_low_s=summary.median_ci_low_s,
        step_ci_high_s=summary.median_ci_high_s,
        shares=shares,
        phase_mean_s={p: phase_totals[p] / n for p in ALL_PHASES},
        counts_per_step=counts,
        items_per_step=sum(items) / n,
        steps_per_s=rate([1.0] * n, durations),
        items_per_s=rate([float(i) for i in items], durations),
        device=device_breakdown(steps),
    )
