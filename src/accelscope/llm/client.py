"""An OpenAI-compatible streaming client: the ``Target`` for vLLM, SGLang, TGI, llama.cpp
server, ``transformers serve`` or any server speaking ``/v1/completions`` or
``/v1/chat/completions`` with server-sent events.

Each request is one HTTP/1.1 connection (``http.client``, blocking, one client thread per
request in flight), so no connection pool or event loop sits between the server's bytes and
the timestamps. A chunk is stamped with ``time.perf_counter()`` as soon as its ``data:`` line is
read. Output arrives on three channels: the answer (a completion's ``text``, a chat delta's
``content``), reasoning (``delta.reasoning``, vLLM's current field, or ``delta.reasoning_content``)
and tool calls (``delta.tool_calls[].function`` name and ``arguments``); the first chunk carrying
any of them is the first token, the first with answer text the first content, the last with any
the last token. A chunk with none (a chat role chunk, an empty ``content: ""``, the finish or
``usage`` chunk) is not a token. Token counts come from the server's ``usage`` (asked for with
``stream_options.include_usage``), the reasoning share from its
``completion_tokens_details.reasoning_tokens``, each chunk's tokens from a ``usage`` on the chunk
itself (vLLM's ``continuous_usage_stats``, when asked for through ``extra_body``); a server that
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
import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, Literal

from accelscope.errors import BadInputError, one_line
from accelscope.llm.documents import TargetDescription
from accelscope.llm.records import LlmRequest, RequestRecord
from accelscope.llm.workload import TokenCounter

__all__ = ["Api", "OpenAIEndpoint"]

Api = Literal["completions", "chat"]
_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
MAX_ERROR_BODY = 2000


def _error_message(status: int, body: bytes) -> str:
    """``HTTP 404: The model `x` does not exist.`` from an OpenAI error body, else the text."""
    text = body[:MAX_ERROR_BODY].decode("utf-8", "replace")
    try:
        payload = json.loads(text)
    except json.JSONDecodeError:
        return f"HTTP {status}: {one_line(text) or http.client.responses.get(status, '')}"
    message: Any = payload
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail", payload.get("message", payload)))
        message = error.get("message", error) if isinstance(error, dict) else error
    return f"HTTP {status}: {one_line(str(message))}"


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
        self.base_url = base_url.strip().rstrip("/")
        self.origin = f"{parsed.scheme}://{parsed.netloc}"
        self.scheme = parsed.scheme
        self.host = parsed.hostname
        self.port = port or (443 if parsed.scheme == "https" else 80)
        prefix = parsed.path.rstrip("/")
        prefix = prefix[: -len("/v1")] if prefix.endswith("/v1") else prefix
        self.path = prefix + _PATHS[api]
        self.model = model
        self.api = api
        self.api_key = api_key
        self.tokenizer = tokenizer
        self.ignore_eos = ignore_eos
        self.extra_body = dict(extra_body or {})
        self._live: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()

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
        for conn in live:
            sock = conn.sock
            if sock is not None:
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
        if self.api == "chat":
            body["messages"] = [{"role": m.role, "content": m.content} for m in request.chat()]
        else:
            body["prompt"] = request.prompt
        if self.ignore_eos:
            body["ignore_eos"] = True
        body.update(self.extra_body)
        return json.dumps(body).encode()

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout_s)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)

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
        conn = self._connection(timeout_s)
        with self._lock:
            self._live.add(conn)
        stream = _StreamState()
        try:
            headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            conn.request("POST", self.path, body=self._body(request), headers=headers)
            response = conn.getresponse()
            if response.status != 200:
                record.error = _error_message(response.status, response.read(MAX_ERROR_BODY))
                return record
            kind = response.getheader("Content-Type", "")
            if "text/event-stream" not in kind:
                record.error = f"not a streaming OpenAI response (Content-Type {kind or 'none'})"
                return record
            self._read_events(response, record, stream, origin_s, deadline, cancel)
        except TimeoutError:
            record.error = f"timeout after {timeout_s:g} s"
        except (OSError, http.client.HTTPException) as exc:
            if cancel.is_set():
                record.cancelled = True
            else:
                record.error = one_line(f"{type(exc).__name__}: {exc}") or type(exc).__name__
        finally:
            with self._lock:
                self._live.discard(conn)
            conn.close()
            record.end_s = time.perf_counter() - origin_s
        record.output_text = "".join(stream.answer)
        record.output_chars = sum(len(s) for s in stream.streamed)
        if record.output_tokens is None and not record.error and self.tokenizer is not None:
            record.output_tokens = self._tokenizer_count(stream.streamed)
            record.tokens_source = "tokenizer"
        stream.finish(record)
        return record

    def _tokenizer_count(self, streamed: list[str]) -> int:
        """The tokenizer's count over every channel's streamed text (reasoning, answer,
        tool-call deltas), each channel's text encoded on its own."""
        assert self.tokenizer is not None
        channels = ["".join(streamed[i::3]) for i in range(3)]
        return sum(
            len(self.tokenizer.encode(part, add_special_tokens=False)) for part in channels if part
        )

    def _read_events(
        self,
        response: http.client.HTTPResponse,
        record: RequestRecord,
        stream: _StreamState,
        origin_s: float,
        deadline: float,
        cancel: threading.Event,
    ) -> None:
        done = False
        while True:
            line = response.readline()
            now = time.perf_counter()
            if cancel.is_set():
                record.cancelled = True
                return
            if not line:
                break
            if now > deadline:
                raise TimeoutError
            line = line.strip()
            if not line or line.startswith(b":") or not line.startswith(b"data:"):
                continue  # blank separators, comments, event:/id: fields
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                event = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError):
                record.error = f"malformed SSE data: {one_line(data.decode('utf-8', 'replace'))}"
                return
            if not isinstance(event, dict):
                record.error = "malformed SSE data: not a JSON object"
                return
            if "error" in event:
                record.error = one_line(f"server error in stream: {event['error']}")
                return
            choices = event.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                done = done or bool(choices[0].get("finish_reason"))
            content, reasoning, tool = self._pieces(event)
            usage = event.get("usage")
            completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
            if not isinstance(completion, int) or isinstance(completion, bool):
                completion = None
            if content or reasoning or tool:
                stamp = now - origin_s
                if record.first_token_s is None:
                    record.first_token_s = stamp
                if content and record.first_content_s is None:
                    record.first_content_s = stamp
                record.last_token_s = stamp
                record.chunk_times_s.append(stamp)
                stream.chunk(completion, content, reasoning, tool)
            if isinstance(usage, dict) and completion is not None:
                record.output_tokens = completion
                record.tokens_source = "usage"
                if isinstance(usage.get("prompt_tokens"), int):
                    record.prompt_tokens = usage["prompt_tokens"]
                details = usage.get("completion_tokens_details")
                if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
                    stream.reported_reasoning = details["reasoning_tokens"]
        if not done:
            record.error = "the stream ended before a finish_reason or [DONE]"

    def _pieces(self, event: dict[str, Any]) -> tuple[str, str, str]:
        """(answer text, reasoning text, tool-call text) of one event: a chat delta's
        ``content``, its ``reasoning`` (vLLM) or ``reasoning_content`` (the older name), and
        its ``tool_calls[].function`` name and ``arguments``; a completion's ``text``."""
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return "", "", ""
        choice = choices[0]
        if self.api != "chat":
            piece = choice.get("text") or ""
            return (piece if isinstance(piece, str) else ""), "", ""
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return "", "", ""
        content = _string(delta.get("content"))
        reasoning = _string(delta.get("reasoning")) or _string(delta.get("reasoning_content"))
        tool: list[str] = []
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    tool.append(_string(function.get("name")))
                    tool.append(_string(function.get("arguments")))
        return content, reasoning, "".join(tool)


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


class _StreamState:
    """What one stream tells beyond the record's stamps: each output chunk's tokens (from a
    cumulative ``usage`` on the chunk itself, vLLM's ``continuous_usage_stats``), which chunks
    carried reasoning, the reasoning tokens the usage reported, each channel's text."""

    def __init__(self) -> None:
        self.counts: list[int | None] = []
        self.reasoning_only: list[bool] = []
        self.mixed = False
        self.counted = 0
        self.reported_reasoning: int | None = None
        self.answer: list[str] = []
        self.streamed: list[str] = []
        """(reasoning, answer, tool-call) text, chunk after chunk."""

    def chunk(self, completion: int | None, content: str, reasoning: str, tool: str) -> None:
        """An output chunk; ``completion``: the cumulative completion tokens it carried."""
        if completion is None:
            self.counts.append(None)
        else:
            self.counts.append(max(completion - self.counted, 0))
            self.counted = completion
        self.reasoning_only.append(bool(reasoning) and not (content or tool))
        self.mixed = self.mixed or (bool(reasoning) and bool(content or tool))
        self.answer.append(content)
        self.streamed.extend((reasoning, content, tool))

    def finish(self, record: RequestRecord) -> None:
        """Each chunk's tokens when every chunk carried them; the reasoning tokens: as the
        usage reported them, else 0 when no chunk carried reasoning, else counted over the
        reasoning chunks when each chunk's tokens are known (reported, or one a chunk when the
        usage's count equals the chunks), else not known."""
        known = [c for c in self.counts if c is not None]
        if self.counts and len(known) == len(self.counts):
            record.chunk_tokens = known
        if self.reported_reasoning is not None:
            record.reasoning_tokens = self.reported_reasoning
            return
        if not self.mixed and not any(self.reasoning_only):
            record.reasoning_tokens = 0 if record.first_token_s is not None else None
            return
        per_chunk = record.chunk_tokens
        one_each = record.tokens_source == "usage" and record.output_tokens == len(self.counts)
        if not per_chunk and one_each:
            per_chunk = [1] * len(self.counts)
        if per_chunk and not self.mixed:
            record.reasoning_tokens = sum(
                n for n, only in zip(per_chunk, self.reasoning_only, strict=True) if only
            )
