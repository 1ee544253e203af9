"""The test servers of :mod:`accelscope.testing.llm_server`, read with plain ``http.client``:
the scripted fake (exact timing, formats, faults, metrics) and the real ``transformers serve``
with and without continuous batching (one start per mode).

Covers: accelscope.testing.llm_server, accelscope.testing.fake_llm_server,
accelscope.testing.real_llm_servers."""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelscope.llm.prometheus_text import parse_exposition
from accelscope.testing.fake_llm_server import FakeLLMServer
from accelscope.testing.real_llm_servers import TransformersServe

TOLERANCE_S = 0.005
REAL_TIMEOUT_S = 120.0


# -- a plain client ----------------------------------------------------------------------


def _connection(url: str, timeout: float = 10.0) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=timeout)


def _request(
    url: str, method: str, path: str, body: Any = None, timeout: float = 10.0
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    connection = _connection(url, timeout)
    if body is None:
        connection.request(method, path)
    else:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request(method, path, data, {"Content-Type": "application/json"})
    return connection, connection.getresponse()


def _events(response: http.client.HTTPResponse) -> Iterator[tuple[float, str]]:
    """Each SSE ``data:`` payload with its arrival time (``perf_counter``)."""
    while True:
        line = response.readline()
        if not line:
            return
        stamp = time.perf_counter()
        text = line.decode().rstrip("\r\n")
        if text.startswith("data: "):
            yield stamp, text.removeprefix("data: ")


def _stream(
    url: str, path: str, body: dict[str, Any], timeout: float = 10.0
) -> list[tuple[float, str]]:
    connection, response = _request(url, "POST", path, {**body, "stream": True}, timeout)
    try:
        assert response.status == 200, response.read()
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        return list(_events(response))
    finally:
        connection.close()


def _held(url: str, path: str, body: dict[str, Any]) -> threading.Thread:
    """Start a stream on a thread whose server holds it (a long TTFT) until the test stops
    the server; the cut connection ends the thread quietly."""

    def ask() -> None:
        with contextlib.suppress(OSError, http.client.HTTPException):  # cut on purpose
            _stream(url, path, body)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.005)


def _get(url: str, path: str) -> tuple[int, str, bytes]:
    connection, response = _request(url, "GET", path)
    try:
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        connection.close()


def _post_json(url: str, path: str, body: Any) -> tuple[int, Any]:
    connection, response = _request(url, "POST", path, body)
    try:
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _parsed(events: list[tuple[float, str]]) -> list[Any]:
    return [json.loads(text) for _, text in events if text != "[DONE]"]


def _content_times(events: list[tuple[float, str]], chat: bool = False) -> list[float]:
    times = []
    for stamp, text in events:
        if text == "[DONE]":
            continue
        choices = json.loads(text)["choices"]
        if not choices:
            continue
        piece = choices[0]["delta"].get("content") if chat else choices[0]["text"]
        if piece:
            times.append(stamp)
    return times


# -- the fake server: timing and formats ---------------------------------------------------


def _follows_script(
    server: FakeLLMServer, path: str, body: dict[str, Any], expected: list[float]
) -> list[tuple[float, str]]:
    """Stream ``body`` and check each content chunk's arrival, from the request's receipt,
    against ``expected`` within :data:`TOLERANCE_S`; return the events. A chunk is never
    early and the server writes it on time by its own clock; on this shared 2-core machine a
    thread is now and then woken 5-12 ms late, so a late try is repeated (three at most)."""
    lateness: list[float] = []
    for _ in range(3):
        events = _stream(server.url, path, body)
        record = server.requests[-1]
        arrivals = [t - record.received_s for t in _content_times(events, chat="chat" in path)]
        sent = [t - record.received_s for t in record.sent_s]
        assert len(arrivals) == len(sent) == len(expected)
        assert all(a >= s >= e for a, s, e in zip(arrivals, sent, expected, strict=True))
        late = max(a - e for a, e in zip(arrivals, expected, strict=True))
        if late <= TOLERANCE_S:
            return events
        lateness.append(late)
    pytest.fail(f"chunks late by up to {lateness} s in three tries")


def test_streamed_completion_follows_the_script_to_the_millisecond() -> None:
    with FakeLLMServer(ttft_s=0.05, itl_s=0.02) as server:
        body = {"model": "fake-model", "prompt": "one two three", "max_tokens": 8}
        expected = [0.05 + k * 0.02 for k in range(8)]
        events = _follows_script(server, "/v1/completions", body, expected)
    chunks = _parsed(events)
    texts = [c["choices"][0]["text"] for c in chunks[:8]]
    assert texts == [f" tok{k}" for k in range(8)]
    assert all(c["object"] == "text_completion" and c["model"] == "fake-model" for c in chunks)
    assert chunks[8]["choices"][0]["finish_reason"] == "length"
    assert chunks[8]["choices"][0]["text"] == ""
    assert all("usage" not in c for c in chunks) and len(chunks) == 9
    assert events[-1][1] == "[DONE]"


def test_several_tokens_a_chunk_leave_at_the_last_ones_time() -> None:
    with FakeLLMServer(ttft_s=0.03, itl_s=0.01, tokens_per_chunk=3, output_tokens=7) as server:
        body = {"model": "fake-model", "prompt": "x", "max_tokens": 100}
        events = _follows_script(server, "/v1/completions", body, [0.05, 0.08, 0.09])
    texts = [c["choices"][0]["text"] for c in _parsed(events)]
    assert texts[:3] == [" tok0 tok1 tok2", " tok3 tok4 tok5", " tok6"]


def test_chat_stream_has_a_role_chunk_then_content_and_usage() -> None:
    with FakeLLMServer(ttft_s=0.04, itl_s=0.01, prompt_tokens_per_word=2) as server:
        body = {
            "model": "fake-model",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello there you"}]},
            ],
            "max_completion_tokens": 4,
            "stream_options": {"include_usage": True},
        }
        expected = [0.04, 0.05, 0.06, 0.07]
        events = _follows_script(server, "/v1/chat/completions", body, expected)
        received = server.requests[-1].received_s
    chunks = _parsed(events)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert events[0][0] - received < 0.02  # the role chunk leaves at once, before any token
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:5]]
    assert contents == [" tok0", " tok1", " tok2", " tok3"]
    assert chunks[5]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "length"}
    assert chunks[6]["choices"] == []
    assert chunks[6]["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    assert events[-1][1] == "[DONE]"


def test_usage_only_when_asked_and_supported() -> None:
    asked = {"prompt": "a b", "max_tokens": 2, "stream_options": {"include_usage": True}}
    with FakeLLMServer(ttft_s=0, itl_s=0) as server:
        with_usage = _parsed(_stream(server.url, "/v1/completions", asked))
        without = _parsed(_stream(server.url, "/v1/completions", {"prompt": "a b"}))
    assert with_usage[-1]["usage"]["prompt_tokens"] == 2
    assert with_usage[-1]["usage"]["completion_tokens"] == 2
    assert len(without) == 16 + 1 and all("usage" not in c for c in without)  # default 16
    with FakeLLMServer(ttft_s=0, itl_s=0, include_usage_supported=False) as server:
        events = _stream(server.url, "/v1/completions", asked)
    assert all("usage" not in c for c in _parsed(events))
    assert events[-1][1] == "[DONE]"


def test_non_streaming_answers_one_completion_with_usage() -> None:
    with FakeLLMServer(ttft_s=0.03, itl_s=0.01) as server:
        start = time.perf_counter()
        status, payload = _post_json(
            server.url, "/v1/completions", {"prompt": "a b c", "max_tokens": 3}
        )
        elapsed = time.perf_counter() - start
        _, chat = _post_json(
            server.url,
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": False},
        )
    assert status == 200 and payload["object"] == "text_completion"
    assert payload["choices"][0]["text"] == " tok0 tok1 tok2"
    assert payload["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    assert elapsed >= 0.05 - 0.001
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": " tok0 tok1"}


def test_errors_for_wrong_model_path_and_body() -> None:
    with FakeLLMServer(model="served") as server:
        status, payload = _post_json(server.url, "/v1/completions", {"model": "x", "prompt": "a"})
        assert status == 404
        assert payload == {
            "error": {
                "message": "The model `x` does not exist.",
                "type": "NotFoundError",
                "code": 404,
            }
        }
        assert _post_json(server.url, "/v1/nothing", {"prompt": "a"})[0] == 404
        assert _get(server.url, "/nothing")[0] == 404
        status, payload = _post_json(server.url, "/v1/completions", b"{not json")
        assert status == 400 and payload["error"]["code"] == 400
        assert server.requests[-1].body is None
        assert _get(server.url, "/health")[0] == 200
        status, _, models = _get(server.url, "/v1/models")
        assert status == 200
        listed = json.loads(models)
        assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["served"]


def test_requests_are_recorded_and_concurrency_counted() -> None:
    with FakeLLMServer(ttft_s=60.0, itl_s=0.0, output_tokens=1) as server:
        threads = [_held(server.url, "/v1/completions", {"prompt": f"p {i}"}) for i in range(3)]
        # the moment: all three held by the server at once (its TTFT is 60 s)
        _wait_until(lambda: server.running == 3, "three requests run at once")
        assert server.concurrent_max == 3
        recorded = server.requests
        server.stop()  # cuts the three
        for thread in threads:
            thread.join(30)
        _wait_until(lambda: server.running == 0, "the cut requests are counted out")
        assert server.concurrent_max == 3
    assert sorted(r.body["prompt"] for r in recorded) == ["p 0", "p 1", "p 2"]
    assert {(r.method, r.path) for r in recorded} == {("POST", "/v1/completions")}


def test_metrics_are_vllm_prometheus_text_and_count_the_prefix_cache() -> None:
    def metrics(url: str) -> dict[str, float]:
        status, kind, body = _get(url, "/metrics")
        assert status == 200 and kind.startswith("text/plain")
        text = body.decode()
        for name in ("vllm:num_requests_running", "vllm:prefix_cache_hits_total"):
            assert f"# HELP {name} " in text and f"# TYPE {name} " in text
        samples = parse_exposition(text)
        assert all(s.labels == {"model_name": "m"} for s in samples)
        return {s.name: s.value for s in samples}

    with FakeLLMServer(model="m", ttft_s=0, itl_s=0, output_tokens=1) as server:
        before = metrics(server.url)
        assert set(before) == {
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total",
            "vllm:num_preemptions_total",
        }
        assert all(v == 0 for v in before.values())
        _stream(server.url, "/v1/completions", {"prompt": "a b c d"})
        _stream(server.url, "/v1/completions", {"prompt": "a b c x y"})
        after = metrics(server.url)
    assert after["vllm:prefix_cache_queries_total"] == 9
    assert after["vllm:prefix_cache_hits_total"] == 3


def test_metrics_show_a_request_in_flight() -> None:
    with FakeLLMServer(ttft_s=60.0, output_tokens=1) as server:
        thread = _held(server.url, "/v1/completions", {"prompt": "a b"})
        # the moment: /metrics is read while the server holds the request (its TTFT is 60 s)
        _wait_until(lambda: server.running == 1, "the request runs")
        samples = {
            s.name: s.value for s in parse_exposition(_get(server.url, "/metrics")[2].decode())
        }
        assert server.running == 1  # still in flight after the scrape
        server.stop()
        thread.join(30)
    assert samples["vllm:num_requests_running"] == 1
    assert 0 < samples["vllm:kv_cache_usage_perc"] <= 1


# -- the fake server: faults ----------------------------------------------------------------


@pytest.mark.parametrize("code", [503, 429])
def test_fault_status(code: int) -> None:
    # the fault: every generation request is answered N (scripted)
    with FakeLLMServer(fault=f"status:{code}") as server:
        status, payload = _post_json(server.url, "/v1/completions", {"prompt": "a", "stream": True})
        assert _get(server.url, "/health")[0] == 200  # the server is up, generation fails
    assert status == code
    assert payload["error"]["code"] == code and payload["error"]["message"]


def test_fault_malformed_sse() -> None:
    # the fault: a bad event after the first chunk (scripted)
    with FakeLLMServer(ttft_s=0, itl_s=0, fault="malformed-sse") as server:
        events = _stream(server.url, "/v1/completions", {"prompt": "a", "max_tokens": 3})
    texts = [text for _, text in events]
    assert json.loads(texts[0])["choices"][0]["text"] == " tok0"
    assert texts[1] == "{not json"
    assert texts[-1] == "[DONE]"


def test_fault_stop_mid_stream() -> None:
    # the fault: the connection ends after half the chunks (scripted)
    body = {"prompt": "a", "max_tokens": 8, "stream_options": {"include_usage": True}}
    with FakeLLMServer(ttft_s=0, itl_s=0.001, fault="stop-mid-stream") as server:
        events = _stream(server.url, "/v1/completions", body)  # readline: the end is an EOF
        connection, response = _request(
            server.url, "POST", "/v1/completions", body | {"stream": True}
        )
        with pytest.raises(http.client.IncompleteRead):  # the chunked body never ends
            response.read()
        connection.close()
    texts = [text for _, text in events]
    assert [json.loads(t)["choices"][0]["text"] for t in texts] == [f" tok{k}" for k in range(4)]


def test_fault_not_openai() -> None:
    # the fault: every request is answered with HTML (scripted)
    with FakeLLMServer(fault="not-openai") as server:
        connection, response = _request(server.url, "POST", "/v1/completions", {"prompt": "a"})
        body = response.read()
        connection.close()
        assert _get(server.url, "/v1/models")[1].startswith("text/html")
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/html")
    assert body.lstrip().startswith(b"<!DOCTYPE html>")


def test_fault_die_after_refuses_later_connections() -> None:
    # the fault: the server dies once it has answered 2 requests (counted)
    server = FakeLLMServer(ttft_s=0, itl_s=0, output_tokens=2, fault="die-after:2")
    with server:
        assert _get(server.url, "/health")[0] == 200  # GETs do not count
        assert _stream(server.url, "/v1/completions", {"prompt": "a"})[-1][1] == "[DONE]"
        status, payload = _post_json(server.url, "/v1/completions", {"prompt": "a"})
        assert status == 200 and payload["usage"]["completion_tokens"] == 2
        with pytest.raises(ConnectionRefusedError):
            _get(server.url, "/health")
        with pytest.raises(ConnectionRefusedError):
            _post_json(server.url, "/v1/completions", {"prompt": "a"})


def test_fault_hang_does_not_block_stop() -> None:
    server = FakeLLMServer(fault="hang")
    server.start()
    connection, response_box = _connection(server.url, timeout=5), []

    def ask() -> None:
        connection.request("POST", "/v1/completions", json.dumps({"prompt": "a"}).encode())
        try:
            response_box.append(connection.getresponse())
        except (OSError, http.client.HTTPException) as exc:
            response_box.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    # the fault: stop once the server has admitted the request it hangs on
    _wait_until(lambda: server.running == 1, "the server holds the request")
    assert not response_box  # nothing sent
    start = time.perf_counter()
    server.stop()
    assert time.perf_counter() - start < 1.0
    thread.join(timeout=2)
    assert isinstance(response_box[0], http.client.RemoteDisconnected)
    server.stop()  # idempotent
    connection.close()


def test_fault_slow_first_is_every_requests_ttft() -> None:
    # the fault: a 0.2 s TTFT on every request (scripted)
    with FakeLLMServer(ttft_s=0.01, itl_s=0, output_tokens=1, fault="slow-first:0.2") as server:
        for _ in range(2):
            _follows_script(server, "/v1/completions", {"prompt": "a"}, [0.2])


def test_stopped_server_refuses_and_bad_faults_are_refused() -> None:
    with FakeLLMServer() as server:
        url = server.url
    with pytest.raises(ConnectionRefusedError):
        _get(url, "/health")
    for fault in ("status:x", "die-after", "slow-first:-1", "explode", "hang:3"):
        with pytest.raises(ValueError, match="fault"):
            FakeLLMServer(fault=fault)


# -- the real transformers serve ------------------------------------------------------------


def _serving_missing() -> str:
    if not TransformersServe.executable().is_file():
        return f"{TransformersServe.executable()} not found"
    for module in ("fastapi", "uvicorn", "transformers"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (transformers[serving])"
    return ""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if reason := _serving_missing():  # `make install` installs it: missing is a failure
        pytest.fail(reason)
    from accelscope.testing.llm_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("llm") / "tiny-llama")


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "continuous-batching"])
def served(
    request: pytest.FixtureRequest, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TransformersServe]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with TransformersServe(tiny_model, continuous_batching=request.param, log_path=log) as server:
        yield server
    assert not server.group_alive()


@pytest.mark.server
def test_transformers_serve_streams_a_completion_with_usage(served: TransformersServe) -> None:
    body = {
        "model": served.model,
        "prompt": "the model serves tokens",
        "max_tokens": 6,
        "stream_options": {"include_usage": True},
    }
    events = _stream(served.url, "/v1/completions", body, timeout=REAL_TIMEOUT_S)
    chunks = _parsed(events)
    assert len(_content_times(events)) == 6  # one event per token
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 6
    assert chunks[-1]["model"] == f"{served.model}@main"
    assert all(text != "[DONE]" for _, text in events)  # transformers sends no [DONE]


@pytest.mark.server
def test_transformers_serve_streams_a_chat_completion_with_usage(
    served: TransformersServe,
) -> None:
    body = {
        "model": served.model,
        "messages": [{"role": "user", "content": "the cache keeps keys"}],
        "max_tokens": 5,
        "stream_options": {"include_usage": True},
    }
    events = _stream(served.url, "/v1/chat/completions", body, timeout=REAL_TIMEOUT_S)
    chunks = _parsed(events)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert len(_content_times(events, chat=True)) == 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert chunks[-1]["usage"]["prompt_tokens"] > 0


@pytest.mark.server
def test_transformers_serve_stops_or_dies_with_its_whole_group(served: TransformersServe) -> None:
    # the fault: kill (or stop) the server once it answers /health (up and serving)
    assert served.group_alive() and served.healthy()
    if served.continuous_batching:
        served.kill()
    else:
        served.stop()
    assert not served.group_alive()
    with pytest.raises(ConnectionRefusedError):
        _get(served.url, "/health")
    served.stop()  # idempotent, also after kill


def _fake_transformers(directory: Path, script: str) -> str:
    """A ``python`` path whose sibling ``transformers`` is ``script`` (a shell script)."""
    command = directory / "transformers"
    command.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    command.chmod(0o755)
    return str(directory / "python")


def test_transformers_serve_that_exits_at_start_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fault: the server command exits 2 at once
    script = "echo \"Error: No such option '--bogus'.\" >&2\nexit 2\n"
    monkeypatch.setattr(sys, "executable", _fake_transformers(tmp_path, script))
    server = TransformersServe(tmp_path, log_path=tmp_path / "logs" / "serve.log")
    with pytest.raises(RuntimeError, match=r"exited with code 2(.|\n)*No such option"), server:
        pass
    assert not server.group_alive()


def test_transformers_serve_not_ready_in_time_is_stopped_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fault: a server that echoes its arguments and never answers (0.5 s start limit)
    script = 'echo "loading $@"\nsleep 60 &\nsleep 60\n'  # never healthy; a child too
    monkeypatch.setattr(sys, "executable", _fake_transformers(tmp_path, script))
    server = TransformersServe(
        tmp_path, continuous_batching=True, startup_timeout_s=0.5, log_path=tmp_path / "log"
    )
    with pytest.raises(RuntimeError, match=r"not healthy after 0.5 s(.|\n)*--cb-num-blocks 64"):
        server.__enter__()
    assert not server.group_alive()
    assert "--device cpu --continuous-batching" in server.log_tail()


def test_transformers_serve_missing_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(RuntimeError, match="not found"), TransformersServe(tmp_path):
        pass
