"""Offline HTML section for a capacity ``plan`` document: options table, monthly cost per
option (bars), and the fleet over the day against the traffic curve.

Same guarantees as the bench report: plotly inlined, a Content-Security-Policy that forbids
any fetch, jinja autoescaping for markup, plotly labels HTML-escaped, embedded JSON
``<``/``>``/``&``-escaped. Every projected capacity carries its ``estimate`` label, in the
table and in the chart labels.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jinja2

from accelscope.commands.plan.view import capacity_cell, energy_cell
from accelscope.report.format import money_usd
from accelscope.report.page import chart_layout, plot_label, plotly_js, script_safe_json, template

__all__ = ["render_plan_report"]

_MODES = (
    ("monthly_always_on", "always on", "#94a3b8"),
    ("monthly_autoscaled", "following traffic", "#2563eb"),
    ("monthly_scale_to_zero", "scale to zero", "#16a34a"),
)


def _label(option: Mapping[str, Any]) -> str:
    capacity = option.get("capacity") or {}
    suffix = " (estimate)" if capacity.get("basis") == "projected" else ""
    return plot_label(str(option["name"]), 40) + suffix


def _layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    margin = {"l": 70, "r": 70, "t": 56, "b": 60}  # room for a right-hand axis
    return chart_layout(title, x_title, y_title, **{"margin": margin, **extra})


def _cost_figure(options: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    priced = [o for o in options if o.get("feasible") and o.get("monthly_autoscaled") is not None]
    if not priced:
        return None
    priced = list(reversed(priced))  # cheapest on top
    ticks = [_label(o) for o in priced]
    traces = [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "y": list(range(len(priced))),
            "x": [o[key] for o in priced],
            "marker": {"color": color},
            "hovertext": [
                f"<b>{t}</b><br>{name}: ${o[key]:,.2f}/month"
                for t, o in zip(ticks, priced, strict=True)
            ],
            "hovertemplate": "%{hovertext}<extra></extra>",
        }
        for key, name, color in _MODES
    ]
    layout = _layout(
        "monthly cost per option",
        "US$ per month",
        "",
        barmode="group",
        height=max(420, 140 + 60 * len(priced)),
    )
    layout["yaxis"].update(automargin=True, tickvals=list(range(len(priced))), ticktext=ticks)
    return {"data": traces, "layout": layout}


def _fleet_figure(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    traffic = doc["traffic"]
    feasible = [o for o in doc["options"] if o.get("feasible") and o.get("hourly_instances")]
    if not feasible:
        return None
    hours = list(range(len(traffic["hourly_qps"])))
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "traffic (qps)",
            "x": hours,
            "y": traffic["hourly_qps"],
            "yaxis": "y2",
            "line": {"color": "#f97316", "width": 2},
            "fill": "tozeroy",
            "fillcolor": "rgba(249,115,22,0.12)",
        }
    ]
    palette = ("#2563eb", "#16a34a", "#7c3aed")
    for option, color in zip(feasible[:3], palette, strict=False):
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv", "color": color, "width": 2},
                "name": f"{_label(option)} instances",
                "x": hours,
                "y": option["hourly_instances"],
            }
        )
    layout = _layout("fleet size over the day vs traffic", "hour of day", "instances")
    layout["yaxis"].update(
        rangemode="tozero",
        dtick=1 if max(max(o["hourly_instances"]) for o in feasible[:3]) <= 12 else None,
    )
    layout["yaxis2"] = {
        "title": {"text": "requests / s"},
        "overlaying": "y",
        "side": "right",
        "rangemode": "tozero",
        "showgrid": False,
    }
    layout["xaxis"].update(dtick=2, range=[-0.5, 23.5])
    return {"data": traces, "layout": layout}


@functools.cache
def _template() -> jinja2.Template:
    filters = {
        "money": money_usd,
        "capacity": capacity_cell,
        "energy": energy_cell,
        "pct": lambda v: "—" if v is None else f"{float(v):.0%}",
    }
    return template("accelscope.commands.plan", "plan.html.j2", filters)


def render_plan_report(doc: Mapping[str, Any], *, title: str) -> str:
    """One self-contained offline HTML document for a capacity plan document."""
    charts = [
        (
            "chart-cost",
            "Monthly cost per option",
            "no priced option meets the SLA",
            _cost_figure(list(doc["options"])),
        ),
        ("chart-fleet", "Fleet over the day", "no feasible option to size", _fleet_figure(doc)),
    ]
    traffic = doc["traffic"]
    return _template().render(
        title=title,
        doc=doc,
        settings=doc["settings"],
        traffic=traffic,
        mean_qps=sum(traffic["hourly_qps"]) / len(traffic["hourly_qps"]),
        recommendation=doc.get("recommendation", {}),
        charts=[(cid, heading, note, fig is not None) for cid, heading, note, fig in charts],
        figures_json=script_safe_json([{"id": cid, **fig} for cid, _, _, fig in charts if fig]),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=plotly_js(),
    )
