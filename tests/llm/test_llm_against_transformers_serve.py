"""``accelscope llm`` against the real ``transformers serve`` (random-weights Llama, tokenizer
trained here, CPU), with continuous batching off and on: every request streams, token counts
come from the server's usage, the figures are positive and consistent, the decode floor is
computed from the model's config, and a server killed mid-run leaves a complete run whose
failed requests are counted.

Covers: accelscope.commands.llm.workflow, accelscope.llm.client, accelscope.llm.floor,
accelscope.testing.real_llm_servers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.llm.documents import LlmTrial
from accelscope.llm.summary import Slo
from accelscope.llm.workload import Lengths, Workload
from accelscope.store.sqlite import ResultStore
from accelscope.testing.client_faults import AfterAnswers
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.testing.real_llm_servers import TransformersServe

pytestmark = pytest.mark.server  # the real `transformers serve`

OUTPUT_TOKENS = 8


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module", params=[False, True], ids=["static", "continuous-batching"])
def server(request: pytest.FixtureRequest, tiny_model: Path) -> Iterator[TransformersServe]:
    with TransformersServe(tiny_model, continuous_batching=request.param) as running:
        yield running


def _settings(server: TransformersServe, **changes: object) -> LlmRequestSettings:
    base: dict[str, object] = {
        "url": server.url,
        "model": server.model,
        "rates": (4.0,),
        "requests": 12,
        "workload": Workload(
            input_tokens=Lengths(16, 16), output_tokens=Lengths(OUTPUT_TOKENS, OUTPUT_TOKENS)
        ),
        "slo": Slo.parse("ttft=5s,tpot=1s", 90.0),
        "model_config": server.model_dir,
        "bandwidth_bytes_per_s": 20e9,
        "timeout_s": 60.0,
    }
    base.update(changes)
    return LlmRequestSettings(**base)  # type: ignore[arg-type]


def test_every_request_streams_with_usage_counts(
    server: TransformersServe, tmp_path: Path, environment: object
) -> None:
    outcome = llm(
        _settings(server, concurrencies=(3,)),
        store_path=tmp_path / "store.db",
        environment=environment,  # type: ignore[arg-type]
    )
    rate_trial, closed_trial = outcome.document.trials
    for trial in (rate_trial, closed_trial):
        summary = trial.summary
        assert summary.completed == 12 and summary.errors == 0
        assert summary.token_sources == {"usage": summary.window.requests}
        assert summary.tokens.output_mean == OUTPUT_TOKENS
        metrics = summary.metrics
        assert 0 < metrics.ttft_s.p50 <= metrics.e2e_s.p50
        assert metrics.tpot_s.p50 > 0 and metrics.itl_s.n > 0
        floor = trial.floor
        assert floor is not None
        assert floor.tpot_floor_s > 0 and floor.bandwidth_source == "--bandwidth (given)"
        assert 0 < floor.decode_efficiency < 1  # a Python server is far above the floor
    with ResultStore(tmp_path / "store.db") as store:
        run = store.get_run(outcome.run_id or "")
        stored = [LlmTrial.from_payload(t) for t in run.documents_of("llm-trial")]
    assert [len(t.records) for t in stored] == [12, 12]
    assert all(r.output_tokens == OUTPUT_TOKENS for r in stored[0].records)
    json.dumps(outcome.document.model_dump(mode="json"))  # JSON-ready


def test_chat_api_streams(server: TransformersServe, tmp_path: Path, environment: object) -> None:
    outcome = llm(
        _settings(server, api="chat", rates=(), concurrencies=(2,), requests=4),
        store_path=None,
        environment=environment,  # type: ignore[arg-type]
    )
    summary = outcome.document.trials[0].summary
    assert summary.completed == 4 and summary.tokens.output_mean == OUTPUT_TOKENS


def test_a_server_killed_mid_run_is_recorded(
    tiny_model: Path, tmp_path: Path, environment: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fault: kill the server in the client thread that has just received the 2nd answer
    with TransformersServe(tiny_model) as doomed:
        hook = AfterAnswers(2, doomed.kill).install(monkeypatch.setattr)
        settings = _settings(doomed, rates=(2.0,), requests=30, scrape_metrics=False)
        outcome = llm(settings, store_path=tmp_path / "s.db", environment=environment)  # type: ignore[arg-type]
        assert not doomed.group_alive()
    summary = outcome.document.trials[0].summary
    assert len(hook.received) >= 2 and summary.completed == len(hook.received)
    assert summary.errors >= 1
    assert summary.completed + summary.errors + summary.cancelled == 30
    assert any(
        "refused" in kind.error.lower()
        or "closed" in kind.error.lower()
        or "ended" in kind.error.lower()
        or "reset" in kind.error.lower()
        for kind in summary.error_kinds
    )
