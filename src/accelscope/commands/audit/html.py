"""Offline HTML report of an ``audit`` document: the fleet heat map over time, busy vs useful
hours per GPU, the cost waterfall in dollars, and the action table.

Same guarantees as the other reports: plotly inlined, a Content-Security-Policy that forbids
any fetch, jinja autoescaping for markup, plotly labels HTML-escaped, embedded JSON
``<``/``>``/``&``-escaped (pod names and labels come from the telemetry: untrusted).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jinja2

from accelscope.report.format import money_usd
from accelscope.report.page import chart_layout, plot_label, plotly_js, script_safe_json, template

__all__ = ["render_audit_report"]


def _label(device: Mapping[str, Any]) -> str:
    holders = ", ".join(device["holders"]) or "unallocated"
    return plot_label(f"{device['key']} ({holders})", 60)


def _heatmap(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    devices = [d for d in doc["devices"] if d.get("timeline")]
    if not devices:
        return None
    hours = len(devices[0]["timeline"])
    layout = chart_layout(
        "engine activity per hour (GR_ENGINE_ACTIVE, else GPU_UTIL)", "hour of the window", ""
    )
    layout["yaxis"].update(automargin=True)
    layout["height"] = max(360, 120 + 28 * len(devices))
    return {
        "data": [
            {
                "type": "heatmap",
                "z": [d["timeline"] for d in devices],
                "x": list(range(hours)),
                "y": [_label(d) for d in devices],
                "zmin": 0,
                "zmax": 1,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": "activity"}},
                "hovertemplate": "%{y}<br>hour %{x}: %{z:.0%}<extra></extra>",
            }
        ],
        "layout": layout,
    }


def _busy_vs_useful(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    devices = list(doc["devices"])
    if not devices:
        return None
    labels = [_label(d) for d in devices]
    series = (
        ("held", "held", "#cbd5e1"),
        ("busy", "busy (nvidia-smi)", "#f97316"),
        ("active", "active (GR engine)", "#2563eb"),
        ("useful", "useful (SM-active)", "#16a34a"),
    )
    traces = [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "y": labels,
            "x": [d["hours"].get(key) for d in devices],
            "marker": {"color": color},
        }
        for key, name, color in series
    ]
    layout = chart_layout("busy vs useful GPU-hours per GPU", "hours", "", barmode="group")
    layout["yaxis"].update(automargin=True, autorange="reversed")
    layout["height"] = max(420, 140 + 70 * len(devices))
    return {"data": traces, "layout": layout}


def _waterfall(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    totals = doc["totals"]
    cost = float(totals["cost_usd"])
    if cost <= 0:
        return None
    per_useful = totals.get("usd_per_useful_gpu_hour")
    price = cost / max(float(totals["observed"]), 1e-9)
    useful = float(totals["useful"]) * price if per_useful is not None else 0.0
    idle = float(totals["idle_usd"])
    rest = max(0.0, cost - useful - idle)
    return {
        "data": [
            {
                "type": "waterfall",
                "orientation": "v",
                "measure": ["absolute", "relative", "relative", "total"],
                "x": ["cost of the window", "idle", "active, SMs not", "useful (SM-active)"],
                "y": [cost, -idle, -rest, 0],
                "text": [money_usd(v) for v in (cost, -idle, -rest, useful)],
                "textposition": "outside",
                "connector": {"line": {"color": "#94a3b8"}},
            }
        ],
        "layout": chart_layout("where the dollars went (at the average $/GPU-hour)", "", "US$"),
    }


@functools.cache
def _template() -> jinja2.Template:
    filters = {
        "money": money_usd,
        "pct": lambda v: "—" if v is None else f"{float(v):.0%}",
        "hours": lambda v: "—" if v is None else f"{float(v):,.1f}",
    }
    return template("accelscope.commands.audit", "audit.html.j2", filters)


def render_audit_report(doc: Mapping[str, Any], *, title: str) -> str:
    """One self-contained offline HTML document for an audit document."""
    charts = [
        ("chart-heatmap", "Fleet over time", "no activity field measured", _heatmap(doc)),
        ("chart-hours", "Busy vs useful", "no device", _busy_vs_useful(doc)),
        ("chart-waterfall", "Waste in dollars", "no cost", _waterfall(doc)),
    ]
    return _template().render(
        title=title,
        doc=doc,
        charts=[(cid, heading, note, fig is not None) for cid, heading, note, fig in charts],
        figures_json=script_safe_json([{"id": cid, **fig} for cid, _, _, fig in charts if fig]),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=plotly_js(),
    )
