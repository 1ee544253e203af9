"""Offline HTML report of an ``llm`` run: the headline (capacity at the SLO, else the best
trial), TTFT and TPOT percentiles against the offered load with the SLO line, goodput and
throughput, one timeline of the client's requests and the server's per-second metrics with the
moment each SLO term broke, TTFT by turn for conversations, every request of a trial, every
trial, the decode floor, what the server said and published, the warnings and notes, and every
figure's definition.

Built from the typed documents (:class:`~accelscope.llm.documents.LlmRun`, and the records of
the stored ``llm-trial`` documents), so a stored run can be re-rendered. Same guarantees as the
other reports: plotly inlined, a Content-Security-Policy that forbids any fetch, jinja
autoescaping for markup, plotly labels HTML-escaped, embedded JSON ``<``/``>``/``&``-escaped
(model names, URLs and server error messages are untrusted). A figure that was not measured
reads "not measured", never 0.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2

from accelscope.commands.llm.figures import (
    goodput_figure,
    latency_figure,
    load_axis,
    requests_figure,
    server_timeline_figure,
    turns_figure,
)
from accelscope.llm.documents import (
    DecodeFloor,
    LlmRun,
    LlmTrial,
    MeanMax,
    RequestRecord,
    metric_name,
)
from accelscope.report.format import format_bytes, ms, si_rate
from accelscope.report.page import plotly_js, script_safe_json, template

__all__ = ["REPORT_DEFINITIONS", "render_llm_report"]

NOT_MEASURED = "not measured"

REPORT_DEFINITIONS: dict[str, str] = {
    "offered_load": "a trial's arrivals: an open-loop rate (req/s or sessions/s, Poisson or "
    "gamma gaps), a closed-loop concurrency (clients in flight), or a trace's speed",
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
    "one_timeline": "the client's requests (at their scheduled arrival) and the server's scrapes "
    "(about one a second) on the trial's clock; counters per scrape interval",
    "slo_break": "the scheduled arrival of the first request over the bound in the first window "
    "of requests (a tenth of the trial, at least 10) whose share over the bound exceeded what "
    "the percentile allows; set against the server's last scrape before it",
    "prefix_reuse": "expected: prompt tokens an earlier request already sent (the conversation "
    "so far, a shared prefix, a trace's repeated blocks), in whole KV blocks when the server "
    "publishes its block size, over all prompt tokens; measured: the server's hits / queries",
    "turn": "a multi-turn session sends turn k+1 when turn k's reply ended plus the think time; "
    "its prompt is the whole conversation so far, so later turns can reuse the prefix cache",
    "timeline": "each request of the trial from its scheduled arrival: waiting (to its first "
    "token: queue, prefill, client lag), then decoding (to the end of the stream)",
}


def _ms(seconds: float | None) -> str:
    return NOT_MEASURED if seconds is None else ms(seconds)


def _tps(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1%}"


def _headline(run: LlmRun) -> tuple[str, list[str]]:
    """(the headline, the lines under it)."""
    capacity = run.capacity
    if capacity is not None:
        lines = []
        for point in capacity.points:
            load = point.load
            text = (
                f"concurrency {load:g}"
                if capacity.unit == "concurrency"
                else f"{load:g} {capacity.unit}"
            )
            lines.append(
                f"{text}: {'passed' if point.passed else f'failed: {point.why or chr(63)}'}"
            )
        if capacity.stopped:
            lines.append(f"search stopped: {capacity.stopped}")
        if capacity.capacity is None:
            return f"No offered load met the SLO ({run.slo_label})", lines
        text = f"Capacity at the SLO ({run.slo_label}): {capacity.label}"
        if capacity.good_output_tokens_per_s is not None:
            text += f", {_tps(capacity.good_output_tokens_per_s)} good output tokens/s"
        if capacity.good_requests_per_s is not None:
            text += f" ({capacity.good_requests_per_s:,.2f} good requests/s)"
        return text, lines
    measured = [t for t in run.trials if t.summary.completed]
    if not measured:
        return "No trial completed a request", []
    with_goodput = [
        t for t in measured if t.summary.goodput and t.summary.goodput.output_tokens_per_s
    ]
    if with_goodput:
        best = max(
            with_goodput,
            key=lambda t: t.summary.goodput.output_tokens_per_s if t.summary.goodput else 0.0,
        )
        goodput = best.summary.goodput
        throughput = best.summary.throughput
        text = (
            f"Best goodput: {_tps(goodput.output_tokens_per_s if goodput else None)} good output "
            f"tokens/s at {best.label} (SLO {run.slo_label})"
        )
        return text, [
            f"{_pct(goodput.attainment if goodput else None)} of its requests met every SLO "
            f"term; throughput {_tps(throughput.output_tokens_per_s if throughput else None)} "
            "output tokens/s"
        ]
    best = max(
        measured,
        key=lambda t: t.summary.throughput.output_tokens_per_s if t.summary.throughput else 0.0,
    )
    throughput = best.summary.throughput
    text = (
        f"Best throughput: {_tps(throughput.output_tokens_per_s if throughput else None)} output "
        f"tokens/s at {best.label}"
    )
    if run.slo is None:
        return text, ["no SLO was given, so goodput was not measured (give --slo)"]
    return text, ["no request met every SLO term: goodput is none at every load"]


def _trial_row(trial: LlmTrial) -> dict[str, Any]:
    summary = trial.summary
    cells = []
    for metric, key in (
        ("ttft_s", "p50"),
        ("ttft_s", "p99"),
        ("tpot_s", "p50"),
        ("tpot_s", "p99"),
        ("itl_s", "p50"),
        ("e2e_s", "p99"),
    ):
        found = summary.metrics.get(metric)
        value = found.value(key)
        cells.append(
            {
                "text": _ms(value),
                "why": found.unclaimed_why(key) if value is not None else "",
                "missing": value is None,
            }
        )
    goodput = summary.goodput
    slo = summary.slo
    return {
        "index": trial.index,
        "label": trial.label,
        "role": trial.role,
        "interrupted": trial.interrupted,
        "requests": summary.requests,
        "completed": summary.completed,
        "errors": summary.errors,
        "cancelled": summary.cancelled,
        "error_kinds": [f"{e.count}x {e.error}" for e in summary.error_kinds],
        "cells": cells,
        "output_tps": _tps(summary.throughput.output_tokens_per_s if summary.throughput else None),
        "goodput": "no SLO" if goodput is None else _tps(goodput.output_tokens_per_s),
        "attainment": None if goodput is None else _pct(goodput.attainment),
        "slo_state": summary.slo_state,
        "slo_terms": []
        if slo is None
        else [(metric_name(m), t.state, t.why) for m, t in slo.terms.items()],
        "lag_p99": _ms(summary.client_lag_s.p99 if summary.client_lag_s else None),
        "client_bound": summary.client_bound if summary.client_lag_s else None,
        "notes": list(summary.notes),
    }


def _floor_row(trial: LlmTrial, floor: DecodeFloor) -> dict[str, Any]:
    return {
        "label": trial.label,
        "tpot_floor": _ms(floor.tpot_floor_s),
        "tpot_measured": _ms(floor.tpot_measured_p50_s),
        "efficiency": _pct(floor.decode_efficiency),
        "bound": floor.bound or NOT_MEASURED,
        "bandwidth": si_rate(floor.bandwidth_bytes_per_s, "B/s"),
        "bandwidth_source": floor.bandwidth_source or "not stated",
        "weights": format_bytes(floor.weights_read_bytes),
        "kv": format_bytes(floor.kv_bytes_per_token),
        "batch": f"{floor.decode_batch_mean:.2f}",
        "context": f"{floor.context_mean_tokens:,.0f}",
        "ttft_floor": _ms(floor.ttft_floor_s),
        "ttft_measured": _ms(floor.ttft_measured_p50_s),
        "prefill_efficiency": _pct(floor.prefill_efficiency),
        "peak": "" if floor.peak_flops_per_s is None else si_rate(floor.peak_flops_per_s),
        "peak_source": floor.peak_source,
        "estimated": floor.estimated,
        "notes": list(floor.notes),
    }


def _mean_max(stats: MeanMax | None, percent: bool = False) -> str:
    if stats is None:
        return NOT_MEASURED
    if percent:
        return f"{stats.mean:.1%} / {stats.max:.1%}"
    return f"{stats.mean:,.1f} / {stats.max:,.0f}"


def _server_row(trial: LlmTrial) -> dict[str, Any]:
    server = trial.server_metrics
    if not server.available:
        return {"label": trial.label, "available": False, "why": server.why or "unknown"}
    prefix = server.prefix_cache
    prefix_text, prefix_source = NOT_MEASURED, ""
    if prefix is not None:
        prefix_text = _pct(prefix.hit_rate)
        if prefix.hits is not None and prefix.queries is not None:
            prefix_text += f" ({prefix.hits:,.0f} of {prefix.queries:,.0f} tokens)"
        prefix_source = prefix.source
    reuse = trial.summary.prefix_reuse
    scrapes = f"{server.scrapes}" + (
        f" ({server.failed_scrapes:g} failed)" if server.failed_scrapes else ""
    )
    return {
        "label": trial.label,
        "available": True,
        "server": server.server or "unknown",
        "scrapes": scrapes,
        "prefix": prefix_text,
        "prefix_source": prefix_source,
        "expected": NOT_MEASURED if reuse is None else _pct(reuse.expected_share),
        "expected_basis": "" if reuse is None else reuse.basis,
        "kv": _mean_max(server.kv_cache_usage, percent=True),
        "preemptions": NOT_MEASURED if server.preemptions is None else f"{server.preemptions:,.0f}",
        "waiting": _mean_max(server.waiting),
        "running": _mean_max(server.running),
    }


def _target_rows(run: LlmRun) -> list[tuple[str, str]]:
    rows = [
        (str(key), "—" if value is None else str(value))
        for key, value in run.target.model_dump().items()
        if value is not None
    ]
    rows.extend((f"workload {key}", value) for key, value in run.workload.rows())
    config = run.server_config
    if config is not None:
        caching = {True: "on", False: "off", None: NOT_MEASURED}[config.prefix_caching]
        rows.append(("server KV block (tokens)", str(config.block_size_tokens or NOT_MEASURED)))
        rows.append(("server prefix caching", caching))
        rows.append(
            (
                "server KV capacity (tokens)",
                f"{config.kv_capacity_tokens:,}" if config.kv_capacity_tokens else NOT_MEASURED,
            )
        )
        rows.append(("server configuration from", config.source))
    return rows


def _warnings(run: LlmRun) -> list[str]:
    found = list(dict.fromkeys([*run.warnings, *(w for t in run.trials for w in t.warnings)]))
    found += [f"sweep stopped: {stop}" for stop in run.saturation]
    found += [
        f"{t.label}: interrupted (Ctrl-C); its figures are partial"
        for t in run.trials
        if t.interrupted
    ]
    return found


def _chosen(
    run: LlmRun, records: Mapping[int, Sequence[RequestRecord]] | None
) -> tuple[LlmTrial | None, Sequence[RequestRecord]] | None:
    """The last trial with records, and its records."""
    if not records:
        return None
    by_index = {int(k): v for k, v in records.items() if v}
    if not by_index:
        return None
    index = max(by_index)
    trial = next((t for t in run.trials if t.index == index), None)
    return trial, by_index[index]


@functools.cache
def _template() -> jinja2.Template:
    return template("accelscope.commands.llm", "llm.html.j2", {})


def render_llm_report(
    run: LlmRun,
    *,
    title: str,
    records: Mapping[int, Sequence[RequestRecord]] | None = None,
) -> str:
    """One self-contained, offline HTML document for an ``llm`` run; ``records`` (trial index
    -> its records) adds the timelines of the last trial that has any."""
    axis = load_axis(run.trials)
    chosen = _chosen(run, records)
    no_records = (
        "no per-request records were given to the report (they are in the stored llm-trial "
        "documents)"
    )
    latency_caption = (
        "p50 dotted, p90 dashed, p99 solid; an open marker is a tail the trial had too few "
        "requests to claim; red dotted line: the SLO bound. Hover a point for its confidence "
        "interval, request count and SLO state."
    )
    timeline_missing: list[str] = []
    server_figure = None
    if chosen is not None and chosen[0] is not None:
        server_figure, timeline_missing = server_timeline_figure(chosen[0], chosen[1], run)
    charts: list[tuple[str, str, str, str, dict[str, Any] | None, bool]] = [
        (
            "chart-ttft",
            "TTFT vs offered load",
            "no trial measured a TTFT",
            latency_caption,
            latency_figure(run, "ttft_s", axis) if axis else None,
            False,
        ),
        (
            "chart-tpot",
            "TPOT vs offered load",
            "no trial measured a TPOT (requests of one output token, or none completed)",
            latency_caption,
            latency_figure(run, "tpot_s", axis) if axis else None,
            False,
        ),
    ]
    if run.slo is not None and run.slo.e2e_s is not None:
        charts.append(
            (
                "chart-e2e",
                "E2E vs offered load",
                "no trial measured an E2E latency",
                latency_caption,
                latency_figure(run, "e2e_s", axis) if axis else None,
                False,
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
            goodput_figure(run, axis) if axis else None,
            False,
        )
    )
    turns = next((turns_figure(t) for t in reversed(run.trials) if len(t.summary.turns) > 1), None)
    if turns is not None:
        charts.append(
            (
                "chart-turns",
                "TTFT by turn",
                "",
                "Each turn's prompt is the conversation so far: with a prefix cache, a later "
                "turn's TTFT pays only for its new message. Bars (right axis): mean prompt and "
                "reusable prefix tokens.",
                turns,
                True,
            )
        )
    charts.append(
        (
            "chart-server",
            "Client and server on one clock",
            no_records if chosen is None else "the trial has no request to draw",
            "Top: each request's TTFT at its scheduled arrival (red x: over the SLO, or an "
            "error at its E2E); below: the server's running and waiting requests, KV-cache "
            "usage, prefix-cache hits and preemptions per scrape interval, on the same clock. "
            "A red line marks where an SLO term broke.",
            server_figure,
            True,
        )
    )
    charts.append(
        (
            "chart-timeline",
            "Per-request timeline",
            no_records if chosen is None else "the trial has no request with an end",
            "One row per request, from its scheduled arrival: amber while waiting for its first "
            "token (client lag, queue, prefill), blue while decoding, red an error (x at its "
            "end), grey cancelled by the run; grey dotted lines: the steady window.",
            requests_figure(chosen[0], chosen[1]) if chosen else None,
            True,
        )
    )
    plain = [c for c in charts if not c[5]]
    floors = [_floor_row(t, t.floor) for t in run.trials if t.floor is not None]
    headline, headline_lines = _headline(run)
    definitions = {**run.definitions, **REPORT_DEFINITIONS}
    breaks = [f"{t.label}: {b.text}" for t in run.trials for b in t.summary.slo_breaks]
    return _template().render(
        title=title,
        model=run.model,
        slo_label=run.slo_label,
        target=_target_rows(run),
        headline=headline,
        headline_lines=headline_lines,
        load_title=axis[1] if axis else "offered load",
        rows=[_trial_row(t) for t in run.trials],
        floors=floors,
        floor_notes=list(dict.fromkeys(n for f in floors for n in f["notes"])),
        floor_why=run.floor_why
        or ("" if floors else f"{NOT_MEASURED}: no trial has a decode floor"),
        servers=[_server_row(t) for t in run.trials],
        breaks=breaks,
        timeline_missing=timeline_missing,
        notes=[
            *([run.eviction_cliff.text] if run.eviction_cliff is not None else []),
            *run.notes,
            *(
                f"{t.label} sent by {'; '.join(w.label for w in t.client_workers)}"
                for t in run.trials
                if t.client_workers
            ),
        ],
        warnings=_warnings(run),
        definitions=definitions,
        charts=[
            {
                "id": cid,
                "heading": heading,
                "note": note,
                "caption": caption,
                "drawn": fig is not None,
                "wide": wide or (len(plain) % 2 == 1 and cid == plain[-1][0]),
            }
            for cid, heading, note, caption, fig, wide in charts
        ],
        figures_json=script_safe_json([{"id": c[0], **c[4]} for c in charts if c[4]]),
        plot_config_json=script_safe_json({"displaylogo": False, "responsive": True}),
        plotly_js=plotly_js(),
    )
