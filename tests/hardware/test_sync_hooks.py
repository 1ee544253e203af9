"""CUDA timing and sync hooks, through fakes (no GPU here; the real run is on the GPU machine)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch

from accelscope.errors import NotAvailableError
from accelscope.hardware import sync
from accelscope.spec import Device


class FakeEvent:
    log: ClassVar[list[str]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.recorded_at_ms = 0.0

    def record(self) -> None:
        FakeEvent.log.append("record")
        self.recorded_at_ms = 12.5 if len(FakeEvent.log) > 1 else 2.5

    def synchronize(self) -> None:
        FakeEvent.log.append("synchronize")

    def elapsed_time(self, end: Any) -> float:
        return float(end.recorded_at_ms - self.recorded_at_ms)


def test_cuda_events_time_in_seconds_after_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeEvent.log = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "device", lambda index: _NullContext())
    interval = sync.CudaEventInterval(0)
    interval.start()
    elapsed_s = interval.stop()
    assert elapsed_s == pytest.approx(0.010)  # 10 ms between the events
    assert FakeEvent.log == ["record", "record", "synchronize"]  # read only after the sync


def test_cuda_timing_without_cuda_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(NotAvailableError, match="no CUDA device"):
        sync.CudaEventInterval(0)
    with pytest.raises(NotAvailableError, match="not available"):
        sync.device_synchronizer(Device.CUDA)


def test_cuda_synchronizer_calls_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda index: calls.append(index))
    sync.device_synchronizer(Device.CUDA, 0)()
    assert calls == [0]


def test_cpu_synchronizer_is_a_no_op() -> None:
    assert sync.device_synchronizer(Device.CPU)() is None


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None
