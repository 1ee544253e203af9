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
from typing import Any

from accelscope.commands._lifecycle import check_paths, write_report
from accelscope.commands.doctor.trace_html import render_trace_report
from accelscope.doctor.device_timeline import TimelineVerdict
from accelscope.doctor.kineto import RankTimeline, rank_timelines
from accelscope.doctor.trace_quality import TraceQuality, gated_verdict
from accelscope.errors import BadInputError

__all__ = [
    "WHAT_IFS_NEED_SCRIPT",
    "RankDiagnosis",
    "TraceDiagnosis",
    "TraceRequest",
    "diagnose_trace",
]

WHAT_IFS_NEED_SCRIPT = (
    "what-ifs need the script: run accelscope doctor SCRIPT to measure the candidate fixes"
)


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
class RankDiagnosis:
    """One rank's steps, the quality gate's outcome and the verdict of its steady steps."""

    timeline: RankTimeline
    quality: TraceQuality
    verdict: TimelineVerdict


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
                    "notes": list(r.timeline.trace.notes),
                }
            )
        return {"mode": "trace", "slowest": self.slowest, "ranks": ranks, "what_ifs": self.note}


def _fraction(value: float | None, flag: str) -> None:
    if value is not None and (not math.isfinite(value) or not 0.0 <= value <= 1.0):
        raise BadInputError(f"{flag} must be a fraction between 0 and 1, got {value}")


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
        ranks.append(RankDiagnosis(timeline=timeline, quality=quality, verdict=verdict))
    slowest = max(ranks, key=lambda r: r.timeline.mean_step_s).timeline.rank
    diagnosis = TraceDiagnosis(ranks=tuple(ranks), slowest=slowest)
    if request.report_path is not None:
        title = f"accelscope doctor --trace: {request.path.name}"
        write_report(render_trace_report(diagnosis, title=title), request.report_path)
    return diagnosis
