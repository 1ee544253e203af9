"""Self-contained offline HTML report of a doctor run: verdict, stacked step-time breakdown,
telemetry timeline, findings with thresholds, what-if bars. Same safety rules as the bench
report (:mod:`accelscope.commands.bench.html`): plotly inlined, CSP forbids fetching, every
user string escaped (jinja autoescape; ``html.escape`` for plotly labels; script-safe JSON)."""

from __future__ import annotations

import functools
from typing import Any

import jinja2

from accelscope.commands.doctor.gpu_lines import gpu_lines
from accelscope.doctor.breakdown import ALL_PHASES
from accelscope.doctor.diagnose import DoctorResult
from accelscope.hardware.fingerprint import Environment
from accelscope.report.format import format_bytes, format_seconds
from accelscope.report.page import chart_layout, plot_label, plotly_js, script_safe_json, template

__all__ = ["render_doctor_report"]

PHASE_COLORS = {
    "input": "#dc2626",
    "copy": "#c026d3",
    "forward": "#2563eb",
    "backward": "#0891b2",
    "optimizer": "#16a34a",
    "sync": "#d97706",
    "other": "#9ca3af",
}


def _layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return chart_layout(
        title,
        x_title,
        y_title,
        **{
            "height": 380,
            "margin": {"l": 70, "r": 70, "t": 50, "b": 50},
            "barmode": "stack",
            **extra,
        },
    )


def _breakdown_figure(result: DoctorResult) -> dict[str, Any]:
    steps = result.profile.measured
    first = result.profile.warmup
    xs = [first + i for i in range(len(steps))]
    traces = []
    for phase in ALL_PHASES:
        ys = [(s.other_s if phase == "other" else s.phases_s[phase]) * 1e3 for s in steps]
        if not any(ys):
            continue
        traces.append(
            {
                "type": "bar",
                "name": phase,
                "x": xs,
                "y": ys,
                "marker": {"color": PHASE_COLORS[phase]},
                "hovertemplate": f"{phase}: %{{y:.3f}} ms<extra>step %{{x}}</extra>",
            }
        )
    return {
        "data": traces,
        "layout": _layout("step-time breakdown (measured steps)", "step", "ms", bargap=0.1),
    }


def _telemetry_figure(result: DoctorResult) -> dict[str, Any] | None:
    telemetry = result.telemetry
    if telemetry is None or not telemetry.samples:
        return None
    samples = telemetry.samples
    ts = [s.t_s for s in samples]
    cores = len(samples[0].cpu_percent)
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"cpu{i} %",
            "x": ts,
            "y": [s.cpu_percent[i] if i < len(s.cpu_percent) else None for s in samples],
            "line": {"width": 1},
        }
        for i in range(cores)
    ]
    traces.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "script CPU (cores x 100)",
            "x": ts,
            "y": [s.process_cpu_cores * 100 for s in samples],
            "line": {"width": 2, "color": "#111827"},
        }
    )
    traces.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "iowait %",
            "x": ts,
            "y": [s.iowait_percent for s in samples],
            "line": {"dash": "dot"},
        }
    )
    traces.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "script RSS (MiB)",
            "x": ts,
            "y": [s.process_rss_bytes / 2**20 for s in samples],
            "yaxis": "y2",
            "line": {"color": "#7c3aed"},
        }
    )
    for gpu in range(len(samples[0].gpus)):
        for field, label, dash in (
            ("utilisation_percent", "util", "solid"),
            ("sm_active_percent", "SM active", "dash"),
            ("tensor_active_percent", "tensor active", "dot"),
        ):
            ys = [getattr(s.gpus[gpu], field) if gpu < len(s.gpus) else None for s in samples]
            if all(y is None for y in ys):
                continue  # not measured: no line rather than a line at 0
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"GPU{gpu} {label} %",
                    "x": ts,
                    "y": ys,
                    "line": {"dash": dash},
                }
            )
    layout = _layout(
        f"telemetry ({1 / telemetry.interval_s:.0f} Hz, sampled outside the script)",
        "seconds",
        "% / cores x 100",
    )
    layout["yaxis2"] = {
        "title": {"text": "MiB"},
        "overlaying": "y",
        "side": "right",
        "showgrid": False,
    }
    return {"data": traces, "layout": layout}


def _what_if_figure(result: DoctorResult) -> dict[str, Any] | None:
    rows = [w for w in result.what_ifs if w.status == "ok" and w.speedup is not None]
    if not rows:
        return None
    rows.sort(key=lambda w: w.speedup or 0.0)
    labels = [plot_label(w.label) for w in rows]
    speed = [w.speedup or 0.0 for w in rows]
    plus = [max(0.0, (w.speedup_high or w.speedup or 0.0) - (w.speedup or 0.0)) for w in rows]
    minus = [max(0.0, (w.speedup or 0.0) - (w.speedup_low or 0.0)) for w in rows]
    colors = [
        "#facc15" if w.name == result.best else "#9ca3af" if w.name == "baseline" else "#2563eb"
        for w in rows
    ]
    trace = {
        "type": "bar",
        "orientation": "h",
        "x": speed,
        "y": list(range(len(rows))),
        "marker": {"color": colors},
        "error_x": {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus},
        "text": [f"{s:.2f}\u00d7" for s in speed],
        "textposition": "outside",
        "hovertext": labels,
        "hovertemplate": "%{hovertext}: %{x:.2f}\u00d7<extra></extra>",
    }
    layout = _layout(
        "what-ifs: items/s vs the re-measured baseline (95 % bounds)",
        "\u00d7 baseline items/s",
        "",
        showlegend=False,
        height=max(300, 100 + 40 * len(rows)),
    )
    layout["yaxis"].update(tickvals=list(range(len(rows))), ticktext=labels, automargin=True)
    layout["shapes"] = [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": 1,
            "x1": 1,
            "y0": 0,
            "y1": 1,
            "line": {"color": "#6b7280", "dash": "dot"},
        }
    ]
    return {"data": [trace], "layout": layout}


@functools.cache
def _template() -> jinja2.Template:
    filters = {
        "seconds": format_seconds,
        "bytes": format_bytes,
        "pct": "{:.1%}".format,
        "rate": "{:,.2f}".format,
    }
    return template("accelscope.commands.doctor", "doctor.html.j2", filters)


def render_doctor_report(
    result: DoctorResult, env: Environment | None, *, trace_name: str = ""
) -> str:
    """One self-contained, offline HTML document for a doctor run."""
    charts = [
        ("chart-breakdown", "Step-time breakdown", "no measured steps", _breakdown_figure(result)),
        ("chart-telemetry", "Telemetry", "no telemetry was sampled", _telemetry_figure(result)),
        ("chart-whatif", "What-ifs", "no what-if was measured", _what_if_figure(result)),
    ]
    figures = [{"id": cid, **fig} for cid, _, _, fig in charts if fig is not None]
    d = result.diagnosis
    return _template().render(
        title=f"accelscope doctor: {result.script.rsplit('/', 1)[-1]}",
        result=result,
        diagnosis=d,
        breakdown=d.breakdown,
        phases=ALL_PHASES,
        colors=PHASE_COLORS,
        env=env,
        trace_name=trace_name,
        gpu_lines=gpu_lines(result),
        telemetry=result.telemetry,
        charts=[(cid, heading, note, fig is not None) for cid, heading, note, fig in charts],
        figures_json=script_safe_json(figures),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=plotly_js(),
    )
