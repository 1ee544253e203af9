"""CUDA timing and sync hooks, through fake GPUs (no GPU here; the real run is on the GPU
machine)."""

from __future__ import annotations

import pytest
import torch

from accelscope.errors import NotAvailableError
from accelscope.hardware import sync
from accelscope.spec import Device
from accelscope.testing.fake_gpus import H100_SXM, FakeGpus


def test_cuda_events_time_in_seconds_after_sync() -> None:
    with FakeGpus() as gpus:
        interval = sync.CudaEventInterval(0)
        interval.start()
        gpus.device_clock_ms += 10.0  # the timed work takes 10 ms of device time
        elapsed_s = interval.stop()
    assert elapsed_s == pytest.approx(0.010)
    records = [c for c in gpus.calls if c.startswith("event.")]
    assert records == ["event.record:0", "event.record:0", "event.synchronize"]  # read after sync


def test_cuda_events_of_another_device_record_on_that_devices_stream() -> None:
    """``cuda:1`` work runs on device 1's stream: its events must be recorded there, not on
    the current device's (0)."""
    with FakeGpus([H100_SXM, H100_SXM]) as gpus:
        assert torch.cuda.current_device() == 0
        interval = sync.CudaEventInterval(1)
        interval.start()
        gpus.device_clock_ms += 2.5
        assert interval.stop() == pytest.approx(0.0025)
    assert [c for c in gpus.calls if c.startswith("event.record")] == ["event.record:1"] * 2


def test_cuda_timing_without_cuda_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(NotAvailableError, match="no CUDA device"):
        sync.CudaEventInterval(0)
    with pytest.raises(NotAvailableError, match="not available"):
        sync.device_synchronizer(Device.CUDA)


def test_cuda_synchronizer_waits_for_its_own_device() -> None:
    with FakeGpus([H100_SXM, H100_SXM]) as gpus:
        sync.device_synchronizer(Device.CUDA, 1)()
        sync.device_synchronizer(Device.CUDA)()
    assert [c for c in gpus.calls if c.startswith("synchronize")] == [
        "synchronize:1",
        "synchronize:0",
    ]


def test_cpu_synchronizer_is_a_no_op() -> None:
    assert sync.device_synchronizer(Device.CPU)() is None
