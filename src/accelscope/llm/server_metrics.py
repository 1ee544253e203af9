"""What the server itself says during a trial: its Prometheus ``/metrics``, read before, during
(every ``interval_s`` on a daemon thread) and after the trial, summarised for the benchmark's
honesty.

A token benchmark can be fooled by the server's state: a "cold" run whose prompts hit the
prefix cache measures cached prefill, a run that preempts requests measures recomputation, and
a queue that never drains measures the queue. :class:`ServerMetricsScraper` reads what vLLM,
SGLang, TGI and llama.cpp server export (:data:`VOCABULARY`) and :func:`summarise` turns the
scrapes into the prefix-cache hits and queries over the trial, KV-cache usage, preemptions,
waiting and running requests. A quantity the server does not export is absent from the
summary, never 0; a server without ``/metrics`` (404), unreachable, or answering something
other than Prometheus text is ``available: False`` with a one-line ``why``. Nothing here
raises into the benchmark.

:func:`parse_exposition` is a small, strict parser of the Prometheus text exposition format
(version 0.0.4, and the OpenMetrics text it resembles): no dependency.
"""

from __future__ import annotations

import http.client
import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

from accelscope.errors import one_line
from accelscope.llm.documents import (
    MeanMax,
    PrefixCacheStats,
    RequestRecord,
    ServerConfig,
    ServerMetrics,
    ServerSample,
)

__all__ = [
    "CONFIG_INFO_METRIC",
    "VOCABULARY",
    "Quantity",
    "Sample",
    "ServerMetricsScraper",
    "ServerName",
    "VocabularyEntry",
    "check_against_client",
    "metrics_url",
    "parse_exposition",
    "published_config",
    "summarise",
]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""A ``/metrics`` answer larger than this is not read (a real one is tens of kilobytes)."""


# -- the exposition format -----------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One sample line: ``name{labels} value [timestamp]``. ``timestamp`` is as written (the
    text format's milliseconds, or OpenMetrics' seconds); ``None`` when the line has none."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float = 0.0
    timestamp: float | None = None


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FLOAT = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE
)
_TIMESTAMP = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_FIELDS = re.compile(r"[ \t]+")
_TYPES = frozenset(
    {"counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset"}
    | {"gaugehistogram"}
)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _blank(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """The label set that opens at ``line[pos] == "{"``; returns it and the index after ``}``."""
    labels: dict[str, str] = {}
    pos = _blank(line, pos + 1)
    while True:
        if pos >= len(line):
            raise ValueError("unterminated label set")
        if line[pos] == "}":
            return labels, pos + 1
        match = _LABEL_NAME.match(line, pos)
        if match is None:
            raise ValueError(f"bad label name at column {pos + 1}")
        name = match.group()
        pos = _blank(line, match.end())
        if pos >= len(line) or line[pos] != "=":
            raise ValueError(f"label {name!r} has no '='")
        pos = _blank(line, pos + 1)
        if pos >= len(line) or line[pos] != '"':
            raise ValueError(f"label {name!r}: value is not quoted")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= len(line):
                raise ValueError(f"label {name!r}: unterminated value")
            char = line[pos]
            if char == '"':
                pos += 1
                break
            if char == "\\":
                if pos + 1 >= len(line) or line[pos + 1] not in _ESCAPES:
                    raise ValueError(f"label {name!r}: bad escape sequence")
                chars.append(_ESCAPES[line[pos + 1]])
                pos += 2
                continue
            chars.append(char)
            pos += 1
        if name in labels:
            raise ValueError(f"label {name!r} appears twice")
        labels[name] = "".join(chars)
        pos = _blank(line, pos)
        if pos < len(line) and line[pos] == ",":
            pos = _blank(line, pos + 1)
        elif pos < len(line) and line[pos] != "}":
            raise ValueError(f"expected ',' or '}}' after label {name!r}")


def _sample(line: str) -> Sample:
    match = _METRIC_NAME.match(line)
    if match is None:
        raise ValueError("does not start with a metric name")
    name = match.group()
    pos = match.end()
    labels: dict[str, str] = {}
    after = _blank(line, pos)
    if after < len(line) and line[after] == "{":
        labels, pos = _labels(line, after)
    if pos < len(line) and line[pos] not in " \t":
        raise ValueError(f"{name}: unexpected {line[pos]!r}")
    rest = _FIELDS.split(line[pos:].strip(" \t"))
    if rest == [""]:
        raise ValueError(f"{name}: no value")
    if len(rest) > 2:
        raise ValueError(f"{name}: unexpected text after the value")
    if _FLOAT.fullmatch(rest[0]) is None:
        raise ValueError(f"{name}: {rest[0]!r} is not a number")
    timestamp: float | None = None
    if len(rest) == 2:
        if _TIMESTAMP.fullmatch(rest[1]) is None:
            raise ValueError(f"{name}: {rest[1]!r} is not a timestamp")
        timestamp = float(rest[1])
    return Sample(name, labels, float(rest[0]), timestamp)


def _comment(line: str) -> None:
    """Validate a ``# HELP`` / ``# TYPE`` line; any other comment is free text."""
    parts = line[1:].split(None, 2)
    if not parts or parts[0] not in ("HELP", "TYPE"):
        return
    if len(parts) < 2 or _METRIC_NAME.fullmatch(parts[1]) is None:
        raise ValueError(f"# {parts[0]} without a valid metric name")
    if parts[0] == "TYPE" and (len(parts) < 3 or parts[2].strip() not in _TYPES):
        raise ValueError(f"# TYPE {parts[1]}: unknown type")


def parse_exposition(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition, in order. Comments, ``# HELP`` and
    ``# TYPE`` lines and blank lines are skipped (HELP/TYPE are checked); label values keep
    their escapes decoded (``\\\\``, ``\\"``, ``\\n``); values may be ``+Inf``, ``-Inf``,
    ``NaN``; a trailing timestamp is kept. Sample names are as written: a counter's
    ``_total`` and ``_created`` samples are distinct names. Raises :class:`ValueError`, naming
    the line, on anything else."""
    samples: list[Sample] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r").strip(" \t")
        if not line:
            continue
        try:
            if line.startswith("#"):
                _comment(line)
            else:
                samples.append(_sample(line))
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return samples


# -- the vocabulary --------------------------------------------------------------------------

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


# -- the scraper -----------------------------------------------------------------------------


def metrics_url(base_url: str) -> str:
    """The ``/metrics`` URL of a server given as ``http://host:port`` (a trailing ``/v1``,
    the OpenAI base URL, is dropped; a URL already ending in ``/metrics`` is kept)."""
    parsed = urllib.parse.urlsplit(base_url.strip())
    path = parsed.path.rstrip("/")
    if not path.endswith("/metrics"):
        path = path.removesuffix("/v1") + "/metrics"
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", ""))


class ServerMetricsScraper:
    """Reads a server's ``/metrics`` around a trial: :meth:`start` before it, :meth:`stop`
    after it (or ``with ServerMetricsScraper(url) as scraper: ...; scraper.summary``).

    :meth:`start` scrapes once; if that fails (no ``/metrics``, unreachable, not Prometheus
    text) the scraper is ``available: False`` with the reason and does nothing more.
    Otherwise a daemon thread scrapes every ``interval_s`` until :meth:`stop`, which scrapes
    a last time and returns :func:`summarise`'s summary plus ``failed_scrapes`` (scrapes
    during the trial that failed, skipped). Neither method raises. Requests go straight to
    the server, as the benchmark's own do (no proxy from the environment)."""

    def __init__(
        self,
        base_url: str,
        *,
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._bad_url = ""
        try:
            self.url = metrics_url(base_url)
        except ValueError as exc:
            self.url, self._bad_url = base_url, f"{base_url!r}: {exc}"
        if not self._bad_url and urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            self._bad_url = f"{base_url!r}: give the server's URL, e.g. http://localhost:8000"
        self.interval_s = max(float(interval_s), 0.01)
        self.timeout_s = float(timeout_s)
        self.headers = {"Accept": "text/plain", **dict(headers or {})}
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._scrapes: list[tuple[float, list[Sample]]] = []
        self._failed = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._why = ""
        self.summary: ServerMetrics | None = None

    def scrape_once(self) -> list[Sample]:
        """One GET of ``/metrics``, parsed. Raises :class:`ValueError` with a one-line
        reason for any failure."""
        if self._bad_url:
            raise ValueError(one_line(self._bad_url))
        request = urllib.request.Request(self.url, headers=self.headers)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as answer:
                body: bytes = answer.read(MAX_BODY_BYTES + 1)
                content_type = str(answer.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 404:
                raise ValueError(f"{self.url}: no /metrics endpoint (HTTP 404)") from None
            raise ValueError(f"{self.url}: HTTP {exc.code} {one_line(str(exc.reason))}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise ValueError(f"{self.url}: no answer within {self.timeout_s:g} s") from None
            raise ValueError(f"{self.url}: unreachable ({one_line(str(exc.reason))})") from None
        except http.client.HTTPException as exc:
            raise ValueError(f"{self.url}: broken answer ({type(exc).__name__})") from None
        except TimeoutError:
            raise ValueError(f"{self.url}: no answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise ValueError(f"{self.url}: {one_line(str(exc)) or type(exc).__name__}") from None
        if len(body) > MAX_BODY_BYTES:
            raise ValueError(f"{self.url}: answer larger than {MAX_BODY_BYTES} bytes")
        if "html" in content_type.lower():
            raise ValueError(f"{self.url}: not Prometheus text ({one_line(content_type)})")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{self.url}: not Prometheus text (not UTF-8)") from None
        try:
            return parse_exposition(text)
        except ValueError as exc:
            raise ValueError(f"{self.url}: not Prometheus text ({one_line(str(exc))})") from None

    def _record(self) -> bool:
        """Scrape and keep the result; ``False`` (counted, reason kept) on failure."""
        at = time.perf_counter()
        try:
            samples = self.scrape_once()
        except Exception as exc:  # noqa: BLE001 - a scrape failure must never reach the trial
            with self._lock:
                self._failed += 1
                self._why = one_line(str(exc)) or type(exc).__name__
            return False
        with self._lock:
            self._scrapes.append((at, samples))
        return True

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self._record()

    @property
    def available(self) -> bool:
        """Whether the first scrape succeeded (``False`` before :meth:`start`)."""
        with self._lock:
            return bool(self._scrapes)

    def start(self) -> None:
        """Scrape once; when that works, keep scraping on a daemon thread. Never raises."""
        if self._started:
            return
        self._started = True
        try:
            if not self._record():
                return
            self._thread = threading.Thread(
                target=self._loop, name="accelscope-server-metrics", daemon=True
            )
            self._thread.start()
        except Exception as exc:  # noqa: BLE001 - e.g. no thread to be had: scraping is optional
            with self._lock:
                self._why = one_line(str(exc)) or type(exc).__name__

    def stop(self, *, origin_s: float | None = None) -> ServerMetrics:
        """Stop the thread, scrape a last time and return the summary (also kept as
        :attr:`summary`), its timeline on the clock that starts at ``origin_s`` (a
        ``time.perf_counter`` reading: the trial's start). Never raises; a second call
        returns the same summary."""
        if self.summary is not None:
            return self.summary
        try:
            self.summary = self._finish(origin_s)
        except Exception as exc:  # noqa: BLE001 - the summary is optional, the trial is not
            why = one_line(str(exc)) or type(exc).__name__
            self.summary = ServerMetrics(available=False, why=why)
        return self.summary

    def _finish(self, origin_s: float | None) -> ServerMetrics:
        if not self._started:
            return ServerMetrics(available=False, why="the scraper was never started")
        if not self.available:
            return ServerMetrics(available=False, why=self._why or "the first scrape failed")
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + self.interval_s + 1.0)
        self._record()
        with self._lock:
            scrapes = list(self._scrapes)
            failed = self._failed
        summary = summarise(scrapes, origin_s=origin_s)
        return summary.model_copy(update={"failed_scrapes": failed})

    def __enter__(self) -> ServerMetricsScraper:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


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
