"""The server's own ``/metrics`` around a trial: the exposition parser, each server's names,
the summary's arithmetic (label sets, counter resets) and a scraper against tiny local
servers that never makes the benchmark raise.

Covers: accelscope.llm.prometheus_text, accelscope.llm.server_vocabulary,
accelscope.llm.metrics_scraper."""

from __future__ import annotations

import contextlib
import http.server
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from accelscope.llm.documents import ServerMetrics
from accelscope.llm.metrics_scraper import ServerMetricsScraper, metrics_url
from accelscope.llm.prometheus_text import Sample, parse_exposition
from accelscope.llm.server_vocabulary import VOCABULARY, summarise
from accelscope.processes import free_port

# -- realistic texts, as the servers write them ---------------------------------------------

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def vllm_text(
    *,
    queries: tuple[float, float] = (1000.0, 0.0),
    hits: tuple[float, float] = (0.0, 0.0),
    usage: tuple[float, float] = (0.25, 0.75),
    preemptions: float = 0.0,
    waiting: float = 1.0,
    running: float = 3.0,
) -> str:
    """vLLM V1 (prometheus_client), two data-parallel engines, with the deprecated names
    exported alongside as 0.9 did."""
    lab = [f'engine="{i}",model_name="{MODEL}"' for i in (0, 1)]
    return f"""# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{{generation="0"}} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{lab[0]}}} {running}
vllm:num_requests_running{{{lab[1]}}} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{lab[0]}}} {waiting}
vllm:num_requests_waiting{{{lab[1]}}} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: \
Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{{lab[0]}}} 0.9
vllm:gpu_cache_usage_perc{{{lab[1]}}} 0.9
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{{lab[0]}}} {usage[0]}
vllm:kv_cache_usage_perc{{{lab[1]}}} {usage[1]}
# HELP vllm:gpu_prefix_cache_queries_total GPU prefix cache queries, in terms of number of \
queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{{{lab[0]}}} 99999.0
vllm:gpu_prefix_cache_queries_total{{{lab[1]}}} 99999.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried \
tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{{lab[0]}}} {queries[0]}
vllm:prefix_cache_queries_total{{{lab[1]}}} {queries[1]}
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried \
tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{{{lab[0]}}} 1.7331e+09
vllm:prefix_cache_queries_created{{{lab[1]}}} 1.7331e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{{lab[0]}}} {hits[0]}
vllm:prefix_cache_hits_total{{{lab[1]}}} {hits[1]}
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{lab[0]}}} {preemptions}
vllm:num_preemptions_total{{{lab[1]}}} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{{{lab[0]}}} 0.5
vllm:time_to_first_token_seconds_bucket{{{lab[0]},le="0.001"}} 0.0
vllm:time_to_first_token_seconds_bucket{{le="+Inf",{lab[0]}}} 5.0
vllm:time_to_first_token_seconds_count{{{lab[0]}}} 5.0
"""


def vllm_v0_text(*, rate: float, usage: float, preemptions: float) -> str:
    """vLLM V0 (0.6): the block hit-rate gauge, no prefix-cache counters."""
    lab = f'model_name="{MODEL}"'
    return f"""# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{lab}}} 2.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{{{lab}}} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{lab}}} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{{lab}}} {usage}
# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{{{lab}}} {rate}
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{lab}}} {preemptions}
"""


def sglang_text(*, prompt: float, cached: float, retracted: float, rate: float) -> str:
    sched = f'model_name="{MODEL}",engine_type="unified",tp_rank="0",pp_rank="0"'
    tok = f'model_name="{MODEL}"'
    return f"""# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{sched}}} 4.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{{{sched}}} 5120.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{{{sched}}} 0.12
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{{sched}}} 2.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{{sched}}} {rate}
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{{{sched}}} {retracted}
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{{tok}}} {prompt}
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{{tok}}} {cached}
"""


def tgi_text(queue: int, batch: int) -> str:
    """TGI's router (metrics-exporter-prometheus): no HELP, a blank line between families."""
    return f"""# TYPE tgi_request_count counter
tgi_request_count 10

# TYPE tgi_queue_size gauge
tgi_queue_size {queue}

# TYPE tgi_batch_current_size gauge
tgi_batch_current_size {batch}

# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 4096

# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{{le="0.005"}} 0
tgi_request_duration_bucket{{le="+Inf"}} 10
tgi_request_duration_sum 12.5
tgi_request_duration_count 10

"""


def llamacpp_text(processing: int, deferred: int, kv: float | None = None) -> str:
    """llama.cpp server's handler: HELP/TYPE per metric, C++ stream formatting of numbers."""
    metrics = [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed.", "1.23457e+06"),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed.", "23210"),
        ("n_decode_total", "counter", "Total number of llama_decode() calls", "23381"),
        ("n_busy_slots_per_decode", "counter", "Average number of busy slots", "1.02"),
        ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", "424.925"),
    ]
    if kv is not None:
        metrics.append(("kv_cache_usage_ratio", "gauge", "KV-cache usage.", f"{kv}"))
    metrics += [
        ("requests_processing", "gauge", "Number of requests processing.", f"{processing}"),
        ("requests_deferred", "gauge", "Number of requests deferred.", f"{deferred}"),
    ]
    return "".join(
        f"# HELP llamacpp:{n} {h}\n# TYPE llamacpp:{n} {t}\nllamacpp:{n} {v}\n"
        for n, t, h, v in metrics
    )


def scrapes(*texts: str) -> list[tuple[float, list[Sample]]]:
    return [(float(i), parse_exposition(text)) for i, text in enumerate(texts)]


# -- the parser -----------------------------------------------------------------------------


def test_parses_comments_labels_escapes_specials_and_timestamps() -> None:
    text = (
        "# a free comment, even # TYPEless\n"
        "# HELP http_requests_total The total number of HTTP requests.\n"
        "# TYPE http_requests_total counter\n"
        'http_requests_total{method="post",code="200"} 1027 1395066363000\r\n'
        'http_requests_total{ method = "post" , code="400", } 3 1395066363000\n'
        "\n"
        'msdos_file_access_time_seconds{path="C:\\\\DIR\\\\FILE.TXT",error="Cannot find file:\\n'
        '\\"FILE.TXT\\""} 1.458255915e9\n'
        "metric_without_timestamp_and_labels 12.47\n"
        'something_weird{problem="division by zero"} +Inf -3982045\n'
        "minus_inf -Inf\n"
        "not_a_number NaN\n"
        'rpc_duration_seconds{quantile="0.5"} 4773\n'
        "rpc_duration_seconds_sum 1.7560473e+07\n"
        "vllm:prefix_cache_queries_total 5\n"
        "vllm:prefix_cache_queries_created 1.7e9\n"
        "empty_labels{} 0\n"
        "openmetrics_ts 1 1395066363.5\n"
        "# EOF\n"
    )
    samples = parse_exposition(text)
    by = {(s.name, tuple(sorted(s.labels.items()))): s for s in samples}
    assert len(samples) == 13
    first = by[("http_requests_total", (("code", "200"), ("method", "post")))]
    assert first.value == 1027 and first.timestamp == 1395066363000
    assert by[("http_requests_total", (("code", "400"), ("method", "post")))].value == 3
    weird = next(s for s in samples if s.name == "msdos_file_access_time_seconds")
    assert weird.labels == {"path": "C:\\DIR\\FILE.TXT", "error": 'Cannot find file:\n"FILE.TXT"'}
    assert weird.value == 1.458255915e9 and weird.timestamp is None
    odd = next(s for s in samples if s.name == "something_weird")
    assert odd.value == math.inf and odd.timestamp == -3982045
    assert next(s for s in samples if s.name == "minus_inf").value == -math.inf
    assert math.isnan(next(s for s in samples if s.name == "not_a_number").value)
    names = [s.name for s in samples]
    assert "vllm:prefix_cache_queries_total" in names
    assert "vllm:prefix_cache_queries_created" in names
    assert next(s for s in samples if s.name == "empty_labels").labels == {}
    assert next(s for s in samples if s.name == "openmetrics_ts").timestamp == 1395066363.5
    assert parse_exposition("") == [] and parse_exposition("\n# only comments\n") == []


@pytest.mark.parametrize(
    "line",
    [
        "<!DOCTYPE html>",
        "<html><body>Not Found</body></html>",
        '{"detail": "Not Found"}',
        "OK",
        "metric_without_value",
        'metric{label="x"}',
        "metric 1_000",
        "metric 0x10",
        "metric one",
        "metric 1 2 3",
        "metric 1 12abc",
        'metric{label="unterminated} 1',
        'metric{label="x" 1',
        "metric{label=unquoted} 1",
        'metric{label="bad \\t escape"} 1',
        'metric{a="1",a="2"} 1',
        'metric{1abc="x"} 1',
        'metric{a="1" b="2"} 1',
        'metric{a="1"}1',
        "metric-name 1",
        "# TYPE metric no_such_type",
        "# TYPE metric",
        "# HELP 9metric help",
    ],
)
def test_rejects_what_is_not_exposition_text(line: str) -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_exposition(f"ok_metric 1\n{line}\n")


# -- the vocabulary -------------------------------------------------------------------------


def test_vocabulary_is_consistent() -> None:
    seen: set[tuple[str, str]] = set()
    for entry in VOCABULARY:
        assert (entry.server, entry.quantity) not in seen
        seen.add((entry.server, entry.quantity))
        assert entry.metric.endswith("_total") == (entry.kind == "counter"), entry
        assert entry.kind == (
            "counter"
            if entry.quantity in ("prefix_cache_queries", "prefix_cache_hits", "preemptions")
            else "gauge"
        )
    assert {e.server for e in VOCABULARY} == {
        "vllm",
        "vllm (older names)",
        "sglang",
        "tgi",
        "llama.cpp",
    }


def test_vllm_counters_sum_engines_and_fractions_average_them() -> None:
    summary = summarise(
        scrapes(
            vllm_text(queries=(1000, 0), hits=(0, 0), usage=(0.25, 0.75), waiting=1, running=3),
            vllm_text(queries=(1600, 400), hits=(200, 100), usage=(0.5, 0.5), waiting=5),
        )
    )
    assert summary.available and summary.server == "vllm" and summary.scrapes == 2
    assert summary.prefix_cache.model_dump() == {
        "queries": 1000,
        "hits": 300,
        "hit_rate": 0.3,
        "source": "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total",
    }
    # The V1 names win over the deprecated ones exported alongside (0.9 at 0.9 usage).
    assert summary.kv_cache_usage.model_dump() == {"mean": 0.5, "max": 0.5}
    assert summary.waiting.model_dump() == {"mean": 3.0, "max": 5.0}
    assert summary.running.model_dump() == {"mean": 3.0, "max": 3.0}
    assert summary.preemptions == 0


def test_vllm_older_names_use_the_hit_rate_gauge() -> None:
    summary = summarise(
        scrapes(
            vllm_v0_text(rate=0.0, usage=0.1, preemptions=2),
            vllm_v0_text(rate=0.5, usage=0.3, preemptions=5),
            vllm_v0_text(rate=0.4, usage=0.2, preemptions=7),
        )
    )
    assert summary.server == "vllm (older names)"
    assert summary.prefix_cache.hit_rate == pytest.approx(0.3)
    assert summary.prefix_cache.queries is None
    assert summary.prefix_cache.source.startswith("vllm:gpu_prefix_cache_hit_rate")
    assert summary.kv_cache_usage.model_dump() == {"mean": pytest.approx(0.2), "max": 0.3}
    assert summary.preemptions == 5
    assert summary.running.model_dump() == {"mean": 2.0, "max": 2.0}


def test_vllm_v1_before_the_rename_reads_the_gpu_counters() -> None:
    text = (
        "# TYPE vllm:gpu_prefix_cache_queries_total counter\nvllm:gpu_prefix_cache_queries_total{{"
        'engine="0",model_name="m"}} {q}\n'
        "# TYPE vllm:gpu_prefix_cache_hits_total counter\nvllm:gpu_prefix_cache_hits_total{{"
        'engine="0",model_name="m"}} {h}\n'
        '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{{engine="0",'
        'model_name="m"}} 0.5\n'
    )
    summary = summarise(scrapes(text.format(q=10, h=0), text.format(q=110, h=25)))
    assert summary.server == "vllm (older names)"
    assert summary.prefix_cache.queries == 100 and summary.prefix_cache.hits == 25
    assert summary.prefix_cache.hit_rate == 0.25
    assert summary.preemptions is None and summary.waiting is None


def test_sglang_prefers_token_counters_over_the_gauge() -> None:
    summary = summarise(
        scrapes(
            sglang_text(prompt=1000, cached=100, retracted=0, rate=0.1),
            sglang_text(prompt=3000, cached=1100, retracted=2, rate=0.9),
        )
    )
    assert summary.server == "sglang"
    assert summary.prefix_cache.model_dump() == {
        "queries": 2000,
        "hits": 1000,
        "hit_rate": 0.5,
        "source": "sglang:cached_tokens_total / sglang:prompt_tokens_total",
    }
    assert summary.kv_cache_usage.model_dump() == {"mean": 0.12, "max": 0.12}
    assert summary.preemptions == 2
    assert summary.waiting.model_dump() == {"mean": 2.0, "max": 2.0}
    assert summary.running.model_dump() == {"mean": 4.0, "max": 4.0}


def test_sglang_without_token_counters_falls_back_to_the_gauge() -> None:
    def text(rate: float) -> str:
        return "\n".join(
            line
            for line in sglang_text(prompt=0, cached=0, retracted=0, rate=rate).splitlines()
            if "cached_tokens" not in line
        )

    summary = summarise(scrapes(text(0.2), text(0.4)))
    assert summary.prefix_cache.hit_rate == pytest.approx(0.3)
    assert summary.prefix_cache.source.startswith("sglang:cache_hit_rate")


def test_tgi_exports_queue_and_batch_only() -> None:
    summary = summarise(scrapes(tgi_text(0, 1), tgi_text(4, 8), tgi_text(2, 6)))
    assert summary.server == "tgi"
    assert summary.waiting.model_dump() == {"mean": 2.0, "max": 4.0}
    assert summary.running.model_dump() == {"mean": 5.0, "max": 8.0}
    for absent in ("prefix_cache", "kv_cache_usage", "preemptions"):
        assert getattr(summary, absent) is None


def test_llamacpp_current_and_older_builds() -> None:
    current = summarise(scrapes(llamacpp_text(1, 0), llamacpp_text(4, 3)))
    assert current.server == "llama.cpp"
    assert current.running.model_dump() == {"mean": 2.5, "max": 4.0}
    assert current.waiting.model_dump() == {"mean": 1.5, "max": 3.0}
    assert current.kv_cache_usage is None and current.prefix_cache is None
    older = summarise(scrapes(llamacpp_text(1, 0, kv=0.25), llamacpp_text(1, 0, kv=0.75)))
    assert older.kv_cache_usage.model_dump() == {"mean": 0.5, "max": 0.75}


def test_a_server_with_none_of_the_names_is_unknown() -> None:
    text = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"
    assert summarise(scrapes(text, text)) == ServerMetrics(
        available=True, server="unknown", scrapes=2
    )
    assert summarise([]).available is False


# -- the arithmetic -------------------------------------------------------------------------


def counter(value: float, **labels: str) -> Sample:
    return Sample("vllm:num_preemptions_total", labels, value)


def test_counter_reset_counts_from_the_reset() -> None:
    values = [10, 15, 3, 7]  # restart between the 2nd and 3rd scrape
    summary = summarise([(float(i), [counter(v, engine="0")]) for i, v in enumerate(values)])
    assert summary.preemptions == (15 - 10) + 3 + (7 - 3)


def test_resets_are_per_label_set_and_new_series_start_at_zero() -> None:
    data = [
        (0.0, [counter(100, engine="0")]),
        (1.0, [counter(110, engine="0"), counter(4, engine="1")]),
        (2.0, [counter(2, engine="0"), counter(6, engine="1")]),
        (3.0, [counter(2, engine="0"), counter(math.nan, engine="1")]),
    ]
    assert summarise(data).preemptions == 10 + 2 + 6


def test_scrapes_are_taken_in_time_order() -> None:
    data = [(2.0, [counter(30)]), (0.0, [counter(10)]), (1.0, [counter(20)])]
    assert summarise(data).preemptions == 20


def test_one_scrape_gives_gauges_but_no_deltas() -> None:
    summary = summarise(scrapes(vllm_text()))
    assert summary.prefix_cache is None and summary.preemptions is None
    assert summary.running.model_dump() == {"mean": 3.0, "max": 3.0}


def test_no_queries_means_no_hit_rate() -> None:
    summary = summarise(scrapes(vllm_text(), vllm_text()))
    assert summary.prefix_cache.queries == 0 and summary.prefix_cache.hit_rate is None


def test_bare_counter_family_names_are_read() -> None:
    data = [(0.0, [Sample("sglang:num_retracted_requests", {}, 1.0)])]
    data.append((1.0, [Sample("sglang:num_retracted_requests", {}, 4.0)]))
    assert summarise(data).preemptions == 3


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://localhost:8000", "http://localhost:8000/metrics"),
        ("http://localhost:8000/", "http://localhost:8000/metrics"),
        ("http://localhost:8000/v1", "http://localhost:8000/metrics"),
        ("http://h:1/proxy/v1/", "http://h:1/proxy/metrics"),
        ("http://h:1/metrics", "http://h:1/metrics"),
    ],
)
def test_metrics_url(base: str, url: str) -> None:
    assert metrics_url(base) == url


# -- the scraper against real sockets -------------------------------------------------------


@contextlib.contextmanager
def serve(
    answer: Callable[[int], tuple[int, str, str]],
) -> Iterator[tuple[str, list[int]]]:
    """A local HTTP server on a free port: ``answer(n)`` gives status, content type and body
    of the n-th request to ``/metrics``; any other path is 404. Yields the base URL and the
    list of request counts (one entry per request)."""
    hits: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            hits.append(len(hits))
            status, content_type, body = answer(hits[-1])
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


PROM = "text/plain; version=0.0.4; charset=utf-8"


def wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


def test_scraper_reads_changing_metrics_during_the_trial() -> None:
    def answer(n: int) -> tuple[int, str, str]:
        text = vllm_text(
            queries=(1000 + 100 * n, 0),
            hits=(10 * n, 0),
            preemptions=n,
            waiting=n,
            usage=(0.1, 0.1),
        )
        return 200, PROM, text

    with serve(answer) as (url, hits):
        scraper = ServerMetricsScraper(url + "/v1", interval_s=0.02)
        scraper.start()
        assert scraper.available
        wait_for(lambda: len(hits) >= 5)
        summary = scraper.stop()
        assert not scraper._thread or not scraper._thread.is_alive()
        done = len(hits)
    assert summary.available and summary.server == "vllm"
    assert summary.scrapes == done and summary.failed_scrapes == 0
    last = done - 1
    assert summary.prefix_cache.queries == 100 * last
    assert summary.prefix_cache.hits == 10 * last
    assert summary.prefix_cache.hit_rate == 0.1
    assert summary.preemptions == last
    assert summary.waiting.model_dump() == {"mean": pytest.approx(last / 2), "max": last}
    assert summary.kv_cache_usage.model_dump() == {"mean": 0.1, "max": 0.1}
    assert scraper.stop() is summary  # idempotent


def test_scraper_as_context_manager_survives_a_server_restart() -> None:
    # the fault: a restart between the 2nd and 3rd scrape (counted, not timed)
    retracted = iter([5, 8, 1, 4])  # the server restarted between the 2nd and 3rd scrape

    def answer(n: int) -> tuple[int, str, str]:
        value = next(retracted, 4)
        return 200, PROM, sglang_text(prompt=10, cached=0, retracted=value, rate=0.0)

    with serve(answer) as (url, hits), ServerMetricsScraper(url, interval_s=0.02) as scraper:
        wait_for(lambda: len(hits) >= 4)
    assert scraper.summary is not None and scraper.summary.server == "sglang"
    assert scraper.summary.preemptions == 3 + 1 + 3
    assert scraper.summary.prefix_cache.hit_rate is None


def test_failed_scrapes_mid_trial_are_counted_not_fatal() -> None:
    # the fault: the 2nd and 3rd scrapes are answered 503 (counted, not timed)
    def answer(n: int) -> tuple[int, str, str]:
        if n in (1, 2):
            return 503, "text/plain", "busy"
        return 200, PROM, tgi_text(n, 1)

    with serve(answer) as (url, hits):
        scraper = ServerMetricsScraper(url, interval_s=0.02)
        scraper.start()
        wait_for(lambda: len(hits) >= 4)
        summary = scraper.stop()
    assert summary.available and summary.server == "tgi"
    assert summary.failed_scrapes == 2 and summary.scrapes == len(hits) - 2


@pytest.mark.parametrize(
    ("status", "content_type", "body", "why"),
    [
        (404, "text/plain", "Not Found", "no /metrics endpoint (HTTP 404)"),
        (200, "text/html; charset=utf-8", "<html><body>hi</body></html>", "not Prometheus text"),
        (200, "text/plain", "<!doctype html><html></html>", "not Prometheus text"),
        (200, "application/json", '{"object": "list", "data": []}', "not Prometheus text"),
        (500, "text/plain", "Internal Server Error", "HTTP 500"),
    ],
)
def test_no_metrics_makes_it_unavailable_with_one_line(
    status: int, content_type: str, body: str, why: str
) -> None:
    with serve(lambda n: (status, content_type, body)) as (url, hits):
        scraper = ServerMetricsScraper(url, interval_s=0.02)
        scraper.start()
        assert not scraper.available
        time.sleep(0.1)  # five intervals in which a scraper that kept trying would scrape again
        summary = scraper.stop()
    assert len(hits) == 1  # one try, then nothing more
    assert scraper._thread is None
    assert summary.available is False and why in summary.why
    assert "\n" not in summary.why and len(summary.why) <= 200


def test_a_server_without_the_path_is_a_404() -> None:
    with serve(lambda n: (200, PROM, "x 1\n")) as (url, _):
        summary = ServerMetricsScraper(url + "/elsewhere/metrics").stop()
        assert summary == ServerMetrics(available=False, why="the scraper was never started")
        scraper = ServerMetricsScraper(url + "/elsewhere/metrics")
        scraper.start()
        summary = scraper.stop()
    assert summary.available is False and "HTTP 404" in summary.why


@pytest.mark.parametrize(
    "base", ["http://127.0.0.1:{port}", "not a url", "ftp://127.0.0.1:{port}", "http://[::1"]
)
def test_never_raises_on_unreachable_or_bad_urls(base: str) -> None:
    scraper = ServerMetricsScraper(base.format(port=free_port()), timeout_s=0.5)
    scraper.start()
    summary = scraper.stop()
    assert summary.available is False and summary.why


def test_a_silent_server_times_out() -> None:
    # the fault: a server that accepts and never answers (the scraper's own 0.2 s limit)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        scraper = ServerMetricsScraper(url, timeout_s=0.2)
        started = time.monotonic()
        scraper.start()
        summary = scraper.stop()
        assert time.monotonic() - started < 2
    assert summary.available is False and "0.2" in summary.why
