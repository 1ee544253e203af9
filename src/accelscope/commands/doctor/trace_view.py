"""Terminal rendering of ``doctor --trace``: per rank the verdict, the step split into causes
(busy beside NVML utilisation and GPM SM activity), the top kernels, the per-step table and the
advice."""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from accelscope.commands.doctor.digest import short_kernel_name
from accelscope.doctor.causes import describe
from accelscope.doctor.trace_diagnosis import RankDiagnosis, TraceDiagnosis
from accelscope.report.format import format_seconds

__all__ = ["trace_view"]

_MAX_STEP_ROWS = 20


def _measured(value: float | None, why: str) -> str:
    return f"{value:.0%}" if value is not None else f"not measured ({why})"


def _rank(rank: RankDiagnosis, *, slowest: bool, many: bool) -> list[RenderableType]:
    v = rank.verdict
    t = rank.timeline
    title = f"[bold]{escape(t.rank)}[/]" + (" · [red]slowest rank[/]" if slowest and many else "")
    parts: list[RenderableType] = [
        Panel(
            Text(v.headline),
            title=f"{title} · bottleneck: [bold red]{escape(v.bottleneck)}[/]",
            title_align="left",
        )
    ]
    device = t.trace.device_name or "GPU"
    parts.append(
        Text(
            f"{device} · {len(t.steps)} step(s) from {t.trace.step_source} · mean step "
            f"{format_seconds(v.step_s)} · kernels {v.compute_share:.0%}, copies "
            f"{v.copy_share:.0%}, idle {v.idle_share:.0%} (the GPU's own timestamps)",
            style="dim",
        )
    )
    if v.kernel_classes:
        classes = ", ".join(
            f"{name} {share:.0%}"
            for name, share in sorted(v.kernel_classes.items(), key=lambda kv: -kv[1])
            if share > 0
        )
        precision = v.matrix_precision or "no matrix kernels"
        parts.append(
            Text(f"kernel time by class: {classes} · matrix precision: {precision}", style="dim")
        )
    parts.append(
        Text(
            f"GPU busy {v.busy_share:.0%} · NVML utilisation "
            f"{_measured(v.nvml_utilisation, 'give --gpu-util')} · GPM SM active "
            f"{_measured(v.sm_active, 'give --sm-active')}",
            style="dim",
        )
    )
    causes = Table(title="where each step's time goes", title_justify="left", box=None)
    causes.add_column("cause")
    causes.add_column("share", justify="right")
    causes.add_column("per step", justify="right")
    causes.add_column("reported")
    reported = dict(v.reported)
    for cause, share in v.ranked:
        if share <= 0:
            continue
        causes.add_row(
            describe(cause),
            f"{share:.1%}",
            format_seconds(share * v.step_s),
            "yes" if cause in reported else "",
        )
    parts.append(causes)
    if rank.kernels:
        kernels = Table(
            title="top kernels (the steps judged)", title_justify="left", box=None, min_width=60
        )
        for name in ("kernel", "share", "per step", "class", "precision"):
            kernels.add_column(name, justify="right" if name in ("share", "per step") else "left")
        for k in rank.kernels:
            kernels.add_row(
                escape(short_kernel_name(k.name)),
                f"{k.share:.1%}",
                format_seconds(k.per_step_s),
                k.kernel_class,
                k.precision or "n/a",
            )
        parts.append(kernels)
    steps = Table(title="steps", title_justify="left", box=None)
    for name in ("step", "time", "kernels", "copies", "busy", "idle", "largest idle cause"):
        steps.add_column(
            name, justify="left" if name in ("step", "largest idle cause") else "right"
        )
    for s in t.steps[:_MAX_STEP_ROWS]:
        idle = {
            c: us for c, us in s.by_cause.items() if c not in ("compute", "memory", "communication")
        }
        top = max(idle.items(), key=lambda kv: kv[1]) if idle else ("", 0.0)
        steps.add_row(
            str(s.index) + (" (set aside)" if s.index in rank.quality.excluded else ""),
            format_seconds(s.step_us / 1e6),
            f"{s.share(s.compute_busy_us):.0%}",
            f"{s.share(s.copy_busy_us):.0%}",
            f"{s.share(s.busy_us):.0%}",
            f"{s.share(s.idle_us):.0%}",
            f"{top[0]} {s.share(top[1]):.0%}" if top[1] > 0 else "",
        )
    parts.append(steps)
    if len(t.steps) > _MAX_STEP_ROWS:
        parts.append(Text(f"... {len(t.steps) - _MAX_STEP_ROWS} more steps", style="dim"))
    flagged = [f.message for f in rank.quality.flags]
    if flagged:
        parts.append(
            Text("window quality (the verdict is of the steady steps only):", style="bold")
        )
        parts.extend(Text(f"  - {message}", style="yellow") for message in flagged)
    parts.append(Text("advice: " + v.advice, style="bold"))
    if rank.quality.advice and rank.quality.advice != v.advice:
        parts.append(Text("then: " + rank.quality.advice, style="bold"))
    for check in v.figures:
        ratio = "" if math.isnan(check.ratio) else f" ({check.ratio:.0%})"
        parts.append(Text(f"figure {check.name}{ratio}: {check.note}", style="yellow"))
    for note in (*v.notes, *t.trace.notes):
        if note not in flagged:
            parts.append(Text(f"note: {note}", style="yellow"))
    return parts


def trace_view(diagnosis: TraceDiagnosis) -> RenderableType:
    """The full terminal summary of a trace diagnosis."""
    many = len(diagnosis.ranks) > 1
    parts: list[RenderableType] = []
    if many:
        table = Table(title="ranks", title_justify="left")
        for name in ("rank", "mean step", "bottleneck", "busy", "kernels"):
            table.add_column(name)
        for r in diagnosis.ranks:
            mark = " (slowest)" if r.timeline.rank == diagnosis.slowest else ""
            table.add_row(
                escape(r.timeline.rank) + mark,
                format_seconds(r.timeline.mean_step_s),
                r.verdict.bottleneck,
                f"{r.verdict.busy_share:.0%}",
                f"{r.verdict.compute_share:.0%}",
            )
        parts.append(table)
    for r in diagnosis.ranks:
        parts.extend(_rank(r, slowest=r.timeline.rank == diagnosis.slowest, many=many))
    parts.append(Text(diagnosis.note, style="dim"))
    return Group(*parts)
