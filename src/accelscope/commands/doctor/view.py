"""Terminal rendering of a doctor result: verdict, stacked step-time bar, findings, what-ifs."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from accelscope.commands.doctor.gpu_lines import gpu_lines
from accelscope.doctor.breakdown import ALL_PHASES
from accelscope.doctor.diagnose import DoctorResult
from accelscope.report.format import format_seconds

__all__ = ["PHASE_COLORS", "doctor_view"]

PHASE_COLORS = {
    "input": "red",
    "copy": "magenta",
    "forward": "blue",
    "backward": "cyan",
    "optimizer": "green",
    "sync": "yellow",
    "other": "bright_black",
}
_BAR_WIDTH = 60


def _bar(shares: dict[str, float]) -> Text:
    text = Text()
    used = 0
    for phase in ALL_PHASES:
        cells = round(shares.get(phase, 0.0) * _BAR_WIDTH)
        cells = min(cells, _BAR_WIDTH - used)
        used += cells
        text.append("█" * cells, style=PHASE_COLORS[phase])
    if used < _BAR_WIDTH:
        text.append("█" * (_BAR_WIDTH - used), style=PHASE_COLORS["other"])
    return text


def _breakdown(result: DoctorResult) -> RenderableType:
    b = result.diagnosis.breakdown
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    table.add_column("phase")
    table.add_column("per step", justify="right")
    table.add_column("share", justify="right")
    for phase in ALL_PHASES:
        share = b.shares.get(phase, 0.0)
        style = PHASE_COLORS[phase]
        table.add_row(
            Text("■ ", style=style) + Text(phase),
            format_seconds(b.phase_mean_s[phase]) if b.phase_mean_s[phase] > 0 else "0",
            f"{share:.1%}",
        )
    rates = (
        f"{b.steps} measured steps · step median {format_seconds(b.step_median_s)} "
        f"(95% CI {format_seconds(b.step_ci_low_s)}-{format_seconds(b.step_ci_high_s)}, "
        f"IQR {b.iqr_ratio:.0%}) · {b.steps_per_s.median:,.2f} steps/s · "
        f"{b.items_per_s.median:,.1f} items/s ({b.items_per_step:g} items/step)"
    )
    gpu = [Text(line, style="dim") for line in gpu_lines(result)]
    return Group(_bar(b.shares), table, Text(rates, style="dim"), *gpu)


def _findings(result: DoctorResult) -> Table:
    table = Table(title="findings", title_justify="left", show_lines=False, expand=False)
    table.add_column("rule")
    table.add_column("status")
    table.add_column("share", justify="right")
    table.add_column("evidence", overflow="fold", max_width=90)
    table.add_column("threshold", style="dim", overflow="fold", max_width=40)
    colors = {"fired": "bold red", "clear": "green", "n/a": "bright_black"}
    for finding in result.diagnosis.findings:
        share = "" if finding.share is None else f"{finding.share:.0%}"
        status = finding.status + (f" ({finding.severity})" if finding.severity else "")
        table.add_row(
            finding.rule,
            Text(status, style=colors.get(finding.status, "")),
            share,
            escape(finding.summary),
            escape(finding.threshold),
        )
    return table


def _what_ifs(result: DoctorResult) -> Table:
    table = Table(title="what-ifs (measured, one change each)", title_justify="left")
    table.add_column("what-if", overflow="fold", max_width=40)
    table.add_column("status")
    table.add_column("steps/s", justify="right")
    table.add_column("items/s", justify="right")
    table.add_column("speedup (items/s)", justify="right")
    table.add_column("notes", overflow="fold", max_width=60)
    for w in result.what_ifs:
        best = w.name == result.best
        steps = "" if w.steps_per_s is None else f"{w.steps_per_s.median:,.2f}"
        items = "" if w.items_per_s is None else f"{w.items_per_s.median:,.1f}"
        speed = ""
        if w.speedup is not None:
            high = "∞" if w.speedup_high is None else f"{w.speedup_high:.2f}"
            speed = f"{w.speedup:.2f}\u00d7 [{w.speedup_low or 0:.2f}-{high}]"
        notes = "; ".join(x for x in (w.reason, w.caveat, *w.notes) if x)
        label = Text(("★ " if best else "") + w.label, style="bold" if best else "")
        table.add_row(label, w.status, steps, items, speed, escape(notes))
    return table


def doctor_view(result: DoctorResult, *, title: str) -> RenderableType:
    """The full terminal summary of a doctor result."""
    d = result.diagnosis
    parts: list[RenderableType] = [
        Panel(
            Text(d.headline),
            title=f"[bold]{escape(title)}[/] · bottleneck: [bold red]{escape(d.title)}[/]",
            title_align="left",
        ),
        _breakdown(result),
        _findings(result),
    ]
    if d.advice:
        parts.append(Text("advice: " + d.advice, style="bold"))
    if result.what_ifs:
        parts.append(_what_ifs(result))
    if result.recommendation:
        parts.append(Text(result.recommendation, style="bold green" if result.best else "yellow"))
    for note in d.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)
