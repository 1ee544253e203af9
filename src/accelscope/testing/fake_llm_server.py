"""A scripted OpenAI-compatible streaming server for tests of ``accelscope llm``, whose timing
is exact (the real servers are :mod:`accelscope.testing.real_llm_servers`).

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
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections import deque
from collections.abc import Sequence

from accelscope.llm.conformance.script import ServedRequest
from accelscope.testing._fake_llm_http import (
    KV_CACHE_TOKENS,
    REMEMBERED_PROMPTS,
    ReceivedRequest,
    StreamShape,
    _Server,
    common_prefix,
)
from accelscope.testing._service import Service

__all__ = ["KV_CACHE_TOKENS", "FakeLLMServer", "ReceivedRequest", "StreamShape"]

_HELP_RUNNING = "Number of requests in model execution batches."
_HELP_WAITING = "Number of requests waiting to be processed."
_HELP_KV = "KV-cache usage. 1 means 100 percent usage."
_HELP_QUERIES = "Prefix cache queries, in terms of number of queried tokens."
_HELP_HITS = "Prefix cache hits, in terms of number of cached tokens."
_HELP_PREEMPTIONS = "Cumulative number of preemption from the engine."


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
    - ``"slow-first:S"``: a TTFT of ``S`` seconds for every request;
    - ``"strict-schema"``: a request whose ``stream_options`` holds anything beyond
      ``include_usage`` (vLLM's ``continuous_usage_stats``) is answered HTTP 400, as a server
      validating OpenAI's schema strictly answers it.

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
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.tls = tls
        """Serve HTTPS with this server-side context (its certificate and key)."""
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
        simple = (
            "",
            "malformed-sse",
            "stop-mid-stream",
            "error-mid-stream",
            "not-openai",
            "hang",
            "strict-schema",
        )
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
            "error-mid-stream, not-openai, die-after:N, hang, slow-first:S or strict-schema"
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on a free loopback port and serve on a daemon thread."""
        if self._server is not None:
            raise RuntimeError("the fake server is already started")
        server = _Server(self)
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = server.server_address[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
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
            hit = max((common_prefix(prompt, p) for p in self._prompts), default=0)
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
