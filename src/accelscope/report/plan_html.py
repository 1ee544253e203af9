"""Offline HTML section for a capacity ``plan`` document: options table, monthly cost per
option (bars), and the fleet over the day against the traffic curve.

Same guarantees as the bench report: plotly inlined, a Content-Security-Policy that forbids
any fetch, jinja autoescaping for markup, plotly labels HTML-escaped, embedded JSON
``<``/``>``/``&``-escaped. Every projected capacity carries its ``estimate`` label, in the
table and in the chart labels.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2
from plotly.offline import get_plotlyjs

from accelscope.report.html import script_safe_json
from accelscope.report.plan_view import capacity_cell

__all__ = ["render_plan_report"]

_FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'
_MODES = (("monthly_always_on", "always on", "#94a3b8"),
          ("monthly_autoscaled", "following traffic", "#2563eb"),
          ("monthly_scale_to_zero", "scale to zero", "#16a34a"))  # fmt: skip


def _esc(text: str, limit: int = 0) -> str:
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=False)


def _label(option: Mapping[str, Any]) -> str:
    capacity = option.get("capacity") or {}
    suffix = " (estimate)" if capacity.get("basis") == "projected" else ""
    return _esc(str(option["name"]), 40) + suffix


def _layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": f"<b>{_esc(title, 90)}</b>", "x": 0.01, "font": {"size": 16}},
        "template": "plotly_white", "font": {"family": _FONT, "size": 12}, "height": 420,
        "margin": {"l": 70, "r": 70, "t": 56, "b": 60}, "hoverlabel": {"align": "left"},
        "legend": {"orientation": "h", "y": -0.2, "x": 0},
        "xaxis": {"title": {"text": _esc(x_title)}}, "yaxis": {"title": {"text": _esc(y_title)}},
        **extra,
    }  # fmt: skip


def _cost_figure(options: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    priced = [o for o in options if o.get("feasible") and o.get("monthly_autoscaled") is not None]
    if not priced:
        return None
    priced = list(reversed(priced))  # cheapest on top
    ticks = [_label(o) for o in priced]
    traces = [{
        "type": "bar", "orientation": "h", "name": name, "y": list(range(len(priced))),
        "x": [o[key] for o in priced], "marker": {"color": color},
        "hovertext": [f"<b>{t}</b><br>{name}: ${o[key]:,.2f}/month" for t, o in
                      zip(ticks, priced, strict=True)],
        "hovertemplate": "%{hovertext}<extra></extra>",
    } for key, name, color in _MODES]  # fmt: skip
    layout = _layout("monthly cost per option", "US$ per month", "", barmode="group",
                     height=max(420, 140 + 60 * len(priced)))  # fmt: skip
    layout["yaxis"].update(automargin=True, tickvals=list(range(len(priced))), ticktext=ticks)
    return {"data": traces, "layout": layout}


def _fleet_figure(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    traffic = doc["traffic"]
    feasible = [o for o in doc["options"] if o.get("feasible") and o.get("hourly_instances")]
    if not feasible:
        return None
    hours = list(range(len(traffic["hourly_qps"])))
    traces: list[dict[str, Any]] = [{
        "type": "scatter", "mode": "lines", "name": "traffic (qps)", "x": hours,
        "y": traffic["hourly_qps"], "yaxis": "y2", "line": {"color": "#f97316", "width": 2},
        "fill": "tozeroy", "fillcolor": "rgba(249,115,22,0.12)",
    }]  # fmt: skip
    palette = ("#2563eb", "#16a34a", "#7c3aed")
    for option, color in zip(feasible[:3], palette, strict=False):
        traces.append({"type": "scatter", "mode": "lines", "line": {"shape": "hv", "color": color,
                       "width": 2}, "name": f"{_label(option)} instances", "x": hours,
                       "y": option["hourly_instances"]})  # fmt: skip
    layout = _layout("fleet size over the day vs traffic", "hour of day", "instances")
    layout["yaxis"].update(rangemode="tozero", dtick=1 if max(
        max(o["hourly_instances"]) for o in feasible[:3]) <= 12 else None)  # fmt: skip
    layout["yaxis2"] = {"title": {"text": "requests / s"}, "overlaying": "y", "side": "right",
                        "rangemode": "tozero", "showgrid": False}  # fmt: skip
    layout["xaxis"].update(dtick=2, range=[-0.5, 23.5])
    return {"data": traces, "layout": layout}


@functools.cache
def _plotly_js() -> str:
    return re.sub(r"</(script)", r"<\\/\1", get_plotlyjs(), flags=re.IGNORECASE)


def _money(value: Any) -> str:
    if value is None:
        return "—"
    amount = float(value)
    return f"${amount:,.0f}" if amount >= 100 else f"${amount:,.2f}"


@functools.cache
def _template() -> jinja2.Template:
    source = resources.files("accelscope.report").joinpath("templates/plan.html.j2")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters.update(money=_money, capacity=capacity_cell,
                       pct=lambda v: "—" if v is None else f"{float(v):.0%}")  # fmt: skip
    return env.from_string(source.read_text(encoding="utf-8"))


def render_plan_report(doc: Mapping[str, Any], *, title: str) -> str:
    """One self-contained offline HTML document for a capacity plan document."""
    charts = [("chart-cost", "Monthly cost per option", "no priced option meets the SLA",
               _cost_figure(list(doc["options"]))),
              ("chart-fleet", "Fleet over the day", "no feasible option to size",
               _fleet_figure(doc))]  # fmt: skip
    traffic = doc["traffic"]
    return _template().render(
        title=title, doc=doc, settings=doc["settings"], traffic=traffic,
        mean_qps=sum(traffic["hourly_qps"]) / len(traffic["hourly_qps"]),
        recommendation=doc.get("recommendation", {}),
        charts=[(cid, heading, note, fig is not None) for cid, heading, note, fig in charts],
        figures_json=script_safe_json([{"id": cid, **fig} for cid, _, _, fig in charts if fig]),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=_plotly_js(),
    )  # fmt: skip
