"""Operator census of one warm-up step: how many ATen ops a step runs, which carry the time,
and in which dtype the matrix multiplies and convolutions run.

A ``TorchDispatchMode`` sees every operator below autograd (forward, backward and optimizer).
It slows the step it watches, so it runs over the last warm-up step only and its times are
used as *shares*, never as step times. On CUDA the host-side op times are launch times, so each
operator that touches a CUDA tensor is also timed on the device: a CUDA event just before the
call and one just after it. The first completes when the previous operator's work is done (or
when it is reached, if the device was idle), the second when this operator's work is done, so
their difference is the operator's time on the device timeline: its kernels, plus at most its
own launch latency where the device was idle. Gaps while the host runs Python between
operators (the census's own bookkeeping included) fall between pairs and are not counted. The
sum over the step, ``op_device_s``, is the device's work per step; by dtype, the matrix
multiplies' share of it says what a lower precision could save.

Units: :meth:`OpCensus.summary` and :func:`measure_op_overhead_s` return seconds. The census
alone accumulates integer nanoseconds (``time.perf_counter_ns``) while it runs: it sums every
ATen call of a step, often hundreds of thousands of sub-microsecond spans, and integer ticks add
up exactly where float ``time.perf_counter()`` reads are each quantised to the spacing of the
clock's float value. :meth:`OpCensus.summary` is where they become seconds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from math import prod
from typing import Any, Protocol

__all__ = ["MATMUL_OPS", "DeviceClock", "OpCensus", "measure_op_overhead_s", "touches_cuda"]

MAX_TIMED_OPS = 200_000
"""Operators timed on the device in the census step; beyond, device times are not reported."""


class DeviceClock(Protocol):
    """What the census needs from the CUDA timeline (:class:`.device.CudaTimeline` is one)."""

    def event(self) -> Any:
        """A new timing event (``torch.cuda.Event(enable_timing=True)``)."""

    def in_use(self) -> bool:
        """Whether CUDA is initialised (checked without initialising it)."""

    def synchronize(self) -> None:
        """Wait for the device."""


def touches_cuda(args: Any, out: Any) -> bool:
    """Whether an operator ran on a CUDA device: the device of the first tensor in its output,
    else in its arguments (a CPU scalar tensor may join a CUDA operator's arguments)."""
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves((out, args)):
        if isinstance(leaf, torch.Tensor):
            return bool(leaf.device.type == "cuda")
    return False


MATMUL_OPS = frozenset(
    {
        "aten.mm",
        "aten.addmm",
        "aten.bmm",
        "aten.baddbmm",
        "aten.matmul",
        "aten.linear",
        "aten.convolution",
        "aten._convolution",
        "aten.convolution_backward",
        "aten.mkldnn_convolution",
        "aten.mkldnn_linear",
        "aten._addmm_activation",
    }
)
"""Operators that run on the matrix units (where a lower precision's fast path would apply)."""


def _is_matmul(name: str) -> bool:
    return name in MATMUL_OPS or "scaled_dot_product" in name


def _flops(name: str, args: tuple[Any, ...], out: Any) -> float:
    """Multiply-add FLOPs of one matmul-like op from its shapes (0 when not derivable)."""
    try:
        if name in ("aten.mm", "aten.matmul") and len(args) >= 2:
            a, b = args[0].shape, args[1].shape
            return float(2.0 * prod(a) * b[-1])
        if name in ("aten.addmm", "aten._addmm_activation"):
            a, b = args[1].shape, args[2].shape
            return float(2.0 * a[0] * a[1] * b[1])
        if name == "aten.bmm":
            a, b = args[0].shape, args[1].shape
            return float(2.0 * a[0] * a[1] * a[2] * b[2])
        if name == "aten.baddbmm":
            a, b = args[1].shape, args[2].shape
            return float(2.0 * a[0] * a[1] * a[2] * b[2])
        if name in ("aten.convolution", "aten._convolution", "aten.mkldnn_convolution"):
            weight = args[1]
            return float(2.0 * float(out.numel()) * prod(weight.shape[1:]))
        if name == "aten.convolution_backward":
            weight = args[2]
            grad_out = args[0]
            return float(4.0 * float(grad_out.numel()) * prod(weight.shape[1:]))
    except (AttributeError, IndexError, TypeError):
        return 0.0
    return 0.0


class OpCensus:
    """Counts, times and classifies the operators of one step (see the module doc).

    Use :meth:`start`/:meth:`stop` around the step (the recorder does, on the last warm-up
    step); :meth:`summary` is JSON-ready.

    Args:
        device: Times operators on the device when given and CUDA is in use as the census
            step starts (never initialising CUDA itself).
        on_device: Whether an operator ran on the device, from its arguments and output (a
            seam: tests time CPU operators with fake events).
    """

    def __init__(
        self,
        device: DeviceClock | None = None,
        on_device: Callable[[Any, Any], bool] = touches_cuda,
    ) -> None:
        self._device = device
        self._on_device = on_device
        self._timing = False
        self._pairs: list[tuple[str | None, Any, Any]] = []  # (matmul dtype or None, a, b)
        self.device_status = (
            "not measured: no CUDA device" if device is None else "not measured: not started"
        )
        self._mode: Any = None
        self.ops = 0
        self.forward_ops = 0
        # integer-ns accumulators (see the module doc); summary() converts them to seconds
        self.op_time_ns = 0
        self.forward_op_time_ns = 0
        self.calls: dict[str, int] = defaultdict(int)
        self.times_ns: dict[str, int] = defaultdict(int)
        self.matmul_time_ns: dict[str, int] = defaultdict(int)  # by dtype
        self.matmul_flops: dict[str, float] = defaultdict(float)  # by dtype
        self.matmul_calls = 0
        self.devices: set[str] = set()
        self.autocast: dict[str, str] = {}
        self.done = False

    def start(self, recorder: Any) -> None:
        """Enter the dispatch mode (counting starts)."""
        from torch.utils._python_dispatch import TorchDispatchMode

        census = self
        device = self._device
        self._timing = device is not None and device.in_use()
        if device is not None and not self._timing:
            self.device_status = "not measured: CUDA was not in use when the census step began"
        timing = self._timing

        class _Mode(TorchDispatchMode):  # type: ignore[no-untyped-call]
            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                before = after = None
                if timing and census._timing:
                    assert device is not None
                    before = device.event()
                    before.record()
                start = time.perf_counter_ns()
                out = func(*args, **(kwargs or {}))
                ns = time.perf_counter_ns() - start
                if before is not None:
                    assert device is not None
                    after = device.event()
                    after.record()  # at once: census bookkeeping stays between pairs
                census.record(func, args, out, ns, recorder, (before, after))
                return out

        self._mode = _Mode()  # type: ignore[no-untyped-call]
        self._mode.__enter__()

    def stop(self) -> None:
        """Leave the dispatch mode."""
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
            self.done = True

    def record(
        self,
        func: Any,
        args: tuple[Any, ...],
        out: Any,
        ns: int,
        recorder: Any,
        events: tuple[Any, Any] = (None, None),
    ) -> None:
        """Account one operator call that took ``ns`` integer nanoseconds on the host;
        ``events``: the recorded CUDA events around it, when it was timed on the device."""
        import torch

        name = str(getattr(func, "overloadpacket", func))
        self.ops += 1
        self.op_time_ns += ns
        self.calls[name] += 1
        self.times_ns[name] += ns
        if getattr(recorder, "forward_depth", 0):
            self.forward_ops += 1
            self.forward_op_time_ns += ns
        matmul = _is_matmul(name)
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        dtype = None if first is None else str(first.dtype).removeprefix("torch.")
        before, after = events
        if before is not None and after is not None and self._on_device(args, out):
            if len(self._pairs) >= MAX_TIMED_OPS:
                self._timing = False
                self._pairs = []
                self.device_status = (
                    f"not measured: more than {MAX_TIMED_OPS} operators in the census step"
                )
            else:
                self._pairs.append((dtype if matmul else None, before, after))
        if not matmul or first is None or dtype is None:
            return
        self.matmul_calls += 1
        self.matmul_time_ns[dtype] += ns
        self.matmul_flops[dtype] += _flops(name, args, out)
        self.devices.add(first.device.type)
        if first.device.type not in self.autocast:
            device = first.device.type
            enabled = torch.is_autocast_enabled(device)
            self.autocast[device] = str(torch.get_autocast_dtype(device)) if enabled else "off"

    def device_times(self) -> tuple[float | None, dict[str, float], int]:
        """``(op_device_s, matmul_device_s by dtype, operators timed)`` from the events
        (synchronises once); ``(None, {}, 0)`` where not measured (:attr:`device_status`)."""
        if not self._pairs:
            if self._timing:
                self.device_status = "not measured: no operator ran on the CUDA device"
            return None, {}, 0
        assert self._device is not None
        try:
            self._device.synchronize()
            total = 0.0
            matmul: dict[str, float] = defaultdict(float)
            for dtype, before, after in self._pairs:
                seconds = max(0.0, float(before.elapsed_time(after)) / 1e3)
                total += seconds
                if dtype is not None:
                    matmul[dtype] += seconds
        except Exception as exc:  # noqa: BLE001 - a broken CUDA context must not lose the run
            self.device_status = f"not measured: reading CUDA events failed: {exc}"
            return None, {}, 0
        self.device_status = (
            f"measured: CUDA events around each of {len(self._pairs)} device operators "
            "of the census step"
        )
        return total, dict(matmul), len(self._pairs)

    def summary(self) -> dict[str, Any]:
        """JSON-ready census (seconds, FLOPs): the integer-ns accumulators leave as seconds."""
        top = sorted(self.times_ns.items(), key=lambda kv: -kv[1])[:12]
        op_device_s, matmul_device_s, device_ops = self.device_times()
        return {
            "op_device_s": op_device_s,
            "matmul_device_s": matmul_device_s,
            "device_ops": device_ops,
            "device_status": self.device_status,
            "ops": self.ops,
            "forward_ops": self.forward_ops,
            "op_time_s": self.op_time_ns / 1e9,
            "forward_op_time_s": self.forward_op_time_ns / 1e9,
            "matmul_calls": self.matmul_calls,
            "matmul_time_s": {k: v / 1e9 for k, v in self.matmul_time_ns.items()},
            "matmul_flops": dict(self.matmul_flops),
            "devices": sorted(self.devices),
            "autocast": {
                k.removeprefix("torch."): v.removeprefix("torch.") for k, v in self.autocast.items()
            },
            "top_ops": [{"name": n, "calls": self.calls[n], "time_s": t / 1e9} for n, t in top],
        }


def measure_op_overhead_s(repeats: int = 400) -> float:
    """Median host time of a trivial eager op here (1-element add): the per-op dispatch cost
    that a step made of tiny ops pays again and again. Measured, seconds."""
    import torch

    a, b = torch.ones(1), torch.ones(1)
    for _ in range(20):
        torch.add(a, b)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.add(a, b)
        samples.append(time.perf_counter() - start)
    samples.sort()
    return samples[len(samples) // 2]
