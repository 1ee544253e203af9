"""Read a torch.profiler (Kineto) trace, the Chrome-trace JSON that ``export_chrome_trace`` and
TensorBoard's ``tensorboard_trace_handler`` write (``.json`` or ``.json.gz``), into the typed
intervals of :mod:`.device_timeline`, find its steps and split each one.

Steps: ``ProfilerStep#N`` annotations where present; else the spans between consecutive
optimizer-step annotations (``Optimizer.step#SGD.step``); else the whole window as one span.
A directory of per-rank traces gives one result per rank.

The file is read in one streaming pass (:mod:`.trace_stream`): each event is reduced, as it is
decoded, to the fields the timeline uses, and the JSON document is never held whole.

Bad traces (missing, too large, not JSON, truncated, no ``traceEvents``, no GPU events) raise
:class:`~accelscope.errors.BadInputError` with one line. Reads files; never prints."""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from accelscope.aten import LAUNCH_NOTHING, VIEWS
from accelscope.doctor.device_timeline import (
    DeviceInterval,
    HostCategory,
    HostSpan,
    StepTimeline,
    StepWindow,
    step_timeline,
)
from accelscope.doctor.trace_quality import NamedEvent, TraceQuality, assess, one_off_kind
from accelscope.doctor.trace_stream import EventArgs, TraceEvent, stream_trace
from accelscope.errors import BadInputError
from accelscope.serialise import dump

__all__ = [
    "MAX_TRACE_BYTES",
    "NO_GPU_ACTIVITY",
    "KinetoTrace",
    "NoGpuEvents",
    "RankTimeline",
    "load_trace",
    "parse_trace",
    "rank_timelines",
    "read_live_trace",
    "trace_files",
]

NAMED_MIN_US = 1_000.0
"""Host events this long (µs) are kept by name for the quality gate."""
MAX_TRACE_BYTES = 4 << 30
"""Largest trace read (after decompression): 4 GiB. The trace is streamed, so memory grows with
the events kept, not the file: a 1.0 GB Kineto trace (5 M events) peaked at 1.25 GiB RSS for
the whole ``doctor --trace`` process (``benchmarks/trace_big.py``)."""

_NAMED_CATEGORIES = {
    "cuda_runtime",
    "cuda_driver",
    "runtime",
    "driver",
    "cpu_op",
    "user_annotation",
    "python_function",
}
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
_COPY = re.compile(r"Memcpy\s+(\w+)(?:\s*\((\w+)\s*->\s*(\w+)\))?", re.IGNORECASE)
_SYNC_CALLS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
}
_SYNC_OPS = {"aten::item", "aten::_local_scalar_dense"}
_COPY_OPS = {"aten::copy_", "aten::to", "aten::_to_copy"}
_COPY_CALLS = {"cudaMemcpyAsync", "cudaMemcpy", "cuMemcpyAsync", "cuMemcpyHtoDAsync_v2"}
_ALLOC_CALLS = {
    "cudaMalloc",
    "cudaFree",
    "cudaMallocHost",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cudaMallocAsync",
    "cudaFreeAsync",
}
_LAUNCH = re.compile(
    r"^(cuda|cu)(LaunchKernel|LaunchKernelExC|LaunchCooperativeKernel|GraphLaunch)"
)
_METADATA_OPS = frozenset(f"aten::{name}" for name in (*VIEWS, *LAUNCH_NOTHING))
"""Operators that on a device tensor launch nothing (views, metadata, allocations) or whose
launches a trace may not nest: never counted as the host's own compute."""


class NoGpuEvents(BadInputError):
    """A trace with no kernel or copy on any device: the loop did not run on the GPU (or the
    profiler recorded CPU activities only)."""


NO_GPU_ACTIVITY = "recorded: no GPU activity (the profiled steps ran nothing on the GPU)"
"""The live record's status when its trace holds no kernel or copy."""


@dataclass(frozen=True, kw_only=True)
class KinetoTrace:
    """The parts of one trace the timeline needs (µs on the trace's clock)."""

    source: str
    device: tuple[DeviceInterval, ...]
    host: tuple[HostSpan, ...]
    steps: tuple[StepWindow, ...]
    step_source: Literal["ProfilerStep", "optimizer step", "whole window"]
    device_name: str | None
    notes: tuple[str, ...] = ()
    named: tuple[NamedEvent, ...] = ()
    """Host events of at least :data:`NAMED_MIN_US` and every compile or one-off event, by
    name: what the quality gate explains a long step with."""
    negative_durations: int = 0
    """Events with a negative duration (left out of everything else)."""
    unrecorded_graph_launches: tuple[float, ...] = ()
    """Start times (µs) of CUDA graph launches whose correlation id no device event carries:
    the graph's kernels are missing from the trace."""

    def quality(self, steps: Sequence[StepTimeline]) -> TraceQuality:
        """The quality gate over ``steps`` (this trace's :meth:`timelines`)."""
        return assess(
            self.steps,
            steps,
            named=self.named,
            host=self.host,
            device=self.device,
            negative_durations=self.negative_durations,
            unrecorded_graph_launch_us=self.unrecorded_graph_launches,
        )

    def timelines(self) -> tuple[StepTimeline, ...]:
        """Each step split into its causes (each step sees only the intervals that meet it)."""
        device = sorted(self.device, key=lambda d: d.start_us)
        host = sorted(self.host, key=lambda h: h.start_us)
        device_starts = [d.start_us for d in device]
        host_starts = [h.start_us for h in host]
        device_longest = max((d.end_us - d.start_us for d in device), default=0.0)
        host_longest = max((h.end_us - h.start_us for h in host), default=0.0)
        out = []
        for w in self.steps:
            a = bisect.bisect_left(device_starts, w.start_us - device_longest)
            b = bisect.bisect_left(device_starts, w.end_us)
            c = bisect.bisect_left(host_starts, w.start_us - host_longest)
            d = bisect.bisect_left(host_starts, w.end_us)
            out.append(step_timeline(w, device[a:b], host[c:d]))
        return tuple(out)


@dataclass(frozen=True, kw_only=True)
class RankTimeline:
    """One rank's (one file's) trace and its steps."""

    rank: str
    trace: KinetoTrace
    steps: tuple[StepTimeline, ...]

    @property
    def mean_step_s(self) -> float:
        return math.fsum(s.step_us for s in self.steps) / len(self.steps) / 1e6


_Call = tuple[str, Any, Any, float, float, Any]
"""A runtime or driver call: name, pid, tid, start and end (µs), correlation id (or None)."""
_Op = tuple[str, Any, Any, float, float]
"""An operator: name, pid, tid, start and end (µs)."""


def load_trace(path: Path) -> KinetoTrace:
    """Read and parse one trace file in one streaming pass (:mod:`.trace_stream`): each event
    is reduced to the fields the timeline uses as it is read, so memory grows with the events
    kept (device activity, runtime calls, operators, annotations), never with the document."""
    events = _Events()
    found, kept = stream_trace(
        path,
        events.add_typed,
        events.add,
        max_bytes=MAX_TRACE_BYTES,
        keep=frozenset({"deviceProperties"}),
    )
    if not found:
        raise BadInputError(f"trace {path}: not a Chrome trace (no traceEvents)")
    return events.trace(source=str(path), device_properties=kept.get("deviceProperties"))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _copy_kind(name: str) -> tuple[str | None, Literal["pageable", "pinned"] | None]:
    match = _COPY.search(name)
    if match is None:
        return None, None
    direction = match.group(1)
    ends = {(match.group(2) or "").lower(), (match.group(3) or "").lower()}
    memory: Literal["pageable", "pinned"] | None = None
    if "pageable" in ends:
        memory = "pageable"
    elif "pinned" in ends:
        memory = "pinned"
    return direction, memory


def _hashable(value: Any) -> Any:
    """A pid, tid or correlation id as a key: a JSON array or object (a broken trace) is none."""
    return None if isinstance(value, (list, dict)) else value


def parse_trace(document: Any, *, source: str = "trace") -> KinetoTrace:
    """The timeline inputs of a parsed trace document (what :func:`load_trace` streams)."""
    if isinstance(document, list):
        events_raw: Any = document
        document = {"traceEvents": document}
    elif isinstance(document, dict):
        events_raw = document.get("traceEvents")
    else:
        raise BadInputError(f"trace {source}: not a Chrome trace (no traceEvents)")
    if not isinstance(events_raw, list):
        raise BadInputError(f"trace {source}: not a Chrome trace (no traceEvents)")
    events = _Events()
    for event in events_raw:
        events.add(event)
    return events.trace(source=source, device_properties=document.get("deviceProperties"))


class _Events:
    """The accumulator of one trace's events: :meth:`add` keeps, per complete (``X``) event,
    only what the timeline reads, in compact form (names interned, runtime calls and operators
    as small tuples, the window's first and last µs as two numbers), and drops the rest at
    once; :meth:`trace` builds the immutable :class:`KinetoTrace`."""

    def __init__(self) -> None:
        self.device: list[DeviceInterval] = []
        self.gpu_pids: set[Any] = set()
        self.by_correlation: dict[int, DeviceInterval] = {}
        self.runtime: list[_Call] = []
        self.ops: list[_Op] = []
        self.annotations: list[tuple[str, float, float]] = []
        self.named: list[NamedEvent] = []
        self.negative = 0
        self.first_us = math.inf
        self.last_us = -math.inf
        self._names: dict[str, str] = {}
        self._compile: dict[str, bool] = {}

    def add(self, event: Any) -> None:
        """Keep what the timeline reads of one trace event, whatever its shape (anything that
        is not a complete event with finite numeric ``ts`` and ``dur`` is ignored): its fields
        are checked here, then kept as a typed event's."""
        if not isinstance(event, dict) or event.get("ph") != "X":
            return
        ts, dur = _number(event.get("ts")), _number(event.get("dur"))
        if ts is None or dur is None:
            return
        name = event.get("name", "")
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        self.add_typed(
            TraceEvent(
                ph="X",
                cat=str(event.get("cat", "")),
                name=name if isinstance(name, str) else str(name),
                pid=_hashable(event.get("pid")),
                tid=_hashable(event.get("tid")),
                ts=ts,
                dur=dur,
                args=EventArgs(
                    correlation=_hashable(args.get("correlation")),
                    stream=args.get("stream", event.get("tid", 0)),
                ),
            )
        )

    def add_typed(self, event: TraceEvent) -> None:
        """Keep what the timeline reads of one event decoded as :class:`TraceEvent` (the
        common case; it runs once per event of the trace, so it is written flat)."""
        ts, dur = event.ts, event.dur
        if event.ph != "X" or ts is None or dur is None:
            return
        if not (math.isfinite(ts) and math.isfinite(dur)):
            return
        if dur < 0:
            self.negative += 1
            return
        cat = event.cat.lower()
        name = self._names.setdefault(event.name, event.name)
        end = ts + dur
        if cat in _NAMED_CATEGORIES:
            compiles = self._compile.get(name)
            if compiles is None:
                compiles = self._compile[name] = one_off_kind(name) == "compile"
            if (dur >= NAMED_MIN_US or compiles) and not _PROFILER_STEP.match(name):
                self.named.append(NamedEvent(start_us=ts, end_us=end, name=name))
        pid = event.pid
        if cat == "overhead" or pid == -1:
            return
        tid = None if event.tid is msgspec.UNSET else event.tid
        args = event.args
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            stream: Any = 0 if event.tid is msgspec.UNSET else event.tid
            correlation = None
            if args is not None:
                if args.stream is not msgspec.UNSET:
                    stream = args.stream
                if args.correlation is not msgspec.UNSET:
                    correlation = args.correlation
            self._device(cat, name, pid, ts, end, stream, correlation)
        elif cat in ("cuda_runtime", "cuda_driver", "runtime", "driver"):
            correlation = None
            if args is not None and args.correlation is not msgspec.UNSET:
                correlation = args.correlation
            self.runtime.append((name, pid, tid, ts, end, correlation))
        elif cat == "cpu_op" and _PROFILER_STEP.match(name):
            self.annotations.append((name, ts, end))  # a step mark filed as an op (torch 1.x)
        elif cat == "cpu_op":
            self.ops.append((name, pid, tid, ts, end))
        elif cat in ("user_annotation", "python_function"):
            self.annotations.append((name, ts, end))
        else:
            return
        if cat != "python_function":
            self.first_us = min(self.first_us, ts)
            self.last_us = max(self.last_us, end)

    def _device(
        self, cat: str, name: str, pid: Any, ts: float, end: float, stream: Any, correlation: Any
    ) -> None:
        stream_us = _number(stream)
        stream_id = int(stream_us) if stream_us is not None else 0
        if cat == "kernel":
            kind: Literal["kernel", "nccl"] = "nccl" if "nccl" in name.lower() else "kernel"
            interval = DeviceInterval(
                start_us=ts, end_us=end, kind=kind, stream=stream_id, name=name
            )
        elif cat == "gpu_memcpy":
            direction, memory = _copy_kind(name)
            interval = DeviceInterval(
                start_us=ts,
                end_us=end,
                kind="memcpy",
                stream=stream_id,
                name=name,
                direction=direction,
                host_memory=memory,
            )
        else:
            interval = DeviceInterval(
                start_us=ts, end_us=end, kind="memset", stream=stream_id, name=name
            )
        self.device.append(interval)
        self.gpu_pids.add(pid)
        if isinstance(correlation, int):
            self.by_correlation[correlation] = interval

    def trace(self, *, source: str, device_properties: Any) -> KinetoTrace:
        """The immutable trace of the events added."""
        if not self.device:
            raise NoGpuEvents(
                f"trace {source}: no GPU events (kernels or copies); record with "
                "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
            )
        host = _host_spans(self.runtime, self.ops, self.annotations, self.by_correlation)
        unrecorded_graphs = tuple(
            ts
            for name, _pid, _tid, ts, _end, correlation in self.runtime
            if "GraphLaunch" in name
            and isinstance(correlation, int)
            and correlation not in self.by_correlation
        )
        steps, step_source = _steps(self.annotations, self.first_us, self.last_us)
        notes: list[str] = []
        if len(self.gpu_pids) > 1:
            notes.append(f"{len(self.gpu_pids)} devices in one trace: their activity is merged")
        device_name: str | None = None
        props = device_properties
        if (
            isinstance(props, list)
            and props
            and isinstance(props[0], dict)
            and props[0].get("name")
        ):
            device_name = str(props[0]["name"])
        return KinetoTrace(
            source=source,
            device=tuple(self.device),
            host=tuple(host),
            steps=steps,
            step_source=step_source,
            device_name=device_name,
            notes=tuple(notes),
            named=tuple(self.named),
            negative_durations=self.negative,
            unrecorded_graph_launches=unrecorded_graphs,
        )


def _host_spans(
    runtime: Sequence[_Call],
    ops: Sequence[_Op],
    annotations: Sequence[tuple[str, float, float]],
    by_correlation: dict[int, DeviceInterval],
) -> list[HostSpan]:
    spans: list[HostSpan] = []
    copy_calls: list[tuple[float, float, HostCategory]] = []
    calls_by_thread: dict[tuple[Any, Any], list[float]] = {}
    for _name, pid, tid, ts, _end, _correlation in runtime:
        calls_by_thread.setdefault((pid, tid), []).append(ts)
    for starts in calls_by_thread.values():
        starts.sort()

    def calls_inside(pid: Any, tid: Any, ts: float, end: float) -> bool:
        starts = calls_by_thread.get((pid, tid), [])
        i = bisect.bisect_left(starts, ts)
        return i < len(starts) and starts[i] <= end

    for name, _pid, _tid, ts, end, correlation in runtime:
        category: HostCategory | None = None
        if name in _SYNC_CALLS:
            category = "sync"
        elif name in _COPY_CALLS or name.startswith(("cudaMemcpy", "cuMemcpy")):
            target = by_correlation.get(correlation) if correlation is not None else None
            if target is not None and target.direction == "HtoD":
                category = "h2d_pinned" if target.host_memory == "pinned" else "h2d_pageable"
            elif target is not None and target.direction == "DtoH":
                category = "sync"  # a readback waits for the device
            else:
                category = "launch"  # device-to-device, or no device record: a launch
            copy_calls.append((ts, end, category))
        elif name in _ALLOC_CALLS:
            category = "allocator"
        elif _LAUNCH.match(name):
            category = "launch"
        if category is not None:
            spans.append(HostSpan(start_us=ts, end_us=end, category=category, name=name))
    order: tuple[HostCategory, ...] = ("h2d_pageable", "h2d_pinned", "sync")
    copy_calls.sort()
    copy_starts = [s for s, _e, _c in copy_calls]
    for name, pid, tid, ts, end in ops:
        op_category: HostCategory = "launch"
        if name in _SYNC_OPS:
            op_category = "sync"
        elif name in _COPY_OPS:
            lo = bisect.bisect_left(copy_starts, ts)
            hi = bisect.bisect_right(copy_starts, end)
            inside = {c for s, e, c in copy_calls[lo:hi] if s >= ts and e <= end}
            op_category = next((c for c in order if c in inside), "launch")
            if not inside and not calls_inside(pid, tid, ts, end):
                op_category = "host_compute"  # a copy between host tensors: no device call
        elif name not in _METADATA_OPS and not calls_inside(pid, tid, ts, end):
            op_category = "host_compute"  # an operator that calls no CUDA API: CPU tensors
        spans.append(HostSpan(start_us=ts, end_us=end, category=op_category, name=name))
    for name, ts, end in annotations:
        if "DataLoader" in name and ("enumerate" in name or "__next__" in name):
            spans.append(HostSpan(start_us=ts, end_us=end, category="dataloader", name=name))
    return spans


def _steps(
    annotations: Sequence[tuple[str, float, float]], first_us: float, last_us: float
) -> tuple[tuple[StepWindow, ...], Literal["ProfilerStep", "optimizer step", "whole window"]]:
    profiler = []
    for name, ts, end in annotations:
        match = _PROFILER_STEP.match(name)
        if match and end > ts:
            profiler.append(StepWindow(index=int(match.group(1)), start_us=ts, end_us=end))
    if profiler:
        unique = {w.index: w for w in profiler}
        return tuple(sorted(unique.values(), key=lambda w: w.start_us)), "ProfilerStep"
    optimizer = sorted({end for name, _ts, end in annotations if _OPTIMIZER_STEP.match(name)})
    if len(optimizer) >= 2:
        windows = tuple(
            StepWindow(index=i, start_us=a, end_us=b)
            for i, (a, b) in enumerate(itertools.pairwise(optimizer))
            if b > a
        )
        return windows, "optimizer step"
    return (StepWindow(index=0, start_us=first_us, end_us=last_us),), "whole window"


def trace_files(path: Path) -> list[Path]:
    """The trace files ``path`` names: itself, or a directory's ``*.json``/``*.json.gz``."""
    if not path.exists():
        raise BadInputError(f"trace {path} not found")
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz"))
        )
        if not files:
            raise BadInputError(f"trace directory {path} has no .json or .json.gz files")
        return files
    return [path]


def rank_timelines(path: Path) -> list[RankTimeline]:
    """One :class:`RankTimeline` per trace file under ``path`` (a file or a directory)."""
    out: list[RankTimeline] = []
    for file in trace_files(path):
        trace = load_trace(file)
        steps = trace.timelines()
        if not steps or all(s.step_us <= 0 for s in steps):
            raise BadInputError(f"trace {file}: no step of positive length")
        rank = file.name.removesuffix(".gz").removesuffix(".json")
        out.append(RankTimeline(rank=rank, trace=trace, steps=steps))
    return out


def read_live_trace(raw: dict[str, Any]) -> dict[str, Any]:
    """The child's ``device_trace`` record with the trace it names read into step timelines
    (``timeline``: every profiled step; ``gate``: the quality gate's outcome, which the
    verdict applies exactly as ``doctor --trace`` does; ``device_name``, ``step_source``); a
    trace that cannot be read leaves the status ``not read: why`` and no timeline. The trace
    file itself is not kept."""
    out = {k: v for k, v in raw.items() if k != "path"}
    path = raw.get("path")
    if not path:
        return out
    try:
        trace = load_trace(Path(str(path)))
        steps = trace.timelines()
    except BadInputError as exc:
        out["status"] = NO_GPU_ACTIVITY if isinstance(exc, NoGpuEvents) else f"not read: {exc}"
        return out
    if not steps or all(s.step_us <= 0 for s in steps):
        out["status"] = "not read: no step of positive length in the trace"
        return out
    quality = trace.quality(steps)
    out["quality"] = [f.message for f in quality.flags]
    out["gate"] = dump(quality)
    out["timeline"] = [dump(s) for s in steps]
    out["device_name"] = trace.device_name
    out["step_source"] = trace.step_source
    return out
