"""Peak memory of a region (real RSS, fake CUDA allocator)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import torch

from accelscope.measurement import memory as memory_module
from accelscope.measurement.memory import MemoryProbe, track_peak_memory

# The two region tests run in a fresh interpreter: in a pytest worker, memory that earlier tests
# left mapped can make the process's high-water mark hide a new allocation (seen once under
# xdist: start and peak both 1.31 GB).
_REGIONS = """
import json
from accelscope.measurement.memory import track_peak_memory

def touched(size):
    block = bytearray(size)
    block[::4096] = b"\\x01" * len(block[::4096])  # touch every page
    del block

with track_peak_memory() as box:
    touched(256 * 1024 * 1024)
with track_peak_memory() as first:
    touched(192 * 1024 * 1024)
with track_peak_memory() as second:
    pass
print(json.dumps({
    "method": box[0].rss_method,
    "grew": box[0].rss_peak_bytes - box[0].rss_start_bytes,
    "first": first[0].rss_peak_bytes,
    "second": second[0].rss_peak_bytes,
}))
"""


@pytest.fixture(scope="module")
def regions() -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _REGIONS], capture_output=True, text=True, check=True, timeout=120
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_region_peak_sees_a_transient_allocation(regions: dict[str, Any]) -> None:
    assert regions["method"] == "region"  # /proc/self/clear_refs works on Linux
    assert regions["grew"] >= 0.9 * 256 * 1024 * 1024


def test_region_peak_is_reset_between_regions(regions: dict[str, Any]) -> None:
    assert regions["second"] < regions["first"] - 100 * 1024 * 1024


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
