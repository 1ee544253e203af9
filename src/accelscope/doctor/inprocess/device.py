"""Per step, what the GPU did while the host waited, from CUDA events recorded by the host.

An event completes when the device has finished everything queued before it. So a pair of
events recorded around a host call, ``a`` just before and ``b`` just after, brackets the part of
the call during which the device had *nothing* left of earlier work: ``a`` completes when the
work queued before the call drains (or at once, if the device was already idle), ``b`` as soon
as it is reached. ``elapsed(a, b)`` is therefore the call's time *after the device drained*,
and the call's host time minus that is the time the host spent *waiting for queued device
work*. Three kinds of host call are bracketed:

* **input waits** (the DataLoader's ``__next__``, which queues no device work): the elapsed
  time is how long the device sat idle while the host waited for the batch; the rest of the
  wait was overlapped with device work;
* **readbacks and synchronisations** (``.item()``, ``.cpu()`` of a device tensor,
  ``torch.cuda.synchronize``...): the part before the drain is the device computing work the
  host had queued (device compute, not a synchronisation cost); the part after it is the
  round trip itself, during which the device idles;
* **host->device copies** (``.to('cuda')``, ``.cuda()``): a blocking copy from pageable
  memory first waits for the queue to drain (device compute again); the part after the drain
  is the transfer and its staging, during which the device's compute idles.

``elapsed_time`` between consecutive step-boundary events is the step's length on the device
timeline. Events are read once, after the last step, so recording them never synchronises the
loop. At most :data:`MAX_PAIRS_PER_STEP` calls per step are bracketed; the host time of the
rest is reported as not split (the analysis counts it as the call's own cost, as it would
without a GPU).

What events cannot see: gaps between kernels while the host is running its own code or
launching kernels (a launch-bound loop). :mod:`.probe` times each operator on the device
during the census step, which gives the device's work per step; the difference is inferred,
not measured (see docs/doctor.md).

The event factory, the "is CUDA in use" probe and the synchronise call are seams: tests drive
the arithmetic with :class:`accelscope.testing.cuda_stream.FakeCudaStream`, whose events carry
simulated device timestamps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MAX_PAIRS_PER_STEP", "CudaTimeline", "cuda_timeline"]

MAX_PAIRS_PER_STEP = 256
"""Readbacks and copies bracketed with events per step; later ones are left unsplit."""

_WAIT_KINDS = ("sync", "copy")


class CudaTimeline:
    """Records CUDA events at step boundaries and around host waits; see the module doc."""

    def __init__(
        self,
        event_factory: Callable[[], Any],
        in_use: Callable[[], bool],
        synchronize: Callable[[], None],
    ) -> None:
        self._event = event_factory
        self._in_use = in_use
        self._synchronize = synchronize
        self._boundaries: dict[int, Any] = {}
        self._idle: dict[int, list[tuple[Any, Any]]] = {}
        self._waits: dict[int, list[tuple[str, Any, Any, float]]] = {}
        self._open: Any = None
        self._wait_open: Any = None
        self._wait_depth = 0
        self._step = 0

    # -- seams shared with the operator census -----------------------------------------------

    def event(self) -> Any:
        """A new timing event (not recorded yet)."""
        return self._event()

    def in_use(self) -> bool:
        """Whether CUDA is initialised in this process (checked without initialising it)."""
        return self._in_use()

    def synchronize(self) -> None:
        """Wait for the device (the original ``torch.cuda.synchronize``)."""
        self._synchronize()

    # -- step boundaries and input waits -----------------------------------------------------

    def boundary(self, index: int) -> None:
        """Mark the start of step ``index`` (only once CUDA is in use)."""
        self._step = index
        if not self._in_use():
            return
        event = self._event()
        event.record()
        self._boundaries[index] = event

    def idle_begin(self) -> None:
        """Mark the start of a host wait that queues no device work."""
        if not self._boundaries:  # CUDA not in use yet
            return
        event = self._event()
        event.record()
        self._open = event

    def idle_end(self) -> None:
        """Mark the end of the wait started by :meth:`idle_begin`."""
        if self._open is None:
            return
        event = self._event()
        event.record()
        self._idle.setdefault(self._step, []).append((self._open, event))
        self._open = None

    # -- readbacks, synchronisations and copies ----------------------------------------------

    def wait_begin(self) -> None:
        """Just before a host call that may wait for the device (a readback or a copy).

        Calls nest (a readback made inside another one): only the outermost is bracketed."""
        self._wait_depth += 1
        if self._wait_depth > 1 or not self._boundaries:
            return
        if len(self._waits.get(self._step, ())) >= MAX_PAIRS_PER_STEP:
            return
        event = self._event()
        event.record()
        self._wait_open = event

    def wait_end(self, kind: str, host_s: float) -> None:
        """Just after the call opened by :meth:`wait_begin`; ``kind`` is ``sync`` or ``copy``,
        ``host_s`` the call's host time (seconds)."""
        if self._wait_depth == 0:
            return
        self._wait_depth -= 1
        if self._wait_depth or self._wait_open is None:
            return
        event = self._event()
        event.record()
        self._waits.setdefault(self._step, []).append((kind, self._wait_open, event, host_s))
        self._wait_open = None

    def wait_cancel(self) -> None:
        """The call opened by :meth:`wait_begin` turned out not to touch the device (or
        raised): forget it."""
        if self._wait_depth == 0:
            return
        self._wait_depth -= 1
        if not self._wait_depth:
            self._wait_open = None

    # -- reading -----------------------------------------------------------------------------

    def collect(self, steps: int) -> list[dict[str, float] | None]:
        """Per step (seconds), or ``None`` where a boundary was not recorded (CUDA not in use
        yet). Synchronises once.

        Keys: ``device_s`` (the step on the device timeline), ``idle_s`` (device idle during
        input waits), and per kind ``sync``/``copy``: ``<kind>_wait_s`` (host time waiting
        for queued device work) and ``<kind>_idle_s`` (host time after the queue drained)."""
        if not self._boundaries:
            return [None] * steps
        self._synchronize()
        out: list[dict[str, float] | None] = []
        for index in range(steps):
            start, end = self._boundaries.get(index), self._boundaries.get(index + 1)
            if start is None or end is None:
                out.append(None)
                continue
            device_s = _elapsed_s(start, end)
            idle_s = sum(_elapsed_s(a, b) for a, b in self._idle.get(index, []))
            record = {"device_s": device_s, "idle_s": min(max(idle_s, 0.0), device_s)}
            for kind in _WAIT_KINDS:
                record[f"{kind}_wait_s"] = 0.0
                record[f"{kind}_idle_s"] = 0.0
            for kind, a, b, host_s in self._waits.get(index, []):
                after_drain_s = min(max(_elapsed_s(a, b), 0.0), host_s)
                record[f"{kind}_wait_s"] += host_s - after_drain_s
                record[f"{kind}_idle_s"] += after_drain_s
            out.append(record)
        return out


def _elapsed_s(start: Any, end: Any) -> float:
    """Device seconds from ``start`` to ``end`` (``elapsed_time`` is in milliseconds)."""
    return float(start.elapsed_time(end)) / 1e3


def cuda_timeline() -> tuple[CudaTimeline | None, str]:
    """A timeline on the real CUDA API, or ``None`` and why it is not available."""
    try:
        import torch
    except ImportError:
        return None, "not available: torch is not importable"
    if not torch.cuda.is_available():
        return None, "not available: no CUDA device"

    def event() -> Any:
        return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def in_use() -> bool:
        return bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]

    synchronize = torch.cuda.synchronize  # the original, before any instrumentation wraps it
    return CudaTimeline(event, in_use, synchronize), "measured: CUDA events per step"
