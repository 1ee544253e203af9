"""``accelscope llm`` against a real vLLM (the CPU build, from ``.venv-vllm``: ``make vllm``) on
a random-weights Llama whose tokenizer was trained here. One server for the module (a start
costs 45-100 s on these machines), prefix caching on, block size 128 (the CPU default):
completions and chat stream with usage; the server's ``/metrics`` are read for real (prefix-cache
queries and hits, KV usage, running and waiting requests, preemptions) with the configuration it
publishes; a shared prefix shorter than one KV block is explained, one longer is hit;
conversations reuse the cache turn after turn; and, last, the server is killed in the middle of
a multi-turn run, whose run is kept with the lost turns counted as errors.

Covers: accelscope.commands.llm.workflow, accelscope.llm.metrics_scraper,
accelscope.llm.server_vocabulary, accelscope.llm.explain, accelscope.testing.real_llm_servers."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import LlmTrial, RequestRecord, Slo
from accelscope.llm.records import LlmRequest
from accelscope.llm.workload import Lengths, PrefixScenario, SessionWorkload, Workload
from accelscope.store.sqlite import ResultStore
from accelscope.testing.client_faults import AfterAnswers
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.testing.real_llm_servers import VllmServe

# a real vLLM; its start alone may take up to VLLM_STARTUP_TIMEOUT_S (420 s) on a loaded machine,
# and the first test's set-up pays it
pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

BLOCK = 128


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # vLLM's CPU attention needs a head size of 32 or more: 64 hidden / 2 heads
    return build_tiny_llama(tmp_path_factory.mktemp("vllm-model") / "tiny", heads=2, kv_heads=1)


@pytest.fixture(scope="module")
def vllm(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServe]:
    log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    with VllmServe(tiny_model, prefix_caching=True, log_path=log) as server:
        yield server
    assert not server.group_alive()


@pytest.fixture(scope="module")
def decode_s_per_token(vllm: VllmServe) -> float:
    """This server's time per output token here, measured (the second of two 64-token
    requests: the first loads kernels): what sizes a trial that must outlast several scrapes
    on a fast CPU as on a slow one."""
    endpoint = OpenAIEndpoint(vllm.url, vllm.model, ignore_eos=True)
    record: RequestRecord | None = None
    for _ in range(2):
        record = endpoint.stream(
            LlmRequest(index=0, prompt="Hello there, how are you", max_tokens=64),
            origin_s=time.perf_counter(),
            scheduled_s=0.0,
            timeout_s=120.0,
            cancel=threading.Event(),
        )
        assert record.ok, record.error
    assert record is not None and record.first_token_s is not None
    return max((record.end_s - record.first_token_s) / 63, 1e-4)


def _settings(server: VllmServe, **changes: object) -> LlmRequestSettings:
    base: dict[str, object] = {
        "url": server.url,
        "model": server.model,
        "concurrencies": (2,),
        "requests": 12,
        "workload": Workload(input_tokens=Lengths(24, 24), output_tokens=Lengths(8, 8)),
        "tokenizer": server.model_dir,
        "ignore_eos": True,
        "timeout_s": 120.0,
    }
    base.update(changes)
    return LlmRequestSettings(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_streams_with_usage_and_the_server_metrics_are_read(
    vllm: VllmServe,
    decode_s_per_token: float,
    tmp_path: Path,
    environment: object,
    api: str,
) -> None:
    # sized from the measured speed: 16 requests two at a time decode for about 6 s (4-5 s
    # measured), several one-second scrapes while requests run, on a fast CPU as on a slow one
    output = min(max(96, math.ceil(6.0 / 8 / decode_s_per_token)), 1800)
    outcome = llm(
        _settings(
            vllm,
            api=api,
            slo=Slo.parse("ttft=10s,tpot=5s", 90.0),
            requests=16,
            workload=Workload(input_tokens=Lengths(24, 24), output_tokens=Lengths(output, output)),
        ),
        store_path=tmp_path / "store.db",
        environment=environment,  # type: ignore[arg-type]
    )
    [trial] = outcome.document.trials
    summary = trial.summary
    assert summary.completed == 16 and summary.errors == 0
    assert summary.token_sources == {"usage": summary.window.requests if summary.window else 0}
    assert summary.tokens is not None and summary.tokens.output_mean == output
    metrics = summary.metrics
    assert 0 < (metrics.ttft_s.p50 or 0) <= (metrics.e2e_s.p50 or 0)
    # TPOT is measured for every request; vLLM merges the outputs its API server has not yet
    # sent (two cores shared with the engine), so a request's later tokens may arrive in one
    # chunk (TPOT 0, measured so: 9 of 15 in one full-suite run). A request whose tokens came
    # in chunks spread in time has a positive TPOT.
    assert metrics.tpot_s.n and (metrics.tpot_s.min or 0) >= 0
    spread = [
        r for r in trial.records if r.chunk_times_s and r.chunk_times_s[-1] > r.chunk_times_s[0]
    ]
    assert not spread or (metrics.tpot_s.max or 0) > 0
    server = trial.server_metrics
    assert server.available and server.server == "vllm" and server.scrapes >= 2
    assert server.prefix_cache is not None and (server.prefix_cache.queries or 0) > 0
    kv = server.kv_cache_usage
    assert (kv is not None and 0 <= kv.max <= 1) or any(
        "kv_cache" in c for c in server.contradicted
    )
    assert server.preemptions == 0
    config = server.config
    assert config is not None and config.block_size_tokens == BLOCK
    assert config.prefix_caching is True and (config.kv_capacity_tokens or 0) > 10_000
    assert outcome.document.server_config == config
    assert server.timeline and server.timeline[0].t_s <= 0.5  # scraped from the start
    assert server.timeline[-1].t_s >= summary.duration_s - 0.5
    with ResultStore(tmp_path / "store.db") as store:
        stored = store.get_run(outcome.run_id or "").documents_of("llm-trial")
    back = LlmTrial.from_payload(stored[0])
    assert back.server_metrics.config == config and len(back.records) == 16
    # the moment the gauges are asserted on: scrapes taken while the client had a request at
    # the server (sent, not ended; vLLM's CPU API server answered /metrics late in a stream,
    # within 20 ms of its end, in two full-suite runs), proved before the assert
    busy = [
        point
        for point in server.timeline
        if any(r.sent_s <= point.t_s <= r.end_s for r in back.records)
    ]
    assert len(busy) >= 2, (
        decode_s_per_token,
        output,
        [p.t_s for p in server.timeline],
        [(round(r.sent_s, 3), round(r.end_s, 3)) for r in back.records],
    )
    # at those scrapes the gauges read a request running or waiting, or accelscope says they
    # contradict the client and does not use them (vLLM 0.32's CPU build read 0 throughout here)
    if server.running is not None:
        assert max((p.running or 0) + (p.waiting or 0) for p in busy) >= 1
    else:
        assert any(line.startswith("running: read 0") for line in server.contradicted)
        assert any("contradicted, not used" in note for note in trial.notes)


def test_a_prefix_shorter_than_a_block_is_explained_one_longer_hits(
    vllm: VllmServe, tmp_path: Path, environment: object
) -> None:
    short = llm(
        _settings(
            vllm,
            workload=Workload(
                input_tokens=Lengths(96, 96),
                output_tokens=Lengths(4, 4),
                prefix=PrefixScenario(32, 1.0),
                seed=101,
            ),
        ),
        store_path=None,
        environment=environment,  # type: ignore[arg-type]
    ).document
    [trial] = short.trials
    assert trial.server_metrics.prefix_cache is not None
    assert trial.server_metrics.prefix_cache.hits == 0  # a 32-token prefix cannot hit
    assert trial.summary.prefix_reuse is not None
    assert trial.summary.prefix_reuse.expected_share == 0  # counted in whole blocks
    assert any("shorter than one KV block" in n and "128" in n for n in short.notes)
    long = llm(
        _settings(
            vllm,
            workload=Workload(
                input_tokens=Lengths(320, 320),
                output_tokens=Lengths(4, 4),
                prefix=PrefixScenario(2 * BLOCK + 20, 1.0),
                seed=202,
            ),
        ),
        store_path=None,
        environment=environment,  # type: ignore[arg-type]
    ).document
    [hit] = long.trials
    reuse = hit.summary.prefix_reuse
    assert reuse is not None and reuse.expected_share == pytest.approx(
        11 * 2 * BLOCK / (12 * 320), rel=0.02
    )  # the first of 12 prompts fills the cache, the other 11 reuse two blocks
    measured = hit.server_metrics.prefix_cache
    assert measured is not None
    assert measured.hit_rate == pytest.approx(reuse.expected_share, rel=0.05)
    assert not any("shorter than one KV block" in n for n in long.notes)


def test_conversations_reuse_the_prefix_cache_turn_by_turn(
    vllm: VllmServe, tmp_path: Path, environment: object
) -> None:
    workload = SessionWorkload(
        sessions_per_trial=4,
        turns=Lengths(3, 3),
        input_tokens=Lengths(150, 150),
        output_tokens=Lengths(16, 16),
        seed=303,
    )
    outcome = llm(
        _settings(vllm, workload=workload, requests=None, concurrencies=(2,)),
        store_path=tmp_path / "store.db",
        environment=environment,  # type: ignore[arg-type]
    )
    [trial] = outcome.document.trials
    assert trial.summary.completed == 12 and trial.summary.errors == 0
    turns = trial.summary.turns
    assert [t.turn for t in turns] == [1, 2, 3]
    assert turns[0].reusable_prefix_tokens_mean == 0
    assert (turns[1].reusable_prefix_tokens_mean or 0) >= 150
    assert (turns[2].prompt_tokens_mean or 0) > (turns[1].prompt_tokens_mean or 0) > 150
    server = trial.server_metrics.prefix_cache
    assert server is not None and (server.hits or 0) >= 4 * 2 * BLOCK  # later turns hit
    reuse = trial.summary.prefix_reuse
    assert reuse is not None and (reuse.expected_share or 0) > 0.3


def test_a_server_killed_mid_conversation(
    vllm: VllmServe, tmp_path: Path, environment: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last in the module: it kills the shared server."""
    workload = SessionWorkload(
        sessions_per_trial=6,
        turns=Lengths(4, 4),
        input_tokens=Lengths(32, 32),
        output_tokens=Lengths(48, 48),
        seed=404,
    )
    store = tmp_path / "store.db"
    # the fault: the server is killed once the client has received two whole turns, from
    # inside the client thread that received the second (its session has turns left to send)
    hook = AfterAnswers(2, vllm.kill).install(monkeypatch.setattr)
    began = time.perf_counter()
    outcome = llm(
        _settings(vllm, workload=workload, requests=None, timeout_s=30.0),
        store_path=store,
        environment=environment,  # type: ignore[arg-type]
    )
    assert time.perf_counter() - began < 60  # never a hang
    [trial] = outcome.document.trials
    summary = trial.summary
    assert summary.requests == 24  # every turn of every session is counted
    received = hook.received
    assert len(received) >= 2 and summary.completed == len(received) and summary.errors >= 1
    assert summary.completed + summary.errors == 24
    assert any("not sent" in kind.error for kind in summary.error_kinds)
    with ResultStore(store) as opened:
        run = opened.get_run(outcome.run_id or "")
    assert run.status == "complete" and run.documents_of("llm")
    assert not vllm.group_alive()
