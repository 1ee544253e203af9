"""The plotly figures of the ``llm`` report, built from the typed documents: latency
percentiles and goodput against the offered load, every request of a trial, per-turn TTFT of a
conversation workload, and **one timeline** where the client's requests and the server's
per-second metrics share the trial's clock, with the moment each SLO term broke.

Every label that can carry a user's or a server's text goes through ``plot_label`` (escaped);
a figure with nothing to draw is ``None`` (the page says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accelscope.llm.documents import (
    Distribution,
    LlmRun,
    LlmTrial,
    RequestRecord,
    ServerSample,
    metric_name,
)
from accelscope.llm.summary import request_values
from accelscope.report.format import ms
from accelscope.report.page import chart_layout, plot_label, vertical_line

__all__ = [
    "TIMELINE_LIMIT",
    "Axis",
    "goodput_figure",
    "latency_figure",
    "load_axis",
    "requests_figure",
    "server_timeline_figure",
    "turns_figure",
]

NOT_MEASURED = "not measured"
TIMELINE_LIMIT = 2000
"""The per-request charts draw at most this many requests (the first by scheduled arrival)."""

_COLORS = {"ttft_s": "#2563eb", "tpot_s": "#16a34a", "e2e_s": "#9333ea"}
_DASHES = {"p50": "dot", "p90": "dash", "p99": "solid"}
_SLO_COLOR = "#dc2626"
_BREAK_COLOR = "#b91c1c"

Axis = tuple[str, str]
"""(x kind: "rate" | "concurrency" | "speed" | "trial", axis title)."""


def _ms_unit(seconds: float | None) -> str:
    return NOT_MEASURED if seconds is None else f"{ms(seconds)} ms"


def load_axis(trials: Sequence[LlmTrial]) -> Axis | None:
    """The x axis of the load charts; None without trials."""
    if not trials:
        return None
    kinds = {t.arrivals.load_kind for t in trials}
    titles = {
        "rate": "offered load (req/s)",
        "concurrency": "concurrency (requests in flight)",
        "speed": "trace speed (x recorded)",
    }
    if len(kinds) == 1:
        kind = next(iter(kinds))
        return kind, titles[kind]
    return "trial", "trial (offered load)"


def _ordered(trials: Sequence[LlmTrial], kind: str) -> list[LlmTrial]:
    if kind == "trial":
        return sorted(trials, key=lambda t: t.index)
    return sorted(trials, key=lambda t: (t.arrivals.load, t.index))


def _x(trial: LlmTrial, kind: str) -> Any:
    if kind == "trial":
        return plot_label(f"#{trial.index} {trial.label}", 40)
    return trial.arrivals.load


def _horizontal_line(y: float, color: str, yref: str = "y") -> dict[str, Any]:
    return {
        "type": "line",
        "xref": "paper",
        "yref": yref,
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": color, "width": 2, "dash": "dot"},
    }


def _latency_hover(trial: LlmTrial, metric: str, key: str) -> str:
    name = metric_name(metric)
    found: Distribution = trial.summary.metrics.get(metric)
    lines = [f"<b>{plot_label(trial.label, 60)}</b>", f"{key} {name} {_ms_unit(found.value(key))}"]
    ci = found.ci(key)
    if ci is not None:
        low = "?" if ci[0] is None else ms(ci[0])
        high = "unbounded" if ci[1] is None else ms(ci[1])
        lines.append(f"95% CI [{low}, {high}] ms")
    why = found.unclaimed_why(key)
    if why:
        lines.append(plot_label(why, 120))
    lines.append(f"n = {found.n}")
    slo = trial.summary.slo
    term = slo.terms.get(metric) if slo else None
    if term is not None:
        lines.append(plot_label(f"SLO: {term.state}" + (f": {term.why}" if term.why else "")))
    return "<br>".join(lines)


def latency_figure(run: LlmRun, metric: str, axis: Axis) -> dict[str, Any] | None:
    """p50/p90/p99 of ``metric`` against the load, with the SLO bound."""
    kind, x_title = axis
    trials = [t for t in _ordered(run.trials, kind) if t.summary.metrics.get(metric).value("p50")]
    if not trials:
        return None
    name = metric_name(metric)
    color = _COLORS.get(metric, "#4b5563")
    traces = []
    for key in ("p50", "p90", "p99"):
        shown = [t for t in trials if t.summary.metrics.get(metric).value(key) is not None]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{key} {name}",
                "x": [_x(t, kind) for t in shown],
                "y": [(t.summary.metrics.get(metric).value(key) or 0.0) * 1e3 for t in shown],
                "line": {"color": color, "dash": _DASHES[key], "width": 2},
                "marker": {
                    "size": 9,
                    "color": color,
                    "symbol": [
                        "circle-open"
                        if t.summary.metrics.get(metric).unclaimed_why(key)
                        else "circle"
                        for t in shown
                    ],
                },
                "hovertext": [_latency_hover(t, metric, key) for t in shown],
                "hovertemplate": "%{hovertext}<extra></extra>",
            }
        )
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    bound = run.slo.terms().get(metric) if run.slo else None
    if bound is not None and run.slo is not None:
        shapes.append(_horizontal_line(bound * 1e3, _SLO_COLOR))
        annotations.append(
            {
                "xref": "paper",
                "yref": "y",
                "x": 1,
                "y": bound * 1e3,
                "xanchor": "right",
                "yanchor": "bottom",
                "showarrow": False,
                "text": plot_label(f"SLO p{run.slo.percentile:g} {name} ≤ {ms(bound)} ms"),
                "font": {"color": _SLO_COLOR},
            }
        )
    layout = chart_layout(
        f"{name} percentiles vs offered load",
        x_title,
        f"{name} (ms)",
        shapes=shapes,
        annotations=annotations,
    )
    layout["yaxis"]["rangemode"] = "tozero"
    if kind == "trial":
        layout["xaxis"]["type"] = "category"
    return {"data": traces, "layout": layout}


def _goodput_hover(trial: LlmTrial) -> str:
    summary = trial.summary
    throughput = summary.throughput
    lines = [f"<b>{plot_label(trial.label, 60)}</b>"]
    if throughput is not None:
        lines.append(f"throughput {throughput.output_tokens_per_s:,.1f} output tok/s")
        lines.append(f"{throughput.requests_per_s:,.2f} completed req/s")
    if summary.goodput is not None:
        lines.append(
            f"goodput {summary.goodput.output_tokens_per_s:,.1f} output tok/s "
            f"({summary.goodput.attainment:.1%} of requests good)"
        )
    lines.append(plot_label(f"SLO: {summary.slo_state}"))
    return "<br>".join(lines)


def goodput_figure(run: LlmRun, axis: Axis) -> dict[str, Any] | None:
    """Throughput and goodput against the load, with the capacity."""
    kind, x_title = axis
    trials = [t for t in _ordered(run.trials, kind) if t.summary.throughput is not None]
    if not trials:
        return None
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "output tokens/s (throughput)",
            "x": [_x(t, kind) for t in trials],
            "y": [t.summary.throughput.output_tokens_per_s for t in trials if t.summary.throughput],
            "line": {"color": "#2563eb", "dash": "dash"},
            "marker": {"size": 8},
            "hovertext": [_goodput_hover(t) for t in trials],
            "hovertemplate": "%{hovertext}<extra></extra>",
        }
    ]
    good = [t for t in trials if t.summary.goodput is not None]
    if good:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "good output tokens/s (goodput)",
                "x": [_x(t, kind) for t in good],
                "y": [t.summary.goodput.output_tokens_per_s for t in good if t.summary.goodput],
                "line": {"color": "#16a34a"},
                "marker": {
                    "size": 10,
                    "symbol": ["circle" if t.summary.slo_state == "met" else "x" for t in good],
                },
                "hovertext": [_goodput_hover(t) for t in good],
                "hovertemplate": "%{hovertext}<extra></extra>",
            }
        )
    shapes = []
    capacity = run.capacity
    if capacity is not None and capacity.capacity is not None and kind != "trial":
        unit_kind = {"concurrency": "concurrency", "x trace speed": "speed"}.get(
            capacity.unit, "rate"
        )
        if unit_kind == kind:
            shapes.append(vertical_line(capacity.capacity, "#16a34a"))
    layout = chart_layout(
        "goodput and throughput vs offered load", x_title, "output tokens/s", shapes=shapes
    )
    layout["yaxis"]["rangemode"] = "tozero"
    if kind == "trial":
        layout["xaxis"]["type"] = "category"
    return {"data": traces, "layout": layout}


def _request_hover(record: RequestRecord) -> str:
    lines = [f"<b>request {record.index}</b>"]
    if record.session is not None:
        lines.append(f"session {record.session}, turn {record.turn}")
    lines.append(f"scheduled at {record.scheduled_s:.3f} s")
    lines.append(f"client lag {ms(record.sent_s - record.scheduled_s)} ms")
    values = request_values(record)
    lines.append(f"TTFT {_ms_unit(values['ttft_s'])}")
    if values["ttfc_s"] != values["ttft_s"]:
        lines.append(f"time to first content {_ms_unit(values['ttfc_s'])}")
    lines.append(f"E2E (last token) {_ms_unit(values['e2e_s'])}")
    lines.append(f"stream end {_ms_unit(values['e2e_stream_s'])}")
    tokens = record.output_tokens
    lines.append(f"output tokens {NOT_MEASURED if tokens is None else tokens}")
    if record.reasoning_tokens:
        lines.append(f"of which reasoning {record.reasoning_tokens}")
    if record.prompt_tokens is not None:
        lines.append(f"prompt tokens {record.prompt_tokens}")
    if record.error:
        lines.append("error: " + plot_label(record.error, 160))
    if record.cancelled:
        lines.append("cancelled by the run (not counted)")
    return "<br>".join(lines)


def requests_figure(
    trial: LlmTrial | None, records: Sequence[RequestRecord]
) -> dict[str, Any] | None:
    """Every request of a trial from its scheduled arrival: waiting, decoding, errors."""
    if not records:
        return None
    usable = sorted(records, key=lambda r: (r.scheduled_s, r.index))
    shown = usable[:TIMELINE_LIMIT]
    series: dict[str, tuple[str, list[int], list[float], list[float], list[str]]] = {
        "wait": ("waiting (scheduled arrival → first token)", [], [], [], []),
        "decode": ("decoding (first token → end)", [], [], [], []),
        "error": ("error (scheduled arrival → end)", [], [], [], []),
        "cancelled": ("cancelled by the run", [], [], [], []),
    }

    def add(name: str, row: int, start: float, stop: float, hover: str) -> None:
        _, rows, bases, lengths, texts = series[name]
        rows.append(row)
        bases.append(start)
        lengths.append(max(stop - start, 0.0))
        texts.append(hover)

    for row, record in enumerate(shown):
        hover = _request_hover(record)
        first = record.first_token_s
        if record.error:
            add("error", row, record.scheduled_s, record.end_s, hover)
        elif record.cancelled:
            add("cancelled", row, record.scheduled_s, record.end_s, hover)
        elif first is None:
            add("wait", row, record.scheduled_s, record.end_s, hover)
        else:
            add("wait", row, record.scheduled_s, first, hover)
            add("decode", row, first, record.end_s, hover)
    colors = {"wait": "#f59e0b", "decode": "#2563eb", "error": "#dc2626", "cancelled": "#9ca3af"}
    traces: list[dict[str, Any]] = [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "y": rows,
            "base": bases,
            "x": lengths,
            "marker": {"color": colors[key], "line": {"width": 0}},
            "hovertext": texts,
            "hovertemplate": "%{hovertext}<extra></extra>",
        }
        for key, (name, rows, bases, lengths, texts) in series.items()
        if rows
    ]
    _, rows, bases, lengths, texts = series["error"]
    if rows:  # an error is often too short to see as a bar: mark its end
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "error (its end)",
                "y": rows,
                "x": [b + n for b, n in zip(bases, lengths, strict=True)],
                "marker": {"color": colors["error"], "symbol": "x", "size": 7},
                "hovertext": texts,
                "hovertemplate": "%{hovertext}<extra></extra>",
            }
        )
    shapes = []
    window = trial.summary.window if trial else None
    if window is not None:
        shapes += [vertical_line(window.start_s, "#6b7280"), vertical_line(window.end_s, "#6b7280")]
    label = trial.label if trial else "the trial"
    title = f"every request of trial #{trial.index if trial else '?'} ({label})"
    if len(usable) > len(shown):
        title += f": the first {len(shown)} of {len(usable)}"
    layout = chart_layout(
        title,
        "seconds from the trial start",
        "request (in order of scheduled arrival)",
        barmode="overlay",
        bargap=0.15,
        shapes=shapes,
    )
    layout["yaxis"].update(autorange="reversed", zeroline=False)
    height = max(360, min(1400, 150 + 8 * len(shown)))
    layout["height"] = height
    layout["margin"] = {**layout["margin"], "b": 100}
    layout["legend"] = {**layout["legend"], "y": -62 / (height - 56 - 100), "yanchor": "top"}
    return {"data": traces, "layout": layout}


def _server_series(
    timeline: Sequence[ServerSample],
) -> dict[str, tuple[list[float], list[float]]]:
    """(times, values) of each server signal that was exported."""
    found: dict[str, tuple[list[float], list[float]]] = {}

    def add(name: str, t: float, value: float | None) -> None:
        if value is not None:
            times, values = found.setdefault(name, ([], []))
            times.append(t)
            values.append(value)

    for sample in timeline:
        add("running", sample.t_s, sample.running)
        add("waiting", sample.t_s, sample.waiting)
        add(
            "kv", sample.t_s, None if sample.kv_cache_usage is None else sample.kv_cache_usage * 100
        )
        if sample.prefix_cache_queries:
            add(
                "hits",
                sample.t_s,
                100.0 * (sample.prefix_cache_hits or 0.0) / sample.prefix_cache_queries,
            )
        add("preemptions", sample.t_s, sample.preemptions)
    return found


def server_timeline_figure(
    trial: LlmTrial, records: Sequence[RequestRecord], run: LlmRun
) -> tuple[dict[str, Any] | None, list[str]]:
    """Client and server on the trial's clock: each request's TTFT at its scheduled arrival
    (red when over the SLO), then the server's running and waiting requests, KV-cache usage,
    prefix-cache hit rate per scrape interval and preemptions, with a line where each SLO term
    broke. Returns the figure and the "not measured: why" lines for the signals missing."""
    missing: list[str] = []
    ordered = sorted(
        (r for r in records if not r.cancelled), key=lambda r: (r.scheduled_s, r.index)
    )[:TIMELINE_LIMIT]
    if not ordered:
        return None, ["no request of the trial to draw"]
    bound = run.slo.ttft_s if run.slo else None
    ok_x: list[float] = []
    ok_y: list[float] = []
    ok_text: list[str] = []
    bad_x: list[float] = []
    bad_y: list[float] = []
    bad_text: list[str] = []
    for record in ordered:
        value = request_values(record)["ttft_s"]
        over = record.error or value is None or (bound is not None and value > bound)
        x, y, text = (bad_x, bad_y, bad_text) if over else (ok_x, ok_y, ok_text)
        x.append(record.scheduled_s)
        y.append((value if value is not None else record.end_s - record.scheduled_s) * 1e3)
        text.append(_request_hover(record))
    rows: list[str] = ["client"]
    series = _server_series(trial.server_metrics.timeline)
    server = trial.server_metrics
    if not server.available:
        missing.append(f"server metrics: not measured: {server.why}")
    else:
        for name, why in (
            ("running", "running requests"),
            ("waiting", "waiting requests"),
            ("kv", "KV-cache usage"),
            ("hits", "prefix-cache hit rate"),
            ("preemptions", "preemptions"),
        ):
            if name not in series:
                missing.append(
                    f"{why}: not measured: the server ({server.server}) does not export it"
                )
        if {"running", "waiting"} & series.keys():
            rows.append("queue")
        if "kv" in series:
            rows.append("kv")
        if {"hits", "preemptions"} & series.keys():
            rows.append("cache")
    gap = 0.04
    height = (1.0 - gap * (len(rows) - 1)) / (len(rows) + 1)
    domains: dict[str, list[float]] = {}
    top = 1.0
    for row in rows:
        size = height * (2 if row == "client" else 1)
        domains[row] = [max(0.0, top - size), top]
        top -= size + gap
    axis_of = {row: ("" if n == 0 else str(n + 1)) for n, row in enumerate(rows)}
    traces: list[dict[str, Any]] = []

    def trace(row: str, **spec: Any) -> None:
        suffix = axis_of[row]
        traces.append({**spec, "xaxis": "x", "yaxis": f"y{suffix}"})

    marker = "circle"
    trace(
        "client",
        type="scatter",
        mode="markers",
        name="TTFT within the SLO" if bound else "TTFT",
        x=ok_x,
        y=ok_y,
        marker={"color": "#2563eb", "size": 5, "symbol": marker},
        hovertext=ok_text,
        hovertemplate="%{hovertext}<extra></extra>",
    )
    if bad_x:
        trace(
            "client",
            type="scatter",
            mode="markers",
            name="TTFT over the SLO, or an error (E2E)",
            x=bad_x,
            y=bad_y,
            marker={"color": _SLO_COLOR, "size": 6, "symbol": "x"},
            hovertext=bad_text,
            hovertemplate="%{hovertext}<extra></extra>",
        )
    colors = {
        "running": "#16a34a",
        "waiting": "#f59e0b",
        "kv": "#9333ea",
        "hits": "#0891b2",
        "preemptions": "#dc2626",
    }
    names = {
        "running": "requests running",
        "waiting": "requests waiting",
        "kv": "KV-cache usage (%)",
        "hits": "prefix-cache hits (% of the interval's prompt tokens)",
        "preemptions": "preemptions in the interval",
    }
    for name, row in (
        ("running", "queue"),
        ("waiting", "queue"),
        ("kv", "kv"),
        ("hits", "cache"),
        ("preemptions", "cache"),
    ):
        if name in series and row in axis_of:
            times, values = series[name]
            trace(
                row,
                type="scatter" if name != "preemptions" else "bar",
                mode="lines+markers",
                name=names[name],
                x=times,
                y=values,
                line={"color": colors[name], "shape": "hv"},
                marker={"color": colors[name], "size": 4},
            )
    layout = chart_layout(
        f"client and server on one clock: trial #{trial.index} ({trial.label})",
        "seconds from the trial start",
        "",
    )
    layout["height"] = 220 + 130 * len(rows)
    titles = {
        "client": "TTFT (ms)",
        "queue": "requests",
        "kv": "KV usage (%)",
        "cache": "hits % / preemptions",
    }
    for row in rows:
        suffix = axis_of[row]
        key = "yaxis" + suffix
        layout[key] = {
            "domain": domains[row],
            "title": {"text": titles[row]},
            "rangemode": "tozero",
            "anchor": "x",
        }
    layout["xaxis"] = {
        "title": {"text": "seconds from the trial start"},
        "anchor": "y" + axis_of[rows[-1]],
    }
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    if bound is not None:
        shapes.append(_horizontal_line(bound * 1e3, _SLO_COLOR))
    for found in trial.summary.slo_breaks:
        shapes.append(vertical_line(found.at_s, _BREAK_COLOR))
        annotations.append(
            {
                "xref": "x",
                "yref": "paper",
                "x": found.at_s,
                "y": 1.0,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "text": plot_label(f"{metric_name(found.metric)} broke", 40),
                "font": {"color": _BREAK_COLOR},
            }
        )
    layout["shapes"] = shapes
    layout["annotations"] = annotations
    return {"data": traces, "layout": layout}, missing


def turns_figure(trial: LlmTrial) -> dict[str, Any] | None:
    """TTFT p50 and p90 by turn of a conversation workload, with the prompt's length and the
    part a prefix cache could reuse."""
    turns = trial.summary.turns
    if len(turns) < 2:
        return None
    x = [t.turn for t in turns]
    traces: list[dict[str, Any]] = []
    for key in ("p50", "p90"):
        values = [t.ttft_s.value(key) for t in turns]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{key} TTFT (ms)",
                "x": x,
                "y": [None if v is None else v * 1e3 for v in values],
                "line": {"color": _COLORS["ttft_s"], "dash": _DASHES[key]},
            }
        )
    traces.append(
        {
            "type": "bar",
            "name": "prompt tokens (mean)",
            "x": x,
            "y": [t.prompt_tokens_mean for t in turns],
            "yaxis": "y2",
            "opacity": 0.35,
            "marker": {"color": "#6b7280"},
        }
    )
    traces.append(
        {
            "type": "bar",
            "name": "reusable prefix tokens (mean)",
            "x": x,
            "y": [t.reusable_prefix_tokens_mean for t in turns],
            "yaxis": "y2",
            "opacity": 0.35,
            "marker": {"color": "#0891b2"},
        }
    )
    layout = chart_layout(f"TTFT by turn at {trial.label}", "turn", "TTFT (ms)")
    layout["yaxis"]["rangemode"] = "tozero"
    layout["yaxis2"] = {
        "title": {"text": "tokens"},
        "overlaying": "y",
        "side": "right",
        "rangemode": "tozero",
        "showgrid": False,
    }
    layout["barmode"] = "overlay"
    layout["xaxis"]["dtick"] = 1
    return {"data": traces, "layout": layout}
