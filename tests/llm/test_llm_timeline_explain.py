"""Client and server on one clock, and the server's own configuration explaining the figures:
vLLM's ``cache_config_info`` read into a typed configuration, the scrapes as a timeline with
per-interval counters, the moment an SLO term broke set against what the server was doing, the
prefix reuse a workload allows counted in the server's KV blocks, and the sentences that explain
a gap (a shared prefix shorter than one block, prefix caching off). Exact, on hand-built records
and scrapes.

Covers: accelscope.llm.timeline, accelscope.llm.explain, accelscope.llm.server_vocabulary."""

from __future__ import annotations

import pytest

from accelscope.llm.documents import (
    Arrivals,
    LlmTrial,
    RequestRecord,
    ServerConfig,
    ServerMetrics,
    ServerSample,
    Slo,
    WorkloadSummary,
)
from accelscope.llm.explain import explanations, prefix_reuse
from accelscope.llm.prometheus_text import parse_exposition
from accelscope.llm.server_vocabulary import published_config, summarise
from accelscope.llm.summary import summarise_trial
from accelscope.llm.timeline import slo_breaks

# the line vLLM 0.32.0 (CPU build) exported here, verbatim
VLLM_CONFIG_INFO = (
    'vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",'
    'cache_hit_alignment_tokens="None",effective_attention_block_size="128",'
    'enable_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="True",engine="0",'
    'gpu_memory_utilization="0.92",hash_block_size="None",is_attention_free="False",'
    'kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",kv_cache_max_concurrency="2048.0",'
    'kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="4194304",'
    'kv_offloading_backend="native",kv_offloading_size="None",kv_sharing_fast_prefill="False",'
    'num_gpu_blocks="32768",prefix_caching_hash_algo="sha256",sliding_window="None",'
    'user_specified_block_size="False"} 1.0'
)


def _scrape(
    running: float, waiting: float, kv: float, queries: float, hits: float, preempted: float
) -> list:
    text = "\n".join(
        [
            f'vllm:num_requests_running{{engine="0"}} {running}',
            f'vllm:num_requests_waiting{{engine="0"}} {waiting}',
            f'vllm:kv_cache_usage_perc{{engine="0"}} {kv}',
            f'vllm:prefix_cache_queries_total{{engine="0"}} {queries}',
            f'vllm:prefix_cache_hits_total{{engine="0"}} {hits}',
            f'vllm:num_preemptions_total{{engine="0"}} {preempted}',
            VLLM_CONFIG_INFO,
        ]
    )
    return parse_exposition(text)


def test_vllm_cache_config_info_is_read_typed() -> None:
    config = published_config(parse_exposition(VLLM_CONFIG_INFO))
    assert config is not None
    assert config.server == "vllm" and config.source == "vllm:cache_config_info"
    assert config.block_size_tokens == 128 and config.prefix_caching is True
    assert config.kv_capacity_tokens == 4_194_304 and config.kv_memory_bytes == 2**30
    assert config.cache_dtype == "auto" and config.max_concurrency == 2048.0
    assert config.labels["num_gpu_blocks"] == "32768"
    assert published_config(parse_exposition("vllm:num_requests_running 1")) is None
    off = published_config(
        parse_exposition('vllm:cache_config_info{enable_prefix_caching="False",block_size="16"} 1')
    )
    assert off is not None and off.prefix_caching is False and off.block_size_tokens == 16
    assert off.kv_capacity_tokens is None  # not published: not measured, never 0


def test_scrapes_become_a_timeline_on_the_trial_clock() -> None:
    origin = 100.0
    scrapes = [
        (100.5, _scrape(0, 0, 0.0, 1000, 0, 0)),
        (101.5, _scrape(4, 0, 0.30, 1500, 256, 0)),
        (102.5, _scrape(8, 3, 0.97, 2500, 256, 2)),
        (103.5, _scrape(2, 0, 0.20, 100, 10, 0)),  # the server restarted: counters reset
    ]
    summary = summarise(scrapes, origin_s=origin)
    assert summary.config is not None and summary.config.block_size_tokens == 128
    timeline = summary.timeline
    assert [s.t_s for s in timeline] == [0.5, 1.5, 2.5, 3.5]
    assert [s.running for s in timeline] == [0, 4, 8, 2]
    assert [s.waiting for s in timeline] == [0, 0, 3, 0]
    assert timeline[2].kv_cache_usage == 0.97
    assert timeline[0].prefix_cache_queries is None  # no interval before the first scrape
    assert [s.prefix_cache_queries for s in timeline[1:]] == [500, 1000, 100]
    assert [s.prefix_cache_hits for s in timeline[1:]] == [256, 0, 10]
    assert [s.preemptions for s in timeline[1:]] == [0, 2, 0]
    assert summary.prefix_cache is not None and summary.prefix_cache.queries == 1600
    assert summary.preemptions == 2


def _record(index: int, scheduled: float, ttft: float, error: str = "") -> RequestRecord:
    return RequestRecord(
        index=index,
        scheduled_s=scheduled,
        sent_s=scheduled,
        end_s=scheduled + ttft + 0.1,
        first_token_s=None if error else scheduled + ttft,
        chunk_times_s=[] if error else [scheduled + ttft, scheduled + ttft + 0.1],
        output_tokens=None if error else 2,
        prompt_tokens=10,
        error=error,
    )


def _ramp(breaking_at: int, count: int = 40) -> list[RequestRecord]:
    """A request every 0.1 s: fast until ``breaking_at``, slow (1 s TTFT) from there on."""
    return [_record(i, i * 0.1, 0.05 if i < breaking_at else 1.0) for i in range(count)]


def test_the_moment_an_slo_term_broke_and_the_server_then() -> None:
    slo = Slo.parse("ttft=500ms", 90.0)
    records = _ramp(breaking_at=25)
    summary = summarise_trial(records, slo=slo)
    assert summary.slo is not None and summary.slo.terms["ttft_s"].state == "missed"
    timeline = [
        ServerSample(t_s=0.5, running=2, waiting=0, kv_cache_usage=0.1, preemptions=None),
        ServerSample(t_s=1.5, running=6, waiting=0, kv_cache_usage=0.5, preemptions=0),
        ServerSample(t_s=2.0, running=8, waiting=4, kv_cache_usage=0.97, preemptions=1),
        ServerSample(t_s=3.0, running=8, waiting=9, kv_cache_usage=0.99, preemptions=2),
    ]
    [found] = slo_breaks(records, slo, summary, timeline)
    # windows of 10 requests; more than 10 % over: the window holding request 25 and another
    # over request (two over) is the first, and its first request over is request 25 (2.5 s)
    assert found.metric == "ttft_s" and found.at_s == pytest.approx(2.5)
    assert found.window_requests == 10 and found.share_over == pytest.approx(0.2)
    assert found.waiting_since_s == 2.0
    assert found.server is not None and found.server.t_s == 2.0
    assert found.text == (
        "p90 TTFT broke 2.5 s into the trial (20% of 10 requests over 500 ms); 0.5 s after "
        "requests began waiting; then 8 running, 4 waiting, KV usage 97%, 1 preemptions so far"
    )


def test_no_break_when_the_term_is_met_and_no_server_state_said_so() -> None:
    slo = Slo.parse("ttft=500ms", 90.0)
    fine = _ramp(breaking_at=1000)
    assert slo_breaks(fine, slo, summarise_trial(fine, slo=slo), []) == []
    broken = _ramp(breaking_at=5)
    [found] = slo_breaks(
        broken, slo, summarise_trial(broken, slo=slo), [], server_why="in-process target"
    )
    assert found.server is None and found.text.endswith("server state: in-process target")
    errors = [_record(i, i * 0.1, 0.05, error="HTTP 500" if i >= 30 else "") for i in range(40)]
    [errored] = slo_breaks(errors, slo, summarise_trial(errors, slo=slo), [])
    assert errored.at_s == pytest.approx(3.0)  # errors count as over


def test_prefix_reuse_counts_whole_kv_blocks() -> None:
    records = []
    for index, (prompt, reusable) in enumerate([(300, 0), (300, 250), (400, 300), (129, 129)]):
        record = _record(index, index * 0.1, 0.05)
        record.prompt_tokens, record.reusable_prefix_tokens = prompt, reusable
        records.append(record)
    config = ServerConfig(server="vllm", source="vllm:cache_config_info", block_size_tokens=128)
    found = prefix_reuse(records, config=config, measured_share=0.3)
    # 250 -> 128; 300 -> 256; a fully cached 129-token prompt recomputes its last token: 128
    assert found is not None and found.reusable_tokens == 128 + 256 + 128
    assert found.prompt_tokens == 1129 and found.expected_share == pytest.approx(512 / 1129)
    assert "128 tokens" in found.basis and found.measured_share == 0.3
    tokens = prefix_reuse(records, config=None, measured_share=None)
    assert tokens is not None and tokens.reusable_tokens == 250 + 300 + 128
    for record in records:
        record.reusable_prefix_tokens = None
    assert prefix_reuse(records, config=config, measured_share=0.3) is None


def _trial(reuse_expected: float, measured: float | None) -> LlmTrial:
    records = [_record(i, i * 0.1, 0.05) for i in range(5)]
    for record in records:
        record.reusable_prefix_tokens = int(10 * reuse_expected)
    summary = summarise_trial(records).model_copy(
        update={"prefix_reuse": prefix_reuse(records, config=None, measured_share=measured)}
    )
    return LlmTrial(
        index=0,
        label="concurrency 4",
        arrivals=Arrivals(concurrency=4),
        summary=summary,
        server_metrics=ServerMetrics(available=True, server="vllm"),
    )


def test_explanations_name_the_block_size_and_prefix_caching_off() -> None:
    config = ServerConfig(
        server="vllm",
        source="vllm:cache_config_info",
        block_size_tokens=128,
        prefix_caching=True,
        kv_capacity_tokens=4096,
    )
    short = WorkloadSummary(kind="synthetic", shared_prefix_tokens=32, prefix_hit_rate=1.0)
    [note] = explanations(short, [_trial(0.0, 0.0)], config)
    assert "shared prefix (32 tokens) is shorter than one KV block" in note
    assert "128 tokens" in note and "--prefix shared=128" in note
    off = config.model_copy(update={"prefix_caching": False})
    notes = explanations(WorkloadSummary(kind="sessions"), [_trial(0.5, 0.0)], off)
    assert notes == [
        "prefix caching is off on this server (enable_prefix_caching=False): the prompt "
        "tokens this workload could reuse are computed again"
    ]
    evicted = explanations(WorkloadSummary(kind="sessions"), [_trial(0.5, 0.1)], config)
    assert evicted == [
        "concurrency 4: the server reused 10% of prompt tokens where the workload allows 50% "
        "(its KV cache holds 4,096 tokens: evicted blocks cannot hit)"
    ]
    assert explanations(WorkloadSummary(kind="sessions"), [_trial(0.5, 0.45)], config) == []
