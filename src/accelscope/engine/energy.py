"""The energy of one configuration: its call run back to back over a window of its own, read
on the GPU's total-energy counter (:mod:`accelscope.hardware.energy`), joules per item.

Why a window of its own, after timing: the timer stops as soon as the median is pinned down,
often after a few dozen calls (tens of milliseconds on a GPU), shorter than the counter's
update period, and its samples are separated by synchronisations. The energy window runs the
same call without a per-call synchronisation for at least :data:`MIN_WINDOW_S` and 20 counter
update periods (±5 %), synchronises the device at both ends, and divides by the items those
calls processed. It covers the whole board (every process on it) in steady state; the first
call, warm-up and timing are not in it.

Where there is no counter (CPU runs; no NVML; no energy counter on the GPU) nothing runs and
the figure is "not measured: why".
"""

from __future__ import annotations

import time
from collections.abc import Callable

from accelscope.hardware.energy import (
    EnergyFigure,
    EnergyMeter,
    cpu_energy_meter,
    nvml_energy_meter,
)
from accelscope.hardware.fingerprint import Environment
from accelscope.hardware.sync import device_synchronizer
from accelscope.spec import Device, RunSpec

__all__ = ["MIN_WINDOW_S", "energy_meter_for", "energy_of_config", "measure_energy"]

MIN_WINDOW_S = 1.0


def energy_meter_for(spec: RunSpec, env: Environment) -> EnergyMeter:
    """The meter of ``spec``'s device: the NVML counter of its GPU, found by the UUID torch
    reported for its CUDA ordinal (so ``CUDA_VISIBLE_DEVICES`` cannot point it at another GPU);
    "not measured" for CPU runs and GPUs whose UUID is unknown."""
    if spec.device is Device.CPU:
        return cpu_energy_meter()
    index = spec.device_index
    gpu = next((g for g in env.gpus if g.index == index), None)
    if gpu is None or not gpu.uuid:
        return EnergyMeter(
            None,
            reason=f"cuda:{index} has no known UUID, so its NVML energy counter cannot be "
            "matched to it",
        )
    return nvml_energy_meter(uuid=gpu.uuid)


def measure_energy(
    call: Callable[[], object],
    items_per_call: int,
    meter: EnergyMeter,
    sync: Callable[[], None],
    *,
    clock: Callable[[], float] = time.perf_counter,
    min_window_s: float = MIN_WINDOW_S,
) -> EnergyFigure:
    """Run ``call`` back to back for ``max(min_window_s, meter.window_needed_s())`` seconds
    between two device ``sync``s and read ``meter`` around it: joules for the items run. Costs
    nothing when the meter has no counter. A call that raises here ends the window "not
    measured" with the error (timing already succeeded; energy is not worth a failed result)."""
    if not meter.available:
        return meter.not_measured()
    window_s = max(min_window_s, meter.window_needed_s())
    calls = 0
    try:
        sync()
        meter.begin()
        began = clock()
        while True:
            call()
            calls += 1
            if clock() - began >= window_s:
                break
        sync()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model can raise anything
        meter.end()
        lines = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
        return meter.not_measured(f"the energy window failed ({why})")
    return meter.end(items=calls * items_per_call)


def energy_of_config(
    call: Callable[[], object],
    spec: RunSpec,
    env: Environment,
    meter: EnergyMeter | None = None,
) -> EnergyFigure:
    """:func:`measure_energy` of one configuration's call on its device (``meter``: a seam;
    by default :func:`energy_meter_for`, its counter's update period probed first (up to
    0.5 s), closed afterwards)."""
    own = meter is None
    used = energy_meter_for(spec, env) if meter is None else meter
    try:
        if not used.available:
            return used.not_measured()
        if own:  # measured, not assumed: a 20 ms counter needs a 1 s window, not 2 s
            used.probe_update_period()
        sync = device_synchronizer(spec.device, spec.device_index)
        return measure_energy(call, spec.batch_size, used, sync)
    finally:
        if own:
            used.close()
