"""Offline HTML report of an ``llm`` run: the headline (capacity at the SLO, else the best
trial), TTFT and TPOT percentiles vs offered load with the SLO line, goodput and throughput vs
load, a per-request timeline of the last trial with records, every trial, the decode floor,
what the server's ``/metrics`` said, the warnings and every figure's definition.

Built from the stored ``llm`` summary document (a plain dict), so a stored run can be
re-rendered; the per-request records (not part of that document) come separately, from the
stored ``llm-trial`` documents. Same guarantees as the other reports: plotly inlined, a
Content-Security-Policy that forbids any fetch, jinja autoescaping for markup, plotly labels
HTML-escaped, embedded JSON ``<``/``>``/``&``-escaped (model names, URLs and server error
messages are untrusted). A figure that was not measured reads "not measured", never 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2

from accelscope.report.format import format_bytes, ms, si_rate
from accelscope.report.page import (
    chart_layout,
    plot_label,
    plotly_js,
    script_safe_json,
    template,
    vertical_line,
)

__all__ = ["TIMELINE_LIMIT", "render_llm_report"]

NOT_MEASURED = "not measured"
TIMELINE_LIMIT = 2000
"""The timeline draws at most this many requests (the first by scheduled arrival)."""

_METRIC_NAMES = {
    "ttft_s": "TTFT",
    "ttft_sent_s": "TTFT from send",
    "tpot_s": "TPOT",
    "itl_s": "ITL",
    "e2e_s": "E2E",
}
_COLORS = {"ttft_s": "#2563eb", "tpot_s": "#16a34a", "e2e_s": "#9333ea"}
_DASHES = {"p50": "dot", "p90": "dash", "p99": "solid"}
_SLO_COLOR = "#dc2626"

REPORT_DEFINITIONS: dict[str, str] = {
    "offered_load": "a trial's arrivals: an open-loop rate (req/s, Poisson or gamma gaps) or a "
    "closed-loop concurrency (requests in flight)",
    "percentile_tail": "a p90/p99 marked 'not claimable' is measured but LoadGen's "
    "early-stopping rule says the trial had too few requests to claim it",
    "slo_state": "per SLO term: met (tail claimed within the bound), missed (more requests "
    "over the bound than the percentile allows; errors count as over), unclaimed (not enough "
    "requests to claim the percentile)",
    "client_bound": "the p99 client lag exceeded its limit: the client did not generate the "
    "offered load, so the trial does not measure it",
    "capacity": "the highest offered load measured to pass: the client kept up, no SLO term was "
    "missed and every term's tail was claimed (never an interpolated load)",
    "decode_floor": "TPOT floor = (weights read + batch x context x KV bytes/token) / memory "
    "bandwidth, per decode step (an estimate from the model's shape)",
    "decode_efficiency": "TPOT floor / measured median TPOT: near 1 bandwidth-bound, far below "
    "it overheads dominate",
    "server_metrics": "the server's own Prometheus /metrics over the trial: counters as growth "
    "from the first to the last scrape, gauges as mean and max over the scrapes",
    "timeline": "each request of the trial from its scheduled arrival: waiting (to its first "
    "token: queue, prefill, client lag), then decoding (to the end of the stream)",
}


# -- reading the document --------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A finite number, else None (absent, null, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _summary(trial: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = trial.get("summary") or {}
    return found


def _stat(trial: Mapping[str, Any], metric: str, key: str) -> float | None:
    metrics = _summary(trial).get("metrics") or {}
    return _number((metrics.get(metric) or {}).get(key))


def _claim_why(trial: Mapping[str, Any], metric: str, key: str) -> str:
    """Why the tail ``key`` (p90, p99) of ``metric`` is not claimable; '' when it is."""
    metrics = _summary(trial).get("metrics") or {}
    claim = (metrics.get(metric) or {}).get(f"{key}_claim") or {}
    if claim and not claim.get("claimable", True):
        return str(claim.get("why") or "not claimable")
    return ""


def _load(trial: Mapping[str, Any]) -> tuple[str, float | None]:
    """("rate" | "concurrency", the offered load)."""
    arrivals = trial.get("arrivals") or {}
    rate = _number(arrivals.get("rate_per_s"))
    if rate is not None:
        return "rate", rate
    return "concurrency", _number(arrivals.get("concurrency"))


def _nested(mapping: Mapping[str, Any], *keys: str) -> float | None:
    value: Any = mapping
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return _number(value)


# -- text ------------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return NOT_MEASURED if seconds is None else ms(seconds)


def _ms_unit(seconds: float | None) -> str:
    return NOT_MEASURED if seconds is None else f"{ms(seconds)} ms"


def _tps(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1%}"


def _load_text(kind: str, load: float | None) -> str:
    if load is None:
        return NOT_MEASURED
    return f"concurrency {load:g}" if kind == "concurrency" else f"{load:g} req/s"


def _metric_name(metric: str) -> str:
    return _METRIC_NAMES.get(metric, metric.removesuffix("_s").upper())


def _capacity_text(value: float | None, unit: str) -> str:
    if value is None:
        return NOT_MEASURED
    return f"concurrency {value:g}" if unit == "concurrency" else f"{value:g} {unit}"


def _headline(document: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(the headline, the lines under it)."""
    trials = list(document.get("trials") or [])
    slo_label = str(document.get("slo_label") or "none")
    capacity = document.get("capacity")
    if isinstance(capacity, Mapping):
        unit = str(capacity.get("unit") or "req/s")
        found = _number(capacity.get("capacity"))
        lines = []
        for point in capacity.get("points") or []:
            load = _capacity_text(_number(point.get("load")), unit)
            verdict = "passed" if point.get("passed") else f"failed: {point.get('why') or '?'}"
            lines.append(f"{load}: {verdict}")
        if capacity.get("stopped"):
            lines.append(f"search stopped: {capacity['stopped']}")
        if found is None:
            return f"No offered load met the SLO ({slo_label})", lines
        good = _number(capacity.get("good_output_tokens_per_s"))
        good_requests = _number(capacity.get("good_requests_per_s"))
        text = f"Capacity at the SLO ({slo_label}): {_capacity_text(found, unit)}"
        if good is not None:
            text += f", {_tps(good)} good output tokens/s"
        if good_requests is not None:
            text += f" ({good_requests:,.2f} good requests/s)"
        return text, lines
    measured = [t for t in trials if _summary(t).get("completed")]
    if not measured:
        return "No trial completed a request", []
    with_goodput = [t for t in measured if _nested(_summary(t), "goodput", "output_tokens_per_s")]
    if with_goodput:
        best = max(
            with_goodput,
            key=lambda t: _nested(_summary(t), "goodput", "output_tokens_per_s") or 0.0,
        )
        summary = _summary(best)
        text = (
            f"Best goodput: {_tps(_nested(summary, 'goodput', 'output_tokens_per_s'))} good "
            f"output tokens/s at {best.get('label')} (SLO {slo_label})"
        )
        attainment = _nested(summary, "goodput", "attainment")
        lines = [
            f"{_pct(attainment)} of its requests met every SLO term; throughput "
            f"{_tps(_nested(summary, 'throughput', 'output_tokens_per_s'))} output tokens/s"
        ]
        return text, lines
    best = max(
        measured, key=lambda t: _nested(_summary(t), "throughput", "output_tokens_per_s") or 0.0
    )
    summary = _summary(best)
    text = (
        f"Best throughput: {_tps(_nested(summary, 'throughput', 'output_tokens_per_s'))} output "
        f"tokens/s at {best.get('label')}"
    )
    if document.get("slo") is None:
        return text, ["no SLO was given, so goodput was not measured (give --slo)"]
    return text, ["no request met every SLO term: goodput is none at every load"]


def _slo_state(summary: Mapping[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    """(overall state, [(metric, state, why)]) of a trial's SLO verdict."""
    slo = summary.get("slo")
    if not isinstance(slo, Mapping):
        return "no SLO", []
    terms = [
        (_metric_name(metric), str(term.get("state", "?")), str(term.get("why") or ""))
        for metric, term in (slo.get("terms") or {}).items()
    ]
    states = {state for _, state, _ in terms}
    if slo.get("met"):
        return "met", terms
    return ("missed" if "missed" in states else "unclaimed"), terms


def _trial_row(trial: Mapping[str, Any]) -> dict[str, Any]:
    summary = _summary(trial)
    kind, load = _load(trial)
    cells = []
    for metric, key in (
        ("ttft_s", "p50"),
        ("ttft_s", "p99"),
        ("tpot_s", "p50"),
        ("tpot_s", "p99"),
        ("itl_s", "p50"),
        ("e2e_s", "p99"),
    ):
        value = _stat(trial, metric, key)
        why = _claim_why(trial, metric, key) if value is not None else ""
        cells.append({"text": _ms(value), "why": why, "missing": value is None})
    state, terms = _slo_state(summary)
    goodput = summary.get("goodput")
    lag = _nested(summary, "client_lag_s", "p99")
    return {
        "index": trial.get("index"),
        "label": str(trial.get("label") or _load_text(kind, load)),
        "role": str(trial.get("role") or ""),
        "interrupted": bool(trial.get("interrupted")),
        "requests": summary.get("requests"),
        "completed": summary.get("completed"),
        "errors": summary.get("errors"),
        "cancelled": summary.get("cancelled"),
        "error_kinds": [
            f"{kind_.get('count')}x {kind_.get('error')}"
            for kind_ in summary.get("error_kinds") or []
        ],
        "cells": cells,
        "output_tps": _tps(_nested(summary, "throughput", "output_tokens_per_s")),
        "goodput": "no SLO"
        if not isinstance(goodput, Mapping)
        else _tps(_number(goodput.get("output_tokens_per_s"))),
        "attainment": None
        if not isinstance(goodput, Mapping)
        else _pct(_number(goodput.get("attainment"))),
        "slo_state": state,
        "slo_terms": terms,
        "lag_p99": _ms(lag),
        "client_bound": summary.get("client_bound"),
        "notes": [str(n) for n in summary.get("notes") or []],
    }


def _floor_row(trial: Mapping[str, Any], floor: Mapping[str, Any]) -> dict[str, Any]:
    bandwidth = _number(floor.get("bandwidth_bytes_per_s"))
    weights = _number(floor.get("weights_read_bytes"))
    kv = _number(floor.get("kv_bytes_per_token"))
    batch = _number(floor.get("decode_batch_mean"))
    context = _number(floor.get("context_mean_tokens"))
    peak = _number(floor.get("peak_flops_per_s"))
    return {
        "label": str(trial.get("label") or trial.get("index")),
        "tpot_floor": _ms(_number(floor.get("tpot_floor_s"))),
        "tpot_measured": _ms(_number(floor.get("tpot_measured_p50_s"))),
        "efficiency": _pct(_number(floor.get("decode_efficiency"))),
        "bound": str(floor.get("bound") or NOT_MEASURED),
        "bandwidth": NOT_MEASURED if bandwidth is None else si_rate(bandwidth, "B/s"),
        "bandwidth_source": str(floor.get("bandwidth_source") or "not stated"),
        "weights": NOT_MEASURED if weights is None else format_bytes(weights),
        "kv": NOT_MEASURED if kv is None else format_bytes(kv),
        "batch": NOT_MEASURED if batch is None else f"{batch:.2f}",
        "context": NOT_MEASURED if context is None else f"{context:,.0f}",
        "ttft_floor": _ms(_number(floor.get("ttft_floor_s"))),
        "ttft_measured": _ms(_number(floor.get("ttft_measured_p50_s"))),
        "prefill_efficiency": _pct(_number(floor.get("prefill_efficiency"))),
        "peak": "" if peak is None else si_rate(peak),
        "peak_source": str(floor.get("peak_source") or ""),
        "estimated": bool(floor.get("estimated")),
        "notes": [str(n) for n in floor.get("notes") or []],
    }


def _mean_max(stats: Any, percent: bool = False) -> str:
    if not isinstance(stats, Mapping):
        return NOT_MEASURED
    mean, most = _number(stats.get("mean")), _number(stats.get("max"))
    if mean is None or most is None:
        return NOT_MEASURED
    if percent:
        return f"{mean:.1%} / {most:.1%}"
    return f"{mean:,.1f} / {most:,.0f}"


def _server_row(trial: Mapping[str, Any]) -> dict[str, Any]:
    server = trial.get("server_metrics") or {}
    label = str(trial.get("label") or trial.get("index"))
    if not server.get("available"):
        return {"label": label, "available": False, "why": str(server.get("why") or "unknown")}
    prefix = server.get("prefix_cache")
    if isinstance(prefix, Mapping):
        rate = _number(prefix.get("hit_rate"))
        hits, queries = _number(prefix.get("hits")), _number(prefix.get("queries"))
        prefix_text = _pct(rate)
        if hits is not None and queries is not None:
            prefix_text += f" ({hits:,.0f} of {queries:,.0f} tokens)"
        prefix_source = str(prefix.get("source") or "")
    else:
        prefix_text, prefix_source = NOT_MEASURED, ""
    preemptions = _number(server.get("preemptions"))
    failed = _number(server.get("failed_scrapes"))
    scrapes = f"{server.get('scrapes', '?')}" + (f" ({failed:g} failed)" if failed else "")
    return {
        "label": label,
        "available": True,
        "server": str(server.get("server") or "unknown"),
        "scrapes": scrapes,
        "prefix": prefix_text,
        "prefix_source": prefix_source,
        "kv": _mean_max(server.get("kv_cache_usage"), percent=True),
        "preemptions": NOT_MEASURED if preemptions is None else f"{preemptions:,.0f}",
        "waiting": _mean_max(server.get("waiting")),
        "running": _mean_max(server.get("running")),
    }


def _target_rows(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    target = document.get("target") or {}
    rows = [(str(key), "—" if value is None else str(value)) for key, value in target.items()]
    workload = document.get("workload") or {}
    rows.extend(
        (f"workload {key}", str(value)) for key, value in workload.items() if value is not None
    )
    return rows


# -- charts ----------------------------------------------------------------------------------


def _axis(trials: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(x kind: "rate" | "concurrency" | "trial", axis title); None without trials."""
    if not trials:
        return None
    kinds = {_load(t)[0] for t in trials}
    if kinds == {"rate"} and all(_load(t)[1] is not None for t in trials):
        return "rate", "offered load (req/s)"
    if kinds == {"concurrency"} and all(_load(t)[1] is not None for t in trials):
        return "concurrency", "concurrency (requests in flight)"
    return "trial", "trial (offered load)"


def _ordered(trials: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    if kind == "trial":
        return sorted(trials, key=lambda t: int(t.get("index") or 0))
    return sorted(trials, key=lambda t: (_load(t)[1] or 0.0, int(t.get("index") or 0)))


def _x(trial: Mapping[str, Any], kind: str) -> Any:
    if kind == "trial":
        return plot_label(f"#{trial.get('index')} {trial.get('label')}", 40)
    return _load(trial)[1]


def _horizontal_line(y: float, color: str) -> dict[str, Any]:
    return {
        "type": "line",
        "xref": "paper",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": color, "width": 2, "dash": "dot"},
    }


def _latency_hover(trial: Mapping[str, Any], metric: str, key: str) -> str:
    name = _metric_name(metric)
    value = _stat(trial, metric, key)
    lines = [f"<b>{plot_label(str(trial.get('label')), 60)}</b>"]
    lines.append(f"{key} {name} {_ms_unit(value)}")
    ci = ((_summary(trial).get("metrics") or {}).get(metric) or {}).get(f"{key}_ci") or []
    if len(ci) == 2:
        low, high = _number(ci[0]), _number(ci[1])
        low_text = "?" if low is None else ms(low)
        high_text = "unbounded" if high is None else ms(high)
        lines.append(f"95% CI [{low_text}, {high_text}] ms")
    why = _claim_why(trial, metric, key)
    if why:
        lines.append(plot_label(why, 120))
    n = _stat(trial, metric, "n")
    if n is not None:
        lines.append(f"n = {n:.0f}")
    _, terms = _slo_state(_summary(trial))
    for term_name, term_state, term_why in terms:
        if term_name == name:
            lines.append(plot_label(f"SLO: {term_state}" + (f": {term_why}" if term_why else "")))
    return "<br>".join(lines)


def _latency_figure(
    document: Mapping[str, Any], metric: str, axis: tuple[str, str]
) -> dict[str, Any] | None:
    kind, x_title = axis
    trials = [
        t
        for t in _ordered(document.get("trials") or [], kind)
        if _stat(t, metric, "p50") is not None
    ]
    if not trials:
        return None
    name = _metric_name(metric)
    color = _COLORS.get(metric, "#4b5563")
    traces = []
    for key in ("p50", "p90", "p99"):
        shown = [t for t in trials if _stat(t, metric, key) is not None]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{key} {name}",
                "x": [_x(t, kind) for t in shown],
                "y": [(_stat(t, metric, key) or 0.0) * 1e3 for t in shown],
                "line": {"color": color, "dash": _DASHES[key], "width": 2},
                "marker": {
                    "size": 9,
                    "color": color,
                    "symbol": [
                        "circle-open" if _claim_why(t, metric, key) else "circle" for t in shown
                    ],
                },
                "hovertext": [_latency_hover(t, metric, key) for t in shown],
                "hovertemplate": "%{hovertext}<extra></extra>",
            }
        )
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    slo = document.get("slo") or {}
    bound = _number(slo.get(metric)) if isinstance(slo, Mapping) else None
    if bound is not None:
        shapes.append(_horizontal_line(bound * 1e3, _SLO_COLOR))
        percentile = _number(slo.get("percentile"))
        label = f"SLO p{percentile:g} {name} ≤ {ms(bound)} ms" if percentile else "SLO"
        annotations.append(
            {
                "xref": "paper",
                "yref": "y",
                "x": 1,
                "y": bound * 1e3,
                "xanchor": "right",
                "yanchor": "bottom",
                "showarrow": False,
                "text": plot_label(label),
                "font": {"color": _SLO_COLOR},
            }
        )
    title = f"{name} percentiles vs offered load"
    layout = chart_layout(title, x_title, f"{name} (ms)", shapes=shapes, annotations=annotations)
    layout["yaxis"]["rangemode"] = "tozero"
    if kind == "trial":
        layout["xaxis"]["type"] = "category"
    return {"data": traces, "layout": layout}


def _goodput_hover(trial: Mapping[str, Any]) -> str:
    summary = _summary(trial)
    lines = [f"<b>{plot_label(str(trial.get('label')), 60)}</b>"]
    lines.append(
        f"throughput {_tps(_nested(summary, 'throughput', 'output_tokens_per_s'))} output tok/s"
    )
    requests = _nested(summary, "throughput", "requests_per_s")
    lines.append(f"{'?' if requests is None else f'{requests:,.2f}'} completed req/s")
    if isinstance(summary.get("goodput"), Mapping):
        good = _nested(summary, "goodput", "output_tokens_per_s")
        attainment = _nested(summary, "goodput", "attainment")
        lines.append(f"goodput {_tps(good)} output tok/s ({_pct(attainment)} of requests good)")
    state, _ = _slo_state(summary)
    lines.append(plot_label(f"SLO: {state}"))
    return "<br>".join(lines)


def _goodput_figure(document: Mapping[str, Any], axis: tuple[str, str]) -> dict[str, Any] | None:
    kind, x_title = axis
    trials = [
        t
        for t in _ordered(document.get("trials") or [], kind)
        if _nested(_summary(t), "throughput", "output_tokens_per_s") is not None
    ]
    if not trials:
        return None
    hover = [_goodput_hover(t) for t in trials]
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "output tokens/s (throughput)",
            "x": [_x(t, kind) for t in trials],
            "y": [_nested(_summary(t), "throughput", "output_tokens_per_s") for t in trials],
            "line": {"color": "#2563eb", "dash": "dash"},
            "marker": {"size": 8},
            "hovertext": hover,
            "hovertemplate": "%{hovertext}<extra></extra>",
        }
    ]
    good = [t for t in trials if isinstance(_summary(t).get("goodput"), Mapping)]
    if good:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "good output tokens/s (goodput)",
                "x": [_x(t, kind) for t in good],
                "y": [_nested(_summary(t), "goodput", "output_tokens_per_s") for t in good],
                "line": {"color": "#16a34a"},
                "marker": {
                    "size": 10,
                    "symbol": [
                        "circle" if _slo_state(_summary(t))[0] == "met" else "x" for t in good
                    ],
                },
                "hovertext": [_goodput_hover(t) for t in good],
                "hovertemplate": "%{hovertext}<extra></extra>",
            }
        )
    shapes = []
    capacity = document.get("capacity")
    if isinstance(capacity, Mapping) and kind != "trial":
        found = _number(capacity.get("capacity"))
        unit_kind = "concurrency" if capacity.get("unit") == "concurrency" else "rate"
        if found is not None and unit_kind == kind:
            shapes.append(vertical_line(found, "#16a34a"))
    title = "goodput and throughput vs offered load"
    layout = chart_layout(title, x_title, "output tokens/s", shapes=shapes)
    layout["yaxis"]["rangemode"] = "tozero"
    if kind == "trial":
        layout["xaxis"]["type"] = "category"
    return {"data": traces, "layout": layout}


def _timeline_trial(
    document: Mapping[str, Any], records: Mapping[int, Sequence[Mapping[str, Any]]] | None
) -> tuple[int, Mapping[str, Any] | None, Sequence[Mapping[str, Any]]] | None:
    """(index, the trial or None, its records) of the last trial with records."""
    if not records:
        return None
    by_index = {int(k): v for k, v in records.items() if v}
    if not by_index:
        return None
    index = max(by_index)
    trial = next((t for t in document.get("trials") or [] if t.get("index") == index), None)
    return index, trial, by_index[index]


def _request_hover(record: Mapping[str, Any]) -> str:
    scheduled = _number(record.get("scheduled_s")) or 0.0
    sent = _number(record.get("sent_s"))
    first = _number(record.get("first_token_s"))
    end = _number(record.get("end_s"))
    lines = [f"<b>request {record.get('index')}</b>", f"scheduled at {scheduled:.3f} s"]
    if sent is not None:
        lines.append(f"client lag {ms(sent - scheduled)} ms")
    lines.append(f"TTFT {_ms_unit(None if first is None else first - scheduled)}")
    lines.append(f"E2E {_ms_unit(None if end is None else end - scheduled)}")
    tokens = record.get("output_tokens")
    lines.append(f"output tokens {NOT_MEASURED if tokens is None else tokens}")
    if record.get("error"):
        lines.append("error: " + plot_label(str(record["error"]), 160))
    if record.get("cancelled"):
        lines.append("cancelled by the run (not counted)")
    return "<br>".join(lines)


def _timeline_figure(
    chosen: tuple[int, Mapping[str, Any] | None, Sequence[Mapping[str, Any]]] | None,
) -> dict[str, Any] | None:
    if chosen is None:
        return None
    index, trial, all_records = chosen
    usable = [
        r
        for r in all_records
        if _number(r.get("scheduled_s")) is not None and _number(r.get("end_s")) is not None
    ]
    if not usable:
        return None
    usable.sort(key=lambda r: (_number(r.get("scheduled_s")) or 0.0, str(r.get("index"))))
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
        scheduled = _number(record.get("scheduled_s")) or 0.0
        end = _number(record.get("end_s")) or scheduled
        first = _number(record.get("first_token_s"))
        hover = _request_hover(record)
        if record.get("error"):
            add("error", row, scheduled, end, hover)
        elif record.get("cancelled"):
            add("cancelled", row, scheduled, end, hover)
        elif first is None:
            add("wait", row, scheduled, end, hover)
        else:
            add("wait", row, scheduled, first, hover)
            add("decode", row, first, end, hover)
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
    window = _summary(trial).get("window") if trial else None
    if isinstance(window, Mapping):
        for edge in ("start_s", "end_s"):
            value = _number(window.get(edge))
            if value is not None:
                shapes.append(vertical_line(value, "#6b7280"))
    label = str((trial or {}).get("label") or f"trial {index}")
    title = f"every request of trial #{index} ({label})"
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


# -- the page --------------------------------------------------------------------------------


def _warnings(document: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    for text in [
        *(document.get("warnings") or []),
        *(w for t in document.get("trials") or [] for w in t.get("warnings") or []),
    ]:
        if str(text) not in found:
            found.append(str(text))
    for trial in document.get("trials") or []:
        if trial.get("interrupted"):
            found.append(f"{trial.get('label')}: interrupted (Ctrl-C); its figures are partial")
    return found


@functools.cache
def _template() -> jinja2.Template:
    return template("accelscope.commands.llm", "llm.html.j2", {})


def render_llm_report(
    document: Mapping[str, Any],
    *,
    title: str,
    records: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
) -> str:
    """One self-contained, offline HTML document for an ``llm`` summary document; ``records``
    (trial index -> its ``RequestRecord.to_dict()`` records) adds the per-request timeline of
    the last trial that has any."""
    trials = list(document.get("trials") or [])
    axis = _axis(trials)
    chosen = _timeline_trial(document, records)
    timeline_note = (
        "no per-request records were given to the report (they are in the stored llm-trial "
        "documents)"
        if chosen is None
        else "the trial has no request with a scheduled arrival and an end"
    )
    latency_caption = (
        "p50 dotted, p90 dashed, p99 solid; an open marker is a tail the trial had too few "
        "requests to claim; red dotted line: the SLO bound. Hover a point for its confidence "
        "interval, request count and SLO state."
    )
    charts: list[tuple[str, str, str, str, dict[str, Any] | None]] = [
        (
            "chart-ttft",
            "TTFT vs offered load",
            "no trial measured a TTFT",
            latency_caption,
            _latency_figure(document, "ttft_s", axis) if axis else None,
        ),
        (
            "chart-tpot",
            "TPOT vs offered load",
            "no trial measured a TPOT (requests of one output token, or none completed)",
            latency_caption,
            _latency_figure(document, "tpot_s", axis) if axis else None,
        ),
    ]
    slo = document.get("slo")
    if isinstance(slo, Mapping) and _number(slo.get("e2e_s")) is not None:
        charts.append(
            (
                "chart-e2e",
                "E2E vs offered load",
                "no trial measured an E2E latency",
                latency_caption,
                _latency_figure(document, "e2e_s", axis) if axis else None,
            )
        )
    charts.append(
        (
            "chart-goodput",
            "Goodput and throughput vs offered load",
            "no trial measured a throughput",
            "dashed: output tokens/s streamed in the steady window; solid: output tokens/s of "
            "the requests that met every SLO term (x: the trial did not meet the SLO); green "
            "dotted line: the capacity.",
            _goodput_figure(document, axis) if axis else None,
        )
    )
    charts.append(
        (
            "chart-timeline",
            "Per-request timeline",
            timeline_note,
            "One row per request, from its scheduled arrival: amber while waiting for its first "
            "token (client lag, queue, prefill), blue while decoding, red an error (x at its "
            "end), grey cancelled by the run; grey dotted lines: the steady window.",
            _timeline_figure(chosen),
        )
    )
    plain = len(charts) - 1
    floors = [_floor_row(t, t["floor"]) for t in trials if isinstance(t.get("floor"), Mapping)]
    floor_why = document.get("floor_why")
    headline, headline_lines = _headline(document)
    definitions = {**dict(document.get("definitions") or {}), **REPORT_DEFINITIONS}
    return _template().render(
        title=title,
        model=str(document.get("model") or NOT_MEASURED),
        slo_label=str(document.get("slo_label") or "none"),
        target=_target_rows(document),
        headline=headline,
        headline_lines=headline_lines,
        load_title=axis[1] if axis else "offered load",
        rows=[_trial_row(t) for t in trials],
        floors=floors,
        floor_notes=list(dict.fromkeys(n for f in floors for n in f["notes"])),
        floor_why=str(floor_why)
        if isinstance(floor_why, str) and floor_why
        else ("" if floors else f"{NOT_MEASURED}: no trial has a decode floor"),
        servers=[_server_row(t) for t in trials],
        warnings=_warnings(document),
        definitions=definitions,
        charts=[
            {
                "id": cid,
                "heading": heading,
                "note": note,
                "caption": caption,
                "drawn": fig is not None,
                "wide": cid == "chart-timeline" or (plain % 2 == 1 and number == plain - 1),
            }
            for number, (cid, heading, note, caption, fig) in enumerate(charts)
        ],
        figures_json=script_safe_json([{"id": c[0], **c[4]} for c in charts if c[4]]),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=plotly_js(),
    )
