"""Offline HTML report for ``accelscope load``: capacity verdict, latency percentiles vs
offered load with the SLA line, per-query queue vs compute time, and every trial.

Built from the stored trial and capacity documents (plain dicts), so a stored run can be
re-rendered. Same safety as the bench report: plotly inlined, a CSP that forbids fetching,
user text escaped by jinja or for plotly labels, JSON made script-safe.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jinja2

from accelscope.commands.load.verdict import harness_floor_text, load_verdict, policy_label
from accelscope.report.format import ms
from accelscope.report.page import (
    chart_layout,
    plot_label,
    plotly_js,
    script_safe_json,
    template,
    vertical_line,
)

__all__ = ["render_load_report"]

_PALETTE = ("#2563eb", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#dc2626", "#4b5563")


_DASHES = {"p50_s": "dot", "p90_s": "dash"}


def _symbol(trial: dict[str, Any]) -> str:
    return "circle" if trial["meets_sla"] else "x"


def _hover(label: str, key: str, trial: dict[str, Any]) -> str:
    rate = trial["offered_rate_per_s"]
    value_ms = trial["latency"][key] * 1e3
    verdict = "meets SLA" if trial["meets_sla"] else "fails: " + "; ".join(trial["sla_failures"])
    return (
        f"<b>{plot_label(label)}</b><br>{rate:.1f} q/s offered<br>{key[:3]} {value_ms:.2f} ms"
        f"<br>{plot_label(verdict, 200)}"
    )


def _curve_figure(
    trials: Sequence[dict[str, Any]], sla_p99_s: float | None, capacity: dict[str, Any] | None
) -> dict[str, Any] | None:
    server = [t for t in trials if t.get("offered_rate_per_s") is not None and t["completed"] > 0]
    if not server:
        return None
    groups: dict[str, list[dict[str, Any]]] = {}
    for trial in server:
        groups.setdefault(policy_label(trial["batching"]), []).append(trial)
    chosen = capacity.get("batching") if capacity else None
    best_label = policy_label(chosen) if chosen else "no batching"
    traces: list[dict[str, Any]] = []
    for number, (label, group) in enumerate(groups.items()):
        group.sort(key=lambda t: t["offered_rate_per_s"])
        color = _PALETTE[number % len(_PALETTE)]
        rates = [t["offered_rate_per_s"] for t in group]
        shown = ("p50_s", "p90_s", "p99_s") if label == best_label else ("p99_s",)
        for key in shown:
            name = f"{key[:3]} · {label}"
            hover = [_hover(label, key, t) for t in group]
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": plot_label(name, 60),
                    "x": rates,
                    "y": [t["latency"][key] * 1e3 for t in group],
                    "line": {"color": color, "dash": _DASHES.get(key, "solid")},
                    "marker": {"symbol": [_symbol(t) for t in group], "size": 9},
                    "hovertext": hover,
                    "hovertemplate": "%{hovertext}<extra></extra>",
                }
            )
    shapes = []
    if sla_p99_s is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "yref": "y",
                "x0": 0,
                "x1": 1,
                "y0": sla_p99_s * 1e3,
                "y1": sla_p99_s * 1e3,
                "line": {"color": "#dc2626", "width": 2, "dash": "dot"},
            }
        )
    if capacity and capacity["capacity_qps"] > 0:
        shapes.append(vertical_line(capacity["capacity_qps"], "#16a34a"))
    title = "latency vs offered load (x: the trial missed the SLA)"
    layout = chart_layout(title, "offered load (queries/s)", "latency (ms)", shapes=shapes)
    layout["yaxis"]["rangemode"] = "tozero"
    return {"data": traces, "layout": layout}


def _split_figure(trial: dict[str, Any] | None) -> dict[str, Any] | None:
    samples = (trial or {}).get("query_samples") or {}
    if not samples.get("scheduled_s"):
        return None
    x = samples["scheduled_s"]
    traces = [
        {
            "type": "bar",
            "name": "queue (scheduled arrival → start)",
            "x": x,
            "y": [v * 1e3 for v in samples["queue_s"]],
            "marker": {"color": "#d97706"},
        },
        {
            "type": "bar",
            "name": "compute (start → done)",
            "x": x,
            "y": [v * 1e3 for v in samples["compute_s"]],
            "marker": {"color": "#2563eb"},
        },
    ]
    rate = (trial or {}).get("offered_rate_per_s")
    title = "per-query queue vs compute time" + (f" at {rate:.1f} q/s" if rate else "")
    layout = chart_layout(
        title, "scheduled arrival (s from trial start)", "ms", barmode="stack", bargap=0.05
    )
    return {"data": traces, "layout": layout}


@functools.cache
def _template() -> jinja2.Template:
    return template(
        "accelscope.commands.load",
        "load.html.j2",
        {"ms": ms, "rate": "{:,.1f}".format, "policy": policy_label},
    )


def render_load_report(
    *,
    title: str,
    model: str,
    label: str,
    scenario: str,
    sla_p99_s: float | None,
    trials: Sequence[dict[str, Any]],
    capacity: dict[str, Any] | None,
    notes: Sequence[str] = (),
    harness_floor: dict[str, Any] | None = None,
) -> str:
    """One self-contained, offline HTML document for a load run (trials as stored dicts;
    ``harness_floor``: the stored floor, falling back to the capacity document's)."""
    split_trial = (capacity or {}).get("capacity_trial") or (trials[-1] if trials else None)
    charts = [
        (
            "chart-curve",
            "Latency vs offered load",
            "no server trial completed a query",
            _curve_figure(trials, sla_p99_s, capacity),
        ),
        (
            "chart-split",
            "Queue vs compute time per query",
            "no completed queries to show",
            _split_figure(split_trial),
        ),
    ]
    return _template().render(
        title=title,
        model=model,
        label=label,
        scenario=scenario,
        verdict=load_verdict(scenario, sla_p99_s, trials, capacity),
        sla=None if sla_p99_s is None else f"{ms(sla_p99_s)} ms",
        trials=trials,
        capacity=capacity,
        notes=list(notes),
        floor=harness_floor_text(harness_floor or (capacity or {}).get("harness_floor")),
        charts=[(cid, heading, note, fig is not None) for cid, heading, note, fig in charts],
        figures_json=script_safe_json([{"id": cid, **fig} for cid, _, _, fig in charts if fig]),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=plotly_js(),
    )
