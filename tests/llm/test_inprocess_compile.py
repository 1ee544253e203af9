"""The in-process engine's static KV cache and ``torch.compile`` (``--cache static``,
``--compile``), on the CPU with the tiny random Llama: same greedy tokens as the dynamic cache,
compilation paid in the warm-up (``compile_s``) and never inside a request's TTFT or TPOT, no
recompilation once requests flow, refusals in one line, and the host-bound note of a GPU run.

Covers: accelscope.llm.inprocess.static, accelscope.llm.inprocess.continuous,
accelscope.llm.inprocess.notes, accelscope.commands.llm.workflow."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.llm.documents import DecodeFloor, LlmTrial
from accelscope.llm.inprocess import (
    ContinuousBatchingModel,
    InProcessModel,
    StaticBatchingModel,
    host_bound_notes,
    in_process_model,
)
from accelscope.llm.records import LlmRequest, RequestRecord
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.llm_model import build_tiny_llama

pytest.importorskip("transformers")

REQUESTS = [
    ("the model serves tokens", 6),
    ("a request waits in a queue for its turn", 9),
    ("the cache keeps keys and values of earlier tokens so decoding reads weights once", 4),
    ("users", 7),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def serve(target: InProcessModel, requests: list[tuple[str, int]]) -> list[RequestRecord]:
    """Send every request at once, each from its own thread, and wait for all."""
    origin = time.perf_counter()
    records: list[RequestRecord | None] = [None] * len(requests)

    def one(i: int) -> None:
        prompt, max_tokens = requests[i]
        records[i] = target.stream(
            LlmRequest(index=i, prompt=prompt, max_tokens=max_tokens),
            origin_s=origin,
            scheduled_s=0.0,
            timeout_s=120.0,
            cancel=threading.Event(),
        )

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    done = [r for r in records if r is not None]
    assert len(done) == len(requests)
    for record in done:
        assert record.ok, record.error
    return done


def greedy(target: InProcessModel, requests: list[tuple[str, int]]) -> list[str]:
    return [r.output_text for r in serve(target, requests)]


@pytest.fixture(scope="module")
def dynamic_tokens(model_dir: Path) -> list[str]:
    target = StaticBatchingModel(model_dir, max_batch=4)
    try:
        return greedy(target, REQUESTS)
    finally:
        target.close()


@pytest.fixture(scope="module")
def compiled(model_dir: Path) -> Iterator[StaticBatchingModel]:
    target = StaticBatchingModel(model_dir, max_batch=4, cache="static", compile=True)
    target.check()
    yield target
    target.close()


def test_static_cache_gives_the_dynamic_cache_greedy_tokens(
    model_dir: Path, dynamic_tokens: list[str]
) -> None:
    target = StaticBatchingModel(model_dir, max_batch=4, cache="static")
    try:
        assert greedy(target, REQUESTS) == dynamic_tokens
        description = target.describe()
        assert description.model_extra == {"cache": "static", "compile": False}
        assert target.compile_s is None
    finally:
        target.close()


@pytest.mark.slow
def test_compiled_static_cache_gives_the_same_tokens_and_pays_compilation_in_the_warm_up(
    compiled: StaticBatchingModel, dynamic_tokens: list[str]
) -> None:
    import torch._dynamo.utils

    compile_s = compiled.compile_s
    assert compile_s is not None and compile_s > 0
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    cache = compiled._static_cache  # one cache for every call: CUDA graphs replay on its tensors
    assert cache is not None
    assert graphs_before > 0, "the warm-up compiled nothing"
    [first] = serve(compiled, REQUESTS[:1])
    assert first.first_token_s is not None
    ttft_s = first.first_token_s - first.sent_s
    assert ttft_s < compile_s / 10, (ttft_s, compile_s)
    assert greedy(compiled, REQUESTS) == dynamic_tokens
    # (dynamo's graph counter is process-wide: in the full suite other tests' compiles in this
    # process moved it during this test, 15 against 14, so it is not held equal here)
    assert compiled.batch_sizes  # requests went through compiled calls
    assert compiled._static_cache is cache
    extra = compiled.describe().model_extra or {}
    assert extra["compile_mode"] == "default"  # the CPU: no CUDA graphs to replay
    assert extra["compile_s"] == compile_s


def test_a_request_longer_than_the_static_cache_is_refused_alone(
    compiled: StaticBatchingModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("accelscope.llm.inprocess.static.STATIC_CACHE_TOKENS", 12)
    origin = time.perf_counter()
    record = compiled.stream(
        LlmRequest(index=0, prompt="the model serves tokens", max_tokens=20),
        origin_s=origin,
        scheduled_s=0.0,
        timeout_s=30.0,
        cancel=threading.Event(),
    )
    assert not record.ok and "exceeds the static cache of 12 tokens" in record.error


def test_requests_that_fit_alone_but_not_together_go_in_separate_calls(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left-padded to the longest prompt, each row runs for the largest max_tokens: a short
    prompt asking many tokens and a long prompt asking few would overflow the cache together,
    so the second waits for the next call instead of failing the batch."""
    target = StaticBatchingModel(model_dir, max_batch=4)
    requests = [("users", 20), (REQUESTS[2][0], 2)]
    try:
        expected = [greedy(target, [r])[0] for r in requests]
        lengths = [len(target._encode(p)) + n for p, n in requests]
    finally:
        target.close()
    monkeypatch.setattr("accelscope.llm.inprocess.static.STATIC_CACHE_TOKENS", max(lengths))
    static = StaticBatchingModel(model_dir, max_batch=4, cache="static")
    static.check()
    model = static.model
    entered, release = threading.Event(), threading.Event()
    original = model.generate

    def held(**kwargs: object) -> object:  # the first call waits, so both queue behind it
        if not entered.is_set():
            entered.set()
            assert release.wait(60)
        return original(**kwargs)

    monkeypatch.setattr(model, "generate", held)
    try:
        blocker = threading.Thread(target=serve, args=(static, [("users", 1)]), daemon=True)
        blocker.start()
        assert entered.wait(60)
        sent: list[list[RequestRecord]] = []
        sender = threading.Thread(target=lambda: sent.append(serve(static, requests)))
        sender.start()
        deadline = time.monotonic() + 60
        while static.progress().queued < 2:  # both wait for the held call
            assert time.monotonic() < deadline, "the two requests never queued"
            time.sleep(0.005)
        release.set()
        sender.join(60)
        blocker.join(60)
        assert [r.output_text for r in sent[0]] == expected
        assert static.batch_sizes == [1, 1, 1]  # the blocker, then one call each
    finally:
        release.set()
        static.close()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"cache": "paged"}, "--cache 'paged': give dynamic or static"),
        ({"compile": True}, "--compile needs --cache static"),
        ({"compile": True, "cache": "dynamic"}, "--compile needs --cache static"),
        ({"batching": "continuous", "cache": "static"}, "--batching static only"),
    ],
)
def test_bad_cache_and_compile_settings(
    kwargs: dict[str, object], words: str, model_dir: Path
) -> None:
    with pytest.raises(BadInputError) as caught:
        in_process_model(model_dir, **kwargs)  # type: ignore[arg-type]
    assert words in caught.value.message
    assert "\n" not in caught.value.message


def test_continuous_batching_refuses_compile(model_dir: Path) -> None:
    with pytest.raises(BadInputError, match="continuous batching keeps its own paged KV cache"):
        ContinuousBatchingModel(model_dir, cache="static", compile=True)


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        (["--cache", "paged"], ["--cache 'paged'", "dynamic", "static"]),
        (["--compile", "--cache", "dynamic"], ["--compile needs --cache static"]),
        (["--compile", "--batching", "continuous"], ["--batching static only"]),
    ],
)
def test_cli_bad_cache_and_compile_are_one_line(
    extra: list[str], mentions: list[str], model_dir: Path, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    code, _out, err = cli(
        "llm", "--hf-model", model_dir, "--concurrency", "1", "--store", store, *extra
    )
    assert_one_line_error(code, err, *mentions)


def test_cli_cache_and_compile_need_an_in_process_model(tmp_path: Path, cli: CliRunner) -> None:
    code, _out, err = cli(
        "llm", "http://127.0.0.1:9/v1", "--model", "m", "--rate", "1", "--compile",
        "--store", tmp_path / "r.db",
    )  # fmt: skip
    assert_one_line_error(code, err, "--cache and --compile", "--hf-model")


@pytest.mark.slow
def test_cli_compile_stores_the_compile_time_apart(
    model_dir: Path, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    code, _out, err = cli(
        "llm", "--hf-model", model_dir, "--concurrency", "2", "--requests", "4",
        "--input-tokens", "8", "--output-tokens", "6", "--compile", "--store", store,
    )  # fmt: skip
    assert code == 0, err
    with ResultStore(store) as opened:
        run = opened.get_run("latest")
    [summary] = run.documents_of("llm")
    target = summary["target"]
    assert target["cache"] == "static" and target["compile"] is True
    assert target["compile_mode"] == "default"
    assert target["compile_s"] > 0
    [trial] = run.documents_of("llm-trial")
    ttft_p50_s = trial["summary"]["metrics"]["ttft_s"]["p50"]
    assert ttft_p50_s < target["compile_s"] / 10
    assert any("s of compilation in the warm-up" in note for note in summary["notes"])


def _trial(tpot_s: float, floor_s: float) -> LlmTrial:
    floor = DecodeFloor(
        weights_read_bytes=1.8e8,
        active_parameters=9e7,
        kv_bytes_per_token=4096.0,
        decode_batch_mean=1.0,
        context_mean_tokens=200.0,
        bandwidth_bytes_per_s=4.8e12,
        bandwidth_source="datasheet",
        tpot_floor_s=floor_s,
        tpot_measured_p50_s=tpot_s,
        decode_efficiency=floor_s / tpot_s,
    )
    return LlmTrial.model_construct(label="concurrency 1", floor=floor)


def test_host_bound_note_on_a_gpu_names_the_levers_not_in_use() -> None:
    trials = [_trial(6.55e-3, 4e-5), _trial(5e-5, 4e-5)]
    [note] = host_bound_notes(trials, device="cuda", cache="dynamic", compile=False, max_batch=8)
    assert note.startswith("concurrency 1: in-process engine host-bound on cuda (cache dynamic)")
    assert "TPOT p50 6.55 ms is 164x the decode floor of 0.040 ms" in note
    assert "--cache static --compile" in note and "larger --max-batch than 8" in note
    [compiled] = host_bound_notes(
        trials[:1], device="cuda:0", cache="static", compile=True, max_batch=8
    )
    assert "--compile (" not in compiled and "larger --max-batch" in compiled
    assert host_bound_notes(trials, device="cpu", cache="dynamic", compile=False, max_batch=8) == []
