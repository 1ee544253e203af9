"""Energy per output token: the GPU's total-energy counter read around each trial (here the
shipped fake NVML, whose counter advances at a set power on the real clock), joules over the
output tokens of the completed requests; "not measured: why" where no counter can be read.

Covers: accelscope.llm.harness, accelscope.hardware.energy."""

from __future__ import annotations

import pytest

from accelscope.hardware.energy import EnergyFigure, nvml_energy_meter
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import Arrivals, TrialSummary
from accelscope.llm.harness import Harness
from accelscope.llm.workload import Lengths, Workload
from accelscope.testing.fake_llm_server import FakeLLMServer
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
    assert energy.items == 20 * 20  # output tokens of the completed requests
    window = energy.window_s or 0
    # two boards at 300 W each over the trial, each reading stale by up to one 100 ms period
    assert energy.energy_j == pytest.approx(2 * 300.0 * window, abs=2 * 300.0 * 0.1 + 0.01)
    assert energy.joules_per_item == pytest.approx(energy.energy_j / 400)
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


def test_a_trial_energy_stored_before_the_merge_still_loads_and_means_the_same() -> None:
    """Trials stored before their energy was an EnergyFigure named the tokens
    ``output_tokens`` and stored ``joules_per_output_token``: read back as the figure's
    ``items`` and its (recomputed) ``joules_per_item``; the figure stored now reads back whole."""
    stored = {
        "energy_j": 120.0,
        "window_s": 2.0,
        "output_tokens": 400,
        "joules_per_output_token": 0.3,
        "uncertainty_j": 6.0,
        "source": "NVML total-energy counter of GPU 0",
        "reason": "",
    }
    trial = {"requests": 1, "completed": 1, "errors": 0, "energy": stored}
    old = TrialSummary.model_validate(trial).energy
    assert old is not None and old.items == 400 and old.source == stored["source"]
    assert old.joules_per_item == pytest.approx(0.3) and old.mean_power_w == pytest.approx(60.0)
    assert (old.energy_j, old.window_s, old.uncertainty_j) == (120.0, 2.0, 6.0)
    again = TrialSummary.model_validate({**trial, "energy": old.model_dump(mode="json")})
    assert again.energy == old
    missing = {"output_tokens": 40, "reason": "the server is not on this machine"}
    assert EnergyFigure.model_validate(missing) == EnergyFigure.not_measured(
        "the server is not on this machine", items=40
    )
