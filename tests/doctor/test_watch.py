"""API mode (``accelscope.watch``): the doctor in the caller's own loop, on the CPU and, with a
recorded GPU trace injected where torch.profiler would have written one, on the one model of
GPU time a ``doctor SCRIPT`` run uses.

Covers: accelscope.doctor.watch, accelscope.doctor.launcher."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accelscope.doctor import watch
from accelscope.doctor.causes import sentence
from accelscope.doctor.inprocess.device_trace import INJECT_ENV
from accelscope.doctor.trace_diagnosis import diagnose_ranks
from accelscope.doctor.verdict import named_from_timeline

TRACE = (
    Path(__file__).resolve().parents[1]
    / "data"
    / "doctor-h200-traces"
    / "archetypes"
    / "sync_bound.json.gz"
)


def _loop(steps: int, *, readbacks: int = 0) -> object:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    logged = torch.randn(300, 300)
    with watch(model=model, warmup=2, telemetry=False) as w:
        for _ in range(steps):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            for _ in range(readbacks):
                logged.tolist()  # a readback per step, heavy on purpose
            w.step()
    return w.result


def test_a_cpu_loop_is_diagnosed_from_its_host_time() -> None:
    result = _loop(12, readbacks=3)
    assert result.diagnosis.timeline is None  # no GPU: no GPU timeline
    assert result.profile.device_trace is not None
    assert not result.profile.device_trace.usable
    assert result.diagnosis.bottleneck == "sync-bound", result.diagnosis.headline


def test_on_cuda_the_verdict_is_the_gpu_timelines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INJECT_ENV, str(TRACE))  # stands in for torch.profiler's trace
    result = _loop(12)
    record = result.profile.device_trace
    assert record is not None and record.status == "injected" and record.usable
    (rank,) = diagnose_ranks(TRACE).ranks
    assert result.diagnosis.timeline == rank.verdict
    named, _ = named_from_timeline(rank.verdict)
    assert result.diagnosis.bottleneck == named == "overhead-bound"  # launch-bound, by trace too
    assert result.diagnosis.advice == sentence(rank.verdict.advice)
