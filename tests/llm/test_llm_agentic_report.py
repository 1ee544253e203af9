"""An agentic ``llm`` run reported as jobs: per concurrency step the validity gate first (an
invalid step named with its reasons, no figure), the job figures with their intervals and $ per
job from the catalog's price, TTFT by context, the SLO tiers, and the measured prefix-cache hit
rate against the optimum of the same sessions, with the eviction cliff named; stored in the run
and shown in the terminal. Against the fake server (its word-prefix cache and its faults).

Covers: accelscope.commands.llm.workflow, accelscope.commands.llm.view, accelscope.llm.harness,
accelscope.llm.jobs, accelscope.llm.prefix_optimum, accelscope.llm.sse_reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from accelscope.commands.llm.view import llm_view
from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.documents import Slo
from accelscope.errors import BadInputError
from accelscope.llm.agentic import AgenticWorkload
from accelscope.llm.documents import LlmRun, RequestRecord, ServerConfig
from accelscope.llm.jobs import ValidityBounds
from accelscope.llm.prefix_optimum import (
    CLIFF_BOUND,
    TurnTokens,
    against_optimum,
    cliff_of,
    optimum,
)
from accelscope.llm.sse_reader import StreamState, _usage
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fake_llm_server import FakeLLMServer

SYSTEM = "you are a coding agent with tools " * 4


def _trajectories(tmp_path: Path, sessions: int = 4) -> Path:
    """``sessions`` agent trajectories of 3 turns: a shared system prompt, two tool rounds
    with waits of 20 ms."""
    rows: list[dict[str, Any]] = []
    for s in range(sessions):
        call = {"type": "function", "function": {"name": "grep", "arguments": '{"q": "x"}'}}
        rows.append(
            {
                "id": f"job{s}",
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"task {s}: fix the failing test"},
                    {"role": "assistant", "content": "look", "tool_calls": [{"id": "a", **call}]},
                    {
                        "role": "tool",
                        "tool_call_id": "a",
                        "content": "a.py b.py",
                        "latency_s": 0.02,
                    },
                    {"role": "assistant", "content": "edit", "tool_calls": [{"id": "b", **call}]},
                    {"role": "tool", "tool_call_id": "b", "content": "ok", "latency_s": 0.02},
                    {"role": "assistant", "content": "done, the test passes"},
                ],
            }
        )
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _stored(store: Path) -> tuple[LlmRun, list[dict[str, Any]]]:
    with ResultStore(store) as opened:
        run = opened.get_run(
            opened.list_runs()[0].id
        )  # the newest (ids within a second do not order)
        [summary] = run.documents_of("llm")
        trials = run.documents_of("llm-trial")
    return LlmRun.model_validate(summary), trials


def _shown(document: LlmRun) -> str:
    console = Console(width=400, record=True, color_system=None)
    console.print(llm_view(document))
    return console.export_text()


# The figures of a valid run are what these tests check; the gate's lag rule (the client's
# p99 send lag) is tested in test_jobs.py. On a shared test machine a sleeping session thread
# may wake late, so the runs that need figures state a lag bound a busy machine keeps.
BUSY_MACHINE = ValidityBounds(lag_limit_s=5.0)


def test_an_agentic_run_stores_and_shows_jobs_and_the_cache_against_its_optimum(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store.db"
    workload = AgenticWorkload.from_file(_trajectories(tmp_path), answers="recorded")
    with FakeLLMServer(ttft_s=0.005, itl_s=0.001) as server:
        llm(
            LlmRequestSettings(
                url=server.url,
                model=server.model,
                api="chat",
                workload=workload,
                concurrencies=(1, 4),
                slo=Slo.parse("ttft=2s,tpot=500ms"),
                instance="g6.xlarge",
                validity=BUSY_MACHINE,
                report_path=tmp_path / "r.html",
            ),
            store_path=store,
        )
    document, trials = _stored(store)
    assert len(document.trials) == 2 and len(trials) == 2
    for trial in document.trials:
        step = trial.summary.agentic
        assert step is not None
        gate = step.gate
        assert gate.valid and gate.turns == 12 and gate.errors == 0 and not gate.failures
        # the fake server publishes no max_model_len: the overflow is not checked, and says so
        assert gate.overflowed is None and "max_model_len" in gate.context_why
        jobs = step.jobs
        assert jobs is not None
        assert (jobs.jobs, jobs.completed, jobs.met_slo) == (4, 4, 4)
        hours = jobs.duration_s / 3600.0
        assert jobs.completed_jobs_per_hour.value == pytest.approx(4 / hours)
        assert jobs.jobs_per_hour_at_slo is not None
        assert jobs.jobs_per_hour_at_slo.value == pytest.approx(4 / hours)
        # every session alike (all at the SLO): the exact binomial interval, named
        assert jobs.jobs_per_hour_at_slo.low is not None
        assert jobs.jobs_per_hour_at_slo.low < 4 / hours
        assert "Clopper-Pearson" in jobs.jobs_per_hour_at_slo.method
        assert jobs.job_latency_p50_s is not None and jobs.job_latency_p50_s.value >= 0.04
        assert jobs.usd_per_hour is not None and "g6.xlarge" in jobs.usd_source
        assert jobs.usd_per_completed_job is not None
        assert jobs.usd_per_completed_job.value == pytest.approx(jobs.usd_per_hour * hours / 4)
        assert sum(b.turns for b in jobs.ttft_by_context) == 12
        assert len(jobs.tiers) == 12 and all(t.sessions_meeting <= 4 for t in jobs.tiers)
        cache = step.cache
        assert cache is not None
        assert cache.concurrency == trial.arrivals.concurrency
        # the fake server exports vLLM's prefix-cache counters, and no cache configuration
        assert cache.measured is not None and cache.measured_source.startswith("vllm:")
        assert cache.lru is None and cache.reference == "every prefix kept"
        assert "no cache configuration" in cache.lru_why
        assert cache.block_size_tokens == 16 and cache.block_basis.startswith("assumed")
        assert 0.0 < cache.every_prefix_kept < 1.0
        assert cache.ratio == pytest.approx(cache.measured / cache.every_prefix_kept)
        assert cache.below_bound == (cache.ratio < CLIFF_BOUND)
    assert document.eviction_cliff is not None
    assert document.eviction_cliff.bound == CLIFF_BOUND
    shown = _shown(document)
    assert "valid at concurrency 4: 0 of 12 turns failed" in shown
    assert "jobs at concurrency 1: 4/4 sessions completed, 4 at the SLO" in shown
    assert "$ per job at concurrency 4:" in shown and "g6.xlarge" in shown
    assert "TTFT by context at concurrency 4" in shown
    assert "sessions meeting each SLO tier at concurrency 1" in shown
    assert "prefix cache at concurrency 4: measured" in shown
    assert "every prefix kept only" in shown
    assert "eviction cliff" in shown


def test_the_gate_fails_a_run_with_injected_server_errors(cli: CliRunner, tmp_path: Path) -> None:
    path, store = _trajectories(tmp_path), tmp_path / "store.db"
    # the check request and three turns are answered; then the server is gone
    with FakeLLMServer(ttft_s=0.005, itl_s=0.001, fault="die-after:4") as server:
        code, out, err = cli(
            "llm", server.url, "--model", server.model, "--api", "chat", "--agentic", path,
            "--concurrency", "2", "--slo", "ttft=2s", "--store", store,
            "--report", tmp_path / "r.html",
        )  # fmt: skip
    assert code == 0, err
    document, _ = _stored(store)
    [trial] = document.trials
    step = trial.summary.agentic
    assert step is not None and not step.gate.valid and step.jobs is None
    [failed] = [f for f in step.gate.failures if f.reason == "errors"]
    assert step.gate.errors >= 9 and step.gate.turns == 12
    assert f"{step.gate.errors} of 12 turns failed" in failed.text
    assert "INVALID at concurrency 2: errors:" in out
    assert "jobs at concurrency 2" not in out


def test_the_gate_fails_a_run_whose_prompts_overflow_the_context(tmp_path: Path) -> None:
    workload = AgenticWorkload.from_file(_trajectories(tmp_path), answers="recorded")
    # the last turn's prompt is about 60 words: 50 tokens overflow on most turns
    with FakeLLMServer(ttft_s=0.005, itl_s=0.001) as server:
        outcome = llm(
            LlmRequestSettings(
                url=server.url,
                model=server.model,
                api="chat",
                workload=workload,
                concurrencies=(2,),
                context_tokens=50,
                validity=BUSY_MACHINE,
                report_path=tmp_path / "r.html",
            ),
            store_path=tmp_path / "store.db",
        )
    [trial] = outcome.document.trials
    step = trial.summary.agentic
    assert step is not None and step.jobs is None
    assert "context overflow" in [f.reason for f in step.gate.failures]
    assert step.gate.context_tokens == 50 and step.gate.overflowed is not None
    assert step.gate.overflowed > 0.01 * step.gate.turns
    shown = _shown(outcome.document)
    assert "INVALID at concurrency 2: context overflow:" in shown
    assert "errors:" not in shown
    assert "context of 50 tokens" in shown
    with pytest.raises(BadInputError, match="context length 1"):
        llm(
            LlmRequestSettings(url="http://127.0.0.1:9", model="m", workload=workload,
                               concurrencies=(1,), context_tokens=1),
            store_path=tmp_path / "s2.db",
        )  # fmt: skip
    assert not (tmp_path / "s2.db").exists()


def _sessions(count: int, turns: int, shared: int, own: int) -> list[list[TurnTokens]]:
    """Sessions whose prompts open with ``shared`` common tokens, each turn adding ``own``."""
    found = []
    for s in range(count):
        prompt = tuple(range(shared))
        chain = []
        for t in range(turns):
            prompt = prompt + tuple(10_000 * (s + 1) + 100 * t + k for k in range(own))
            chain.append(TurnTokens(prompt))
        found.append(chain)
    return found


def test_the_optimum_under_the_server_capacity_names_the_cliff() -> None:
    sessions = _sessions(count=8, turns=4, shared=32, own=32)
    config = ServerConfig(
        server="vllm", source="test", block_size_tokens=16, kv_capacity_tokens=16 * 24
    )
    every = optimum(sessions, block_size=16).hit_rate
    steps = []
    for concurrency in (1, 4, 8):
        lru = optimum(sessions, block_size=16, capacity_blocks=24, concurrency=concurrency)
        found = against_optimum(
            sessions,
            concurrency=concurrency,
            config=config,
            measured=0.5 * every,
            measured_source="usage.prompt_tokens_details.cached_tokens",
        )
        assert found.every_prefix_kept == pytest.approx(every)
        assert found.lru == pytest.approx(lru.hit_rate) and found.reference == "lru"
        assert found.capacity_blocks == 24 and found.block_basis == "the server's"
        assert found.ratio == pytest.approx(0.5 * every / lru.hit_rate)
        steps.append(found)
    # more sessions in flight than 24 blocks hold: LRU evicts each context before its reuse
    assert steps[0].lru is not None and steps[2].lru is not None
    assert steps[2].lru < steps[0].lru
    cliff = cliff_of(steps)
    first_below = next(s.concurrency for s in steps if s.ratio is not None and s.ratio < 0.9)
    assert cliff.concurrency == first_below
    assert f"eviction cliff at concurrency {first_below}" in cliff.text
    # half of what every prefix kept allows, at every step: reuse lost from the first step
    assert all(s.kept_share == pytest.approx(0.5) for s in steps)
    assert cliff.reuse_lost_at == 1
    # the capacity alone predicts the cliff: where LRU keeps under 0.9 of every prefix kept
    predicted = next(
        s.concurrency for s in steps if s.lru is not None and s.lru < 0.9 * s.every_prefix_kept
    )
    assert cliff.optimum_cliff_at == predicted
    assert f"below 0.9 from concurrency {predicted}" in cliff.text
    # at a rate there is no concurrency to replay LRU at; a measured rate at the optimum
    at_rate = against_optimum(
        sessions, concurrency=None, config=config, measured=every, measured_source="x"
    )
    assert at_rate.lru is None and "rate" in at_rate.lru_why and at_rate.ratio == 1.0
    assert not at_rate.below_bound
    none = against_optimum(
        sessions, concurrency=2, config=None, measured=None, measured_why="no /metrics"
    )
    assert none.ratio is None and "no /metrics" in none.ratio_why
    assert cliff_of([none]).concurrency is None
    # a block of 16 server tokens is 8 tokens of a model that counts half as many
    halved = against_optimum(
        sessions, concurrency=1, config=config, measured=0.1, tokens_per_model_token=2.0
    )
    assert halved.every_prefix_kept == pytest.approx(optimum(sessions, block_size=8).hit_rate)
    with pytest.raises(ValueError, match="cliff bound"):
        against_optimum(sessions, concurrency=1, config=config, measured=0.1, bound=0.0)


def test_cached_tokens_are_read_from_the_usage() -> None:
    state = StreamState()

    _usage({"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": 32}}, 5, state)
    assert state.usage_cached == 32
    record = RequestRecord(index=0, scheduled_s=0.0, sent_s=0.0, end_s=1.0, cached_tokens=32)
    assert RequestRecord.model_validate(record.model_dump(mode="json")).cached_tokens == 32
    assert RequestRecord(index=0, scheduled_s=0.0, sent_s=0.0, end_s=1.0).cached_tokens is None


def test_without_an_slo_the_jobs_have_no_rate_at_the_slo(tmp_path: Path) -> None:
    workload = AgenticWorkload.from_file(_trajectories(tmp_path, sessions=2), answers="recorded")
    with FakeLLMServer(ttft_s=0.005, itl_s=0.001) as server:
        outcome = llm(
            LlmRequestSettings(
                url=server.url,
                model=server.model,
                api="chat",
                workload=workload,
                concurrencies=(2,),
                slo=None,
                validity=BUSY_MACHINE,
                report_path=tmp_path / "r.html",
            ),
            store_path=tmp_path / "store.db",
        )
    [trial] = outcome.document.trials
    step = trial.summary.agentic
    assert step is not None and step.jobs is not None
    assert step.jobs.jobs_per_hour_at_slo is None and step.jobs.completed == 2
    assert "no SLO given" in " ".join(step.jobs.notes)
    assert "$ per job at concurrency 2: not measured: no price" in _shown(outcome.document)


def test_a_bad_instance_is_one_line(cli: CliRunner, tmp_path: Path) -> None:
    path = _trajectories(tmp_path, sessions=1)
    with FakeLLMServer(ttft_s=0.005, itl_s=0.001) as server:
        code, _, err = cli(
            "llm", server.url, "--model", server.model, "--agentic", path, "--concurrency", "1",
            "--instance", "no-such-instance", "--store", tmp_path / "s.db",
        )  # fmt: skip
    assert_one_line_error(code, err, "no-such-instance")
