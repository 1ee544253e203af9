"""Peak memory of a region (real RSS, fake CUDA allocator)."""

from __future__ import annotations

import pytest
import torch

from accelscope.measurement import memory as memory_module
from accelscope.measurement.memory import MemoryProbe, track_peak_memory


def test_region_peak_sees_a_transient_allocation() -> None:
    size = 256 * 1024 * 1024
    with track_peak_memory() as box:
        block = bytearray(size)
        block[::4096] = b"\x01" * len(block[::4096])  # touch every page
        del block
    peak = box[0]
    assert peak.rss_method == "region"  # /proc/self/clear_refs works on Linux
    assert peak.rss_peak_bytes - peak.rss_start_bytes >= 0.9 * size


def test_region_peak_is_reset_between_regions() -> None:
    with track_peak_memory() as first:
        block = bytearray(192 * 1024 * 1024)
        block[::4096] = b"\x01" * len(block[::4096])
        del block
    with track_peak_memory() as second:
        pass
    assert second[0].rss_peak_bytes < first[0].rss_peak_bytes - 100 * 1024 * 1024


def test_fallback_to_process_peak_when_reset_is_impossible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory_module, "_reset_rss_high_water", lambda: False)
    with track_peak_memory() as box:
        pass
    assert box[0].rss_method == "process"
    assert box[0].rss_peak_bytes > 0


def test_cuda_peaks_come_from_the_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "init", lambda: calls.append("init"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d: 4 * 2**30)
    probe = MemoryProbe(cuda_device=0)
    probe.begin()
    peak = probe.end()
    # CUDA is initialised first: the allocator refuses a device before (seen on an H100)
    assert calls == ["init", "reset"]
    assert peak.cuda_allocated_peak_bytes == 3 * 2**30
    assert peak.cuda_reserved_peak_bytes == 4 * 2**30
