"""Energy per output token: the GPU's total-energy counter read around each trial (here the
shipped fake NVML, whose counter advances at a set power on the real clock), joules over the
output tokens of the completed requests; "not measured: why" where no counter can be read."""

from __future__ import annotations

import pytest

from accelscope.hardware.energy import nvml_energy_meter
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import Arrivals
from accelscope.llm.harness import Harness
from accelscope.llm.workload import Lengths, Workload
from accelscope.testing.llm_server import FakeLLMServer
from accelscope.testing.nvml import FakeNvml

WORKLOAD = Workload(input_tokens=Lengths(8, 8), output_tokens=Lengths(20, 20), seed=2)


def test_joules_per_output_token_from_the_gpu_counters() -> None:
    meters = [
        nvml_energy_meter(
            index=i, nvml=FakeNvml(gpus=("NVIDIA H100", "NVIDIA H100"), power_w=300.0)
        )
        for i in (0, 1)
    ]
    with FakeLLMServer(ttft_s=0.05, itl_s=0.02) as server:
        harness = Harness(
            target=OpenAIEndpoint(server.url, server.model),
            workload=WORKLOAD,
            count=20,
            energy=meters,
        )
        trial = harness.trial(Arrivals(concurrency=4))
    energy = trial.summary.energy
    assert energy is not None and energy.energy_j is not None, energy
    assert energy.output_tokens == 20 * 20
    window = energy.window_s or 0
    # two boards at 300 W each over the trial, each reading stale by up to one 100 ms period
    assert energy.energy_j == pytest.approx(2 * 300.0 * window, abs=2 * 300.0 * 0.1 + 0.01)
    assert energy.joules_per_output_token == pytest.approx(energy.energy_j / 400)
    assert energy.uncertainty_j is not None and energy.uncertainty_j > 0
    assert energy.source.count("NVML total-energy counter") == 2


def test_not_measured_says_why() -> None:
    with FakeLLMServer(ttft_s=0.01, itl_s=0.001) as server:
        plain = Harness(
            target=OpenAIEndpoint(server.url, server.model),
            workload=WORKLOAD,
            count=4,
            no_energy_why="the server is not on this machine",
        ).trial(Arrivals(concurrency=2))
        refused = Harness(
            target=OpenAIEndpoint(server.url, server.model),
            workload=WORKLOAD,
            count=4,
            energy=[nvml_energy_meter(index=0, nvml=FakeNvml(energy=False))],
        ).trial(Arrivals(concurrency=2))
    assert plain.summary.energy is not None and plain.summary.energy.energy_j is None
    assert plain.summary.energy.reason == "the server is not on this machine"
    assert refused.summary.energy is not None and refused.summary.energy.energy_j is None
    assert "has no total-energy counter" in refused.summary.energy.reason
