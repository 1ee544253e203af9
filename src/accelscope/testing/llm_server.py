"""OpenAI-compatible LLM servers for tests of ``accelscope llm``: a scripted fake whose timing
is exact, and the real ``transformers serve`` on a tiny model.

:class:`FakeLLMServer` is an in-process HTTP server (``ThreadingHTTPServer`` on a free loopback
port, daemon threads) that streams like vLLM: ``POST /v1/completions`` and
``POST /v1/chat/completions`` answer server-sent events (``data: {...}\\n\\n``, one HTTP chunk
each, ``Transfer-Encoding: chunked``, flushed at once), then a chunk with
``finish_reason: "length"``, the ``usage`` chunk (``"choices": []``) when the request asked
for it with ``stream_options: {"include_usage": true}``, and ``data: [DONE]``. Its script is
exact, so a client's TTFT, TPOT and ITL can be checked to the millisecond: token ``k``
(0-based) leaves at ``receipt + ttft_s + k * itl_s`` (absolute ``time.perf_counter``
deadlines, so errors do not add up), a chunk of ``tokens_per_chunk`` tokens leaves at its last
token's time, and token ``k`` reads ``" tok{k}"``. A chunk never leaves early; a loaded machine
may wake the server late now and then (5-12 ms seen on a busy 2-core machine), and
:attr:`ReceivedRequest.sent_s` says when each chunk really left. A chat stream's first chunk (the
``{"role": "assistant"}`` delta, no content) leaves at receipt, as real servers send it: a
client must not take it for the first token. It also answers ``GET /health``,
``GET /v1/models`` and ``GET /metrics`` (vLLM's metric names, with a simple prefix cache), and
plays faults on purpose (``fault=``, see :class:`FakeLLMServer`). ::

    with FakeLLMServer(ttft_s=0.05, itl_s=0.01) as server:
        run_client(server.url, model=server.model)
        assert server.requests[0].body["max_tokens"] == 16

:class:`TransformersServe` runs the real ``transformers serve`` (the ``serving`` extra of
transformers) on CPU in its own process group, on a free port, offline, its output in a log
file; it waits for ``GET /health`` and stops the whole group on exit. Served with
:func:`accelscope.testing.llm_model.build_tiny_llama`'s model it streams exactly ``max_tokens``
tokens, one SSE event per token. What transformers 5.23 does differently from vLLM (seen on
that model, with and without ``--continuous-batching``): the final chunk carries
``finish_reason`` *and* ``usage`` whether or not ``stream_options.include_usage`` was asked
(the field is accepted and ignored); there is no ``data: [DONE]``; events that queued up while
the event loop was busy leave in one write; a wrong model name is ``400`` (``{"detail": ...}``,
"Server is pinned to ..."), an unknown field such as ``ignore_eos`` is ``422``;
``GET /metrics`` is ``404``; ``GET /v1/models`` fails (500) without a Hugging Face cache
directory. With continuous batching the batching manager (and its KV cache, see
:data:`CB_NUM_BLOCKS`) starts on the first request, which therefore takes seconds longer. ::

    with TransformersServe(build_tiny_llama(tmp / "model")) as server:
        run_client(server.url, model=server.model)
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from accelscope.files import write_atomic
from accelscope.llm.conformance.script import (
    CHAT_TEMPLATE_GENERATION_TOKENS,
    CHAT_TEMPLATE_MESSAGE_TOKENS,
    ServedRequest,
    read_hosted_cases,
    stamps_json,
)
from accelscope.llm.server_process import ServerProcess, ServerStartError
from accelscope.testing._service import Service

__all__ = [
    "CB_NUM_BLOCKS",
    "KV_CACHE_TOKENS",
    "FakeLLMServer",
    "ReceivedRequest",
    "StreamShape",
    "TransformersServe",
    "VllmServe",
]

GENERATION_PATHS = ("/v1/completions", "/v1/chat/completions")
DEFAULT_MAX_TOKENS = 16
REMEMBERED_PROMPTS = 1000
KV_CACHE_TOKENS = 4096
CB_NUM_BLOCKS = 64
"""KV-cache blocks (of 256 tokens) :class:`TransformersServe` gives continuous batching. Left to
itself, transformers sizes that cache from the device's memory, on CPU the machine's RAM: a
24 GiB machine saw 8.5 GiB resident and 20-30 s on the first request; 64 blocks (16384 tokens)
is 1.2 GiB and under 2 s."""
"""The fake KV cache's size in tokens: ``vllm:kv_cache_usage_perc`` is the prompt and output
tokens of the requests in flight over this (at most 1)."""

_HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>Welcome</title></head>\n"
    b"<body><h1>It works!</h1><p>This is not an OpenAI-compatible server.</p></body></html>\n"
)
_HELP_RUNNING = "Number of requests in model execution batches."
_HELP_WAITING = "Number of requests waiting to be processed."
_HELP_KV = "KV-cache usage. 1 means 100 percent usage."
_HELP_QUERIES = "Prefix cache queries, in terms of number of queried tokens."
_HELP_HITS = "Prefix cache hits, in terms of number of cached tokens."
_HELP_PREEMPTIONS = "Cumulative number of preemption from the engine."
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def _words(value: Any) -> list[str]:
    """The words of a prompt: a string, a list of strings, or token ids (one word each)."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        words: list[str] = []
        for item in value:
            if isinstance(item, int):
                words.append(str(item))
            elif isinstance(item, dict):  # a chat content part
                words.extend(_words(item.get("text", "")))
            else:
                words.extend(_words(item))
        return words
    return []


def _prompt_words(path: str, body: dict[str, Any]) -> list[str]:
    if path == "/v1/chat/completions":
        words: list[str] = []
        for message in body.get("messages") or []:
            if isinstance(message, dict):
                words.extend(_words(message.get("content", "")))
        return words
    return _words(body.get("prompt", ""))


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class StreamShape:
    """What the script made of one generation request, decided before its first byte:
    the tokens it counted, each output chunk's tokens, and the first chunk with answer text
    (None: none)."""

    prompt_tokens: int
    output_tokens: int
    reasoning_tokens: int
    chunk_tokens: tuple[int, ...]
    content_chunk: int | None


@dataclass(frozen=True)
class ReceivedRequest:
    """One request the fake server received: method, path, the parsed JSON body (``None`` for
    a GET or a body that is not JSON) and its receipt time on ``time.perf_counter``.

    ``sent_s`` fills in as the answer goes: when each content chunk of a stream was written,
    or the one answer of a non-streaming request (``time.perf_counter``). It is the script as
    the machine managed it: a loaded machine wakes the server late now and then, so a client's
    stamps are best compared with these."""

    method: str
    path: str
    body: Any
    received_s: float
    sent_s: list[float] = field(default_factory=list)
    ended_s: list[float] = field(default_factory=list)
    """When a stream's trailing events began to leave (the finish chunk, or a scripted error
    event), one stamp; empty until then."""
    shape: list[StreamShape] = field(default_factory=list)
    """A generation request's :class:`StreamShape`, one entry once it is decided."""


class _Dying(Exception):
    """The connection is cut on purpose (a scripted fault, or the server stops)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, owner: FakeLLMServer) -> None:
        self.owner = owner
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", owner.port_wanted), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks for the host's fully qualified name: a DNS look-up
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self, keep: socket.socket | None = None) -> None:
        """Shut down every open connection but ``keep`` (their threads close them)."""
        with self.connections_lock:
            open_now = [c for c in self.connections if c is not keep]
        for connection in open_now:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away, or a connection cut on purpose


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server
    _sent: list[float]
    _ended: list[float]
    _shape: list[StreamShape]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ----------------------------------------------------------------------

    def _send_bytes(
        self, status: int, body: bytes, content_type: str, *, length: int | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, payload: Any) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json")

    def _send_error_json(self, status: int, message: str) -> None:
        kind = _ERROR_TYPES.get(status)
        if kind is None:
            try:
                kind = "".join(HTTPStatus(status).phrase.title().split()) + "Error"
            except ValueError:
                kind = "Error"
        self._send_json(status, {"error": {"message": message, "type": kind, "code": status}})

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        """One HTTP chunk, in one write (no Nagle delay between its pieces)."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _event(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(f"data: {text}\n\n".encode())

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _sleep_until(self, deadline: float) -> None:
        stopping = self.server.owner._stopping
        while True:
            wait = deadline - time.perf_counter()
            if wait <= 0:
                return
            if stopping.wait(wait):
                raise _Dying

    # -- routes ------------------------------------------------------------------------

    def do_GET(self) -> None:
        owner = self.server.owner
        received = time.perf_counter()
        path = self.path.split("?", 1)[0]
        owner._record(ReceivedRequest("GET", path, None, received))
        if owner._fault_kind == "not-openai":
            self._send_bytes(200, _HTML_PAGE, "text/html; charset=utf-8")
        elif path == "/health":
            self._send_bytes(200, b"", "text/plain")
        elif path == "/v1/models":
            model = {"id": owner.model, "object": "model", "created": int(time.time())}
            model["owned_by"] = "accelscope"
            self._send_json(200, {"object": "list", "data": [model]})
        elif path == "/metrics":
            body = owner._metrics_text().encode()
            self._send_bytes(200, body, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send_error_json(404, f"Not Found: {path}")

    def do_POST(self) -> None:
        owner = self.server.owner
        received = time.perf_counter()
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body: Any = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        record = ReceivedRequest("POST", path, body, received)
        self._sent = record.sent_s
        self._ended = record.ended_s
        self._shape = record.shape
        owner._record(record)
        if owner._fault_kind == "not-openai":
            self._send_bytes(200, _HTML_PAGE, "text/html; charset=utf-8")
            return
        if path not in GENERATION_PATHS:
            self._send_error_json(404, f"Not Found: {path}")
            return
        if not isinstance(body, dict):
            self._send_error_json(400, "The request body is not a JSON object.")
            return
        model = body.get("model", owner.model)
        if model != owner.model:
            self._send_error_json(404, f"The model `{model}` does not exist.")
            return
        last = owner._admit()
        self._counted = True
        if last is None:  # the server is dying: a request beyond die-after's N
            self._release()
            self.close_connection = True
            return
        try:
            self._generate(path, body, received, last=last)
        except (_Dying, OSError):
            self.close_connection = True
        finally:
            self._release()

    def _release(self) -> None:
        """Count this request out, once: before its last bytes leave, so a closed-loop client
        that sends its next request on reading them never sees it still counted."""
        if getattr(self, "_counted", False):
            self._counted = False
            self.server.owner._finish()

    # -- generation --------------------------------------------------------------------

    def _generate(self, path: str, body: dict[str, Any], received: float, *, last: bool) -> None:
        owner = self.server.owner
        fault = owner._fault_kind
        if fault == "status":
            self._send_error_json(owner._fault_value_int, "Scripted fault: the server is unwell.")
            return
        if fault == "hang":
            owner._stopping.wait()
            raise _Dying
        chat = path == "/v1/chat/completions"
        requested = body.get("max_tokens", body.get("max_completion_tokens"))
        if owner.output_tokens is not None:
            n_out = owner.output_tokens
        elif isinstance(requested, int) and not isinstance(requested, bool):
            n_out = max(0, requested)
        else:
            n_out = DEFAULT_MAX_TOKENS
        prompt_words = _prompt_words(path, body)
        prompt_tokens = len(prompt_words) * owner.prompt_tokens_per_word
        if chat and owner.chat_template:
            messages = body.get("messages")
            count = len(messages) if isinstance(messages, list) else 0
            prompt_tokens += count * CHAT_TEMPLATE_MESSAGE_TOKENS + CHAT_TEMPLATE_GENERATION_TOKENS
        owner._prefix_cache(prompt_words)
        slots = owner._slots
        if slots is not None:  # max_running: wait for a slot, as a server's scheduler queue
            with owner._lock:
                owner._waiting += 1
            while not slots.acquire(timeout=0.05):
                if owner._stopping.is_set():
                    raise _Dying
            with owner._lock:
                owner._waiting -= 1
            received = max(received, time.perf_counter())
        owner._reserve(prompt_tokens + n_out)
        try:
            self._answer(body, chat, n_out, prompt_tokens, received, last=last)
        finally:
            owner._reserve(-(prompt_tokens + n_out))
            if slots is not None:
                slots.release()

    def _answer(
        self,
        body: dict[str, Any],
        chat: bool,
        n_out: int,
        prompt_tokens: int,
        received: float,
        *,
        last: bool,
    ) -> None:
        owner = self.server.owner
        fault = owner._fault_kind
        ttft = owner._fault_value_float if fault == "slow-first" else owner.ttft_s
        chunks = owner._chunks(n_out)
        created = int(time.time())
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n_out,
            "total_tokens": prompt_tokens + n_out,
        }

        def deadline(token: int) -> float:
            return received + ttft + token * owner.itl_s

        every = owner.corrupt_every
        reasoning_end = min(owner.reasoning_tokens, n_out) if chat else 0
        tool_start = max(reasoning_end, n_out - owner.tool_call_tokens) if chat else n_out

        def text(start: int, stop: int) -> str:
            return "".join(
                f" bad{k}" if every and k % every == every - 1 else f" tok{k}"
                for k in range(max(start, reasoning_end), min(stop, tool_start))
            )

        def thought(start: int, stop: int) -> str:
            return "".join(f" think{k}" for k in range(start, min(stop, reasoning_end)))

        def arguments(start: int, stop: int) -> str:
            return "".join(f" arg{k}" for k in range(max(start, tool_start), stop))

        if reasoning_end and owner.report_reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_end}
        answers = [
            number
            for number, (start, stop) in enumerate(chunks)
            if max(start, reasoning_end) < min(stop, tool_start)
        ]
        self._shape.append(
            StreamShape(
                prompt_tokens=prompt_tokens,
                output_tokens=n_out,
                reasoning_tokens=reasoning_end,
                chunk_tokens=tuple(stop - start for start, stop in chunks),
                content_chunk=answers[0] if answers else None,
            )
        )

        if not body.get("stream", False):
            self._sleep_until(deadline(max(n_out - 1, 0)))
            full = text(0, n_out)
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": full}
                if reasoning_end:
                    choice["message"][owner.reasoning_field] = thought(0, n_out)
            else:
                choice["text"] = full
            obj = "chat.completion" if chat else "text_completion"
            payload = {"id": ident, "object": obj, "created": created, "model": owner.model}
            payload |= {"choices": [choice], "usage": usage}
            data = json.dumps(payload).encode()
            if fault == "malformed-sse":
                self._send_bytes(200, b"{not json", "application/json")
            elif fault == "stop-mid-stream":
                self._send_bytes(200, data[: len(data) // 2], "application/json", length=len(data))
                raise _Dying
            else:
                if last:
                    owner._die(keep=self.connection)
                self._sent.append(time.perf_counter())
                self._release()
                self._send_bytes(200, data, "application/json")
            return

        def chunk(delta_or_text: str | None, finish: str | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0}
            if chat:
                if delta_or_text is None:
                    c["delta"] = {} if finish else {"role": "assistant"}
                else:
                    c["delta"] = {"content": delta_or_text}
            else:
                c["text"] = delta_or_text or ""
            c["finish_reason"] = finish
            obj = "chat.completion.chunk" if chat else "text_completion"
            return {
                "id": ident,
                "object": obj,
                "created": created,
                "model": owner.model,
                "choices": [c],
            }

        def output(start: int, stop: int) -> dict[str, Any]:
            """The chunk of tokens [start, stop): each channel's part in one delta."""
            if not chat:
                return chunk(text(start, stop))
            delta: dict[str, Any] = {}
            if start < reasoning_end:
                delta[owner.reasoning_field] = thought(start, stop)
            if text(start, stop):
                delta["content"] = text(start, stop)
            if stop > tool_start:
                call: dict[str, Any] = {
                    "index": 0,
                    "function": {"arguments": arguments(start, stop)},
                }
                if start <= tool_start:  # the call's first delta names it
                    call |= {"id": "call-" + ident[-8:], "type": "function"}
                    call["function"]["name"] = "fake_tool"
                delta["tool_calls"] = [call]
            found = chunk(None)
            found["choices"][0]["delta"] = delta
            return found

        options = body.get("stream_options")
        wants_usage = isinstance(options, dict) and options.get("include_usage") is True
        wants_usage = wants_usage and owner.include_usage_supported
        continuous = (
            wants_usage
            and isinstance(options, dict)
            and options.get("continuous_usage_stats") is True
        )

        def counted(event: dict[str, Any], tokens: int) -> dict[str, Any]:
            """vLLM's continuous_usage_stats: every chunk carries the usage so far."""
            if continuous:
                event["usage"] = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": tokens,
                    "total_tokens": prompt_tokens + tokens,
                }
            return event

        self._start_stream()
        if chat:
            opening = chunk(None)
            if owner.empty_opening_chunk:  # vLLM's: role and an empty content
                opening["choices"][0]["delta"]["content"] = ""
            self._event(counted(opening, 0))
        elif owner.empty_opening_chunk:
            self._event(counted(chunk(""), 0))
        cutting = fault in ("stop-mid-stream", "error-mid-stream")
        cut_after = max(1, len(chunks) // 2) if cutting else None
        for number, (start, stop) in enumerate(chunks):
            self._sleep_until(deadline(stop - 1))
            self._sent.append(time.perf_counter())
            self._event(counted(output(start, stop), stop))
            if number == 0 and fault == "malformed-sse":
                self._chunk(b"data: {not json\n\n")
            if cut_after is not None and number + 1 >= cut_after:
                break
        if fault == "stop-mid-stream":  # no chunk at all: cut before the end
            raise _Dying
        if fault == "error-mid-stream":  # vLLM's error event, then [DONE]
            self._ended.append(time.perf_counter())
            error = {"message": "Scripted fault: generation failed.", "type": "InternalServerError"}
            self._event({"error": error | {"code": 500}})
            self._release()
            self._event("[DONE]")
            self._end_stream()
            return
        if owner.tail_s:
            self._sleep_until(deadline(n_out - 1) + owner.tail_s)
        self._ended.append(time.perf_counter())
        self._event(counted(chunk(None, finish="length"), n_out))
        if wants_usage:
            usage_chunk = chunk(None)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = usage
            self._event(usage_chunk)
        self._release()
        self._event("[DONE]")
        if last:
            owner._die(keep=self.connection)
        self._end_stream()


class FakeLLMServer(Service):
    """A scripted OpenAI-compatible streaming server on ``127.0.0.1`` (see the module).

    ``ttft_s``: from the request's receipt to its first content chunk; ``itl_s``: between
    consecutive tokens; ``tokens_per_chunk`` tokens per chunk; ``output_tokens`` per request
    (``None``: the request's ``max_tokens``, else ``max_completion_tokens``, else 16);
    ``usage.prompt_tokens`` is the words of the prompt (or of the messages' contents) times
    ``prompt_tokens_per_word``; ``include_usage_supported=False`` never sends ``usage`` in a
    stream. A request naming another model is ``404`` (vLLM's message), an unknown path
    ``404``, a body that is not a JSON object ``400``. A non-streaming request gets one JSON
    completion with ``usage``, when its last token would have been sent.

    ``fault`` plays one failure, on the generation requests (POST to either completion
    path) unless said otherwise:

    - ``"status:N"``: answer HTTP ``N`` with an OpenAI-style JSON error body;
    - ``"malformed-sse"``: a ``data: {not json`` event right after the first content chunk
      (the stream then goes on); a non-streaming answer is ``{not json``;
    - ``"stop-mid-stream"``: half the content chunks (at least one), then the connection
      closes: no final chunk, no usage, no ``[DONE]``, no end of the chunked body;
    - ``"not-openai"``: every request, on every path, is answered ``200`` with an HTML page;
    - ``"die-after:N"``: once ``N`` generation requests have been answered the server is
      gone: it stops listening before the ``N``-th answer's last bytes leave (so any later
      connection is refused), other open connections are cut, requests in flight beyond
      ``N`` get no answer;
    - ``"error-mid-stream"``: half the content chunks (at least one), then vLLM's error
      event (``data: {"error": {...}}``), ``[DONE]`` and the end of the body;
    - ``"hang"``: read the request and send nothing until the server stops (``stop()`` does
      not wait for it; the connection is then closed);
    - ``"slow-first:S"``: a TTFT of ``S`` seconds for every request.

    ``max_running`` lets that many requests generate at once (vLLM's ``max-num-seqs``): the
    others wait for a slot, and their TTFT counts from when they got one plus the wait;
    ``corrupt_every`` replaces every k-th token's text with ``" bad{k}"`` (a configuration that
    changes the answers, for a quality guard).

    Stream shapes (the script's timing is unchanged: token ``k`` leaves at ``receipt + ttft_s +
    k * itl_s``, a chunk at its last token's time): ``reasoning_tokens`` makes the first R
    tokens of a chat answer reasoning (``" think{k}"``) in ``delta.<reasoning_field>``
    (``"reasoning"``, vLLM's current field, or ``"reasoning_content"``), R at least the output:
    capped inside reasoning, no content at all; the usage then says
    ``completion_tokens_details.reasoning_tokens`` unless ``report_reasoning_tokens=False``;
    ``tool_call_tokens`` makes the last T tokens of a chat answer (after any reasoning) a tool
    call's ``arguments`` (``" arg{k}"``; the first such delta names ``fake_tool``); a chunk
    that straddles two channels carries both in one delta. ``first_chunk_tokens`` packs k1
    tokens in the first chunk (then ``tokens_per_chunk`` a chunk); ``empty_opening_chunk``
    sends, at receipt, a chat role chunk with ``content: ""`` (vLLM's) or a completion chunk
    with ``text: ""``; ``tail_s`` holds the trailing events (finish chunk, usage, ``[DONE]``)
    that long after the last token (:attr:`ReceivedRequest.ended_s` stamps when they began).
    A request whose ``stream_options`` asks for ``continuous_usage_stats`` (with
    ``include_usage``) gets vLLM's running ``usage`` on every chunk. ``chat_template`` counts
    a chat template into a chat request's ``usage.prompt_tokens``, as a real server applies
    one: :data:`~accelscope.llm.conformance.script.CHAT_TEMPLATE_MESSAGE_TOKENS` per message
    and :data:`~accelscope.llm.conformance.script.CHAT_TEMPLATE_GENERATION_TOKENS` for the
    assistant header. :meth:`served` is what each generation request was served, for a
    conformance grade.

    ``requests`` lists every request received (:class:`ReceivedRequest`), ``concurrent_max``
    the most generation requests ever in flight at once. ``/metrics`` exports vLLM's
    ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (requests waiting for a
    ``max_running`` slot),
    ``vllm:kv_cache_usage_perc`` (tokens in flight over :data:`KV_CACHE_TOKENS`),
    ``vllm:prefix_cache_queries_total`` (prompt tokens), ``vllm:prefix_cache_hits_total``
    (the longest common word prefix with any of the last 1000 prompts, in tokens) and
    ``vllm:num_preemptions_total`` (always 0).
    """

    def __init__(
        self,
        *,
        model: str = "fake-model",
        ttft_s: float = 0.05,
        itl_s: float = 0.01,
        tokens_per_chunk: int = 1,
        output_tokens: int | None = None,
        prompt_tokens_per_word: int = 1,
        include_usage_supported: bool = True,
        fault: str = "",
        max_running: int | None = None,
        corrupt_every: int = 0,
        port: int = 0,
        reasoning_tokens: int = 0,
        reasoning_field: str = "reasoning",
        report_reasoning_tokens: bool = True,
        tool_call_tokens: int = 0,
        first_chunk_tokens: int | None = None,
        empty_opening_chunk: bool = False,
        tail_s: float = 0.0,
        chat_template: bool = False,
    ) -> None:
        if ttft_s < 0 or itl_s < 0 or tail_s < 0:
            raise ValueError("ttft_s, itl_s and tail_s must not be negative")
        if reasoning_field not in ("reasoning", "reasoning_content"):
            raise ValueError("reasoning_field: reasoning or reasoning_content")
        if reasoning_tokens < 0 or tool_call_tokens < 0:
            raise ValueError("reasoning_tokens and tool_call_tokens must not be negative")
        if first_chunk_tokens is not None and first_chunk_tokens < 1:
            raise ValueError("first_chunk_tokens must be at least 1")
        self.reasoning_tokens = reasoning_tokens
        self.reasoning_field = reasoning_field
        self.report_reasoning_tokens = report_reasoning_tokens
        self.tool_call_tokens = tool_call_tokens
        self.first_chunk_tokens = first_chunk_tokens
        self.empty_opening_chunk = empty_opening_chunk
        self.tail_s = tail_s
        self.chat_template = chat_template
        if tokens_per_chunk < 1:
            raise ValueError("tokens_per_chunk must be at least 1")
        if output_tokens is not None and output_tokens < 0:
            raise ValueError("output_tokens must not be negative")
        self.model = model
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.tokens_per_chunk = tokens_per_chunk
        self.output_tokens = output_tokens
        self.prompt_tokens_per_word = prompt_tokens_per_word
        if max_running is not None and max_running < 1:
            raise ValueError("max_running must be at least 1")
        if corrupt_every < 0:
            raise ValueError("corrupt_every must not be negative")
        self.max_running = max_running
        self.corrupt_every = corrupt_every
        self.port_wanted = port
        """The port to listen on (0: a free one)."""
        self._slots = threading.Semaphore(max_running) if max_running else None
        self._waiting = 0
        self.include_usage_supported = include_usage_supported
        self.fault = fault
        self._fault_kind, self._fault_value_int, self._fault_value_float = self._parse_fault(fault)
        self.url = ""
        self.port = 0
        self.concurrent_max = 0
        self._lock = threading.Lock()
        self._requests: list[ReceivedRequest] = []
        self._running = 0
        self._tokens_in_flight = 0
        self._admitted = 0
        self._queries = 0
        self._hits = 0
        self._prompts: deque[tuple[str, ...]] = deque(maxlen=REMEMBERED_PROMPTS)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def _chunks(self, n_out: int) -> list[tuple[int, int]]:
        """The stream's token ranges [start, stop): ``first_chunk_tokens`` first (when set),
        then ``tokens_per_chunk`` each."""
        found: list[tuple[int, int]] = []
        start = 0
        if self.first_chunk_tokens is not None and n_out:
            start = min(self.first_chunk_tokens, n_out)
            found.append((0, start))
        per_chunk = self.tokens_per_chunk
        found += [(a, min(a + per_chunk, n_out)) for a in range(start, n_out, per_chunk)]
        return found

    @staticmethod
    def _parse_fault(fault: str) -> tuple[str, int, float]:
        kind, _, value = fault.partition(":")
        simple = ("", "malformed-sse", "stop-mid-stream", "error-mid-stream", "not-openai", "hang")
        if kind in simple and not value:
            return kind, 0, 0.0
        try:
            if kind == "status":
                code = int(value)
                if not 100 <= code <= 599:
                    raise ValueError
                return kind, code, 0.0
            if kind == "die-after":
                count = int(value)
                if count < 0:
                    raise ValueError
                return kind, count, 0.0
            if kind == "slow-first":
                seconds = float(value)
                if seconds < 0:
                    raise ValueError
                return kind, 0, seconds
        except ValueError:
            pass
        raise ValueError(
            f"unknown fault {fault!r}: expected status:N, malformed-sse, stop-mid-stream, "
            "error-mid-stream, not-openai, die-after:N, hang or slow-first:S"
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on a free loopback port and serve on a daemon thread."""
        if self._server is not None:
            raise RuntimeError("the fake server is already started")
        server = _Server(self)
        self._server = server
        self.port = server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-llm-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        if self._fault_kind == "die-after" and self._fault_value_int == 0:
            self._die(keep=None)

    def stop(self) -> None:
        """Stop serving and cut every open connection (idempotent; never waits on a
        request in flight)."""
        self._stopping.set()
        self._close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _close(self) -> None:
        """Stop listening, end the serving loop, cut the connections (once)."""
        server = self._server
        with self._lock:
            if server is None or self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):
            server.socket.shutdown(socket.SHUT_RDWR)  # from now on, connections are refused
        if self._thread is not None and self._thread.is_alive():
            server.shutdown()
        server.server_close()
        server.cut_connections()

    def _die(self, keep: socket.socket | None) -> None:
        """die-after: refuse connections now; close the rest on a side thread."""
        server = self._server
        if server is None:
            return
        with contextlib.suppress(OSError):
            server.socket.shutdown(socket.SHUT_RDWR)

        def finish() -> None:
            self._stopping.set()
            with self._lock:
                if self._closed:
                    return
                self._closed = True
            server.shutdown()
            server.server_close()
            server.cut_connections(keep=keep)

        threading.Thread(target=finish, name="fake-llm-server-dies", daemon=True).start()

    # -- state -----------------------------------------------------------------------------

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received so far, in order of receipt (a copy)."""
        with self._lock:
            return list(self._requests)

    def served(self) -> list[ServedRequest]:
        """Each generation request that was served a shape, as
        :class:`~accelscope.llm.conformance.script.ServedRequest` (its stamps and counts)."""
        found = []
        for request in self.requests:
            if not request.shape:
                continue
            shape = request.shape[0]
            sent = list(request.sent_s)
            ended = request.ended_s[0] if request.ended_s else None
            found.append(
                ServedRequest(
                    received_s=request.received_s,
                    sent_s=sent,
                    ended_s=ended,
                    chunk_tokens=list(shape.chunk_tokens[: len(sent)]),
                    prompt_tokens=shape.prompt_tokens,
                    output_tokens=shape.output_tokens,
                    reasoning_tokens=shape.reasoning_tokens,
                    content_chunk=shape.content_chunk,
                    errored=self._fault_kind == "error-mid-stream" and ended is not None,
                )
            )
        return found

    @property
    def closed(self) -> bool:
        """Whether the server stopped serving (stopped, or died by its fault)."""
        with self._lock:
            return self._closed

    @property
    def running(self) -> int:
        """Generation requests in flight now."""
        with self._lock:
            return self._running

    def _record(self, request: ReceivedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _admit(self) -> bool | None:
        """Count a generation request in; ``True`` when it is die-after's last one, ``None``
        when it comes after that (the server is dying)."""
        with self._lock:
            self._admitted += 1
            number = self._admitted
            self._running += 1
            self.concurrent_max = max(self.concurrent_max, self._running)
        if self._fault_kind != "die-after":
            return False
        if number > self._fault_value_int:
            return None
        return number == self._fault_value_int

    def _finish(self) -> None:
        with self._lock:
            self._running -= 1

    def _reserve(self, tokens: int) -> None:
        with self._lock:
            self._tokens_in_flight += tokens

    def _prefix_cache(self, words: Sequence[str]) -> None:
        prompt = tuple(words)
        with self._lock:
            hit = max((_common_prefix(prompt, p) for p in self._prompts), default=0)
            self._queries += len(prompt) * self.prompt_tokens_per_word
            self._hits += hit * self.prompt_tokens_per_word
            self._prompts.append(prompt)

    def _metrics_text(self) -> str:
        with self._lock:
            waiting = self._waiting
            running = self._running - waiting
            usage = min(1.0, self._tokens_in_flight / KV_CACHE_TOKENS)
            queries, hits = self._queries, self._hits
        label = '{model_name="' + self.model.replace("\\", "\\\\").replace('"', '\\"') + '"}'
        families: list[tuple[str, str, str, float]] = [
            ("vllm:num_requests_running", "gauge", _HELP_RUNNING, running),
            ("vllm:num_requests_waiting", "gauge", _HELP_WAITING, waiting),
            ("vllm:kv_cache_usage_perc", "gauge", _HELP_KV, usage),
            ("vllm:prefix_cache_queries_total", "counter", _HELP_QUERIES, queries),
            ("vllm:prefix_cache_hits_total", "counter", _HELP_HITS, hits),
            ("vllm:num_preemptions_total", "counter", _HELP_PREEMPTIONS, 0),
        ]
        lines: list[str] = []
        for name, kind, help_text, value in families:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{label} {float(value)!r}")
        return "\n".join(lines) + "\n"


class TransformersServe(ServerProcess):
    """The real ``transformers serve`` on ``model_dir``, on CPU, on a free loopback port.

    A :class:`~accelscope.llm.server_process.ServerProcess` (own process group, parent-death
    signal, log file, always stopped) started with ``HF_HUB_OFFLINE=1``,
    ``TRANSFORMERS_OFFLINE=1`` and ``TOKENIZERS_PARALLELISM=false``; ready when ``GET /health``
    answers 200 (the model is loaded before the server listens). A process that exits first,
    or a server not ready within ``startup_timeout_s``, is a :class:`RuntimeError` holding the
    log's last lines (the log is kept then). ``model`` is what to send as ``"model"``: the
    server is pinned to the path it was started with and refuses any other name; it answers
    ``"<path>@main"`` in its chunks. ``stop()`` sends SIGTERM to the group, waits 10 s, then
    SIGKILL; ``kill()`` is SIGKILL at once (the server dying mid-run).

    ``continuous_batching`` adds ``--continuous-batching`` and, unless ``cb_num_blocks`` is
    ``None``, ``--cb-num-blocks`` (:data:`CB_NUM_BLOCKS`: transformers would otherwise size the
    KV cache from the machine's RAM). ``extra_args`` come last, so they override. ``device``
    is ``--device``. ``startup_s`` is how long the start took.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        continuous_batching: bool = False,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 180,
        log_path: Path | None = None,
        device: str = "cpu",
        cb_num_blocks: int | None = CB_NUM_BLOCKS,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.continuous_batching = continuous_batching
        self.cb_num_blocks = cb_num_blocks
        self.extra_args = tuple(extra_args)
        self.device = device
        self.model = str(model_dir)
        command = [str(self.executable()), "serve", self.model]
        command += ["--port", "{port}", "--host", "127.0.0.1", "--device", device]
        if continuous_batching:
            command.append("--continuous-batching")
            if cb_num_blocks is not None:
                command += ["--cb-num-blocks", str(cb_num_blocks)]
        super().__init__(
            [*command, *self.extra_args],  # an option given twice: the last one counts
            name="transformers serve",
            env={
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
            },
            startup_timeout_s=startup_timeout_s,
            log_path=log_path,
            stop_timeout_s=10.0,
        )

    @staticmethod
    def executable() -> Path:
        """The ``transformers`` command of this Python environment."""
        return Path(sys.executable).with_name("transformers")

    def start(self) -> None:
        """Start the server and wait until it is healthy (RuntimeError with the log if not)."""
        executable = self.executable()
        if not executable.is_file():
            raise RuntimeError(
                f"{executable} not found: install transformers with its serving extra "
                "(pip install 'transformers[serving]')"
            )
        try:
            super().start()
        except ServerStartError as error:
            raise RuntimeError(
                f"transformers serve {error.message.removeprefix(self.name + ' ')}; last lines "
                f"of {self.log_path}:\n{error.log_tail}"
            ) from None

    def _healthy(self) -> bool:
        return self.healthy()


VLLM_STARTUP_TIMEOUT_S = 420.0
"""A vLLM CPU server started to healthy in 81-140 s here (45 s with --enforce-eager); a loaded
2-core machine doubles that."""


class VllmServe(ServerProcess):
    """The real vLLM OpenAI server on ``model_dir`` (a CPU build on these machines), on a
    free loopback port: a :class:`~accelscope.llm.server_process.ServerProcess` (own process
    group, parent-death signal, health wait on ``/health``, always stopped; the log is kept
    when the start fails, in the :class:`~accelscope.llm.server_process.ServerStartError`).

    The environment is found by :func:`accelscope.llm.engines.find_vllm` (``python``, else
    ``vllm`` on ``PATH``, else the project's ``.venv-vllm`` that ``make vllm`` builds): a
    missing one is a one-line :class:`~accelscope.errors.BadInputError` saying how to make it.
    ``enforce_eager`` skips torch.compile (half the start time; what a test wants), ``kv_cache_gib``
    is the CPU build's KV-cache space; ``prefix_caching``, ``max_num_seqs``, ``dtype``,
    ``kv_cache_dtype`` and ``max_model_len`` are vLLM's flags (None: its default). ``model`` is
    the name to send: the directory, as vLLM names a model it was started with."""

    def __init__(
        self,
        model_dir: Path,
        *,
        python: Path | None = None,
        enforce_eager: bool = True,
        kv_cache_gib: float = 1.0,
        prefix_caching: bool | None = None,
        max_num_seqs: int | None = None,
        max_model_len: int | None = 2048,
        dtype: str | None = None,
        kv_cache_dtype: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = VLLM_STARTUP_TIMEOUT_S,
        log_path: Path | None = None,
        registry: Path | None = None,
    ) -> None:
        from accelscope.llm.engines import find_vllm, vllm_command, vllm_environment

        self.model_dir = Path(model_dir)
        self.model = str(model_dir)
        self.install = find_vllm(python)
        flags: list[str] = []
        if enforce_eager:
            flags.append("--enforce-eager")
        if max_model_len is not None:
            flags += ["--max-model-len", str(max_model_len)]
        if prefix_caching is not None:
            flags.append(
                "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching"
            )
        if max_num_seqs is not None:
            flags += ["--max-num-seqs", str(max_num_seqs)]
        if dtype is not None:
            flags += ["--dtype", dtype]
        if kv_cache_dtype is not None:
            flags += ["--kv-cache-dtype", kv_cache_dtype]
        super().__init__(
            vllm_command(self.install, self.model_dir, flags=[*flags, *extra_args]),
            name="vllm",
            env=vllm_environment(self.install, kv_cache_gib=kv_cache_gib),
            startup_timeout_s=startup_timeout_s,
            log_path=log_path,
            registry=registry,
        )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m accelscope.testing.llm_server --port P [...]``: serve a scripted fake on
    ``127.0.0.1:P`` until SIGTERM or SIGINT (a server a command line can start: ``tune``'s
    ``--server-command`` tests)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m accelscope.testing.llm_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--max-running", type=int, default=None)
    parser.add_argument("--corrupt-every", type=int, default=0)
    parser.add_argument("--fault", default="", help="a fault of FakeLLMServer, or none")
    parser.add_argument("--startup-s", type=float, default=0.0)
    parser.add_argument("--ignore-term", action="store_true", help="survive SIGTERM")
    parser.add_argument(
        "--cases",
        type=Path,
        default=None,
        help="a JSON list of conformance cases (name, port, script), each served on its port "
        "beside the one above (their scripts replace its timing options)",
    )
    parser.add_argument(
        "--stamps-dir",
        type=Path,
        default=None,
        help="on the way out, write what each case served to NAME.json here",
    )
    args = parser.parse_args(argv)
    if args.max_running is not None and args.max_running < 1:
        parser.error("--max-running must be at least 1")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait(args.startup_s)  # a slow start (a stop still ends it)
    server = FakeLLMServer(
        model=args.model,
        ttft_s=args.ttft_ms / 1000.0,
        itl_s=args.itl_ms / 1000.0,
        max_running=args.max_running,
        corrupt_every=args.corrupt_every,
        fault="" if args.fault == "none" else args.fault,
        port=args.port,
    )
    # one process hosts every case (an accelscope import costs seconds; a case's server, a
    # thread): each case's own server, on its own port, with its own stamps
    hosted = read_hosted_cases(args.cases.read_bytes()) if args.cases else []
    cases = {
        case.name: FakeLLMServer(model=args.model, port=case.port, **case.script.model_dump())
        for case in hosted
    }
    with contextlib.ExitStack() as running:
        for case_server in cases.values():
            running.enter_context(case_server)
        try:
            with server:
                print(f"fake LLM server on {server.url}", flush=True)
                while not stop.wait(0.1):
                    if server.closed:  # die-after: the process ends, as a crashed server's would
                        print("the fake server died (scripted)", flush=True)
                        sys.exit(1)
        finally:
            for name, case_server in cases.items():
                if args.stamps_dir is not None:
                    write_atomic(
                        args.stamps_dir / f"{name}.json", stamps_json(case_server.served())
                    )


if __name__ == "__main__":
    main()
