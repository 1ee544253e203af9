"""Self-contained offline HTML bench report: header, verdict, results table, plotly charts.

The document embeds plotly.js inline and fetches nothing (its Content-Security-Policy forbids
it too). User-supplied text is escaped wherever it lands: jinja autoescapes the markup, text
that becomes a plotly label is HTML-escaped first (plotly renders a subset of HTML), and the
embedded JSON writes ``<``, ``>``, ``&`` as ``\\u003c``-style escapes, so no string can end
the ``<script>`` element it sits in.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jinja2
import plotly.graph_objects as go

from accelscope.commands.bench.copies import copy_pairs
from accelscope.commands.bench.standing import Standing
from accelscope.report.format import format_bytes, ms
from accelscope.report.page import (
    chart_layout,
    plot_label,
    plotly_js,
    script_safe_json,
    template,
    vertical_line,
)
from accelscope.result import Accuracy, Result, Status
from accelscope.spec import Device
from accelscope.sweep.confirm import Confirmation
from accelscope.sweep.select import (
    SpeedupCell,
    pareto_front,
    skipped_by_reason,
    speedup_cells,
    speedup_note,
)

__all__ = ["render_bench_report"]

_TIMES, _MINUS = "\u00d7", "\u2212"
_COLORS = {Status.OK: "#2563eb", Status.REJECTED: "#d97706", Status.FAILED: "#dc2626"}
_SYMBOLS = {Status.OK: "circle", Status.REJECTED: "x", Status.FAILED: "x-thin-open"}
_MAX_POINT_LABELS = 10
"""Scatter points are labelled on the chart up to this many; beyond, only on hover."""
_LOG_SPREAD = 30.0
"""An axis switches to a log scale when its largest value is this many times the smallest."""


def _labels(results: Sequence[Result]) -> list[str]:
    """Unique labels: ``eager/bf16/b8/t2``, ``@cuda`` when not on CPU, `` #n`` on repeats."""
    labels: list[str] = []
    for result in results:
        label = result.spec.label()
        if result.spec.device is not Device.CPU:
            label += f"@{result.spec.device.value}"
        base, n = label, 2
        while label in labels:
            label, n = f"{base} #{n}", n + 1
        labels.append(label)
    return labels


def _speedups(
    results: Sequence[Result], baseline_key: str | None, confirmation: Confirmation | None
) -> list[SpeedupCell | None]:
    """Each result's speedup over the baseline (``None`` where either is unmeasured):
    interleaved where the confirmation measured it beside the baseline, else not a claim
    (:func:`accelscope.sweep.select.speedup_cells`)."""
    base = next((r for r in results if baseline_key and r.spec.key == baseline_key), None)
    cells = speedup_cells(results, base, confirmation)
    return [cells.get(r.spec.key) for r in results]


def _accuracy_text(accuracy: Accuracy | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Metric parts (value, change vs the reference) and fidelity parts, for display."""
    if accuracy is None:
        return ("—",), ()
    metric: tuple[str, ...] = ()
    if accuracy.metric_value is not None:
        metric = (f"{accuracy.metric_name or 'metric'} {accuracy.metric_value:.2%}",)
        change = None if accuracy.metric_drop is None else -accuracy.metric_drop * 100
        if change is not None and round(change, 2) != 0:
            metric += (f"(Δ {change:+.2f} pp)".replace("-", _MINUS),)
    fidelity: tuple[str, ...] = ()
    if (f := accuracy.fidelity) is not None:
        fidelity = (f"rel-L2 {f.rel_l2:.1e}".replace("0.0e+00", "0"),)
        if f.top1_agreement is not None:
            fidelity += (f"top-1 agree {f.top1_agreement:.1%}",)
    return metric or (() if fidelity else ("—",)), fidelity


class _Row(NamedTuple):
    """A table row: the result, plus what the template cannot derive from it alone."""

    result: Result
    label: str
    speedup: str
    badges: tuple[str, ...]
    metric: tuple[str, ...]
    fidelity: tuple[str, ...]


class _Point(NamedTuple):
    result: Result
    label: str
    x: float
    y: float
    hover: str


def _hover(result: Result, label: str, *lines: str) -> str:
    """Hover HTML: the label and status (escaped here), then ``lines`` (escaped by the caller)."""
    head = f"<b>{plot_label(label)}</b><br>{result.status.value}"
    if result.status_reason:
        head += f": {plot_label(result.status_reason, 200)}"
    return "<br>".join((head, *lines))


def _axis_type(values: Sequence[float]) -> str:
    positive = [v for v in values if v > 0]
    if len(positive) < 2 or len(positive) < len(values):
        return "linear"
    return "log" if max(positive) / min(positive) >= _LOG_SPREAD else "linear"


def _status_traces(points: Sequence[_Point]) -> list[dict[str, Any]]:
    """One marker trace per status present, styled by status."""
    traces = []
    for status in Status:
        if not (chosen := [p for p in points if p.result.status is status]):
            continue
        traces.append(
            {
                "type": "scatter",
                "name": status.value,
                "x": [p.x for p in chosen],
                "y": [p.y for p in chosen],
                "mode": "markers+text" if len(points) <= _MAX_POINT_LABELS else "markers",
                "text": [plot_label(p.label, 40) for p in chosen],
                "textposition": "top center",
                "textfont": {"size": 10, "color": "#4b5563"},
                "cliponaxis": False,
                "hovertext": [p.hover for p in chosen],
                "hovertemplate": "%{hovertext}<extra></extra>",
                "marker": {
                    "color": _COLORS[status],
                    "symbol": _SYMBOLS[status],
                    "size": 11,
                    "line": {"width": 1.5, "color": _COLORS[status]},
                },
            }
        )
    return traces


def _throughput_figure(
    results: Sequence[Result],
    labels: Sequence[str],
    model: str,
    best_key: str | None,
    sla_p99_s: float | None,
) -> go.Figure | None:
    """Items/s (y) against p99 latency in ms (x), the Pareto front of the ok points, the SLA."""
    points = []
    for result, label in zip(results, labels, strict=True):
        if (m := result.measurement) is not None:
            tp, p99 = m.throughput_items_per_s, m.summary.p99_s
            hover = _hover(result, label, f"{tp:,.1f} items/s", f"p99 {ms(p99)} ms")
            points.append(_Point(result, label, p99 * 1e3, tp, hover))
    if not points:
        return None
    ok = [p for p in points if p.result.status is Status.OK]
    front = [ok[i] for i in pareto_front([(p.y, p.x) for p in ok])]
    traces = [
        {
            "type": "scatter",
            "name": "Pareto front (ok only)",
            "mode": "lines",
            "x": [p.x for p in front],
            "y": [p.y for p in front],
            "hoverinfo": "skip",
            "line": {"color": "#16a34a", "width": 2, "dash": "dash"},
        }
    ]
    traces += _status_traces(points)
    traces += [
        {
            "type": "scatter",
            "name": "best",
            "mode": "markers",
            "x": [p.x],
            "y": [p.y],
            "hoverinfo": "skip",
            "marker": {
                "symbol": "star",
                "size": 20,
                "color": "#facc15",
                "line": {"width": 1, "color": "#854d0e"},
            },
        }
        for p in points
        if best_key and p.result.spec.key == best_key
    ]
    xs = [p.x for p in points] + ([sla_p99_s * 1e3] if sla_p99_s else [])
    layout = chart_layout(f"{model}: throughput vs p99 latency", "p99 latency (ms)", "items / s")
    layout["xaxis"]["type"] = _axis_type(xs)
    layout["yaxis"]["type"] = _axis_type([p.y for p in points])
    if sla_p99_s:
        sla_ms = sla_p99_s * 1e3
        layout["shapes"] = [vertical_line(sla_ms, "#dc2626")]
        at = math.log10(sla_ms) if layout["xaxis"]["type"] == "log" else sla_ms  # log axis: log10
        layout["annotations"] = [
            {
                "xref": "x",
                "yref": "paper",
                "x": at,
                "y": 1,
                "yanchor": "bottom",
                "showarrow": False,
                "text": f"SLA p99 ≤ {ms(sla_p99_s)} ms",
                "font": {"color": "#dc2626"},
            }
        ]
    return go.Figure(data=traces, layout=layout)


def _speedup_figure(
    results: Sequence[Result],
    labels: Sequence[str],
    speedups: Sequence[SpeedupCell | None],
    baseline_label: str,
) -> go.Figure | None:
    """Horizontal bars of speedup vs the baseline, largest on top, coloured by status; a ratio
    across processes (not a claim) is drawn faint, an interleaved one with its interval."""
    bars = sorted(
        (
            (s.ratio, label, r, s)
            for r, label, s in zip(results, labels, speedups, strict=True)
            if s
        ),
        key=lambda bar: (bar[0], bar[1]),
    )
    if not bars:
        return None

    def hover(cell: SpeedupCell) -> str:
        evidence = cell.evidence
        if evidence is None:
            return "the baseline"
        if evidence.estimate is None:
            return plot_label(f"{cell.text(_TIMES)}: {evidence.why}")
        how = f"measured alternately with the baseline in one worker, {evidence.counts_text}"
        return plot_label(f"{cell.text(_TIMES, interval=True)}: {how}")

    def error(cell: SpeedupCell, side: str) -> float:
        estimate = cell.evidence.estimate if cell.evidence else None
        if estimate is None:
            return 0.0
        return estimate.high - cell.ratio if side == "high" else cell.ratio - estimate.low

    trace = {
        "type": "bar",
        "orientation": "h",
        "x": [x for x, _, _, _ in bars],
        "y": list(range(len(bars))),
        "marker": {
            "color": [_COLORS[r.status] for _, _, r, _ in bars],
            "opacity": [1.0 if c.claim else 0.35 for _, _, _, c in bars],
        },
        "error_x": {
            "type": "data",
            "symmetric": False,
            "array": [error(c, "high") for _, _, _, c in bars],
            "arrayminus": [error(c, "low") for _, _, _, c in bars],
            "color": "#111827",
        },
        "text": [c.text(_TIMES) for _, _, _, c in bars],  # short: ±, the hover has the CI
        "textposition": "outside",
        "cliponaxis": False,
        "hovertemplate": "%{hovertext}<extra></extra>",
        "hovertext": [_hover(r, label, hover(c)) for _, label, r, c in bars],
    }
    layout = chart_layout(
        "speedup vs baseline (faint ~: separate processes, not a claim)",
        f"{_TIMES} throughput of {baseline_label}",
        "",
        showlegend=False,
        height=max(420, 120 + 30 * len(bars)),
        shapes=[vertical_line(1.0, "#6b7280")],
    )
    ticks = [plot_label(label, 48) for _, label, _, _ in bars]  # index categories: no merged bars
    layout["yaxis"].update(automargin=True, tickvals=list(range(len(bars))), ticktext=ticks)
    top = max(x + error(c, "high") for x, _, _, c in bars)
    layout["xaxis"]["range"] = [0, top * 1.35]
    return go.Figure(data=[trace], layout=layout)


def _accuracy_axis(
    accuracies: Sequence[Accuracy],
) -> tuple[str, dict[str, Any], Callable[[Accuracy], float | None]] | None:
    """(y title, y axis, value getter): metric drop, else top-1 agreement, else rel-L2."""
    if any(a.metric_drop is not None for a in accuracies):
        name = next(a.metric_name for a in accuracies if a.metric_drop is not None) or "metric"
        return (
            f"{name} drop vs reference (pp)",
            {"type": "linear"},
            lambda a: None if a.metric_drop is None else a.metric_drop * 100,
        )
    fids = [a.fidelity for a in accuracies if a.fidelity is not None]
    if any(f.top1_agreement is not None for f in fids):
        return (
            "top-1 agreement with reference (%)",
            {"type": "linear"},
            lambda a: (
                None
                if a.fidelity is None or a.fidelity.top1_agreement is None
                else a.fidelity.top1_agreement * 100
            ),
        )
    if not fids:
        return None
    floor = min((f.rel_l2 for f in fids if f.rel_l2 > 0), default=1e-9) / 10  # where 0 sits
    zero = f" (0 drawn at {floor:.0e})" if any(f.rel_l2 == 0 for f in fids) else ""
    log = {"type": "log", "dtick": 1, "exponentformat": "power"}
    return (
        f"rel-L2 error vs reference{zero}",
        log,
        lambda a: None if a.fidelity is None else max(a.fidelity.rel_l2, floor),
    )


def _accuracy_figure(
    results: Sequence[Result], labels: Sequence[str], speedups: Sequence[SpeedupCell | None]
) -> go.Figure | None:
    """Accuracy (see :func:`_accuracy_axis`) against speedup, or items/s without a baseline."""
    rows = [
        (r, label, s, r.accuracy, r.measurement)
        for r, label, s in zip(results, labels, speedups, strict=True)
    ]
    axis = _accuracy_axis([a for _, _, _, a, m in rows if a is not None and m is not None])
    if axis is None:
        return None
    y_title, y_axis, pick = axis
    by_speedup = any(s is not None for s in speedups)
    points = []
    for r, label, s, acc, m in rows:
        x = (s.ratio if s else None) if by_speedup else (m.throughput_items_per_s if m else None)
        y = None if acc is None or m is None else pick(acc)
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y):
            metric, fidelity = _accuracy_text(acc)
            lines = [plot_label(" ".join(metric))] + [plot_label(f) for f in fidelity]
            points.append(_Point(r, label, x, y, _hover(r, label, *lines)))
    if not points:
        return None
    x_title = f"speedup ({_TIMES} baseline throughput)" if by_speedup else "items / s"
    better = "higher" if y_title.startswith("top-1") else "lower"
    layout = chart_layout(f"accuracy vs speed ({better} is better)", x_title, y_title)
    layout["yaxis"].update(y_axis)
    return go.Figure(data=_status_traces(points), layout=layout)


@functools.cache
def _template() -> jinja2.Template:
    return template(
        "accelscope.commands.bench",
        "bench.html.j2",
        {"ms": ms, "bytes": format_bytes, "rate": "{:,.1f}".format},
    )


def render_bench_report(
    results: Sequence[Result],
    *,
    title: str,
    model: str,
    best_key: str | None,
    lowest_latency_key: str | None,
    verdict: str,
    sla_p99_s: float | None,
    baseline_key: str | None,
    confirmation: Confirmation | None = None,
    standing: Standing | None = None,
) -> str:
    """One self-contained, offline HTML document for a bench run.

    On a GPU it also shows each row's two throughputs (inputs on the device; each batch's copy
    from pinned host memory included) with the compile time per shape, and the ``standing`` of
    the best figure against the published records and the roofline floor.

    ``*_key`` values are :attr:`RunSpec.key` strings. Speedup is a configuration's throughput
    divided by the baseline's: from ``confirmation``'s interleaved rounds where it measured the
    configuration beside the baseline, else one process each and marked as not a claim.
    Failed results (no measurement) get a table row but no points.
    """
    skipped = skipped_by_reason(results)
    results = [r for r in results if r.status is not Status.SKIPPED]
    labels = _labels(results)
    speedups = _speedups(results, baseline_key, confirmation)
    marks = (("best", best_key), ("lowest latency", lowest_latency_key), ("baseline", baseline_key))
    rows = []
    for result, label, speedup in zip(results, labels, speedups, strict=True):
        badges = tuple(name for name, key in marks if key and key == result.spec.key)
        text = "—" if speedup is None else speedup.text(_TIMES, interval=True)
        rows.append(_Row(result, label, text, badges, *_accuracy_text(result.accuracy)))
    baseline = next((row.label for row in rows if "baseline" in row.badges), None)
    charts = [
        (
            "chart-throughput",
            "Throughput vs p99 latency",
            "no configuration was measured",
            _throughput_figure(results, labels, model, best_key, sla_p99_s),
        ),
        (
            "chart-speedup",
            "Speedup vs baseline",
            "no measured baseline, so no speedups",
            _speedup_figure(results, labels, speedups, baseline or ""),
        ),
        (
            "chart-accuracy",
            "Accuracy vs speed",
            "no accuracy was measured",
            _accuracy_figure(results, labels, speedups),
        ),
    ]
    return _template().render(
        title=title,
        model=model,
        verdict=verdict,
        rows=rows,
        baseline=baseline,
        skipped=skipped,
        speedup_note=speedup_note(c for c in speedups if c),
        warnings=[(lb, w) for r, lb in zip(results, labels, strict=True) for w in r.warnings],
        env=results[0].environment if results else None,
        sla=None if sla_p99_s is None else f"{ms(sla_p99_s)} ms",
        charts=[(cid, heading, note, fig is not None) for cid, heading, note, fig in charts],
        figures_json=script_safe_json(
            [{"id": cid, **fig.to_plotly_json()} for cid, _, _, fig in charts if fig]
        ),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        copy_pairs=copy_pairs(results),
        standing=standing,
        plotly_js=plotly_js(),
    )
