"""A simulated CUDA stream and its host thread, for doctor's GPU paths without a GPU.

:class:`FakeCudaStream` keeps one clock for the host and the device (integer nanoseconds) and
one in-order queue of device work. The host advances the clock by running code (:meth:`host`),
launching kernels (:meth:`launch`: the launch costs the host ``launch_s``; the kernel starts
when the device reaches it), reading a value back (:meth:`readback`: the host blocks until the
queue drains, as ``.item()`` does), or copying to the device (:meth:`copy_to_device`, blocking
from pageable memory or not from pinned memory). Between :meth:`step_begin` and
:meth:`step_end` it records what happened as torch.profiler would (:meth:`document`: a
Chrome/Kineto trace with ``ProfilerStep#N`` annotations, runtime calls, operators, kernels
and copies on the device, correlated), so doctor's live path reads a trace of the very loop
whose host phases the recorder measured. The stream counts the device's true busy time, so a
test compares what the analysis attributes with what happened.

:class:`FakeTorchCuda` stands in for ``torch.cuda``'s memory statistics (peaks, allocator
retries) and device properties.

One timebase for host and device is a simplification: real device timestamps have their own
origin (the profiler aligns them), which the trace reader never relies on.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

__all__ = ["FakeCudaStream", "FakeTorchCuda"]

_HOST_PID = _HOST_TID = 4242
_GPU_PID, _STREAM = 0, 7
_DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _us(ns: int) -> float:
    return ns / 1e3


class FakeCudaStream:
    """One in-order CUDA stream and the host thread that feeds it (see the module doc).

    Args:
        launch_s: Host seconds one kernel launch costs.
        latency_s: Seconds from the queue draining to a blocked host resuming.
    """

    def __init__(self, *, launch_s: float = 8e-6, latency_s: float = 15e-6) -> None:
        self.launch_ns = _ns(launch_s)
        self.latency_ns = _ns(latency_s)
        self.now_ns = 0
        self.drained_ns = 0
        self.busy_ns = 0
        self.tracing = False
        self.events: list[dict[str, Any]] = []
        self.device_events: list[dict[str, Any]] = []
        """Every kernel and copy (recorded always: work queued before the window may run
        inside it, as CUPTI records it)."""
        self._correlation = 1
        self._step: tuple[int, int] | None = None
        self._window: tuple[int, int] | None = None

    def clock_ns(self) -> int:
        """The host's clock (integer ns), for a recorder."""
        return self.now_ns

    # -- what the loop does ------------------------------------------------------------------

    def host(self, seconds: float, *, dataloader: bool = False) -> None:
        """The host runs its own code for ``seconds`` (Python; ``dataloader``: waiting in the
        DataLoader's ``__next__``, annotated as torch.profiler does)."""
        start = self.now_ns
        self.now_ns += _ns(seconds)
        if dataloader:
            self._host_event("user_annotation", _DATALOADER, start)

    def launch(self, device_s: float, name: str = "volta_sgemm_128x64_nn") -> None:
        """Launch one kernel ``name`` that keeps the device busy ``device_s`` seconds."""
        start = self.now_ns
        self.now_ns += self.launch_ns
        correlation = self._host_event("cuda_runtime", "cudaLaunchKernel", start, correlate=True)
        self._enqueue(_ns(device_s), "kernel", name, correlation)

    def readback(self, copy_s: float = 2e-6) -> None:
        """``tensor.item()``: a device-to-host copy queued behind everything, then a wait."""
        start = self.now_ns
        self.now_ns += self.launch_ns
        correlation = self._host_event("cuda_runtime", "cudaMemcpyAsync", start, correlate=True)
        self._enqueue(_ns(copy_s), "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", correlation)
        wait = self.now_ns
        self._wait_for_queue()
        self._host_event("cuda_runtime", "cudaStreamSynchronize", wait)
        self._host_event("cpu_op", "aten::item", start)

    def copy_to_device(self, transfer_s: float, *, blocking: bool) -> None:
        """A host-to-device copy: ``blocking`` (pageable source) waits for the queue to drain,
        then for the transfer; otherwise (pinned, ``non_blocking=True``) it is only queued."""
        start = self.now_ns
        self.now_ns += self.launch_ns
        memory = "Pageable" if blocking else "Pinned"
        self._enqueue(_ns(transfer_s), "gpu_memcpy", f"Memcpy HtoD ({memory} -> Device)", None)
        correlation = self._correlation - 1
        if blocking:
            self._wait_for_queue()
        if self.tracing:
            self._host_event("cuda_runtime", "cudaMemcpyAsync", start, correlation=correlation)
            self._host_event("cpu_op", "aten::copy_", start)

    # -- the profiled window -----------------------------------------------------------------

    def step_begin(self, index: int) -> None:
        """Start recording step ``index`` (``ProfilerStep#index``)."""
        self.tracing = True
        self._step = (index, self.now_ns)

    def step_end(self) -> None:
        """The step started by :meth:`step_begin` ends now."""
        if self._step is not None:
            index, start = self._step
            self._host_event("user_annotation", f"ProfilerStep#{index}", start)
            first = start if self._window is None else self._window[0]
            self._window = (first, self.now_ns)
        self._step = None
        self.tracing = False

    def document(self) -> dict[str, Any]:
        """What was recorded, as a torch.profiler (Kineto) trace document."""
        meta = [{"ph": "M", "name": "process_name", "pid": _GPU_PID, "args": {"name": "GPU 0"}}]
        start_us, end_us = (_us(t) for t in self._window or (0, 0))
        device = [
            e for e in self.device_events if e["ts"] + e["dur"] > start_us and e["ts"] < end_us
        ]
        return {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9}],
            "traceEvents": meta + self.events + device,
        }

    # -- internals ---------------------------------------------------------------------------

    def _host_event(
        self,
        cat: str,
        name: str,
        start_ns: int,
        *,
        correlate: bool = False,
        correlation: int | None = None,
    ) -> int | None:
        if not self.tracing:
            return None
        if correlate:
            correlation = self._correlation
            self._correlation += 1
        event: dict[str, Any] = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": _HOST_PID,
            "tid": _HOST_TID,
            "ts": _us(start_ns),
            "dur": _us(self.now_ns - start_ns),
        }
        if correlation is not None:
            event["args"] = {"correlation": correlation}
        self.events.append(event)
        return correlation

    def _enqueue(self, work_ns: int, cat: str, name: str, correlation: int | None) -> None:
        start = max(self.now_ns, self.drained_ns)
        self.drained_ns = start + work_ns
        self.busy_ns += work_ns
        if correlation is None:
            correlation = self._correlation
            self._correlation += 1
        args = {"device": 0, "stream": _STREAM, "correlation": correlation}
        if cat == "gpu_memcpy":
            args["bytes"] = 1 << 20
        self.device_events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": _GPU_PID,
                "tid": _STREAM,
                "ts": _us(start),
                "dur": _us(work_ns),
                "args": args,
            }
        )

    def _wait_for_queue(self) -> None:
        if self.drained_ns > self.now_ns:
            self.now_ns = self.drained_ns + self.latency_ns


@dataclass
class FakeTorchCuda:
    """``torch.cuda`` as far as its memory statistics go (bytes; see the module doc).

    ``fail`` makes every call raise, as a broken CUDA context does.
    """

    allocated_peak_bytes: int = 12 * 2**30
    reserved_peak_bytes: int = 14 * 2**30
    total_bytes: int = 80 * 2**30
    alloc_retries: int = 0
    ooms: int = 0
    name: str = "NVIDIA H100 80GB HBM3"
    initialized: bool = True
    fail: str = ""

    def _check(self) -> None:
        if self.fail:
            raise RuntimeError(self.fail)

    def is_initialized(self) -> bool:
        """Whether the loop used CUDA."""
        return self.initialized

    def current_device(self) -> int:
        """Ordinal of the current device."""
        self._check()
        return 0

    def max_memory_allocated(self, device: int | None = None) -> int:
        """Peak bytes held by tensors."""
        self._check()
        return self.allocated_peak_bytes

    def max_memory_reserved(self, device: int | None = None) -> int:
        """Peak bytes held by the caching allocator."""
        self._check()
        return self.reserved_peak_bytes

    def memory_stats(self, device: int | None = None) -> dict[str, int]:
        """The allocator counters accelscope reads."""
        self._check()
        return {"num_alloc_retries": self.alloc_retries, "num_ooms": self.ooms}

    def get_device_properties(self, device: int | None = None) -> Any:
        """Name and total memory of the device."""
        self._check()
        return SimpleNamespace(name=self.name, total_memory=self.total_bytes)
