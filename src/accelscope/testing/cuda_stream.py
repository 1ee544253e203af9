"""A simulated CUDA stream and its host thread, for code that reads CUDA events without a GPU.

:class:`FakeCudaStream` keeps one clock for the host and the device (integer nanoseconds) and
one in-order queue of device work. The host advances the clock by running code (:meth:`host`),
launching kernels (:meth:`launch`: the launch costs the host ``launch_s``; the kernel starts
when the device reaches it), reading a value back (:meth:`readback`: the host blocks until the
queue drains, as ``.item()`` does), or copying to the device (:meth:`copy_to_device`, blocking
from pageable memory or not from pinned memory). :meth:`event` makes events shaped like
``torch.cuda.Event(enable_timing=True)``: ``record()`` on the stream, completed when the device
reaches them (at the later of the record time and the moment the queue drains), and
``elapsed_time(other)`` in milliseconds. The stream counts the device's true busy time, so a
test compares what an analysis attributes with what happened.

:class:`FakeTorchCuda` stands in for ``torch.cuda``'s memory statistics (peaks, allocator
retries) and device properties.

One timebase for host and device is a simplification: real device timestamps have their own
origin, which is why accelscope only ever subtracts two device timestamps, as the tests do.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

__all__ = ["FakeCudaEvent", "FakeCudaStream", "FakeTorchCuda"]


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


class FakeCudaEvent:
    """A timing event on a :class:`FakeCudaStream` (see the module doc)."""

    def __init__(self, stream: FakeCudaStream) -> None:
        self._stream = stream
        self.at_ns: int | None = None

    def record(self) -> None:
        """Enqueue the event; it completes when the device reaches it."""
        stream = self._stream
        stream.events_recorded += 1
        stream.now_ns += stream.record_ns
        self.at_ns = max(stream.now_ns, stream.drained_ns)

    def query(self) -> bool:
        """Whether the device has reached the event by now (host clock)."""
        return self.at_ns is not None and self.at_ns <= self._stream.now_ns

    def elapsed_time(self, end: FakeCudaEvent) -> float:
        """Milliseconds from this event to ``end`` on the device timeline (like torch)."""
        if self.at_ns is None or end.at_ns is None:
            raise RuntimeError("both events must be recorded before elapsed_time")
        return (end.at_ns - self.at_ns) / 1e6


class FakeCudaStream:
    """One in-order CUDA stream and the host thread that feeds it (see the module doc).

    Args:
        launch_s: Host seconds one kernel launch costs.
        record_s: Host seconds one event record costs.
        latency_s: Seconds from the queue draining to a blocked host resuming.
    """

    def __init__(
        self, *, launch_s: float = 8e-6, record_s: float = 2e-6, latency_s: float = 15e-6
    ) -> None:
        self.launch_ns = _ns(launch_s)
        self.record_ns = _ns(record_s)
        self.latency_ns = _ns(latency_s)
        self.now_ns = 0
        self.drained_ns = 0
        self.busy_ns = 0
        self.events_recorded = 0
        self.synchronized = 0

    # -- seams in the shape accelscope's CUDA timeline takes --------------------------------

    def clock_ns(self) -> int:
        """The host's clock (integer ns), for a recorder."""
        return self.now_ns

    def event(self) -> FakeCudaEvent:
        """A new timing event (the ``torch.cuda.Event`` factory)."""
        return FakeCudaEvent(self)

    def in_use(self) -> bool:
        """CUDA is always initialised on the fake."""
        return True

    def synchronize(self) -> None:
        """Block the host until every queued item is done (``torch.cuda.synchronize``)."""
        self.synchronized += 1
        self._wait_for_queue()

    # -- what the loop does ------------------------------------------------------------------

    def host(self, seconds: float) -> None:
        """The host runs its own code for ``seconds`` (Python, waiting for a DataLoader)."""
        self.now_ns += _ns(seconds)

    def launch(self, device_s: float) -> None:
        """Launch one kernel that keeps the device busy ``device_s`` seconds."""
        self.now_ns += self.launch_ns
        self._enqueue(_ns(device_s))

    def readback(self, copy_s: float = 2e-6) -> None:
        """``tensor.item()``: a device-to-host copy queued behind everything, then a wait."""
        self.now_ns += self.launch_ns
        self._enqueue(_ns(copy_s))
        self._wait_for_queue()

    def copy_to_device(self, transfer_s: float, *, blocking: bool) -> None:
        """A host-to-device copy: ``blocking`` (pageable source) waits for the queue to drain,
        then for the transfer; otherwise (pinned, ``non_blocking=True``) it is only queued."""
        self.now_ns += self.launch_ns
        self._enqueue(_ns(transfer_s))
        if blocking:
            self._wait_for_queue()

    # -- internals ---------------------------------------------------------------------------

    def _enqueue(self, work_ns: int) -> None:
        start = max(self.now_ns, self.drained_ns)
        self.drained_ns = start + work_ns
        self.busy_ns += work_ns

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
