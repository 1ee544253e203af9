"""The quality gate of a device timeline: what in a profiled window is not the steady state a
verdict may be drawn from, found before any verdict is given.

Traces users send are often not steady: the warm-up is inside the window, one step was
profiled, a ``torch.compile`` or the CUDA context's creation sits in the first step. A
bottleneck named from such a window names the one-off work ("launch-bound: 100 %" for a 13 s
compile, "pageable copies" for a 30 s context creation). So, per trace:

- **one-off work**: a step many times longer than the median of its siblings (it is set aside),
  and named events that only happen once: CUDA context creation, lazy CUDA module loading,
  torch.compile / Inductor / Triton compilation, cuDNN autotuning, the caching allocator's growth.
  Each is named with its duration and the step it fell in;
- **too few steps** (fewer than :data:`MIN_STEADY_STEPS` steady ones);
- **unexplained host time**: long stretches of a step no recorded event covers (a compile or
  Python outside the profiler's reach);
- **CUDA graphs whose kernels were not recorded** (a launch whose correlation id no kernel
  carries, or launches in a step with no kernel at all);
- **timestamps that cannot be right** (negative durations).

The verdict is then drawn from the steady steps only; where none remain it is not given, and the
user is told how to profile steady steps. Pure analysis: typed data in, typed data out."""

from __future__ import annotations

import bisect
import itertools
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from accelscope.doctor.causes import VERDICT_ADVICE
from accelscope.doctor.device_timeline import (
    DeviceInterval,
    HostSpan,
    StepTimeline,
    StepWindow,
    SuppliedFigure,
    TimelineVerdict,
    timeline_verdict,
)
from accelscope.units import format_seconds

__all__ = [
    "MIN_STEADY_STEPS",
    "OUTLIER_RATIO",
    "STEADY_ADVICE",
    "FlagKind",
    "NamedEvent",
    "QualityFlag",
    "TraceQuality",
    "assess",
    "gated_verdict",
    "one_off_kind",
]

FlagKind = Literal[
    "one_off",
    "outlier_step",
    "few_steps",
    "unexplained_host",
    "graphs_unrecorded",
    "bad_timestamps",
]
OneOffKind = Literal["context", "module_load", "compile", "cudnn_autotune", "allocator"]

OUTLIER_RATIO = 3.0
"""A step longer than this multiple of its siblings' median is not steady ..."""
OUTLIER_MIN_EXCESS_US = 500.0
"""... when it is also this much longer (µs): a 30 µs step beside 10 µs ones is noise."""
MIN_STEADY_STEPS = 3
"""Fewer steady steps than this: the verdict stands on too little."""
ONE_OFF_MIN_US = 10_000.0
"""A named one-off event (context creation, module load, compile) counts from 10 ms."""
DOMINANT_SHARE = 0.5
"""One-off work over this share of a step makes the step not steady, whatever its siblings."""
UNEXPLAINED_SHARE = 0.3
"""Host time no event explains over this share of a step is flagged."""

STEADY_ADVICE = VERDICT_ADVICE["not_diagnosed"]

_CONTEXT = {
    "cudaDeviceGetStreamPriorityRange",
    "cudaGetDeviceCount",
    "cudaSetDevice",
    "cudaGetDeviceProperties",
    "cudaGetDeviceProperties_v2",
    "cudaDriverGetVersion",
    "cudaRuntimeGetVersion",
    "cudaStreamCreateWithPriority",
    "cudaInitDevice",
    "cuInit",
    "cuDevicePrimaryCtxRetain",
    "cuCtxCreate",
    "cuCtxCreate_v2",
    "cuCtxCreate_v3",
}
_MODULE = {
    "cudaFuncGetAttributes",
    "cudaFuncSetAttribute",
    "cudaGetFuncBySymbol",
    "cuModuleLoad",
    "cuModuleLoadData",
    "cuModuleLoadDataEx",
    "cuModuleLoadFatBinary",
    "cuModuleGetFunction",
    "cuLibraryLoadData",
    "cuLibraryGetKernel",
    "cuLibraryLoadFromFile",
}
_ALLOCATOR = {"cudaMalloc", "cuMemAlloc_v2", "cudaMallocAsync", "cudaMallocHost", "cudaHostAlloc"}
_COMPILE = re.compile(
    r"dynamo|inductor|compile_fx|backend_compile|entire_frame_compile|aot_dispatch|"
    r"create_aot_dispatcher|async_compile|triton_compile|compile_inner|call_user_compiler|"
    r"max_autotune|autotune_select",
    re.IGNORECASE,
)
_CUDNN = re.compile(r"cudnn|convolution", re.IGNORECASE)
_WHAT: dict[OneOffKind, str] = {
    "context": "CUDA context creation",
    "module_load": "lazy CUDA module loading (the first launch of each kernel)",
    "compile": "torch.compile / Inductor / Triton compilation",
    "cudnn_autotune": "cuDNN autotuning (torch.backends.cudnn.benchmark) or a first convolution",
    "allocator": "the caching allocator's growth (cudaMalloc)",
}


@dataclass(frozen=True, kw_only=True)
class NamedEvent:
    """A host event long enough to matter (a runtime call, an operator, an annotation), by
    name, in µs on the trace clock."""

    start_us: float
    end_us: float
    name: str

    def __post_init__(self) -> None:
        if not self.end_us >= self.start_us:
            raise ValueError(f"event {self.name!r} ends before it starts")


@dataclass(frozen=True, kw_only=True)
class QualityFlag:
    """One thing in the window a verdict must not be drawn from. ``step``: the step it is in
    (None for the whole trace); ``seconds``: how long it took, where it has a length."""

    kind: FlagKind
    message: str
    step: int | None = None
    seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class TraceQuality:
    """The gate's outcome: its flags, the steps kept for the verdict (``steady``) and those set
    aside (``excluded``); ``diagnosable`` is False where no steady step remains."""

    flags: tuple[QualityFlag, ...]
    steady: tuple[int, ...]
    excluded: tuple[int, ...]

    def __post_init__(self) -> None:
        if set(self.steady) & set(self.excluded):
            raise ValueError("a step cannot be both steady and excluded")

    @property
    def diagnosable(self) -> bool:
        return bool(self.steady)

    @property
    def advice(self) -> str | None:
        """How to profile steady steps, where the window held one-off work or too few steps."""
        kinds = {f.kind for f in self.flags}
        return STEADY_ADVICE if kinds & {"one_off", "outlier_step", "few_steps"} else None


def one_off_kind(name: str) -> OneOffKind | None:
    """The one-off work an event's name gives, if any."""
    if name in _CONTEXT:
        return "context"
    if name in _MODULE:
        return "module_load"
    if name in _ALLOCATOR:
        return "allocator"
    if _COMPILE.search(name):
        return "compile"
    return None


def _overlap(event: NamedEvent, window: StepWindow) -> float:
    return max(0.0, min(event.end_us, window.end_us) - max(event.start_us, window.start_us))


def _per_step(events: Sequence[NamedEvent], window: StepWindow) -> dict[str, float]:
    totals: dict[str, float] = {}
    for event in events:
        amount = _overlap(event, window)
        if amount > 0:
            totals[event.name] = totals.get(event.name, 0.0) + amount
    return totals


def _outermost(events: Sequence[NamedEvent], window: StepWindow, kind: OneOffKind) -> float:
    """The time events of ``kind`` cover in ``window`` (nested ones count once), µs."""
    spans = sorted(
        (max(e.start_us, window.start_us), min(e.end_us, window.end_us))
        for e in events
        if one_off_kind(e.name) == kind and _overlap(e, window) > 0
    )
    total, end = 0.0, -math.inf
    for a, b in spans:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _explain(
    excess_us: float,
    outlier: dict[str, float],
    typical: dict[str, float],
) -> tuple[str, OneOffKind | None] | None:
    """The event name that best explains a step's excess over its siblings: among the names
    whose excess is within 80 % of the largest, a known one-off kind first, else the
    innermost (the shortest total)."""
    gains = {n: us - typical.get(n, 0.0) for n, us in outlier.items()}
    if not gains:
        return None
    top = max(gains.values())
    if top < 0.2 * excess_us:
        return None
    near = [n for n, g in gains.items() if g >= 0.8 * top]
    known = [n for n in near if one_off_kind(n) is not None]
    if known:
        name = max(known, key=lambda n: gains[n])
        return name, one_off_kind(name)
    convolutions = [n for n in near if _CUDNN.search(n)]  # its trials' syncs are inside it
    if convolutions:
        return min(convolutions, key=lambda n: outlier[n]), "cudnn_autotune"
    name = min(near, key=lambda n: outlier[n])
    return name, ("cudnn_autotune" if _CUDNN.search(name) else None)


def assess(
    windows: Sequence[StepWindow],
    steps: Sequence[StepTimeline],
    *,
    named: Sequence[NamedEvent] = (),
    host: Sequence[HostSpan] = (),
    device: Sequence[DeviceInterval] = (),
    negative_durations: int = 0,
    unrecorded_graph_launch_us: Sequence[float] = (),
) -> TraceQuality:
    """Gate ``steps`` (one per window, same order): flag what is not steady, keep the rest."""
    if len(windows) != len(steps):
        raise ValueError(f"{len(windows)} windows for {len(steps)} steps")
    flags: list[QualityFlag] = []
    excluded: set[int] = set()
    if negative_durations:
        flags.append(
            QualityFlag(
                kind="bad_timestamps",
                message=f"{negative_durations} event(s) with a negative duration: left out; "
                "the trace's clock or its writer is suspect",
            )
        )
    lengths = [s.step_us for s in steps]
    # indexed once, so a step finds its graph launches and kernels by bisection, not by a scan
    # of the whole trace per step (a 1 GB trace holds millions of host events)
    unrecorded = sorted(unrecorded_graph_launch_us)
    graph_starts = sorted(h.start_us for h in host if "GraphLaunch" in h.name)
    kernel_spans = sorted((d.start_us, d.end_us) for d in device if d.kind in ("kernel", "nccl"))
    kernel_starts = [a for a, _ in kernel_spans]
    kernel_end_max = list(itertools.accumulate((b for _, b in kernel_spans), max))
    for i, (window, step) in enumerate(zip(windows, steps, strict=True)):
        others = lengths[:i] + lengths[i + 1 :]
        typical_us = statistics.median(others) if others else None
        # named one-off work inside this step, by kind
        one_off: dict[OneOffKind, float] = {
            kind: us
            for kind in _WHAT
            if kind != "allocator" and (us := _outermost(named, window, kind)) >= ONE_OFF_MIN_US
        }
        outlier = (
            typical_us is not None
            and step.step_us > OUTLIER_RATIO * typical_us
            and step.step_us - typical_us >= OUTLIER_MIN_EXCESS_US
        )
        if outlier and typical_us is not None:
            excess = step.step_us - typical_us
            sibling_totals = [
                _per_step(named, w) for j, w in enumerate(windows) if j != i and j not in excluded
            ]
            typical_by_name = {
                n: statistics.median([t.get(n, 0.0) for t in sibling_totals])
                for n in {n for t in sibling_totals for n in t}
            }
            explained = _explain(excess, _per_step(named, window), typical_by_name)
            why = "no recorded event explains it"
            if explained is not None:
                name, kind = explained
                why = f"{name} took {format_seconds(_per_step(named, window)[name] / 1e6)}"
                if kind is not None:
                    why += f": {_WHAT[kind]}"
                    one_off.setdefault(kind, excess)
            flags.append(
                QualityFlag(
                    kind="outlier_step",
                    step=step.index,
                    seconds=step.step_us / 1e6,
                    message=f"step {step.index} took {format_seconds((step.step_us) / 1e6)}, "
                    f"{step.step_us / typical_us:.0f}x the median of the others "
                    f"({format_seconds(typical_us / 1e6)}): set aside ({why})",
                )
            )
            excluded.add(step.index)
        for kind, us in one_off.items():
            share = min(us, step.step_us) / step.step_us if step.step_us > 0 else 0.0
            flags.append(
                QualityFlag(
                    kind="one_off",
                    step=step.index,
                    seconds=us / 1e6,
                    message=f"{_WHAT[kind]}: {format_seconds(us / 1e6)} in step {step.index} "
                    f"({share:.0%} of it)",
                )
            )
            if share >= DOMINANT_SHARE:
                excluded.add(step.index)
        unexplained = step.by_cause.get("unexplained", 0.0)
        if step.step_us > 0 and unexplained / step.step_us >= UNEXPLAINED_SHARE:
            flags.append(
                QualityFlag(
                    kind="unexplained_host",
                    step=step.index,
                    seconds=unexplained / 1e6,
                    message=f"step {step.index}: {format_seconds(unexplained / 1e6)} "
                    f"({unexplained / step.step_us:.0%}) of host time no recorded event "
                    "covers, the GPU idle (a compile, an import or Python outside the "
                    "profiler's reach): not called launch-bound",
                )
            )
            if unexplained / step.step_us >= DOMINANT_SHARE:
                excluded.add(step.index)
        # graph launches whose kernels are missing: by correlation id where the launch has
        # one (a partly graphed step too), else a step with launches and no kernel at all
        missing = bisect.bisect_left(unrecorded, window.end_us) - bisect.bisect_left(
            unrecorded, window.start_us
        )
        uncorrelated = bisect.bisect_left(graph_starts, window.end_us) - bisect.bisect_left(
            graph_starts, window.start_us
        )
        begun = bisect.bisect_left(kernel_starts, window.end_us)  # kernels starting before its end
        kernels = begun > 0 and kernel_end_max[begun - 1] > window.start_us
        if not missing and uncorrelated and not kernels:
            missing = uncorrelated
        if missing:
            flags.append(
                QualityFlag(
                    kind="graphs_unrecorded",
                    step=step.index,
                    message=f"step {step.index}: {missing} CUDA graph launch(es) whose kernels "
                    "were not recorded: the graphs' work is missing from the trace (record with "
                    "a profiler that traces graph kernels, or profile once without graphs)",
                )
            )
            excluded.add(step.index)
    steady = tuple(s.index for s in steps if s.index not in excluded)
    if len(steady) < MIN_STEADY_STEPS:
        flags.append(
            QualityFlag(
                kind="few_steps",
                message=f"{len(steady)} steady step(s) of {len(steps)} in the window "
                f"(fewer than {MIN_STEADY_STEPS}): "
                + ("the verdict stands on little" if steady else "no verdict is given"),
            )
        )
    return TraceQuality(
        flags=tuple(flags),
        steady=steady,
        excluded=tuple(s.index for s in steps if s.index in excluded),
    )


_ONE_OFF_FLAGS = {"one_off", "outlier_step", "unexplained_host", "graphs_unrecorded"}


def gated_verdict(
    steps: Sequence[StepTimeline],
    quality: TraceQuality,
    *,
    sm_active: float | None = None,
    nvml_utilisation: float | None = None,
    supplied: Sequence[SuppliedFigure] = (),
) -> TimelineVerdict:
    """The verdict of the steady steps only, the gate's flags first among its notes; where no
    steady step remains, ``not_diagnosed`` (the shares of the whole window kept for the record,
    no bottleneck named from one-off work) with the advice to profile steady steps."""
    keep = set(quality.steady)
    steady = [s for s in steps if s.index in keep]
    flagged = tuple(f.message for f in quality.flags)
    verdict = timeline_verdict(
        steady or steps, sm_active=sm_active, nvml_utilisation=nvml_utilisation, supplied=supplied
    )
    if steady:
        return replace(verdict, notes=(*flagged, *verdict.notes))
    one_offs = [f.message for f in quality.flags if f.kind in _ONE_OFF_FLAGS]
    what = "; ".join(one_offs[:2]) or "no steady step"
    return replace(
        verdict,
        bottleneck="not_diagnosed",
        headline=f"not diagnosed: the window holds no steady step to judge ({what})",
        advice=STEADY_ADVICE,
        notes=(*flagged, *verdict.notes),
    )
