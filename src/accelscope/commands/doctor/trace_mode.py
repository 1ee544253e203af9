"""``accelscope doctor --trace FILE|DIR``: the device-timeline diagnosis of a torch.profiler
trace the user already has (captured on any machine): per step the compute, copy and idle
time from the GPU's own timestamps, idle gaps attributed to what the host was doing, the
bottleneck and its advice. A directory of per-rank traces gives one row per rank and names the
slowest. What-ifs need the script; nothing is stored. Returns data; never prints; writes
only the HTML report that ``--report`` names."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from accelscope.commands._lifecycle import check_paths, write_report
from accelscope.commands.doctor.trace_html import render_trace_report
from accelscope.doctor.device_timeline import (
    KernelClass,
    Precision,
    TimelineVerdict,
    kernel_class,
    kernel_precision,
    kernel_time_by_name,
)
from accelscope.doctor.kineto import RankTimeline, rank_timelines
from accelscope.doctor.trace_quality import TraceQuality, gated_verdict
from accelscope.errors import BadInputError

__all__ = [
    "TOP_KERNELS",
    "WHAT_IFS_NEED_SCRIPT",
    "KernelShare",
    "RankDiagnosis",
    "TraceDiagnosis",
    "TraceRequest",
    "diagnose_trace",
    "top_kernels",
    "trace_title",
]

WHAT_IFS_NEED_SCRIPT = (
    "what-ifs need the script: run accelscope doctor SCRIPT to measure the candidate fixes"
)

TOP_KERNELS = 5
"""How many kernels, by name, the diagnosis keeps (the longest over the steady steps)."""


@dataclass(frozen=True, kw_only=True)
class TraceRequest:
    """A trace file or a directory of per-rank traces; optional NVML utilisation and GPM SM
    activity (fractions in [0, 1]) measured over the same steps, printed beside the busy share
    and used by the device-bound and under-filled checks. ``report_path``: where to write the
    HTML report (none by default: nothing of a trace run is stored)."""

    path: Path
    sm_active: float | None = None
    nvml_utilisation: float | None = None
    report_path: Path | None = None


@dataclass(frozen=True, kw_only=True)
class KernelShare:
    """One kernel, by name, over the steps the verdict was drawn from: its device time per
    step (the union of its intervals, clipped to each step) and that time's share of the step;
    ``kernel_class`` and ``precision`` from its name (precision only for matrix kernels)."""

    name: str
    share: float
    per_step_s: float
    kernel_class: KernelClass | Literal["communication"]
    precision: Precision | None


@dataclass(frozen=True, kw_only=True)
class RankDiagnosis:
    """One rank's steps, the quality gate's outcome, the verdict of its steady steps and its
    longest kernels over those steps."""

    timeline: RankTimeline
    quality: TraceQuality
    verdict: TimelineVerdict
    kernels: tuple[KernelShare, ...] = ()

    @property
    def verdict_steps(self) -> tuple[int, ...]:
        """The steps the verdict is drawn from: the steady ones, else (none steady) all."""
        return self.quality.steady or tuple(s.index for s in self.timeline.steps)


@dataclass(frozen=True, kw_only=True)
class TraceDiagnosis:
    """Every rank's diagnosis; ``slowest`` names the rank with the longest mean step."""

    ranks: tuple[RankDiagnosis, ...]
    slowest: str
    note: str = WHAT_IFS_NEED_SCRIPT

    def document(self) -> dict[str, Any]:
        """A JSON-ready summary (``--json``)."""
        ranks = []
        for r in self.ranks:
            steps = [
                {
                    "index": s.index,
                    "step_s": s.step_us / 1e6,
                    "compute_busy_share": s.share(s.compute_busy_us),
                    "copy_busy_share": s.share(s.copy_busy_us),
                    "busy_share": s.share(s.busy_us),
                    "idle_share": s.share(s.idle_us),
                    "shares": s.shares,
                    "idle_gaps": len(s.gaps),
                }
                for s in r.timeline.steps
            ]
            ranks.append(
                {
                    "rank": r.timeline.rank,
                    "source": r.timeline.trace.source,
                    "device": r.timeline.trace.device_name,
                    "step_source": r.timeline.trace.step_source,
                    "mean_step_s": r.timeline.mean_step_s,
                    "verdict": asdict(r.verdict),
                    "quality": {
                        "flags": [asdict(f) for f in r.quality.flags],
                        "steady_steps": list(r.quality.steady),
                        "excluded_steps": list(r.quality.excluded),
                        "advice": r.quality.advice,
                    },
                    "steps": steps,
                    "top_kernels": [asdict(k) for k in r.kernels],
                    "notes": list(r.timeline.trace.notes),
                }
            )
        return {"mode": "trace", "slowest": self.slowest, "ranks": ranks, "what_ifs": self.note}


def _fraction(value: float | None, flag: str) -> None:
    if value is not None and (not math.isfinite(value) or not 0.0 <= value <= 1.0):
        raise BadInputError(f"{flag} must be a fraction between 0 and 1, got {value}")


def trace_title(path: Path) -> str:
    """The title of a trace's report and digest."""
    return f"accelscope doctor --trace: {path.name}"


def top_kernels(timeline: RankTimeline, steps: tuple[int, ...]) -> tuple[KernelShare, ...]:
    """The :data:`TOP_KERNELS` kernels with the most device time over ``steps`` (indices),
    longest first, each with its share of those steps' time."""
    keep = set(steps)
    windows = [w for w in timeline.trace.steps if w.index in keep]
    total_us = math.fsum(w.end_us - w.start_us for w in windows)
    if not windows or total_us <= 0:
        return ()
    nccl = {d.name for d in timeline.trace.device if d.kind == "nccl"}
    by_name = kernel_time_by_name(windows, timeline.trace.device)
    ranked = sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_KERNELS]
    out = []
    for name, us in ranked:
        klass = "communication" if name in nccl else kernel_class(name)
        out.append(
            KernelShare(
                name=name,
                share=min(1.0, us / total_us),
                per_step_s=us / len(windows) / 1e6,
                kernel_class=klass,
                precision=kernel_precision(name) if klass == "matrix" else None,
            )
        )
    return tuple(out)


def diagnose_trace(request: TraceRequest) -> TraceDiagnosis:
    """Read the trace(s), name each rank's bottleneck, write the report if asked."""
    _fraction(request.sm_active, "--sm-active")
    _fraction(request.nvml_utilisation, "--gpu-util")
    check_paths(None, request.report_path)
    ranks = []
    for timeline in rank_timelines(request.path):
        quality = timeline.trace.quality(timeline.steps)
        verdict = gated_verdict(
            timeline.steps,
            quality,
            sm_active=request.sm_active,
            nvml_utilisation=request.nvml_utilisation,
        )
        steps = quality.steady or tuple(s.index for s in timeline.steps)
        ranks.append(
            RankDiagnosis(
                timeline=timeline,
                quality=quality,
                verdict=verdict,
                kernels=top_kernels(timeline, steps),
            )
        )
    slowest = max(ranks, key=lambda r: r.timeline.mean_step_s).timeline.rank
    diagnosis = TraceDiagnosis(ranks=tuple(ranks), slowest=slowest)
    if request.report_path is not None:
        title = trace_title(request.path)
        write_report(render_trace_report(diagnosis, title=title), request.report_path)
    return diagnosis
