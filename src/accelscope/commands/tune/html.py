"""Offline HTML report of a ``tune`` run: the verdict and the winner's launch command, the
throughput-vs-latency Pareto front of every trial of every configuration, the goodput of each
configuration, the confirmation rounds, and the table (start time, capacity, tails, KV usage,
prefix hits, preemptions, quality, cost), with the failures' log lines. Plotly inlined, a
Content-Security-Policy that forbids any fetch, every user and server string escaped."""

from __future__ import annotations

import functools
from typing import Any

import jinja2

from accelscope.report.page import chart_layout, plot_label, plotly_js, script_safe_json, template
from accelscope.tune.documents import TuneConfig, TuneRun

__all__ = ["pareto_front", "render_tune_report"]

NOT_MEASURED = "not measured"


def _points(run: TuneRun) -> list[tuple[float, float, str, str]]:
    """(latency at the SLO percentile in ms, output tokens/s, configuration, trial) of every
    trial of every configuration."""
    key = "p99" if (run.slo.percentile if run.slo else 99.0) > 90 else "p90"
    metric = "ttft_s"
    if run.slo is not None and run.slo.ttft_s is None:
        metric = "e2e_s" if run.slo.e2e_s is not None else "tpot_s"
    found = []
    for config in run.configs:
        for trial in config.trials or ([config.point] if config.point else []):
            latency = trial.summary.metrics.get(metric).value(key)
            throughput = trial.summary.throughput
            if latency is None or throughput is None:
                continue
            found.append((latency * 1e3, throughput.output_tokens_per_s, config.key, trial.label))
    return found


def pareto_front(
    points: list[tuple[float, float, str, str]],
) -> list[tuple[float, float, str, str]]:
    """The points no other point beats on both latency (lower) and throughput (higher)."""
    front = []
    for point in points:
        dominated = any(
            o[0] <= point[0] and o[1] >= point[1] and (o[0] < point[0] or o[1] > point[1])
            for o in points
        )
        if not dominated:
            front.append(point)
    return sorted(front)


def _pareto_figure(run: TuneRun) -> dict[str, Any] | None:
    points = _points(run)
    if not points:
        return None
    traces: list[dict[str, Any]] = []
    for key in dict.fromkeys(p[2] for p in points):
        mine = [p for p in points if p[2] == key]
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": plot_label(key, 60),
                "x": [p[0] for p in mine],
                "y": [p[1] for p in mine],
                "text": [plot_label(f"{key} at {p[3]}", 120) for p in mine],
                "hovertemplate": "%{text}<br>%{x:.0f} ms, %{y:.1f} tok/s<extra></extra>",
                "marker": {"size": 10, "symbol": "star" if key == run.winner else "circle"},
            }
        )
    front = pareto_front(points)
    traces.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "Pareto front",
            "x": [p[0] for p in front],
            "y": [p[1] for p in front],
            "line": {"color": "#111827", "dash": "dot", "shape": "hv"},
            "hoverinfo": "skip",
        }
    )
    percentile = f"p{run.slo.percentile:g}" if run.slo else "p99"
    layout = chart_layout(
        "throughput vs latency: every trial of every configuration",
        f"{percentile} latency (ms)",
        "output tokens/s",
    )
    layout["yaxis"]["rangemode"] = "tozero"
    layout["xaxis"]["rangemode"] = "tozero"
    return {"data": traces, "layout": layout}


def _goodput_figure(run: TuneRun) -> dict[str, Any] | None:
    measured = [c for c in run.configs if c.goodput_tokens_per_s is not None]
    if not measured:
        return None
    trace = {
        "type": "bar",
        "orientation": "h",
        "x": [c.goodput_tokens_per_s for c in measured],
        "y": [plot_label(c.key, 60) for c in measured],
        "marker": {"color": ["#16a34a" if c.key == run.winner else "#2563eb" for c in measured]},
        "hovertemplate": "%{y}: %{x:.1f} good tok/s<extra></extra>",
    }
    layout = chart_layout("good output tokens/s at the SLO", "good output tokens/s", "")
    layout["yaxis"]["autorange"] = "reversed"
    layout["height"] = max(300, 120 + 36 * len(measured))
    return {"data": [trace], "layout": layout}


def _row(config: TuneConfig, run: TuneRun) -> dict[str, Any]:
    key = "p99" if (run.slo.percentile if run.slo else 99.0) > 90 else "p90"
    point = config.point
    server = point.server_metrics if point else None

    def tail(metric: str) -> str:
        if point is None:
            return NOT_MEASURED
        value = point.summary.metrics.get(metric).value(key)
        return NOT_MEASURED if value is None else f"{value * 1000:,.0f}"

    return {
        "key": config.key,
        "winner": config.key == run.winner,
        "role": config.role,
        "status": config.status,
        "phase": config.phase,
        "failure": config.failure.description if config.failure else "",
        "why": config.why,
        "log": config.log_tail.strip().splitlines()[-8:],
        "startup": NOT_MEASURED if config.startup_s is None else f"{config.startup_s:,.0f}",
        "load": config.load_label or NOT_MEASURED,
        "goodput": NOT_MEASURED
        if config.goodput_tokens_per_s is None
        else f"{config.goodput_tokens_per_s:,.1f}",
        "ttft": tail("ttft_s"),
        "tpot": tail("tpot_s"),
        "kv": NOT_MEASURED
        if not server or not server.kv_cache_usage
        else f"{server.kv_cache_usage.max:.0%}",
        "hits": NOT_MEASURED
        if not server or not server.prefix_cache or server.prefix_cache.hit_rate is None
        else f"{server.prefix_cache.hit_rate:.0%}",
        "preemptions": NOT_MEASURED
        if not server or server.preemptions is None
        else f"{server.preemptions:g}",
        "quality": "not guarded"
        if config.quality is None
        else f"{config.quality.agreement:.1%} ({config.quality.method})",
        "cost": NOT_MEASURED
        if config.cost_per_million_good_tokens_usd is None
        else f"${config.cost_per_million_good_tokens_usd:,.3f}",
        "launch": config.launch,
        "tuner": f"{config.wall_s:,.0f} s wall, {config.tuner_cpu_s:,.1f} s CPU",
    }


@functools.cache
def _template() -> jinja2.Template:
    return template("accelscope.commands.tune", "tune.html.j2", {})


def render_tune_report(run: TuneRun, *, title: str) -> str:
    """One self-contained, offline HTML document for a ``tune`` run."""
    charts = [
        ("chart-pareto", "Throughput vs latency", _pareto_figure(run)),
        ("chart-goodput", "Good tokens per second", _goodput_figure(run)),
    ]
    return _template().render(
        title=title,
        run=run,
        rows=[_row(c, run) for c in run.configs],
        verdict=run.verdict,
        charts=[{"id": c[0], "heading": c[1], "drawn": c[2] is not None} for c in charts],
        figures_json=script_safe_json([{"id": c[0], **c[2]} for c in charts if c[2]]),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=plotly_js(),
    )
