"""The HTTP side of :class:`~accelscope.testing.fake_llm_server.FakeLLMServer`: its server and
request handler, which play the script (routes, the stream's chunks on their deadlines, the
faults), and what it records of each request (:class:`ReceivedRequest`, :class:`StreamShape`).
What the handler needs of the server it plays for is :class:`ScriptedServer`, declared here:
the fake imports this module, never the other way round. Private to the fake: tests use
:mod:`accelscope.testing.fake_llm_server`."""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from accelscope.llm.conformance.script import (
    CHAT_TEMPLATE_GENERATION_TOKENS,
    CHAT_TEMPLATE_MESSAGE_TOKENS,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "GENERATION_PATHS",
    "KV_CACHE_TOKENS",
    "REMEMBERED_PROMPTS",
    "ReceivedRequest",
    "ScriptedServer",
    "StreamShape",
    "common_prefix",
]

GENERATION_PATHS = ("/v1/completions", "/v1/chat/completions")
DEFAULT_MAX_TOKENS = 16
REMEMBERED_PROMPTS = 1000
KV_CACHE_TOKENS = 4096
"""The fake KV cache's size in tokens: ``vllm:kv_cache_usage_perc`` is the prompt and output
tokens of the requests in flight over this (at most 1)."""

_HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>Welcome</title></head>\n"
    b"<body><h1>It works!</h1><p>This is not an OpenAI-compatible server.</p></body></html>\n"
)
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


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
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


class ScriptedServer(Protocol):
    """What the HTTP side reads of the server it plays for (its script: settings and fault)
    and the state it updates (counts, the prefix cache, dying): the attributes and methods of
    :class:`~accelscope.testing.fake_llm_server.FakeLLMServer` the handler uses."""

    model: str
    port_wanted: int
    ttft_s: float
    itl_s: float
    output_tokens: int | None
    prompt_tokens_per_word: int
    include_usage_supported: bool
    corrupt_every: int
    reasoning_tokens: int
    reasoning_field: str
    report_reasoning_tokens: bool
    tool_call_tokens: int
    empty_opening_chunk: bool
    tail_s: float
    chat_template: bool
    _fault_kind: str
    _fault_value_int: int
    _fault_value_float: float
    _lock: threading.Lock
    _slots: threading.Semaphore | None
    _stopping: threading.Event
    _waiting: int

    def _chunks(self, n_out: int) -> list[tuple[int, int]]: ...

    def _record(self, request: ReceivedRequest) -> None: ...

    def _admit(self) -> bool | None: ...

    def _finish(self) -> None: ...

    def _reserve(self, tokens: int) -> None: ...

    def _prefix_cache(self, words: Sequence[str]) -> None: ...

    def _metrics_text(self) -> str: ...

    def _die(self, keep: socket.socket | None) -> None: ...


class _Dying(Exception):
    """The connection is cut on purpose (a scripted fault, or the server stops)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, owner: ScriptedServer) -> None:
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
        options = body.get("stream_options")
        if (
            fault == "strict-schema"
            and isinstance(options, dict)
            and set(options) - {"include_usage"}
        ):
            extra = ", ".join(sorted(set(options) - {"include_usage"}))
            self._send_error_json(400, f"stream_options: extra inputs are not permitted: {extra}")
            return
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
