"""The client over HTTPS: ``http.client`` sends the request and reads the head, the body is read
in the request's thread; the records are those of plain HTTP, and every way an answer fails
is the same one line. The fake server serves TLS with a self-signed certificate
(``tests/data/tls``), trusted through ``SSL_CERT_FILE``."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.records import LlmRequest, RequestRecord
from accelscope.testing.fake_llm_server import FakeLLMServer

_TLS = Path(__file__).parents[1] / "data" / "tls"
_CERT = _TLS / "localhost-cert.pem"


def _context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(_CERT, _TLS / "localhost-key.pem")
    return context


@pytest.fixture
def trusted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SSL_CERT_FILE", str(_CERT))
    yield


def _stream(url: str, model: str = "fake-model", *, api: str = "chat") -> RequestRecord:
    endpoint = OpenAIEndpoint(url, model, api=api)  # type: ignore[arg-type]
    request = LlmRequest(index=0, prompt="hello there", max_tokens=8)
    return endpoint.stream(
        request,
        origin_s=time.perf_counter(),
        scheduled_s=0.0,
        timeout_s=20.0,
        cancel=threading.Event(),
    )


@pytest.mark.usefixtures("trusted")
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_stream_over_https_is_read_as_over_plain_http(api: str) -> None:
    with FakeLLMServer(ttft_s=0.02, itl_s=0.005, output_tokens=8, tls=_context()) as server:
        assert server.url.startswith("https://")
        record = _stream(server.url, api=api)
    assert not record.error, record.error
    assert record.output_tokens == 8 and record.tokens_source == "usage"
    assert len(record.chunk_times_s) == 8
    assert record.chunk_times_s == sorted(record.chunk_times_s)
    assert record.first_token_s is not None and record.first_token_s > record.sent_s
    assert record.end_s >= record.chunk_times_s[-1]


@pytest.mark.usefixtures("trusted")
def test_an_error_answer_over_https_is_one_line() -> None:
    with FakeLLMServer(tls=_context()) as server:
        record = _stream(server.url, model="nope")
    assert record.error == "HTTP 404: The model `nope` does not exist."


@pytest.mark.usefixtures("trusted")
def test_a_page_over_https_is_not_a_stream() -> None:
    with FakeLLMServer(fault="not-openai", tls=_context()) as server:
        record = _stream(server.url)
    assert record.error.startswith("not a streaming OpenAI response (Content-Type text/html")


def test_an_untrusted_certificate_is_one_line_of_error() -> None:
    with FakeLLMServer(tls=_context()) as server:
        record = _stream(server.url)
    assert record.error.startswith("SSLCertVerificationError"), record.error
    assert "\n" not in record.error and record.first_token_s is None
