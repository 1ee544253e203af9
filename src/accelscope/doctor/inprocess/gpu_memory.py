"""The loop's GPU memory, read once at the end inside the process that ran it.

``torch.cuda.max_memory_allocated`` is the peak held by tensors, ``max_memory_reserved`` the
peak held by PyTorch's caching allocator (tensors plus its cache and fragmentation): what the
device had to give the process. ``memory_stats()["num_alloc_retries"]`` counts the times a
``cudaMalloc`` failed, the allocator freed its whole cache and tried again: each retry
synchronises the device, so a loop that needs them runs slower near the memory limit.
Peaks cover the whole run, warm-up included (nothing resets them).

Only read where the loop initialised CUDA (reading never initialises it). ``cuda`` is a seam:
``torch.cuda`` by default, :class:`accelscope.testing.cuda_stream.FakeTorchCuda` in tests.
"""

from __future__ import annotations

from typing import Any

__all__ = ["read_gpu_memory"]


def read_gpu_memory(cuda: Any = None) -> tuple[dict[str, Any] | None, str]:
    """``(record, status)``: the record is JSON-ready (bytes, counts) or ``None``, and the
    status says ``measured: ...`` or ``not measured: why``."""
    if cuda is None:
        try:
            import torch
        except ImportError:
            return None, "not measured: torch is not importable"
        cuda = torch.cuda
    try:
        if not cuda.is_initialized():
            return None, "not measured: the loop did not use CUDA"
        device = cuda.current_device()
        stats = cuda.memory_stats(device)
        props = cuda.get_device_properties(device)
        record = {
            "device": f"cuda:{device} {props.name}",
            "allocated_peak_bytes": int(cuda.max_memory_allocated(device)),
            "reserved_peak_bytes": int(cuda.max_memory_reserved(device)),
            "total_bytes": int(props.total_memory),
            "alloc_retries": int(stats.get("num_alloc_retries", 0)),
            "ooms": int(stats.get("num_ooms", 0)),
        }
    except Exception as exc:  # noqa: BLE001 - a broken CUDA context must not lose the run
        return None, f"not measured: reading torch.cuda memory statistics failed: {exc}"
    return record, "measured: torch.cuda caching allocator, peaks over the whole run"
