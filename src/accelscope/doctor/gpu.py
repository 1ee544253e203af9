"""What the GPU did during the measured steps, in the terms the rules reason in.

Two sources, both measured:

* **the device timeline** (CUDA events, :mod:`.inprocess.device`) and the census's per-operator
  device times (:mod:`.inprocess.probe`), folded into :class:`GpuPace`: how long the host
  waited for work it had queued on the GPU, how much GPU work a step holds, and how long the
  GPU was seen idle and behind what;
* **NVML/GPM telemetry** sampled from outside the loop (:mod:`accelscope.hardware.telemetry`),
  folded into :class:`GpuActivity`: utilisation, SM activity, tensor-core activity and DRAM
  bandwidth activity, averaged over the samples taken while the measured steps ran. A metric
  the driver refused is ``None`` with the reason, never 0.

**The GPU sets the pace** (:attr:`GpuPace.bound`) when the host waited for queued GPU work at
least :data:`WAIT_BOUND` of the step (it had nothing better to do than wait for the GPU), or
when the GPU's own work per step, measured on the census step, is at least :data:`WORK_BOUND`
of the step time (a loop that never reads a value back shows no waits: its host blocks inside
kernel launches once the queue is full).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from accelscope.doctor.breakdown import Breakdown
from accelscope.doctor.device_timeline import SuppliedFigure, check_figure
from accelscope.doctor.profile import OpSummary, Profile
from accelscope.hardware.telemetry import GpuSample, Telemetry

__all__ = [
    "WAIT_BOUND",
    "WORK_BOUND",
    "GpuActivity",
    "GpuPace",
    "gpu_activity",
    "gpu_pace",
    "steps_window",
]

WAIT_BOUND = 0.5
"""Host waiting for queued GPU work at least this share of the step: the GPU sets the pace."""
WORK_BOUND = 0.8
"""GPU work (census step) at least this share of the step time: the GPU sets the pace."""
MIN_SAMPLES = 2
"""Telemetry samples needed inside a window before its means are reported."""


@dataclass(frozen=True, kw_only=True)
class GpuPace:
    """How the measured steps used the GPU; every share is of the host step time.

    Attributes:
        wait_share: The host waited for queued GPU work (readbacks, synchronisations and
            blocking copies before the queue drained); ``None``: not measured.
        sync_wait_share / copy_wait_share: The same, split by the call that waited.
        work_share: GPU operator time of the census step over the mean measured step time;
            ``None``: not measured, or inconsistent (``work_status`` says why). Above
            :data:`~accelscope.doctor.device_timeline.CONSISTENCY_TOLERANCE` times the step the
            figure is "inconsistent: not used" (the census step's event pairs spanned host
            dispatch on an idle GPU, or steps vary in size) and never sets the pace; between 1
            and the tolerance it is kept as measured.
        work_status: ``measured: ...`` or ``not measured: why``.
        input_idle_share: The GPU idle while the host waited for input.
        sync_idle_share: The GPU idle during readbacks after its queue drained (round trips).
        copy_idle_share: The GPU's compute idle during blocking copies after the drain.
        step_s: Mean host step time of the steps with a device record (seconds).
    """

    wait_share: float | None
    sync_wait_share: float | None
    copy_wait_share: float | None
    work_share: float | None
    work_status: str
    input_idle_share: float
    sync_idle_share: float | None
    copy_idle_share: float | None
    step_s: float

    @property
    def idle_share(self) -> float:
        """The GPU seen idle: input waits, readbacks and copies after the drain."""
        return self.input_idle_share + (self.sync_idle_share or 0.0) + (self.copy_idle_share or 0.0)

    @property
    def unseen_share(self) -> float | None:
        """Step time that is neither GPU work nor seen idle: the GPU idle between kernels
        while the host ran Python or launched work (inferred, not measured by events)."""
        if self.work_share is None:
            return None
        return max(0.0, 1.0 - min(1.0, self.work_share) - self.idle_share)

    @property
    def bound(self) -> bool:
        """The GPU sets the pace (see the module doc)."""
        return (self.wait_share or 0.0) >= WAIT_BOUND or (self.work_share or 0.0) >= WORK_BOUND

    @property
    def share(self) -> float:
        """Share of step time set by the GPU's own work: the larger of the wait share (a lower
        bound) and the work share (capped at 1)."""
        return max(self.wait_share or 0.0, min(1.0, self.work_share or 0.0))

    def evidence(self) -> dict[str, object]:
        """The figures, named with their unit ("not measured: why" where missing)."""
        missing = "not measured: profile recorded before readbacks were split"

        def value(x: float | None, why: str = missing) -> object:
            return why if x is None else x

        return {
            "gpu_wait_share": value(self.wait_share),
            "gpu_wait_in_readbacks_share": value(self.sync_wait_share),
            "gpu_wait_in_copies_share": value(self.copy_wait_share),
            "gpu_work_share": value(self.work_share, self.work_status),
            "gpu_work_per_step_s": value(
                None if self.work_share is None else self.work_share * self.step_s,
                self.work_status,
            ),
            "gpu_idle_share": self.idle_share,
            "gpu_idle_behind_input_share": self.input_idle_share,
            "gpu_idle_in_readbacks_share": value(self.sync_idle_share),
            "gpu_idle_in_copies_share": value(self.copy_idle_share),
            "gpu_idle_between_kernels_share_inferred": value(self.unseen_share, self.work_status),
            "step_mean_s": self.step_s,
        }


def gpu_pace(breakdown: Breakdown, probe: OpSummary | None) -> GpuPace | None:
    """The pace figures of the measured steps; ``None`` without a device timeline."""
    device = breakdown.device
    if device is None:
        return None
    step_s = device.host_step_mean_s
    if probe is None:
        work, status = None, "not measured: no operator census (use --warmup >= 1)"
    elif probe.op_device_s is None:
        work, status = None, probe.device_status
    else:
        work = probe.op_device_s / step_s if step_s > 0 else None
        status = (
            f"measured: {probe.device_status.removeprefix('measured: ')} over the mean "
            "measured step"
        )
        check = check_figure(
            SuppliedFigure(name="GPU operators per step", value_s=probe.op_device_s, step_s=step_s)
        )
        if work is not None and not check.used:
            work, status = (
                None,
                (
                    f"{check.note}: the census step's operator event pairs sum to "
                    f"{probe.op_device_s * 1e3:.1f} ms against a {step_s * 1e3:.1f} ms step"
                ),
            )
    return GpuPace(
        wait_share=device.wait_share,
        sync_wait_share=device.share(device.sync_wait_s),
        copy_wait_share=device.share(device.copy_wait_s),
        work_share=work,
        work_status=status,
        input_idle_share=device.share(device.input_idle_s) or 0.0,
        sync_idle_share=device.share(device.sync_idle_s),
        copy_idle_share=device.share(device.copy_idle_s),
        step_s=device.host_step_mean_s,
    )


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
