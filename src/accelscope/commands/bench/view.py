"""Terminal renderers (rich): they build renderables from results; the CLI prints them."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.engine.probe import ProbeTable
from accelscope.hardware.fingerprint import Environment
from accelscope.result import Result, Status
from accelscope.store.sqlite import RunRecord
from accelscope.sweep.select import (
    SPEEDUP_COLUMN_NOTE,
    Selection,
    baseline_for,
    skipped_by_reason,
)
from accelscope.units import format_bytes, format_seconds

__all__ = ["bench_view", "environment_view", "results_view", "runs_view"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


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


def _speedup_text(result: Result, baseline: Result | None) -> str:
    if baseline is None or result.measurement is None or baseline.measurement is None:
        return "—"
    ratio = result.measurement.throughput_items_per_s / baseline.measurement.throughput_items_per_s
    return f"{ratio:.2f}x"


def results_view(
    results: Sequence[Result],
    title: str = "",
    *,
    baseline: Result | None = None,
    best_key: str | None = None,
    show_notes: bool = True,
) -> RenderableType:
    """The results table (one row per configuration), then notes: stop rule and warnings.

    With a ``baseline`` a speedup column is added; the ``best_key`` row is marked with a star.
    """
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
                _ms(s.mean_s),
                _ms(s.p50_s),
                _ms(s.p99_s),
                _ms(s.min_s),
                format_seconds(m.first_call_s),
            ]
        peak = format_bytes(result.memory.rss_peak_bytes) if result.memory else "—"
        row = [
            backend,
            spec.precision.value,
            str(spec.batch_size),
            str(spec.threads),
            *cells[:5],
            _accuracy_text(result),
            peak,
            cells[5],
        ]
        if baseline is not None:
            row.append(_speedup_text(result, baseline))
        table.add_row(*row, Text(status, style=style))
        if not show_notes:
            continue
        if m is not None:
            note = f"{spec.label()}: {m.stop_explanation()}; median CI "
            note += f"[{_ms(m.summary.median_ci_low_s)}, {_ms(m.summary.median_ci_high_s)}] ms"
            notes.append(Text(note, style="dim"))
        notes.extend(
            Text(f"{spec.label()}: warning: {w}", style="yellow")
            for w in result.warnings
            if m is None or w != m.stop_explanation()
        )
    return Group(table, *notes)


def environment_view(env: Environment, probes: ProbeTable | None = None) -> RenderableType:
    """The machine fingerprint, the precisions the ISA table calls fast here and, with
    ``probes``, what the probes measured (those decide what a sweep measures)."""
    cpu = env.cpu
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("CPU", f"{cpu.model_name} ({cpu.vendor}, {cpu.arch})")
    facts.add_row(
        "cores",
        f"{cpu.physical_cores} physical, {cpu.logical_cores} logical, "
        f"{cpu.usable_cores} usable by this process, {cpu.sockets} socket(s)",
    )
    if cpu.max_freq_mhz:
        facts.add_row("max clock", f"{cpu.max_freq_mhz:.0f} MHz")
    caches = [
        f"L{n} {format_bytes(b)}"
        for n, b in ((2, cpu.l2_cache_bytes), (3, cpu.l3_cache_bytes))
        if b
    ]
    if caches:
        facts.add_row("cache", ", ".join(caches))
    facts.add_row("ISA", " ".join(cpu.isa) or "(none recognised)")
    facts.add_row("memory", format_bytes(env.memory_bytes))
    for gpu in env.gpus:
        facts.add_row(
            f"GPU {gpu.index}",
            f"{gpu.name}, {format_bytes(gpu.memory_bytes)}, sm_{gpu.compute_capability}, "
            f"driver {gpu.driver_version or '?'}, CUDA {gpu.cuda_runtime or '?'}",
        )
    if not env.gpus:
        facts.add_row("GPU", "none found")
    facts.add_row("python", env.python)
    facts.add_row("libraries", ", ".join(f"{n} {v}" for n, v in env.libraries))
    facts.add_row("torch build", ", ".join(f"{k}={v}" for k, v in env.torch_build))
    facts.add_row("fingerprint", env.fingerprint())
    paths = Table(title="precision fast paths", title_justify="left")
    for header in ("device", "precision", "fast path", "unit", "why"):
        paths.add_column(header)
    for support in env.precision_support():
        paths.add_row(
            support.device.value,
            support.precision.value,
            Text("yes", style="green") if support.fast else Text("no", style="yellow"),
            support.unit,
            support.reason,
        )
    parts: list[RenderableType] = [facts, Text(""), paths]
    if probes is not None:
        measured = Table(
            title=f"measured precision probes ({probes.threads} threads; these decide)",
            title_justify="left",
        )
        for header in ("runtime", "precision", "kept", "conv", "matmul", "note"):
            measured.add_column(header)
        for verdict in probes.verdicts:
            speed = {k.kernel: f"{k.speedup:.2f}x fp32" for k in verdict.kernels}
            note = verdict.error or "; ".join(
                n
                for n in (verdict.note, verdict.executes_as and f"runs as {verdict.executes_as}")
                if n
            )
            measured.add_row(
                verdict.runtime,
                verdict.precision.value,
                Text("yes", style="green") if verdict.keep else Text("no", style="yellow"),
                speed.get("conv", "—"),
                speed.get("matmul", "—"),
                note,
            )
        parts.extend([Text(""), measured])
    return Group(*parts)


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


def bench_view(
    results: Sequence[Result], selection: Selection, *, title: str, rule: str = ""
) -> RenderableType:
    """The bench table (speedup vs eager fp32, best marked), the accuracy rule, the verdict."""
    baseline = baseline_for(results)
    shown = [r for r in results if r.status is not Status.SKIPPED]
    table = results_view(
        shown, title, baseline=baseline, best_key=selection.best_key, show_notes=False
    )
    parts: list[RenderableType] = [table]
    groups = skipped_by_reason(results)
    if groups:
        count = sum(len(labels) for _, labels in groups)
        parts.append(Text(f"not measured ({count}):", style="dim"))
        parts.extend(
            Text(f"  {', '.join(labels)}: {reason}", style="dim") for reason, labels in groups
        )
    if rule:
        parts.append(Text(f"accuracy rule: {rule}", style="dim"))
    if selection.confirmation is not None and selection.confirmation.speedup is not None:
        parts.append(Text(SPEEDUP_COLUMN_NOTE, style="dim"))
    parts.append(Text(selection.verdict, style="bold"))
    return Group(*parts)
