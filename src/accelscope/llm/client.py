"""An OpenAI-compatible streaming client: the ``Target`` for vLLM, SGLang, TGI, llama.cpp
server, ``transformers serve`` or any server speaking ``/v1/completions`` or
``/v1/chat/completions`` with server-sent events.

Each request is one HTTP/1.1 connection, so no connection pool sits between the server's bytes and
the timestamps. On plain HTTP the request's own thread connects and sends it; the answer, its
status line and headers included, is read by one reader thread per endpoint
(:mod:`accelscope.llm.sse_reader`: a chunk then costs a ``recv`` and its parsing, not a thread
wake-up and a GIL hand-off, and the request's thread wakes once, at the end); a chunk is stamped
with the kernel's receive time of the read that brought it (``SO_TIMESTAMPNS`` on Linux; else
``time.perf_counter()`` as soon as the read returns), and chunks that came in one read share the
stamp. A TLS stream is read in the request's thread, the same way.
Output arrives on three channels: the answer (a
completion's ``text``, a chat delta's ``content``), reasoning (``delta.reasoning``, vLLM's current
field, or ``delta.reasoning_content``) and tool calls (``delta.tool_calls[].function`` name and
``arguments``); the first chunk carrying any of them is the first token, the first with answer text
the first content, the last with any the last token. A chunk with none (a chat role chunk, an empty
``content: ""``, the finish or ``usage`` chunk) is not a token. Token counts come from the server's
``usage`` (asked for with ``stream_options.include_usage``), the reasoning share from its
``completion_tokens_details.reasoning_tokens``, each chunk's tokens from a ``usage`` on the chunk
itself (vLLM's ``continuous_usage_stats``, asked for unless the server refuses it); a server that
sends no usage falls back to the model's tokenizer over the streamed text of every channel,
labelled ``tokenizer``, or to ``unknown``: never a whitespace count. ``output_text`` holds the
answer only (a conversation's next turn carries no reasoning).

Failures are per request and never raise: an HTTP status, a non-SSE answer, malformed JSON,
a stream that ends with neither a ``finish_reason`` nor ``[DONE]`` (``transformers serve``
sends no ``[DONE]``), a timeout, a refused connection each become the
record's ``error`` (one line). :meth:`OpenAIEndpoint.check` sends one small request first so a
wrong URL, path or model name is one line of bad input before any trial starts.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, Literal

from accelscope.errors import BadInputError, one_line
from accelscope.llm.documents import TargetDescription
from accelscope.llm.records import LlmRequest, RequestRecord
from accelscope.llm.sse_reader import (
    READ_BYTES,
    Reactor,
    SseParser,
    StreamState,
    enable_kernel_stamps,
)
from accelscope.llm.workload import TokenCounter

__all__ = ["Api", "OpenAIEndpoint"]

Api = Literal["completions", "chat"]
_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def _rebuild(
    base_url: str,
    model: str,
    options: dict[str, Any],
    ignore_eos: bool,
    extra_body: Mapping[str, Any] | None,
    chunk_usage: bool = True,
) -> OpenAIEndpoint:
    endpoint = OpenAIEndpoint(
        base_url, model, ignore_eos=ignore_eos, extra_body=extra_body, **options
    )
    endpoint.chunk_usage = chunk_usage  # what the parent's check found the server takes
    return endpoint


_HTTP_4XX = re.compile(r"HTTP 4\d\d\b")
"""The error of a request the server refused (HTTP 4xx): asked again without the extras."""


class OpenAIEndpoint:
    """A streaming OpenAI-compatible endpoint (``base_url`` like ``http://host:8000``; a
    trailing ``/v1`` is accepted)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api: Api = "completions",
        api_key: str | None = None,
        tokenizer: TokenCounter | None = None,
        ignore_eos: bool = False,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise BadInputError(f"{base_url!r}: give the server's URL, e.g. http://localhost:8000")
        if api not in _PATHS:
            raise BadInputError(f"--api {api!r}: give completions or chat")
        if not model.strip():
            raise BadInputError("--model: give the model name the server serves")
        try:
            port = parsed.port
        except ValueError:
            raise BadInputError(f"{base_url!r}: the port is not a number") from None
        self._arguments = (base_url, model, api, api_key, tokenizer, ignore_eos, extra_body)
        self.base_url = base_url.strip().rstrip("/")
        self.origin = f"{parsed.scheme}://{parsed.netloc}"
        self.scheme = parsed.scheme
        self.host = parsed.hostname
        self.port = port or (443 if parsed.scheme == "https" else 80)
        prefix = parsed.path.rstrip("/")
        prefix = prefix[: -len("/v1")] if prefix.endswith("/v1") else prefix
        self.path = prefix + _PATHS[api]
        self._target = urllib.parse.quote(self.path, safe="/%:@!$&'()*+,;=~")
        self._host_header = parsed.netloc.rpartition("@")[2]
        if api_key is not None and any(c in api_key for c in "\r\n\0"):
            raise BadInputError("--api-key: a key holds no line breaks")
        self.model = model
        self.api = api
        self.api_key = api_key
        self.tokenizer = tokenizer
        self.ignore_eos = ignore_eos
        self.extra_body = dict(extra_body or {})
        self.chunk_usage = True
        """Ask for a ``usage`` on every chunk (vLLM's ``continuous_usage_stats``: the only way a
        stream says how many tokens each chunk holds, so TPOT divides by N - k1 with the real
        k1); :meth:`check` turns it off for a server that refuses it."""
        self._live: set[socket.socket] = set()
        self._tls: ssl.SSLContext | None = None
        if self.scheme == "https":  # the system's trusted certificates, as http.client does
            self._tls = ssl.create_default_context()
            self._tls.set_alpn_protocols(["http/1.1"])
        self._lock = threading.Lock()
        self._reactor = Reactor()

    def __reduce__(self) -> tuple[Any, ...]:
        """An endpoint travels to another client process (``llm --workers``) as its arguments:
        connections, locks and the reader thread are each process's own."""
        base_url, model, api, api_key, tokenizer, ignore_eos, extra_body = self._arguments
        options = {"api": api, "api_key": api_key, "tokenizer": tokenizer}
        return _rebuild, (base_url, model, options, ignore_eos, extra_body, self.chunk_usage)

    # -- the Target protocol -------------------------------------------------------------

    def describe(self) -> TargetDescription:
        return TargetDescription(
            kind="openai-http",
            url=self.base_url,
            path=self.path,
            api=self.api,
            model=self.model,
            ignore_eos=self.ignore_eos,
            token_counts="server usage; tokenizer fallback" if self.tokenizer else "server usage",
        )

    def check(self) -> None:
        """One small streaming request; any failure is bad input, in one line."""
        probe = LlmRequest(index=-1, prompt="Hello", max_tokens=2)
        origin = time.perf_counter()
        record = self.stream(
            probe, origin_s=origin, scheduled_s=0.0, timeout_s=60.0, cancel=threading.Event()
        )
        if record.error and _HTTP_4XX.match(record.error) and self.chunk_usage:
            # a server that refuses vLLM's per-chunk usage (a strict OpenAI schema) is asked
            # again without it: each chunk's tokens then come from the tokenizer, or k1 = 1
            self.chunk_usage = False
            record = self.stream(
                probe, origin_s=origin, scheduled_s=0.0, timeout_s=60.0, cancel=threading.Event()
            )
        if record.error:
            raise BadInputError(f"{self.origin}{self.path}: {record.error}")
        if record.first_token_s is None:
            raise BadInputError(
                f"{self.origin}{self.path}: the stream carried no text for a 2-token request"
            )

    def interrupt(self) -> None:
        """Close every connection in flight (their requests end ``cancelled``)."""
        with self._lock:
            live = list(self._live)
        for sock in live:
            if sock.fileno() >= 0:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def trial_notes(self) -> list[str]:
        return []  # the server's own view comes from its /metrics

    def close(self) -> None:
        self.interrupt()

    # -- one request -----------------------------------------------------------------------

    def _body(self, request: LlmRequest) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
        }
        if self.chunk_usage:
            body["stream_options"]["continuous_usage_stats"] = True
        if self.api == "chat":
            body["messages"] = [{"role": m.role, "content": m.content} for m in request.chat()]
        else:
            body["prompt"] = request.prompt
        if self.ignore_eos:
            body["ignore_eos"] = True
        body.update(self.extra_body)
        return json.dumps(body).encode()

    def _head(self, body: bytes) -> bytes:
        """A request's line and headers (those ``http.client`` would send, in its order)."""
        lines = [
            f"POST {self._target} HTTP/1.1",
            f"Host: {self._host_header}",
            "Accept-Encoding: identity",
            f"Content-Length: {len(body)}",
            "Content-Type: application/json",
            "Accept: text/event-stream",
        ]
        if self.api_key:
            lines.append(f"Authorization: Bearer {self.api_key}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")

    def stream(
        self,
        request: LlmRequest,
        *,
        origin_s: float,
        scheduled_s: float,
        timeout_s: float,
        cancel: threading.Event,
    ) -> RequestRecord:
        record = request.record(scheduled_s=scheduled_s, sent_s=time.perf_counter() - origin_s)
        deadline = time.perf_counter() + timeout_s
        stream = StreamState()
        parser = SseParser(
            record,
            stream,
            origin_s=origin_s,
            chat=self.api == "chat",
            cancel=cancel,
            head=True,
        )
        timeout_error = f"timeout after {timeout_s:g} s"
        try:
            self._exchange(self._body(request), parser, deadline, timeout_s, timeout_error)
        except TimeoutError:
            record.error = timeout_error
        except OSError as exc:
            if cancel.is_set():
                record.cancelled = True
            else:
                record.error = one_line(f"{type(exc).__name__}: {exc}") or type(exc).__name__
        parser.settle(time.perf_counter())
        if record.output_tokens is None and not record.error and self.tokenizer is not None:
            record.output_tokens = self._tokenizer_count(stream.streamed)
            record.tokens_source = "tokenizer"
        stream.finish(record)
        return record

    def _exchange(
        self, body: bytes, parser: SseParser, deadline: float, timeout_s: float, error: str
    ) -> None:
        """Connect, send, and read the answer (head and body) into ``parser``: a plain-HTTP
        socket on the endpoint's reader thread (this thread then wakes once, when the stream
        is over), a TLS one here, read by read."""
        sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
        try:
            stamped = False
            if self._tls is None:
                stamped = enable_kernel_stamps(sock)
            else:
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            with self._lock:
                self._live.add(sock)
            sock.sendall(self._head(body) + body)
            if self._tls is None:
                sock.setblocking(False)
                self._reactor.follow(sock, parser, deadline, error, stamped=stamped)
                return
            while True:
                data = sock.recv(READ_BYTES)
                now = time.perf_counter()
                if not data:
                    if parser.cancel.is_set():
                        parser.fail(now, cancelled=True)
                    else:
                        parser.eof(now)
                    return
                if now > deadline:
                    parser.fail(now, error)
                    return
                if parser.feed(data, now):
                    return
        finally:
            with self._lock:
                self._live.discard(sock)
            sock.close()

    def _tokenizer_count(self, streamed: list[str]) -> int:
        """The tokenizer's count over every channel's streamed text (reasoning, answer,
        tool-call deltas), each channel's text encoded on its own."""
        assert self.tokenizer is not None
        channels = ["".join(streamed[i::3]) for i in range(3)]
        return sum(
            len(self.tokenizer.encode(part, add_special_tokens=False)) for part in channels if part
        )
