"""One configuration's energy window, on the fake NVML's counter and a fake clock: joules per
item over the window only, the device synchronised at both ends, nothing run without a counter;
and a measured configuration carries its figure through the Result's JSON."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from accelscope.backends.eager import EagerBackend
from accelscope.engine.configuration import measure_config
from accelscope.engine.energy import energy_meter_for, measure_energy
from accelscope.hardware.energy import EnergyMeter, cpu_energy_meter, nvml_energy_meter
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.result import Result
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.testing import FakeClock, ScriptedWork, fixed_environment
from accelscope.testing.nvml import FakeNvml


def _meter(clock: FakeClock, **fake: object) -> EnergyMeter:
    nvml = FakeNvml(clock=clock, **fake)  # type: ignore[arg-type]
    return nvml_energy_meter(index=0, nvml=nvml, clock=clock)


def test_joules_per_item_over_back_to_back_calls() -> None:
    clock = FakeClock()
    work = ScriptedWork(clock, [1 / 256], cycle=True)  # ~4 ms per call of 64 items
    syncs: list[float] = []
    meter = _meter(clock, power_w=500.0, energy_update_period_s=0.05)
    meter.update_period_s = 0.05  # as probe_update_period would find it: 20 periods = 1 s
    figure = measure_energy(
        work, 64, meter, lambda: syncs.append(clock()), clock=clock, min_window_s=1.0
    )
    assert work.calls == 256 and len(syncs) == 2  # 1 s of calls, synchronised at both ends
    assert figure.items == 256 * 64 and figure.window_s == pytest.approx(1.0)
    assert figure.energy_j == pytest.approx(500.0)
    assert figure.joules_per_item == pytest.approx(500.0 / (256 * 64))
    assert figure.uncertainty_rel == pytest.approx(0.05, rel=0.01)  # one 50 ms period in 1 s


def test_the_window_is_long_enough_for_the_counter() -> None:
    clock = FakeClock()
    work = ScriptedWork(clock, [1 / 128], cycle=True)
    meter = _meter(clock)  # the assumed 100 ms period: 20 periods = 2 s
    figure = measure_energy(work, 1, meter, lambda: None, clock=clock, min_window_s=0.1)
    assert figure.window_s == pytest.approx(2.0) and figure.measured


def test_no_counter_runs_nothing() -> None:
    clock = FakeClock()
    work = ScriptedWork(clock, [0.01], cycle=True)
    figure = measure_energy(work, 8, cpu_energy_meter(), lambda: None, clock=clock)
    assert work.calls == 0 and figure.energy_j is None and "CPU" in figure.reason


def test_a_failing_call_is_not_measured_with_why() -> None:
    clock = FakeClock()

    def boom() -> None:
        clock.advance(0.5)
        raise RuntimeError("CUDA error: an illegal memory access\nmore")

    figure = measure_energy(boom, 1, _meter(clock), lambda: None, clock=clock)
    assert figure.reason == (
        "the energy window failed (RuntimeError: CUDA error: an illegal memory access)"
    )


def test_the_meter_follows_the_gpu_by_uuid() -> None:
    env = fixed_environment()  # cuda:0 is GPU-0
    cpu = RunSpec(model="m", backend="eager", precision=Precision.FP32, batch_size=1, threads=1)
    assert "CPU" in energy_meter_for(cpu, env).reason
    cuda = dataclasses.replace(cpu, device=Device.CUDA)
    unknown = dataclasses.replace(env, gpus=(dataclasses.replace(env.gpus[0], uuid=None),))
    assert "no known UUID" in energy_meter_for(cuda, unknown).reason


def test_a_measured_configuration_carries_its_energy() -> None:
    model = LoadedModel(
        ref="linear",
        format=ModelFormat.TORCH,
        inputs=(TensorSpec(name="x", shape=("N", 8)),),
        digest="x",
        module=torch.nn.Linear(8, 2),
    )
    spec = RunSpec(
        model="linear", backend="eager", precision=Precision.FP32, batch_size=4, threads=1
    )
    env = fixed_environment()
    config = TimerConfig(budget_s=0.05, min_samples=2, warmup_iters=1, warmup_min_s=0.0)
    cpu = measure_config(model, spec, EagerBackend(), env, timer_config=config)
    assert cpu.energy is not None and cpu.energy.describe().startswith("not measured: no energy")
    assert Result.from_json(cpu.to_json()) == cpu
    # a counter advancing on the real clock (the fake NVML at 200 W, updated every 1 ms)
    meter = nvml_energy_meter(index=0, nvml=FakeNvml(power_w=200.0, energy_update_period_s=0.001))
    meter.update_period_s = 0.001
    measured = measure_config(
        model, spec, EagerBackend(), env, timer_config=config, energy_meter=meter
    )
    energy = measured.energy
    assert energy is not None and energy.measured and energy.items
    assert energy.items % spec.batch_size == 0 and (energy.window_s or 0) >= 1.0
    assert energy.mean_power_w == pytest.approx(200.0, rel=0.05)
    assert Result.from_json(measured.to_json()).energy == energy
