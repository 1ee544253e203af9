"""Operator census of one warm-up step: how many ATen ops a step runs, which carry the time,
and in which dtype the matrix multiplies and convolutions run.

A ``TorchDispatchMode`` sees every operator below autograd (forward, backward and optimizer).
It slows the step it watches, so it runs over the last warm-up step only and its times are
used as *shares*, never as step times. On CUDA the host-side op times are launch times: what
the GPU did comes from its own timeline (:mod:`.device_trace`), never from here.

Units: :meth:`OpCensus.summary` and :func:`measure_op_overhead_s` return seconds. The census
alone accumulates integer nanoseconds (``time.perf_counter_ns``) while it runs: it sums every
ATen call of a step, often hundreds of thousands of sub-microsecond spans, and integer ticks add
up exactly where float ``time.perf_counter()`` reads are each quantised to the spacing of the
clock's float value. :meth:`OpCensus.summary` is where they become seconds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from math import prod
from typing import Any

__all__ = ["MATMUL_OPS", "OpCensus", "measure_op_overhead_s"]

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
    """

    def __init__(self) -> None:
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

        class _Mode(TorchDispatchMode):  # type: ignore[no-untyped-call]
            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                start = time.perf_counter_ns()
                out = func(*args, **(kwargs or {}))
                ns = time.perf_counter_ns() - start
                census.record(func, args, out, ns, recorder)
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
    ) -> None:
        """Account one operator call that took ``ns`` integer nanoseconds on the host."""
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

    def summary(self) -> dict[str, Any]:
        """JSON-ready census (seconds, FLOPs): the integer-ns accumulators leave as seconds."""
        top = sorted(self.times_ns.items(), key=lambda kv: -kv[1])[:12]
        return {
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
