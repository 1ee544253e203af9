"""Self-contained offline HTML roofline: log-log chart with both roofs per dtype, operators as
points sized by their time, names on hover; the operator table and the model summary.

Same safety rules as the bench report: plotly inlined, a CSP that forbids fetching, every user
string escaped (jinja autoescape for markup, ``html.escape`` for plotly labels, script-safe JSON).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jinja2

from accelscope.report.format import format_bytes
from accelscope.report.page import plot_label, plotly_js, script_safe_json, template
from accelscope.roofline.analysis import RooflineAnalysis

__all__ = ["render_roofline_report", "roofline_figure"]

_COLORS = {"fp32": "#2563eb", "bf16": "#16a34a", "fp16": "#9333ea", "int8": "#d97706"}
_BOUND_SYMBOLS = {
    "compute-bound": "circle",
    "memory-bound": "square",
    "overhead-bound": "x",
    "unmeasured": "circle-open",
}


def _roof(
    peak: float, bandwidth: float, low: float, high: float
) -> tuple[list[float], list[float]]:
    ridge = peak / bandwidth
    xs = sorted({low, min(max(ridge, low), high), high})
    return xs, [min(peak, x * bandwidth) for x in xs]


def roofline_figure(profile: RooflineAnalysis) -> dict[str, Any]:
    """The plotly figure (a dict): one memory+compute roof and one point trace per dtype."""
    points = [
        op for op in profile.operators if op.flops > 0 and op.bytes > 0 and op.measured_time_s > 0
    ]
    intensities = [op.flops / op.bytes for op in points] or [1.0]
    low = 10 ** math.floor(math.log10(min([*intensities, 0.1])) - 0.5)
    high = 10 ** math.ceil(math.log10(max([*intensities, 1e3])) + 0.5)
    total = sum(op.measured_time_s for op in points) or 1.0
    traces: list[dict[str, Any]] = []
    for dtype in sorted({op.peak_dtype for op in profile.operators}):
        color = _COLORS.get(dtype, "#4b5563")
        peak = next(op.peak_flops_per_s for op in profile.operators if op.peak_dtype == dtype)
        xs, ys = _roof(peak, profile.ceilings.bandwidth_bytes_per_s, low, high)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{dtype} roof",
                "x": xs,
                "y": ys,
                "line": {"color": color, "width": 2},
                "hoverinfo": "skip",
            }
        )
        chosen = [op for op in points if op.peak_dtype == dtype]
        if not chosen:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"{dtype} operators",
                "x": [op.flops / op.bytes for op in chosen],
                "y": [op.achieved_flops_per_s for op in chosen],
                "hovertext": [
                    f"<b>{plot_label(op.name)}</b> ({plot_label(op.dtype)}) x{op.calls}<br>"
                    f"{op.bound}<br>"
                    f"{op.measured_time_s * 1e3:,.3f} ms, floor {op.floor_time_s * 1e3:,.3f} ms<br>"
                    f"{op.flops / 1e9:,.3f} GFLOP, {format_bytes(op.bytes)}<br>"
                    f"achieved {op.achieved_flops_per_s / 1e9:,.1f} GFLOP/s of "
                    f"{op.attainable_flops_per_s / 1e9:,.1f} attainable"
                    for op in chosen
                ],
                "hovertemplate": "%{hovertext}<extra></extra>",
                "marker": {
                    "color": color,
                    "opacity": 0.75,
                    "line": {"width": 1, "color": "#111827"},
                    "size": [8 + 40 * math.sqrt(op.measured_time_s / total) for op in chosen],
                    "symbol": [_BOUND_SYMBOLS.get(op.bound, "circle") for op in chosen],
                },
            }
        )
    layout = {
        "title": {
            "text": f"<b>{plot_label(profile.model)}</b>: roofline "
            f"({plot_label(profile.precision)}, batch {profile.batch_size})",
            "x": 0.01,
        },
        "template": "plotly_white",
        "height": 560,
        "hoverlabel": {"align": "left"},
        "xaxis": {"type": "log", "title": {"text": "arithmetic intensity (FLOP / byte)"}},
        "yaxis": {"type": "log", "title": {"text": "achieved FLOP/s"}},
        "legend": {"orientation": "h", "y": -0.18},
    }
    return {"data": traces, "layout": layout}


@functools.cache
def _template() -> jinja2.Template:
    return template("accelscope.commands.roofline", "roofline.html.j2", {})


def render_roofline_report(profile: RooflineAnalysis) -> str:
    """One offline HTML document for a roofline profile."""
    ordered = sorted(profile.operators, key=lambda op: -op.measured_time_s)
    not_plotted = [op.name for op in profile.operators if not (op.flops > 0 and op.bytes > 0)]
    return _template().render(
        profile=profile,
        operators=ordered,
        ceilings=profile.ceilings,
        total_bytes=format_bytes(profile.total_bytes),
        bandwidth=format_bytes(profile.ceilings.bandwidth_bytes_per_s),
        not_plotted=sorted(set(not_plotted)),
        top_lost=profile.top_lost(5),
        figure_json=script_safe_json(roofline_figure(profile)),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=plotly_js(),
    )
