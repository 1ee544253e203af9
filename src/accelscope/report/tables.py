"""Terminal tables shared by several commands (rich renderables; the CLI prints them): the
results table of ``measure``, ``bench`` and ``runs show``, and the runs list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.report.format import format_bytes, format_seconds, ms

if TYPE_CHECKING:  # imported where used: the runs list (``accelscope runs list``) needs neither
    from accelscope.result import Result
    from accelscope.store.sqlite import RunRecord

__all__ = ["energy_notes", "results_view", "runs_view"]


def _accuracy_text(result: Result) -> str:
    accuracy = result.accuracy
    if accuracy is None:
        return "—"
    parts: list[str] = []
    if accuracy.metric_value is not None:
        parts.append(f"{accuracy.metric_name} {accuracy.metric_value:.2%}")
        drop = accuracy.metric_drop
        if drop:
            parts.append(f"(Δ {-drop:+.2%})")
    if accuracy.fidelity is not None:
        parts.append(f"relL2 {accuracy.fidelity.rel_l2:.1e}")
        if accuracy.fidelity.top1_agreement is not None:
            parts.append(f"top1 agree {accuracy.fidelity.top1_agreement:.0%}")
    return " ".join(parts) or "—"


def _joules_text(result: Result) -> str:
    """Joules per item of the result's energy window: "n/m" when not measured (the reason is
    a note), "—" for results stored before energy was measured."""
    if result.energy is None:
        return "—"
    value = result.energy.joules_per_item
    return "n/m" if value is None else f"{value:.3g}"


def energy_notes(results: Sequence[Result]) -> list[str]:
    """Each distinct reason a result's energy was not measured, once."""
    reasons = (r.energy.reason for r in results if r.energy is not None and r.energy.reason)
    return [f"energy: not measured: {reason}" for reason in dict.fromkeys(reasons)]


def results_view(
    results: Sequence[Result],
    title: str = "",
    *,
    baseline: Result | None = None,
    best_key: str | None = None,
    show_notes: bool = True,
    speedups: Mapping[str, str] | None = None,
) -> RenderableType:
    """The results table (one row per configuration), then notes: stop rule and warnings.

    With a ``baseline`` a speedup column is added: the caller's text by ``RunSpec.key`` in
    ``speedups`` (bench: interleaved figures where it has them), else the ratio of the two
    figures, one process each, marked as not a claim
    (:func:`accelscope.sweep.select.speedup_cells`); the ``best_key`` row is marked with a star.
    """
    from accelscope.result import Status
    from accelscope.sweep.select import speedup_cells

    texts: Mapping[str, str] = speedups or {}
    if baseline is not None and speedups is None:
        texts = {k: c.text() for k, c in speedup_cells(results, baseline, None).items()}
    table = Table(title=title or None, title_justify="left", show_lines=False)
    headers = [
        "backend",
        "prec",
        "batch",
        "thr",
        "items/s",
        "mean ms",
        "p50 ms",
        "p99 ms",
        "min ms",
        "accuracy",
        "peak RSS",
        "J/item",
        "first call",
        "status",
    ]
    if baseline is not None:
        headers.insert(headers.index("status"), "speedup")
    for header in headers:
        numeric = header not in ("backend", "prec", "accuracy", "status")
        table.add_column(header, justify="right" if numeric else "left", no_wrap=header != "status")
    notes: list[RenderableType] = []
    for result in results:
        spec, m = result.spec, result.measurement
        status = result.status.value + (f": {result.status_reason}" if result.status_reason else "")
        style = {Status.OK: "", Status.SKIPPED: "dim"}.get(result.status, "red")
        backend = spec.backend + "".join(f" {k}={v}" for k, v in spec.options)
        if best_key is not None and spec.key == best_key:
            backend, style = "★ " + backend, "bold green"
        if m is None:
            cells = ["—"] * 6
        else:
            s = m.summary
            cells = [
                f"{m.throughput_items_per_s:,.1f}",
                ms(s.mean_s),
                ms(s.p50_s),
                ms(s.p99_s),
                ms(s.min_s),
                format_seconds(m.first_call_s),
            ]
        peak = format_bytes(result.memory.rss_peak_bytes) if result.memory else "—"
        row = [
            backend,
            spec.precision_label,  # tf32 for fp32 with TF32 tensor cores
            str(spec.batch_size),
            str(spec.threads),
            *cells[:5],
            _accuracy_text(result),
            peak,
            _joules_text(result),
            cells[5],
        ]
        if baseline is not None:
            row.append(texts.get(result.spec.key, "—"))
        table.add_row(*row, Text(status, style=style))
        if not show_notes:
            continue
        if m is not None:
            note = f"{spec.label()}: {m.stop_explanation()}; median CI "
            note += f"[{ms(m.summary.median_ci_low_s)}, {ms(m.summary.median_ci_high_s)}] ms"
            notes.append(Text(note, style="dim"))
        notes.extend(
            Text(f"{spec.label()}: warning: {w}", style="yellow")
            for w in result.warnings
            if m is None or w != m.stop_explanation()
        )
    if show_notes:
        notes.extend(Text(note, style="dim") for note in energy_notes(results))
    return Group(table, *notes)


def runs_view(runs: Sequence[RunRecord]) -> RenderableType:
    """The run listing, newest first."""
    table = Table(title="runs", title_justify="left")
    for header in ("id", "kind", "model", "results", "status", "started (UTC)"):
        table.add_column(header, no_wrap=header != "model")
    for run in runs:
        table.add_row(
            run.id,
            run.kind,
            run.model,
            str(run.result_count),
            run.status,
            run.created_at[:19].replace("T", " "),
        )
    return table
