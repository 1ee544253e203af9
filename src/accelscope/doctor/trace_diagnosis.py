"""The diagnosis of a torch.profiler trace, rank by rank: each rank's steps, the quality gate's
outcome, the verdict of its steady steps and its top kernels (the data ``doctor --trace``
prints, renders and digests). Pure analysis: reads the trace files, never prints."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

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

__all__ = [
    "TOP_KERNELS",
    "WHAT_IFS_NEED_SCRIPT",
    "KernelShare",
    "RankDiagnosis",
    "TraceDiagnosis",
    "diagnose_ranks",
    "top_kernels",
]

WHAT_IFS_NEED_SCRIPT = (
    "what-ifs need the script: run accelscope doctor SCRIPT to measure the candidate fixes"
)

TOP_KERNELS = 5
"""How many kernels, by name, the diagnosis keeps (the longest over the steady steps)."""


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

    def __post_init__(self) -> None:
        # its time is a union clipped to each step: a share outside [0, 1] is a bug upstream
        if not (math.isfinite(self.share) and 0.0 <= self.share <= 1.0 + 1e-9):
            raise ValueError(f"kernel {self.name!r}: share {self.share} of its steps")
        if not (math.isfinite(self.per_step_s) and self.per_step_s >= 0.0):
            raise ValueError(f"kernel {self.name!r}: {self.per_step_s} s per step")


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
                    "verdict": {
                        **asdict(r.verdict),
                        "reported": [list(pair) for pair in r.verdict.reported],
                    },
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
                share=us / total_us,
                per_step_s=us / len(windows) / 1e6,
                kernel_class=klass,
                precision=kernel_precision(name) if klass == "matrix" else None,
            )
        )
    return tuple(out)


def diagnose_ranks(
    path: Path, *, sm_active: float | None = None, nvml_utilisation: float | None = None
) -> TraceDiagnosis:
    """Read the trace(s) under ``path``, gate each rank's window and name its bottleneck."""
    ranks = []
    for timeline in rank_timelines(path):
        quality = timeline.trace.quality(timeline.steps)
        verdict = gated_verdict(
            timeline.steps,
            quality,
            sm_active=sm_active,
            nvml_utilisation=nvml_utilisation,
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
    return TraceDiagnosis(ranks=tuple(ranks), slowest=slowest)
