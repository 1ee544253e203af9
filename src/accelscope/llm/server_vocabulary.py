"""What each server's ``/metrics`` names mean, and what a trial's scrapes say through them.

:data:`VOCABULARY` holds, as data, the metrics vLLM (both generations of names), SGLang, TGI
and llama.cpp server export for the quantities a token benchmark must check: prefix-cache
queries and hits, KV-cache usage, preemptions, waiting and running requests.
:func:`summarise` turns the scrapes of a trial (parsed by
:mod:`accelscope.llm.prometheus_text`) into the document: the server detected from the names,
counters as their growth (surviving resets), gauges as mean and max, a per-scrape timeline and
the configuration the server publishes (:func:`published_config`). A quantity the server does
not export is absent from the summary, never 0. :func:`check_against_client` holds the gauges
against what the client saw. The scraping itself is :mod:`accelscope.llm.metrics_scraper`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from accelscope.llm.documents import (
    MeanMax,
    PrefixCacheStats,
    RequestRecord,
    ServerConfig,
    ServerMetrics,
    ServerSample,
)
from accelscope.llm.prometheus_text import Sample

__all__ = [
    "CONFIG_INFO_METRIC",
    "VOCABULARY",
    "Quantity",
    "ServerName",
    "VocabularyEntry",
    "check_against_client",
    "published_config",
    "summarise",
]


ServerName = Literal["vllm", "vllm (older names)", "sglang", "tgi", "llama.cpp", "unknown"]
Quantity = Literal[
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prefix_cache_hit_rate",
    "kv_cache_usage",
    "preemptions",
    "waiting",
    "running",
]


@dataclass(frozen=True)
class VocabularyEntry:
    """One metric a server exports and the quantity it measures. ``family`` groups the
    generations of one server (``vllm`` and ``vllm (older names)``): a quantity the detected
    generation lacks is looked up in the family's other generations."""

    server: ServerName
    family: str
    quantity: Quantity
    metric: str
    kind: Literal["counter", "gauge"]


def _entries(
    server: ServerName,
    family: str,
    rows: Sequence[tuple[Quantity, str, Literal["counter", "gauge"]]],
) -> tuple[VocabularyEntry, ...]:
    return tuple(VocabularyEntry(server, family, q, metric, kind) for q, metric, kind in rows)


# Checked against the sources (sample names as exposed; prometheus_client adds ``_total`` to
# a counter):
# - vLLM V1: vllm/v1/metrics/loggers.py (PrometheusStatLogger; labels model_name, engine) and
#   docs.vllm.ai "Production Metrics". ``vllm:prefix_cache_{queries,hits}`` count tokens.
# - vLLM, older names: V0's vllm/engine/metrics.py (docs.vllm.ai 0.5-0.8) has the
#   ``vllm:gpu_prefix_cache_hit_rate`` gauge and ``vllm:gpu_cache_usage_perc``; V1 up to 0.9
#   exported the counters as ``vllm:gpu_prefix_cache_{queries,hits}`` (deprecated in 0.9,
#   renamed to the names above, ``gpu_cache_usage_perc`` to ``kv_cache_usage_perc``).
# - SGLang: python/sglang/srt/metrics/collector.py. Correction/addition: besides the
#   ``sglang:cache_hit_rate`` gauge (last batches' rate) it has counters
#   ``sglang:cached_tokens_total`` (cached prompt tokens) over ``sglang:prompt_tokens_total``,
#   preferred as the trial's Δhits/Δqueries; preemption is "retraction" there:
#   ``sglang:num_retracted_requests_total``. ``sglang:token_usage`` is the KV pool's fraction.
# - TGI: huggingface.co/docs/text-generation-inference/reference/metrics and the router's
#   ``metrics::gauge!`` calls: ``tgi_queue_size``, ``tgi_batch_current_size`` (gauges).
# - llama.cpp server: tools/server/server.cpp (``/metrics`` handler, no labels):
#   ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``. Correction:
#   ``llamacpp:kv_cache_usage_ratio`` exists only in older builds; current ones dropped it.
#   llama.cpp exports nothing about prefix-cache hits or preemption.
VOCABULARY: tuple[VocabularyEntry, ...] = (
    *_entries(
        "vllm",
        "vllm",
        [
            ("prefix_cache_queries", "vllm:prefix_cache_queries_total", "counter"),
            ("prefix_cache_hits", "vllm:prefix_cache_hits_total", "counter"),
            ("kv_cache_usage", "vllm:kv_cache_usage_perc", "gauge"),
            ("preemptions", "vllm:num_preemptions_total", "counter"),
            ("waiting", "vllm:num_requests_waiting", "gauge"),
            ("running", "vllm:num_requests_running", "gauge"),
        ],
    ),
    *_entries(
        "vllm (older names)",
        "vllm",
        [
            ("prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "counter"),
            ("prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "counter"),
            ("prefix_cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate", "gauge"),
            ("kv_cache_usage", "vllm:gpu_cache_usage_perc", "gauge"),
            ("preemptions", "vllm:num_preemptions_total", "counter"),
            ("waiting", "vllm:num_requests_waiting", "gauge"),
            ("running", "vllm:num_requests_running", "gauge"),
        ],
    ),
    *_entries(
        "sglang",
        "sglang",
        [
            ("prefix_cache_queries", "sglang:prompt_tokens_total", "counter"),
            ("prefix_cache_hits", "sglang:cached_tokens_total", "counter"),
            ("prefix_cache_hit_rate", "sglang:cache_hit_rate", "gauge"),
            ("kv_cache_usage", "sglang:token_usage", "gauge"),
            ("preemptions", "sglang:num_retracted_requests_total", "counter"),
            ("waiting", "sglang:num_queue_reqs", "gauge"),
            ("running", "sglang:num_running_reqs", "gauge"),
        ],
    ),
    *_entries(
        "tgi",
        "tgi",
        [
            ("waiting", "tgi_queue_size", "gauge"),
            ("running", "tgi_batch_current_size", "gauge"),
        ],
    ),
    *_entries(
        "llama.cpp",
        "llama.cpp",
        [
            ("kv_cache_usage", "llamacpp:kv_cache_usage_ratio", "gauge"),
            ("waiting", "llamacpp:requests_deferred", "gauge"),
            ("running", "llamacpp:requests_processing", "gauge"),
        ],
    ),
)
"""Metric names per server and generation (detection order: first generation wins)."""

_ACROSS_SERIES: dict[Quantity, Literal["sum", "mean"]] = {
    "prefix_cache_queries": "sum",
    "prefix_cache_hits": "sum",
    "prefix_cache_hit_rate": "mean",
    "kv_cache_usage": "mean",
    "preemptions": "sum",
    "waiting": "sum",
    "running": "sum",
}
"""How one scrape's label sets (engines, data-parallel ranks, models) combine: counts add up,
fractions of equal pools average (two engines at 50 % are 50 %, not 100 %)."""


# -- the summary -----------------------------------------------------------------------------

_Series = tuple[str, tuple[tuple[str, str], ...]]


def _find(samples: Sequence[Sample], entry: VocabularyEntry) -> list[Sample]:
    """The samples of ``entry``'s metric; a counter also answers to its bare family name
    (OpenMetrics-style exporters) when no ``_total`` sample is there. ``_created`` never."""
    found = [s for s in samples if s.name == entry.metric]
    if not found and entry.kind == "counter" and entry.metric.endswith("_total"):
        bare = entry.metric.removesuffix("_total")
        found = [s for s in samples if s.name == bare]
    return [s for s in found if not math.isnan(s.value)]


def _detect(scrapes: Sequence[Sequence[Sample]]) -> ServerName:
    present = {s.name for samples in scrapes for s in samples}
    present |= {n.removesuffix("_total") + "_total" for n in present}

    def seen(entry: VocabularyEntry) -> bool:
        return entry.metric in present

    shared: dict[str, int] = {}
    for entry in VOCABULARY:
        shared[entry.metric] = shared.get(entry.metric, 0) + 1
    for only_its_own in (True, False):
        for entry in VOCABULARY:
            if seen(entry) and (not only_its_own or shared[entry.metric] == 1):
                return entry.server
    return "unknown"


def _candidates(server: ServerName, quantity: Quantity) -> list[VocabularyEntry]:
    """``quantity``'s entries: the detected generation's first, then its family's others."""
    own = [e for e in VOCABULARY if e.server == server and e.quantity == quantity]
    family = {e.family for e in VOCABULARY if e.server == server}
    others = [
        e
        for e in VOCABULARY
        if e.family in family and e.server != server and e.quantity == quantity
    ]
    return own + others


def _series_key(sample: Sample) -> _Series:
    return sample.name, tuple(sorted(sample.labels.items()))


def _counter_delta(scrapes: Sequence[Sequence[Sample]], entry: VocabularyEntry) -> float | None:
    """Growth of ``entry``'s counter from the first scrape to the last, summed over label
    sets. A value below the previous one is a reset (the server restarted): the growth
    counts from 0 again. A series first seen after the first scrape started at 0 during the
    trial. ``None`` with fewer than two scrapes or when the metric is never there."""
    if len(scrapes) < 2:
        return None
    last: dict[_Series, float] = {}
    total = 0.0
    found = False
    for index, samples in enumerate(scrapes):
        for sample in _find(samples, entry):
            found = True
            key = _series_key(sample)
            previous = last.get(key)
            if previous is None:
                total += sample.value if index > 0 else 0.0
            elif sample.value < previous:
                total += sample.value
            else:
                total += sample.value - previous
            last[key] = sample.value
    return total if found else None


def _gauge_values(scrapes: Sequence[Sequence[Sample]], entry: VocabularyEntry) -> list[float]:
    """One value per scrape that has the gauge: its label sets combined per quantity."""
    values: list[float] = []
    for samples in scrapes:
        found = [s.value for s in _find(samples, entry) if math.isfinite(s.value)]
        if found:
            total = sum(found)
            values.append(total / len(found) if _ACROSS_SERIES[entry.quantity] == "mean" else total)
    return values


def _gauge(
    scrapes: Sequence[Sequence[Sample]], server: ServerName, quantity: Quantity
) -> tuple[list[float], str] | None:
    for entry in _candidates(server, quantity):
        values = _gauge_values(scrapes, entry)
        if values:
            return values, entry.metric
    return None


def _counter(
    scrapes: Sequence[Sequence[Sample]], server: ServerName, quantity: Quantity
) -> tuple[float, str] | None:
    for entry in _candidates(server, quantity):
        delta = _counter_delta(scrapes, entry)
        if delta is not None:
            return delta, entry.metric
    return None


def _stats(values: Sequence[float]) -> MeanMax:
    return MeanMax(mean=round(sum(values) / len(values), 6), max=round(max(values), 6))


def _number(value: float) -> float | int:
    """A counter delta as JSON: an integer when it is one."""
    return int(value) if value.is_integer() else round(value, 6)


def _first_gauge(samples: Sequence[Sample], server: ServerName, quantity: Quantity) -> float | None:
    found = _gauge([samples], server, quantity)
    return round(found[0][0], 6) if found else None


def _step(
    before: Sequence[Sample], after: Sequence[Sample], server: ServerName, quantity: Quantity
) -> float | None:
    found = _counter([before, after], server, quantity)
    return _number(found[0]) if found else None


def _timeline(
    scrapes: Sequence[tuple[float, list[Sample]]], server: ServerName, origin_s: float
) -> list[ServerSample]:
    """Each scrape on the trial's clock: gauges as read, counters as growth since the scrape
    before (``None`` for the first, and for what the server does not export)."""
    found = []
    previous: list[Sample] | None = None
    for at, samples in scrapes:
        found.append(
            ServerSample(
                t_s=round(at - origin_s, 6),
                running=_first_gauge(samples, server, "running"),
                waiting=_first_gauge(samples, server, "waiting"),
                kv_cache_usage=_first_gauge(samples, server, "kv_cache_usage"),
                prefix_cache_queries=None
                if previous is None
                else _step(previous, samples, server, "prefix_cache_queries"),
                prefix_cache_hits=None
                if previous is None
                else _step(previous, samples, server, "prefix_cache_hits"),
                preemptions=None
                if previous is None
                else _step(previous, samples, server, "preemptions"),
            )
        )
        previous = samples
    return found


def _bool(text: str | None) -> bool | None:
    if text is None:
        return None
    lowered = text.strip().lower()
    return True if lowered == "true" else False if lowered == "false" else None


def _float(text: str | None) -> float | None:
    if text is None or text.strip() in ("", "None"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _int(text: str | None) -> int | None:
    value = _float(text)
    return None if value is None else int(value)


CONFIG_INFO_METRIC = "vllm:cache_config_info"
"""vLLM's info metric whose labels are its cache configuration (value 1)."""


def published_config(samples: Sequence[Sample]) -> ServerConfig | None:
    """What the server publishes of its own configuration, from one scrape: vLLM's
    ``vllm:cache_config_info`` labels (block size, prefix caching, KV capacity in tokens and
    bytes, cache dtype, max concurrency). ``None`` when nothing is published."""
    for sample in samples:
        if sample.name != CONFIG_INFO_METRIC:
            continue
        labels = dict(sample.labels)
        return ServerConfig(
            server="vllm",
            source=CONFIG_INFO_METRIC,
            block_size_tokens=_int(labels.get("block_size")),
            prefix_caching=_bool(labels.get("enable_prefix_caching")),
            kv_capacity_tokens=_int(labels.get("kv_cache_size_tokens")),
            kv_memory_bytes=_float(labels.get("kv_cache_memory_bytes")),
            cache_dtype=labels.get("cache_dtype"),
            max_concurrency=_float(labels.get("kv_cache_max_concurrency")),
            labels=labels,
        )
    return None


def summarise(
    scrapes: Sequence[tuple[float, list[Sample]]], *, origin_s: float | None = None
) -> ServerMetrics:
    """The summary of successful scrapes, each ``(time, samples)``: which server (from the
    metric names), how many scrapes, every quantity it exports (counters as their growth from
    the first scrape to the last, surviving resets; gauges as mean and max over the scrapes),
    the scrapes as a timeline on the trial's clock (``origin_s``: the trial's start on the
    same clock; default the first scrape) and the configuration the server publishes. A
    quantity the server does not export is ``None``."""
    timed = sorted(scrapes, key=lambda scrape: scrape[0])
    ordered = [samples for _, samples in timed]
    if not ordered:
        return ServerMetrics(available=False, why="no scrape of /metrics succeeded")
    server = _detect(ordered)
    config = next((c for c in map(published_config, reversed(ordered)) if c is not None), None)
    if server == "unknown":
        return ServerMetrics(available=True, server=server, scrapes=len(ordered), config=config)
    prefix: PrefixCacheStats | None = None
    queries = _counter(ordered, server, "prefix_cache_queries")
    hits = _counter(ordered, server, "prefix_cache_hits")
    if queries is not None and hits is not None:
        prefix = PrefixCacheStats(
            queries=_number(queries[0]),
            hits=_number(hits[0]),
            hit_rate=round(hits[0] / queries[0], 6) if queries[0] > 0 else None,
            source=f"{hits[1]} / {queries[1]}",
        )
    else:
        rate = _gauge(ordered, server, "prefix_cache_hit_rate")
        if rate is not None:
            prefix = PrefixCacheStats(
                hit_rate=_stats(rate[0]).mean, source=f"{rate[1]} (gauge, mean over scrapes)"
            )
    usage = _gauge(ordered, server, "kv_cache_usage")
    preemptions = _counter(ordered, server, "preemptions")
    waiting = _gauge(ordered, server, "waiting")
    running = _gauge(ordered, server, "running")
    origin = timed[0][0] if origin_s is None else origin_s
    return ServerMetrics(
        available=True,
        server=server,
        scrapes=len(ordered),
        prefix_cache=prefix,
        kv_cache_usage=_stats(usage[0]) if usage else None,
        preemptions=_number(preemptions[0]) if preemptions else None,
        waiting=_stats(waiting[0]) if waiting else None,
        running=_stats(running[0]) if running else None,
        config=config,
        timeline=_timeline(timed, server, origin),
    )


# -- the gauges against the client ----------------------------------------------------------

HELD_MARGIN_S = 0.05
"""A scrape counts as taken while the server held a request when it falls inside that
request's span from its send to its end by at least this much on both sides (the request had
reached the server; the scrape's stamp is when its answer arrived, the gauges were read a
little before)."""


def check_against_client(
    metrics: ServerMetrics, records: Sequence[RequestRecord], *, min_scrapes: int = 2
) -> ServerMetrics:
    """The ``running``, ``waiting`` and ``kv_cache_usage`` gauges held against what the client
    saw: at a scrape taken while the client had a request at the server (sent, not ended), a
    server reading 0 running and 0 waiting contradicts it. When every such scrape (at least
    ``min_scrapes``) reads so, those gauges (and KV usage, if it read 0 too) are not used:
    ``None``, with why in ``contradicted``. Seen on vLLM 0.32's CPU build: 8 scrapes during a
    2.5 s decode of one request, all 0."""
    held = [
        point
        for point in metrics.timeline
        if any(r.sent_s + HELD_MARGIN_S <= point.t_s <= r.end_s - HELD_MARGIN_S for r in records)
    ]
    idle = [(p.running or 0) == 0 and (p.waiting or 0) == 0 for p in held]
    if len(held) < min_scrapes or not all(idle) or metrics.running is None:
        return metrics
    gauges = ["running", "waiting"]
    if all((p.kv_cache_usage or 0) == 0 for p in held):
        gauges.append("kv_cache_usage")
    updates = {name: None for name in gauges if getattr(metrics, name) is not None}
    notes = [
        f"{name}: read 0 at all {len(held)} scrapes taken while the client had a request at "
        "the server; contradicted, not used"
        for name in updates
    ]
    return metrics.model_copy(update={**updates, "contradicted": [*metrics.contradicted, *notes]})
