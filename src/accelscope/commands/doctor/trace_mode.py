"""``accelscope doctor --trace FILE|DIR``: the device-timeline diagnosis of a torch.profiler
trace the user already has (captured on any machine): per step the compute, copy and idle
time from the GPU's own timestamps, idle gaps attributed to what the host was doing, the
bottleneck and its advice. A directory of per-rank traces gives one row per rank and names the
slowest. What-ifs need the script; nothing is stored. Returns data; never prints; writes
only the HTML report that ``--report`` names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from accelscope.commands._lifecycle import check_paths, write_report
from accelscope.commands.doctor.trace_html import render_trace_report
from accelscope.doctor.trace_diagnosis import (
    TOP_KERNELS,
    WHAT_IFS_NEED_SCRIPT,
    KernelShare,
    RankDiagnosis,
    TraceDiagnosis,
    diagnose_ranks,
    top_kernels,
)
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


def _fraction(value: float | None, flag: str) -> None:
    if value is not None and (not math.isfinite(value) or not 0.0 <= value <= 1.0):
        raise BadInputError(f"{flag} must be a fraction between 0 and 1, got {value}")


def trace_title(path: Path) -> str:
    """The title of a trace's report and digest."""
    return f"accelscope doctor --trace: {path.name}"


def diagnose_trace(request: TraceRequest) -> TraceDiagnosis:
    """Read the trace(s), name each rank's bottleneck, write the report if asked."""
    _fraction(request.sm_active, "--sm-active")
    _fraction(request.nvml_utilisation, "--gpu-util")
    check_paths(None, request.report_path)
    diagnosis = diagnose_ranks(
        request.path, sm_active=request.sm_active, nvml_utilisation=request.nvml_utilisation
    )
    if request.report_path is not None:
        title = trace_title(request.path)
        write_report(render_trace_report(diagnosis, title=title), request.report_path)
    return diagnosis
