"""The device timeline of a training loop from the GPU's own timestamps: per step, how much of
the step the device computed, copied and sat idle, and, gap by gap, what the host was doing
while the GPU ran dry (after HTA's temporal and idle-time breakdowns, XProf's step-time
breakdown).

Input is typed intervals (kernels, copies, memsets, NCCL kernels on the device; runtime calls,
operators and annotations on the host), in microseconds on one clock, as a torch.profiler
(Kineto) trace records them (:mod:`accelscope.doctor.kineto` reads one). Output is a partition
of each step into exclusive causes, so every share is of its own step and at most 1 by
construction: intervals are clipped to the step and busy time is the union of intervals, never
their sum (kernels on two streams that overlap count once).

A figure supplied from elsewhere (a sum of per-operator event pairs, a host-bracketed span) is
checked against the step it claims to be part of: above :data:`CONSISTENCY_TOLERANCE` times the
step it is "inconsistent: not used" and never drives the verdict.

Pure analysis: typed data in, typed data out; never prints."""

from __future__ import annotations

import bisect
import functools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from accelscope.doctor.causes import (
    BOTTLENECK_SHARE,
    CAUSES,
    VERDICT_ADVICE,
    advice_for,
    describe,
)

__all__ = [
    "CONSISTENCY_TOLERANCE",
    "DEVICE_BOUND_COMPUTE",
    "DEVICE_BOUND_SM_ACTIVE",
    "UNDERFILLED_SM_ACTIVE",
    "UNEXPLAINED_MIN_US",
    "DeviceInterval",
    "FigureCheck",
    "HostCategory",
    "HostSpan",
    "IdleGap",
    "KernelClass",
    "Precision",
    "StepTimeline",
    "StepWindow",
    "SuppliedFigure",
    "TimelineVerdict",
    "check_figure",
    "kernel_class",
    "kernel_precision",
    "kernel_time_by_name",
    "step_timeline",
    "timeline_verdict",
]

DeviceKind = Literal["kernel", "nccl", "memcpy", "memset"]
HostCategory = Literal[
    "sync", "h2d_pageable", "h2d_pinned", "dataloader", "allocator", "host_compute", "launch"
]
KernelClass = Literal["matrix", "memory", "other"]
Precision = Literal["reduced", "fp32", "unknown"]

CONSISTENCY_TOLERANCE = 1.05
"""A part above this multiple of its step is inconsistent (beyond measurement error)."""
DEVICE_BOUND_COMPUTE = 0.8
"""Device-bound needs compute kernels over at least this share of the step ..."""
DEVICE_BOUND_SM_ACTIVE = 0.5
"""... and, where GPM measured it, SM activity at least this high."""
UNEXPLAINED_MIN_US = 10_000.0
"""An idle stretch of at least this many µs that no host event covers is ``unexplained``, not
Python between launches: launch overhead is microseconds between events, not 10 ms with none."""
UNDERFILLED_SM_ACTIVE = 0.2
"""Kernels cover the step but SM activity below this: the GPU is kept busy by tiny or
under-filled kernels (a finding of its own, never 'compute-bound')."""

_HOST_PRIORITY: tuple[HostCategory, ...] = (
    "sync",
    "h2d_pageable",
    "h2d_pinned",
    "dataloader",
    "allocator",
    "host_compute",
    "launch",
)
"""Where host spans overlap in an idle gap, the first category here names the time."""

_MATRIX = re.compile(
    r"gemm|gemv|xmma|hmma|wgmma|imma|cutlass|cublas|nvjet|flash|fmha|sdpa|attention|"
    r"conv(?!ert)|fprop|dgrad|wgrad|winograd|matmul|triton_mm|tensorop"
)
_MEMORY = re.compile(
    r"elementwise|reduce_kernel|reduction|norm|welford|moments|gammabeta|softmax|"
    r"catarray|copy|cat_|fill|index|scatter|gather|dropout|transpose|permute|embedding|"
    r"multi_tensor_apply|foreach|nll_loss|cross_entropy|bn_fw|bn_bw|nchwtonhwc|nhwctonchw|"
    r"triton_poi|triton_per|triton_red|memset|upsample|pool"
)
_MATRIX_WEAK = re.compile(r"cudnn|^(sm\d+|ampere|volta|turing|hopper)_")
_REDUCED = re.compile(
    r"bf16|fp16|f16|half|tf32|fp8|e4m3|e5m2|int8|i8816|hmma|wgmma|imma|s1688|s16816|h1688|"
    r"h16816|tensorop|flash|nvjet_[hbte]|nvjet_.[hbte]|"
    # cuBLAS 13's Hopper kernels name the input type after the tile and cluster shapes:
    # nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT (h: 16-bit inputs; s: fp32)
    r"nvjet_sm\d+_[a-z]+_\d+x\d+_\d+x\d+_\d+x\d+_[hbte]_"
)
_FP32 = re.compile(r"sgemm|fp32|f32|simt|nvjet_sss|nvjet_sm\d+_[a-z]+_[\dx_]+_s_|float")


@functools.lru_cache(maxsize=1 << 14)  # called per interval per step; names repeat
def kernel_class(name: str) -> KernelClass:
    """``matrix`` (GEMM, convolution, attention), ``memory`` (elementwise, normalisation,
    softmax, reductions, copies) or ``other``, from a kernel's name."""
    low = name.lower()
    if _MATRIX.search(low):
        return "matrix"
    if _MEMORY.search(low):
        return "memory"
    if _MATRIX_WEAK.search(low):
        return "matrix"
    return "other"


@functools.lru_cache(maxsize=1 << 14)
def kernel_precision(name: str) -> Precision:
    """``reduced`` (bf16/fp16/tf32/fp8 in the name, or a tensor-core kernel), ``fp32``
    (``sgemm``, fp32 names), else ``unknown``, from a matrix kernel's name."""
    low = name.lower()
    if _REDUCED.search(low):
        return "reduced"
    if _FP32.search(low):
        return "fp32"
    return "unknown"


@dataclass(frozen=True, kw_only=True)
class DeviceInterval:
    """One activity on the device, in µs. ``direction``: ``HtoD``, ``DtoH``, ``DtoD`` ... for
    copies; ``host_memory``: ``pageable`` or ``pinned`` for host<->device copies."""

    start_us: float
    end_us: float
    kind: DeviceKind
    stream: int = 0
    name: str = ""
    direction: str | None = None
    host_memory: Literal["pageable", "pinned"] | None = None

    @property
    def cause(self) -> str:
        """The cause this activity's time is charged to when nothing of higher rank runs."""
        if self.kind == "kernel":
            return "memory" if kernel_class(self.name) == "memory" else "compute"
        if self.kind == "nccl":
            return "communication"
        if self.kind == "memcpy" and self.direction == "HtoD":
            return "h2d_pinned" if self.host_memory == "pinned" else "h2d_pageable"
        if self.kind == "memcpy" and self.direction == "DtoH":
            return "sync"
        return "other"


@dataclass(frozen=True, kw_only=True)
class HostSpan:
    """What the host was doing, in µs: a runtime call, an operator or an annotation, already
    classified (:mod:`.kineto` does it from names and correlated device copies)."""

    start_us: float
    end_us: float
    category: HostCategory
    name: str = ""


@dataclass(frozen=True, kw_only=True)
class StepWindow:
    """One step on the trace clock, in µs."""

    index: int
    start_us: float
    end_us: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_us) and self.end_us >= self.start_us):
            raise ValueError(f"step {self.index}: window {self.start_us}..{self.end_us} µs")


@dataclass(frozen=True, kw_only=True)
class IdleGap:
    """One stretch of the step in which the device ran nothing, split by host cause (µs)."""

    start_us: float
    end_us: float
    by_cause: dict[str, float]

    @property
    def cause(self) -> str:
        """The cause that holds most of the gap."""
        return max(self.by_cause.items(), key=lambda kv: kv[1])[0] if self.by_cause else "other"


@dataclass(frozen=True, kw_only=True)
class StepTimeline:
    """One step split into exclusive causes (µs); they sum to ``step_us``."""

    index: int
    step_us: float
    compute_busy_us: float
    copy_busy_us: float
    busy_us: float
    copy_by_kind: dict[str, float]
    by_cause: dict[str, float]
    gaps: Annotated[tuple[IdleGap, ...], Field(exclude=True)]
    """Not stored: the verdict does not need them."""
    kernel_by_class: dict[str, float] = field(default_factory=dict)
    """Kernel busy time (union per class, clipped to the step): ``matrix reduced``,
    ``matrix fp32``, ``matrix unknown``, ``memory``, ``other``; classes may overlap in time."""

    def __post_init__(self) -> None:
        """The partition holds, or the timeline is not built: every part >= 0, the causes sum
        to the step, busy time within the step and kernel and copy time within busy time
        (floating-point rounding allowed; a bug raises here instead of being clipped later)."""
        step = self.step_us
        if not (math.isfinite(step) and step >= 0):
            raise ValueError(f"step {self.index}: length {step} µs")
        slack = 1e-9 * step + 1e-6
        parts = {**self.by_cause, **{f"kernel {k}": v for k, v in self.kernel_by_class.items()}}
        parts |= {"compute_busy": self.compute_busy_us, "copy_busy": self.copy_busy_us}
        for name, value in {**parts, "busy": self.busy_us}.items():
            if not (math.isfinite(value) and -slack <= value <= step + slack):
                raise ValueError(f"step {self.index}: {name} {value} µs outside [0, {step}]")
        if abs(math.fsum(self.by_cause.values()) - step) > slack * max(1, len(self.by_cause)):
            raise ValueError(
                f"step {self.index}: its causes sum to {math.fsum(self.by_cause.values())} µs, "
                f"not its length {step} µs"
            )
        if max(self.compute_busy_us, self.copy_busy_us) > self.busy_us + slack:
            raise ValueError(f"step {self.index}: kernel or copy time above its busy time")

    @property
    def idle_us(self) -> float:
        return self.step_us - self.busy_us

    def share(self, us: float) -> float:
        """``us`` (a part of this step) as a share of it."""
        return us / self.step_us if self.step_us > 0 else 0.0

    @property
    def shares(self) -> dict[str, float]:
        return {cause: self.share(us) for cause, us in self.by_cause.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepTimeline:
        """Read back what :func:`accelscope.serialise.dump` stored, without the idle gaps
        (causes this version does not know are kept as read)."""

        def floats(key: str) -> dict[str, float]:
            return {str(k): float(v) for k, v in (data.get(key) or {}).items()}

        by_cause = dict.fromkeys(CAUSES, 0.0) | floats("by_cause")
        return cls(
            index=int(data["index"]),
            step_us=float(data["step_us"]),
            compute_busy_us=float(data["compute_busy_us"]),
            copy_busy_us=float(data["copy_busy_us"]),
            busy_us=float(data["busy_us"]),
            copy_by_kind=floats("copy_by_kind"),
            by_cause=by_cause,
            gaps=(),
            kernel_by_class=floats("kernel_by_class"),
        )


@dataclass(frozen=True, kw_only=True)
class SuppliedFigure:
    """A duration measured elsewhere that claims to be a part of a step of ``step_s``."""

    name: str
    value_s: float
    step_s: float


@dataclass(frozen=True, kw_only=True)
class FigureCheck:
    """A supplied figure against its step: used, clipped to 1, or inconsistent (not used)."""

    name: str
    ratio: float
    used: bool
    note: str


@dataclass(frozen=True, kw_only=True)
class TimelineVerdict:
    """The bottleneck named from a device timeline.

    ``bottleneck``: a key of :data:`CAUSES`, ``underfilled`` or ``mixed``; ``ranked``: every
    cause's mean share of the step, largest first; ``notes``: why a tempting verdict was not
    given, and every supplied figure that was inconsistent. ``matrix_precision``: what the
    matrix kernels' names say of their precision (``reduced``, ``fp32``, ``unknown``; None
    without matrix kernels); ``kernel_classes``: each kernel class's mean share of the step."""

    bottleneck: str
    headline: str
    advice: str
    ranked: tuple[tuple[str, float], ...]
    step_s: float
    compute_share: float
    busy_share: float
    copy_share: float
    idle_share: float
    nvml_utilisation: float | None
    sm_active: float | None
    figures: tuple[FigureCheck, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    kernel_share: float = 0.0
    matrix_precision: Precision | None = None
    kernel_classes: dict[str, float] = field(default_factory=dict)

    @property
    def reported(self) -> tuple[tuple[str, float], ...]:
        """The causes at or above their own threshold (:data:`~.causes.CAUSES`), largest
        first: what both ``doctor SCRIPT`` (as fired findings) and ``doctor --trace`` report.
        Kernel time is reported only when the verdict names it (compute or memory): its test
        is kernel coverage with SM activity, not a share. Nothing is reported from a window
        with no steady step (``not_diagnosed``): its shares are one-off work."""
        if self.bottleneck == "not_diagnosed":
            return ()
        out = []
        for cause, share in self.ranked:
            known = CAUSES.get(cause)
            if known is None or known.threshold is None:
                continue
            if cause in ("compute", "memory"):
                if cause == self.bottleneck:
                    out.append((cause, share))
            elif share >= known.threshold:
                out.append((cause, share))
        return tuple(out)

    def __post_init__(self) -> None:
        """``ranked`` is a partition of the step (the mean over steps of partitions): no share
        below 0, their sum at most 1 (floating-point rounding allowed); a bug raises here
        instead of being clipped by a reader."""
        total = math.fsum(share for _, share in self.ranked)
        if any(not share >= 0 for _, share in self.ranked) or total > 1 + 1e-9:
            raise ValueError(f"the ranked causes are not a partition of the step: {self.ranked}")


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merged, sorted, non-empty intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _length(intervals: Iterable[tuple[float, float]]) -> float:
    return math.fsum(end - start for start, end in intervals)


def kernel_time_by_name(
    windows: Sequence[StepWindow], device: Sequence[DeviceInterval]
) -> dict[str, float]:
    """Each kernel name's device time in ``windows``, µs: per name the union of its kernel
    (and NCCL kernel) intervals, so a kernel overlapping itself on two streams counts once,
    clipped to each window and summed over the windows. Names with no time are left out."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for d in device:
        if d.kind in ("kernel", "nccl") and d.end_us > d.start_us:
            spans.setdefault(d.name, []).append((d.start_us, d.end_us))
    out: dict[str, float] = {}
    for name, raw in spans.items():
        merged = _union(raw)
        starts = [start for start, _ in merged]
        total = 0.0
        for w in windows:
            first = max(0, bisect.bisect_right(starts, w.start_us) - 1)
            last = bisect.bisect_left(starts, w.end_us)
            total += _length(_clip(merged[first:last], w.start_us, w.end_us))
        if total > 0:
            out[name] = total
    return out


def _clip(
    intervals: Iterable[tuple[float, float]], lo: float, hi: float
) -> list[tuple[float, float]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def _subtract(
    base: list[tuple[float, float]], remove: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """``base`` minus ``remove``; both merged and sorted."""
    out: list[tuple[float, float]] = []
    j = 0
    for start, end in base:
        cursor = start
        while j < len(remove) and remove[j][1] <= cursor:
            j += 1
        k = j
        while k < len(remove) and remove[k][0] < end:
            r_start, r_end = remove[k]
            if r_start > cursor:
                out.append((cursor, r_start))
            cursor = max(cursor, r_end)
            if cursor >= end:
                break
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def _within(
    merged: list[tuple[float, float]], ends: list[float], lo: float, hi: float
) -> list[tuple[float, float]]:
    """The intervals of ``merged`` (sorted, disjoint; ``ends`` their ends) that meet
    [lo, hi), found by bisection so a gap costs O(log n) plus what it meets."""
    first = bisect.bisect_right(ends, lo)
    out: list[tuple[float, float]] = []
    for start, end in merged[first:]:
        if start >= hi:
            break
        out.append((start, end))
    return out


def step_timeline(
    window: StepWindow,
    device: Sequence[DeviceInterval],
    host: Sequence[HostSpan],
) -> StepTimeline:
    """Split ``window`` into exclusive causes: compute kernels first, then NCCL, then copies
    and memsets (by direction and host memory), then idle time by what the host was doing."""
    lo, hi = window.start_us, window.end_us
    step_us = hi - lo  # a window ends after it starts: checked when it was built
    by_cause: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
    taken: list[tuple[float, float]] = []
    compute_us = copy_us = 0.0
    copy_by_kind: dict[str, float] = {}
    rank = ["compute", "memory", "communication", "h2d_pageable", "h2d_pinned", "sync", "other"]
    for cause in rank:
        own = _union(_clip(((d.start_us, d.end_us) for d in device if d.cause == cause), lo, hi))
        fresh = _subtract(own, taken)
        by_cause[cause] += _length(fresh)
        taken = _union([*taken, *fresh])
    kernels = [d for d in device if d.kind == "kernel"]
    compute_us = _length(_union(_clip(((d.start_us, d.end_us) for d in kernels), lo, hi)))
    kernel_spans: dict[str, list[tuple[float, float]]] = {}
    for d in kernels:
        klass = kernel_class(d.name)
        key = f"matrix {kernel_precision(d.name)}" if klass == "matrix" else klass
        kernel_spans.setdefault(key, []).append((d.start_us, d.end_us))
    kernel_by_class = {
        key: length
        for key, spans_ in kernel_spans.items()
        if (length := _length(_union(_clip(spans_, lo, hi)))) > 0
    }
    copies = [d for d in device if d.kind == "memcpy"]
    copy_us = _length(_union(_clip(((d.start_us, d.end_us) for d in copies), lo, hi)))
    for d in copies:
        kind = f"{d.direction or 'copy'}" + (f" {d.host_memory}" if d.host_memory else "")
        clipped = _length(_clip([(d.start_us, d.end_us)], lo, hi))
        if clipped > 0:
            copy_by_kind[kind] = copy_by_kind.get(kind, 0.0) + clipped
    busy_us = _length(taken)
    idle = _subtract([(lo, hi)] if step_us > 0 else [], taken)
    spans = {
        cat: _union(_clip(((h.start_us, h.end_us) for h in host if h.category == cat), lo, hi))
        for cat in _HOST_PRIORITY
    }
    span_ends = {cat: [end for _, end in merged] for cat, merged in spans.items()}
    gaps: list[IdleGap] = []
    for start, end in idle:
        remaining = [(start, end)]
        gap_causes: dict[str, float] = {}
        for cat in _HOST_PRIORITY:
            near = _within(spans[cat], span_ends[cat], start, end)
            if not near:
                continue
            left = _subtract(remaining, near)
            amount = _length(remaining) - _length(left)
            if amount > 0:
                gap_causes[cat] = amount
            remaining = left
        unexplained = _length(a for a in remaining if a[1] - a[0] >= UNEXPLAINED_MIN_US)
        if unexplained > 0:
            gap_causes["unexplained"] = unexplained
        rest = _length(remaining) - unexplained
        opened_in_sync = bool(_within(spans["sync"], span_ends["sync"], start, start + 1e-6))
        if opened_in_sync:
            # the GPU ran dry while the host waited in a readback: the Python and launches
            # after it, until the GPU has work again, are that readback's cost (gap by gap)
            moved = gap_causes.pop("launch", 0.0) + rest
            if moved > 0:
                gap_causes["sync"] = gap_causes.get("sync", 0.0) + moved
        elif rest > 0:
            # short host time no event covers, in a gap where the host ran: Python between its
            # operators and launches; in a gap where no host event ran at all: other
            ran = any(c != "unexplained" for c in gap_causes)
            gap_causes["launch" if ran else "other"] = (
                gap_causes.get("launch", 0.0) + rest if ran else rest
            )
        for cause, amount in gap_causes.items():
            by_cause[cause] += amount
        gaps.append(IdleGap(start_us=start, end_us=end, by_cause=gap_causes))
    return StepTimeline(
        index=window.index,
        step_us=step_us,
        compute_busy_us=compute_us,
        copy_busy_us=copy_us,
        busy_us=busy_us,
        copy_by_kind=copy_by_kind,
        by_cause=by_cause,
        gaps=tuple(gaps),
        kernel_by_class=kernel_by_class,
    )


def check_figure(figure: SuppliedFigure) -> FigureCheck:
    """A supplied part of a step: above :data:`CONSISTENCY_TOLERANCE` times the step it is
    "inconsistent: not used"; between 1 and the tolerance it is clipped to the step."""
    if not figure.step_s > 0 or not math.isfinite(figure.value_s) or figure.value_s < 0:
        return FigureCheck(
            name=figure.name, ratio=math.nan, used=False, note="not measured: no step time"
        )
    ratio = figure.value_s / figure.step_s
    if ratio > CONSISTENCY_TOLERANCE:
        return FigureCheck(
            name=figure.name,
            ratio=ratio,
            used=False,
            note=(
                f"inconsistent: not used ({ratio:.0%} of its step; a part cannot exceed its whole)"
            ),
        )
    if ratio > 1.0:
        return FigureCheck(
            name=figure.name, ratio=1.0, used=True, note=f"clipped to the step ({ratio:.0%})"
        )
    return FigureCheck(name=figure.name, ratio=ratio, used=True, note="consistent")


def _mean_share(steps: Sequence[StepTimeline], pick: str) -> float:
    total = math.fsum(s.step_us for s in steps)
    if total <= 0:
        return 0.0
    if pick == "busy":
        part = math.fsum(s.busy_us for s in steps)
    elif pick == "copy":
        part = math.fsum(s.copy_busy_us for s in steps)
    elif pick == "compute_busy":
        part = math.fsum(s.compute_busy_us for s in steps)
    else:
        part = math.fsum(s.by_cause.get(pick, 0.0) for s in steps)
    return part / total


def _kernel_classes(steps: Sequence[StepTimeline]) -> dict[str, float]:
    total = math.fsum(s.step_us for s in steps)
    keys = sorted({k for s in steps for k in s.kernel_by_class})
    if total <= 0:
        return dict.fromkeys(keys, 0.0)
    return {k: math.fsum(s.kernel_by_class.get(k, 0.0) for s in steps) / total for k in keys}


def _matrix_precision(classes: dict[str, float]) -> Precision | None:
    """Reduced where reduced-precision matrix kernels hold most of the matrix time; fp32 where
    fp32 ones do; else unknown (None without matrix kernels)."""
    matrix = {k.removeprefix("matrix "): v for k, v in classes.items() if k.startswith("matrix ")}
    if not matrix or math.fsum(matrix.values()) <= 0:
        return None
    total = math.fsum(matrix.values())
    if matrix.get("reduced", 0.0) >= 0.5 * total:
        return "reduced"
    if matrix.get("fp32", 0.0) >= 0.5 * total:
        return "fp32"
    return "unknown"


def timeline_verdict(
    steps: Sequence[StepTimeline],
    *,
    nvml_utilisation: float | None = None,
    sm_active: float | None = None,
    supplied: Sequence[SuppliedFigure] = (),
) -> TimelineVerdict:
    """Name the bottleneck of ``steps``: the largest cause at or above
    :data:`BOTTLENECK_SHARE`, else ``mixed``. The device sets the pace only when kernels
    (matrix and memory-bound together) cover :data:`DEVICE_BOUND_COMPUTE` of the step and,
    where GPM measured it, SM activity is at least :data:`DEVICE_BOUND_SM_ACTIVE`; it is then
    named ``memory`` where memory-bound kernels hold most of the kernel time (fusion advice,
    never bf16), else ``compute`` (bf16 advice only when the matrix kernels are not already in
    reduced precision). Kernels covering the step with SM activity under
    :data:`UNDERFILLED_SM_ACTIVE` is ``underfilled``. Supplied figures are checked and
    reported; none of them drives the verdict."""
    if not steps:
        raise ValueError("no steps")
    step_s = math.fsum(s.step_us for s in steps) / len(steps) / 1e6
    ranked = tuple(
        sorted(
            ((cause, _mean_share(steps, cause)) for cause in CAUSES),
            key=lambda kv: (-kv[1], kv[0]),
        )
    )
    shares = dict(ranked)
    kernels = shares["compute"] + shares["memory"]  # exclusive causes: at most the step
    device_top = "memory" if shares["memory"] > shares["compute"] else "compute"
    busy = _mean_share(steps, "busy")
    classes = _kernel_classes(steps)
    precision = _matrix_precision(classes)
    notes: list[str] = []
    figures = tuple(check_figure(f) for f in supplied)
    for check in figures:
        if not check.used:
            notes.append(f"{check.name}: {check.note}")
    top, top_share = ranked[0]
    bottleneck = "mixed"
    if top in ("compute", "memory"):
        if kernels >= DEVICE_BOUND_COMPUTE and sm_active is not None:
            if sm_active < UNDERFILLED_SM_ACTIVE:
                bottleneck = "underfilled"
            elif sm_active < DEVICE_BOUND_SM_ACTIVE:
                notes.append(
                    f"kernels cover {kernels:.0%} of the step but SM active is "
                    f"{sm_active:.0%} (< {DEVICE_BOUND_SM_ACTIVE:.0%}): not called device-bound"
                )
            else:
                bottleneck = device_top
        elif kernels >= DEVICE_BOUND_COMPUTE:
            bottleneck = device_top
            notes.append("SM activity not measured (no GPM): device-bound from kernel time only")
        else:
            notes.append(
                f"kernels cover {kernels:.0%} of the step (< "
                f"{DEVICE_BOUND_COMPUTE:.0%}): not called device-bound"
            )
    elif top_share >= BOTTLENECK_SHARE and CAUSES[top].threshold is not None:
        bottleneck = top
    kernel_busy = _mean_share(steps, "compute_busy")  # copies keep no SM busy
    if (
        kernel_busy >= DEVICE_BOUND_COMPUTE
        and sm_active is not None
        and sm_active < UNDERFILLED_SM_ACTIVE
    ):
        bottleneck = "underfilled"
    advice = advice_for(bottleneck)
    if bottleneck == "compute":
        if precision == "reduced":
            advice = VERDICT_ADVICE["compute_reduced"]
        elif precision == "unknown":
            notes.append(
                "the matrix kernels' names do not give their precision: the bf16 advice holds "
                "only if they run in fp32"
            )
    headline = _headline(bottleneck, shares, kernel_busy, sm_active, ranked, precision)
    return TimelineVerdict(
        bottleneck=bottleneck,
        headline=headline,
        advice=advice,
        ranked=ranked,
        step_s=step_s,
        compute_share=kernel_busy,
        busy_share=busy,
        copy_share=_mean_share(steps, "copy"),
        idle_share=1.0 - busy,
        nvml_utilisation=nvml_utilisation,
        sm_active=sm_active,
        figures=figures,
        notes=tuple(notes),
        kernel_share=kernels,
        matrix_precision=precision,
        kernel_classes=classes,
    )


def _headline(
    bottleneck: str,
    shares: dict[str, float],
    busy: float,
    sm_active: float | None,
    ranked: tuple[tuple[str, float], ...],
    precision: Precision | None = None,
) -> str:
    if bottleneck == "underfilled":
        sm = "not measured" if sm_active is None else f"{sm_active:.0%}"
        return (
            f"under-filled GPU: kernels cover {busy:.0%} of the step but SM active is {sm}: "
            "tiny or under-filled kernels, not compute-bound"
        )
    if bottleneck == "mixed":
        top = ", ".join(f"{cause} {share:.0%}" for cause, share in ranked[:3] if share > 0)
        return f"mixed: no cause holds {BOTTLENECK_SHARE:.0%} of the step ({top})"
    if bottleneck == "compute":
        what = {
            "reduced": "already in reduced precision on the tensor cores",
            "fp32": "in fp32",
            "unknown": "precision not given by their names",
        }.get(precision or "", "")
        return f"device-bound: matrix kernels run {shares['compute']:.0%} of the step" + (
            f" ({what})" if what else ""
        )
    if bottleneck == "memory":
        return (
            f"memory-bound on the device: elementwise/normalisation/reduction kernels run "
            f"{shares['memory']:.0%} of the step (matrix kernels {shares['compute']:.0%})"
        )
    return f"{describe(bottleneck)}: {shares[bottleneck]:.0%} of the step"
