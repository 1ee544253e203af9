"""Reading an OpenAI server-sent-event stream into a request's record, for many streams at a
time on one thread.

:class:`SseParser` is push-style: each read of the socket (``feed``, stamped once when the read
returned) goes through the chunked framing (``size CRLF data CRLF``), the SSE lines and each
``data:`` event's JSON into the record's stamps and counts; the definitions are the client's
(see :mod:`accelscope.llm.client`). :class:`Reactor` reads every plain-HTTP stream of an
endpoint on one thread (``epoll``: one wake-up for every socket that is ready, at most one
each :data:`WAKE_SPACING_S`), so a chunk costs a ``recv`` and its parsing, not a thread switch:
with a thread a stream, each chunk woke its thread and passed the GIL, about 40 us of CPU a
chunk. The caller's thread connects and sends the request, then waits for the stream's end;
the reader reads the answer's head (:func:`parse_head`) and body. A read that brings one whole
chunk which cannot end the stream (no ``[DONE]``, no ``"error"``, not the last chunk) is kept
with its stamp and parsed with the next read that can, in one go: the records are those of a
read parsed at once, for less CPU a chunk.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import json.scanner
import select
import socket
import struct
import sys
import threading
import time
from collections import deque
from typing import Any, NamedTuple

import orjson

from accelscope.errors import one_line
from accelscope.llm.records import RequestRecord

__all__ = [
    "MAX_ERROR_BODY",
    "READ_BYTES",
    "Reactor",
    "ResponseHead",
    "SseParser",
    "StreamState",
    "error_message",
    "parse_head",
]

READ_BYTES = 65536
"""The most one read takes: whatever the socket holds, so a burst of chunks costs one call."""

_SO_TIMESTAMPNS = 35
"""Linux's ``SO_TIMESTAMPNS`` (``SCM_TIMESTAMPNS`` too; Python does not name it): each read
brings the kernel's receive time of its data (``CLOCK_REALTIME``, a ``timespec``)."""

_STAMP_BYTES = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_SOL_SOCKET = socket.SOL_SOCKET
_TIMESPEC = struct.Struct("qq")


def enable_kernel_stamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp each read of ``sock`` with its data's receive time; False
    where it cannot (not Linux, not an IP socket)."""
    if not _STAMP_BYTES or not hasattr(sock, "recvmsg") or not sys.platform.startswith("linux"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _kernel_stamp(ancillary: list[tuple[int, int, bytes]], offset_ns: int) -> float | None:
    """The receive time a read brought (``time.perf_counter`` seconds; ``offset_ns``: the
    real-time clock's lead over it), or None when it brought none."""
    for level, kind, data in ancillary:
        if kind == _SO_TIMESTAMPNS and level == _SOL_SOCKET and len(data) >= 16:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            if seconds:
                stamp_ns: int = seconds * 1_000_000_000 + nanoseconds - offset_ns
                return stamp_ns / 1e9
    return None


_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
"""The C scanner behind ``json.loads`` without its per-call wrappers (encoding detection, the
decoder object, the trailing-whitespace regex): what reads a payload ``orjson`` refuses."""

_INCOMPLETE = one_line(f"IncompleteRead: {http.client.IncompleteRead(b'')}")
"""What ``http.client`` said of a chunked body cut before its last chunk (kept word for word)."""

_NO_ANSWER = "RemoteDisconnected: Remote end closed connection without response"
"""What ``http.client`` said of a connection closed before the status line (word for word)."""

MAX_HEAD_BYTES = 65536
"""The most an answer's status line and headers may take."""

MAX_ERROR_BODY = 2000
"""The most of an error answer's body read for its message."""


class ResponseHead(NamedTuple):
    """An HTTP answer's status line and the headers a stream needs."""

    status: int
    content_type: str
    chunked: bool
    length: int | None


def parse_head(raw: bytes) -> ResponseHead | str:
    """The head of an HTTP/1.x answer (without its blank line), or what is wrong with it."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(None, 2)
    version, status = [*parts, "", ""][:2]
    if not version.startswith("HTTP/") or not (len(status) == 3 and status.isdecimal()):
        return one_line(f"BadStatusLine: {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    length: int | None = None
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    if not chunked and "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            return one_line(f"the answer's Content-Length is not a number: {lines[0]!r}")
        if length < 0:
            return "the answer's Content-Length is negative"
    return ResponseHead(int(status), headers.get("content-type", ""), chunked, length)


def error_message(status: int, body: bytes) -> str:
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


def _json_object(data: bytes) -> dict[str, Any] | str:
    """The JSON object of one ``data:`` payload (stripped), or the record's error when it is
    none: what ``json.loads`` accepts, nothing else. ``orjson`` reads it (1.4 us an event
    against 2.9 us); what it refuses goes to ``json.loads``, which takes NaN, Infinity and a
    lone surrogate. (``orjson`` reads an integer beyond 64 bits as a float, no count, and
    JSON nested 1,000-1,023 deep, where ``json.loads`` runs out of recursion.)"""
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        pass  # not JSON, or JSON orjson refuses: as json.loads says
    else:
        if type(event) is dict:
            return event
    text, event, end = "", None, -1
    try:
        text = data.decode()
        event, end = _scan_json(text, 0)
    except (StopIteration, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        end = -1
    if end != len(text):
        return f"malformed SSE data: {one_line(data.decode('utf-8', 'replace'))}"
    if type(event) is not dict:
        return "malformed SSE data: not a JSON object"
    return event


def _pieces(event: dict[str, Any], chat: bool) -> tuple[bool, str, str, str]:
    """(finished, answer text, reasoning text, tool-call text) of one event: whether its
    first choice carries a ``finish_reason``; a chat delta's ``content``, its ``reasoning``
    (vLLM) or ``reasoning_content`` (the older name), and its ``tool_calls[].function`` name
    and ``arguments``; a completion's ``text``."""
    choices = event.get("choices")
    if type(choices) is not list or not choices or type(choices[0]) is not dict:
        return False, "", "", ""
    choice = choices[0]
    finished = bool(choice.get("finish_reason"))
    if not chat:
        return finished, _string(choice.get("text")), "", ""
    delta = choice.get("delta")
    if type(delta) is not dict:
        return finished, "", "", ""
    content = _string(delta.get("content"))
    reasoning = _string(delta.get("reasoning")) or _string(delta.get("reasoning_content"))
    calls = delta.get("tool_calls")
    if not calls or type(calls) is not list:
        return finished, content, reasoning, ""
    tool: list[str] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            tool.append(_string(function.get("name")))
            tool.append(_string(function.get("arguments")))
    return finished, content, reasoning, "".join(tool)


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


class SseParser:
    """One stream's body, fed read by read, into ``record`` and ``state``.

    ``chunked``: the body has HTTP/1.1 chunked framing (else it ends with the connection or
    after ``length`` bytes). :meth:`feed` returns True once the stream is over for the client
    (``[DONE]``, an error event, malformed data, the body's last chunk, ``cancel``); the
    stamps then are on the record. A read is stamped once: the chunks it brought arrived
    together."""

    def __init__(
        self,
        record: RequestRecord,
        state: StreamState,
        *,
        origin_s: float,
        chat: bool,
        chunked: bool = False,
        length: int | None = None,
        cancel: threading.Event,
        head: bool = False,
    ) -> None:
        self.record = record
        self.state = state
        self.origin_s = origin_s
        self.chat = chat
        self.chunked = chunked
        self.left = length
        self.cancel = cancel
        self.done = False
        """A ``finish_reason`` or ``[DONE]`` was seen."""
        self.over = False
        self.ended_s: float | None = None
        """When the stream ended for the client (``time.perf_counter``)."""

        self._head: bytes | None = b"" if head else None
        """The answer's status line and headers so far, while they are read (``head``: the
        parser reads them; else the caller did)."""
        self._status = 200
        self._error_body: bytes | None = None
        """The body of an answer that is not HTTP 200, while it is read (for its message)."""
        self._raw = b""
        self._pending = b""
        self._first_token: float | None = None
        self._first_content: float | None = None
        self._last_token: float | None = None
        self._deferred: list[tuple[bytes, float]] = []
        """Whole chunks read but not parsed yet, with their stamps (see :meth:`feed`)."""
        self._latest = float("-inf")
        """The latest stamp given: a read is never stamped before the one it follows (a read
        without the kernel's receive time is stamped when it returned, and in a burst the
        receive time of a later read can be earlier than that: TPOT would be negative)."""

    def feed(self, data: bytes, now: float) -> bool:
        """One read's bytes, read at ``now``; True: the stream is over."""
        if now < self._latest:
            now = self._latest
        self._latest = now
        if self.cancel.is_set():
            if self._replay():
                return True
            self.record.cancelled = True
            return self._close(now)
        if self._head is not None:
            body = self._read_head(data, now)
            if body is None:
                return self.over
            data = body
        if self._error_body is not None:
            return self._read_error(data, now)
        if not data:
            return False
        if self.chunked and not self._raw and data[-2:] == b"\r\n":
            # a read of one whole chunk that cannot end the stream (most reads): its data is
            # kept with its stamp and parsed with the next read that can
            newline = data.find(b"\r\n", 0, 10)
            if newline > 0:
                start = newline + 2
                try:
                    whole = len(data) - start - 2 == int(data[:newline], 16) > 0
                except ValueError:
                    whole = False
                if whole and b"[DONE]" not in data and b'"error"' not in data:
                    self._deferred.append((data[start:-2], now))
                    return False
        if self._replay():
            return True
        if self.chunked:
            self._raw += data
            data, last = self._unframe()
        else:
            if self.left is not None:
                data = data[: self.left]
                self.left -= len(data)
            last = self.left == 0
        self._pending += data
        if b"\n" in data and self._lines(now - self.origin_s):
            return self._close(now)
        if last:
            return self.eof(now, cut=False)
        return False

    def _read_head(self, data: bytes, now: float) -> bytes | None:
        """The body bytes that came after the head, once it is whole; None while it is not,
        or when the answer is over (not a stream: the record says why)."""
        assert self._head is not None
        raw = self._head + data
        end = raw.find(b"\r\n\r\n")
        if end < 0:
            self._head = raw
            if len(raw) > MAX_HEAD_BYTES:
                self.record.error = f"the answer's headers exceed {MAX_HEAD_BYTES} bytes"
                self._close(now)
            return None
        head = parse_head(raw[:end])
        if isinstance(head, str):
            self.record.error = head
            self._close(now)
            return None
        if head.status < 200:  # an interim answer (100 Continue): the real one follows
            self._head = b""
            return self._read_head(raw[end + 4 :], now)
        self._head = None
        self._status = head.status
        self.chunked, self.left = head.chunked, head.length
        if head.status != 200:
            self._error_body = b""
        elif "text/event-stream" not in head.content_type:
            kind = head.content_type or "none"
            self.record.error = f"not a streaming OpenAI response (Content-Type {kind})"
            self._close(now)
            return None
        return raw[end + 4 :]

    def _read_error(self, data: bytes, now: float, *, ended: bool = False) -> bool:
        """The body of an answer that is not HTTP 200, up to :data:`MAX_ERROR_BODY` bytes:
        its message is the record's error once it is read (``ended``: the connection ended)."""
        assert self._error_body is not None
        last = ended
        if self.chunked:
            self._raw += data
            data, last = self._unframe()
            last = last or ended
        elif self.left is not None:
            data = data[: self.left]
            self.left -= len(data)
            last = last or self.left == 0
        self._error_body += data
        if not last and len(self._error_body) < MAX_ERROR_BODY:
            return False
        self.record.error = error_message(self._status, self._error_body)
        return self._close(now)

    def _replay(self) -> bool:
        """Parse the chunks kept back, each at its read's stamp; True: one ended the stream
        (a malformed event: the stream ends there, at that read)."""
        if not self._deferred:
            return False
        deferred, self._deferred = self._deferred, []
        origin = self.origin_s
        for data, stamp in deferred:
            if (
                not self._pending
                and data[:5] == b"data:"
                and data[-2:] == b"\n\n"
                and data.find(b"\n") == len(data) - 2
            ):  # one ``data:`` line and its blank line (most chunks): the line is the event
                if self._data(data[5:-2].strip(), stamp - origin):
                    return self._close(stamp)
                continue
            self._pending += data
            if b"\n" in data and self._lines(stamp - origin):
                return self._close(stamp)
        return False

    def eof(self, now: float, *, cut: bool = True) -> bool:
        """The connection ended (``cut``: where a chunked body had more to come)."""
        if self._replay():
            return True
        if self._head is not None:
            self.record.error = _NO_ANSWER
            return self._close(now)
        if self._error_body is not None:
            return self._read_error(b"", now, ended=True)
        self._pending += b"\n"  # a last line the body did not end
        if not self._lines(now - self.origin_s):
            if cut and self.chunked:
                self.record.error = _INCOMPLETE
            elif not self.done:
                self.record.error = "the stream ended before a finish_reason or [DONE]"
        return self._close(now)

    def fail(self, now: float, error: str = "", *, cancelled: bool = False) -> bool:
        """The stream ended on an error of the connection (or the run's cancel)."""
        if self._replay():
            return True
        if cancelled:
            self.record.cancelled = True
        elif not self.record.error:
            self.record.error = error
        return self._close(now)

    def settle(self, now: float) -> None:
        """The record's end (when the stream ended, else ``now``: it never reached its end
        here), its answer text and its characters over every channel."""
        record, state = self.record, self.state
        ended = self.ended_s if self.ended_s is not None else now
        record.end_s = ended - self.origin_s
        record.output_text = "".join(state.answer)
        record.output_chars = sum(len(s) for s in state.streamed)

    def _close(self, now: float) -> bool:
        record, state = self.record, self.state
        if state.usage_completion is not None:
            record.output_tokens = state.usage_completion
            record.tokens_source = "usage"
        if state.usage_prompt is not None:
            record.prompt_tokens = state.usage_prompt
        record.cached_tokens = state.usage_cached
        record.first_token_s = self._first_token
        record.first_content_s = self._first_content
        record.last_token_s = self._last_token
        self.ended_s = now
        self.over = True
        return True

    def _unframe(self) -> tuple[bytes, bool]:
        """The data of every whole chunk in the buffer, and whether the last chunk came."""
        raw = self._raw
        decoded: list[bytes] = []
        at = 0
        last = False
        while (newline := raw.find(b"\r\n", at)) >= 0:
            try:
                size = int(raw[at:newline].split(b";", 1)[0], 16)
            except ValueError:
                self.record.error = one_line(
                    f"IncompleteRead: {http.client.IncompleteRead(raw[at:newline])}"
                )
                last = True
                break
            if size == 0:  # the last chunk (trailers, if any, are not read)
                last = True
                break
            stop = newline + 2 + size
            if len(raw) < stop + 2:
                break  # the rest of this chunk is still on its way
            decoded.append(raw[newline + 2 : stop])
            at = stop + 2
        self._raw = raw[at:]
        return (decoded[0] if len(decoded) == 1 else b"".join(decoded)), last

    def _lines(self, stamp: float) -> bool:
        """The whole lines pending, each ``data:`` an event; True: the stream is over."""
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue  # blank separators, comments, event:/id: fields
            if self._data(line[5:].strip(), stamp):
                return True
        return bool(self.record.error)

    def _data(self, data: bytes, stamp: float) -> bool:
        """One ``data:`` field's payload (stripped), received at ``stamp`` (seconds since the
        origin); True: the stream is over."""
        if data == b"[DONE]":
            self.done = True
            return True
        record = self.record
        event = _json_object(data)
        if isinstance(event, str):
            record.error = event
            return True
        if "error" in event:
            record.error = one_line(f"server error in stream: {event['error']}")
            return True
        finish, content, reasoning, tool = _pieces(event, self.chat)
        self.done = self.done or finish
        usage = event.get("usage")
        completion = usage.get("completion_tokens") if type(usage) is dict else None
        if type(completion) is not int:
            completion = None  # bool, a float, a string: not a count
        if content or reasoning or tool:
            if self._first_token is None:
                self._first_token = stamp
            if content and self._first_content is None:
                self._first_content = stamp
            self._last_token = stamp
            record.chunk_times_s.append(stamp)
            self.state.chunk(completion, content, reasoning, tool)
        if completion is not None:
            assert isinstance(usage, dict)
            _usage(usage, completion, self.state)
        return False


def _usage(usage: dict[str, Any], completion: int, state: StreamState) -> None:
    """The counts of a ``usage`` that carries ``completion_tokens`` (the record takes the
    last one when the stream ends: a pydantic field set per chunk costs a microsecond)."""
    state.usage_completion = completion
    if isinstance(usage.get("prompt_tokens"), int):
        state.usage_prompt = usage["prompt_tokens"]
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
        state.reported_reasoning = details["reasoning_tokens"]
    cached = usage.get("prompt_tokens_details")
    if isinstance(cached, dict) and isinstance(cached.get("cached_tokens"), int):
        state.usage_cached = cached["cached_tokens"]


IDLE_S = 1.0
"""A reactor thread with no stream for this long ends (the next stream starts one)."""

WAKE_SPACING_S = 0.001
"""While streams are being read, the reader wakes at most this often and then reads every
socket that is ready: a wake-up (``epoll_wait`` and a thread switch) is paid once for the
sockets ready by then, not once a chunk. The stamps do not move, since each read carries the
kernel's receive time of its data; two chunks of one stream that arrive within the spacing
share one read, and so the later one's stamp (by at most the spacing; a reader that wakes at
once shares them too, within its own lag). A stream read without kernel stamps turns spacing
off while it is read."""


class Reactor:
    """Reads many streams' sockets on one daemon thread. :meth:`follow` hands it a socket
    (non-blocking from then on) with its parser and a deadline and waits until the stream is
    over; the thread starts with a stream and ends after :data:`IDLE_S` without one."""

    def __init__(self, *, wake_spacing_s: float = WAKE_SPACING_S) -> None:
        self.wake_spacing_s = wake_spacing_s
        self._lock = threading.Lock()
        self._incoming: deque[_Followed] = deque()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def follow(
        self,
        sock: socket.socket,
        parser: SseParser,
        deadline: float,
        timeout_error: str,
        *,
        stamped: bool = False,
    ) -> None:
        """Read ``sock`` into ``parser`` until the stream is over, or ``deadline``
        (``time.perf_counter``) passes: then the record's error is ``timeout_error``.
        ``stamped``: the kernel stamps the socket's reads (:func:`enable_kernel_stamps`)."""
        over = threading.Event()
        with self._lock:
            self._incoming.append((sock, parser, (deadline, timeout_error), over, stamped))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="llm-sse", daemon=True)
                self._thread.start()
        with contextlib.suppress(BlockingIOError):
            self._wake_w.send(b"x")
        over.wait()

    def _run(self) -> None:
        live: dict[int, _Followed] = {}
        try:
            self._loop(live)
        except BaseException:
            # a bug here must not leave a caller waiting forever: every stream in hand ends
            # with the error, the traceback goes to the thread's excepthook
            with self._lock:
                self._thread = None
                waiting = [(parser, over) for _, parser, _, over, _ in self._incoming]
                self._incoming.clear()
            now = time.perf_counter()
            for _, parser, _, over, _ in live.values():
                waiting.append((parser, over))
            for parser, over in waiting:
                parser.fail(now, "the stream reader thread failed")
                over.set()
            raise

    def _loop(self, live: dict[int, _Followed]) -> None:
        poller = _Poller()
        wake = self._wake_r.fileno()
        poller.register(wake)
        next_check = time.perf_counter()
        idle_since: float | None = None
        woke = 0.0
        unstamped = 0  # streams read without kernel stamps: no spacing while there are any
        while True:
            if live and not unstamped and self.wake_spacing_s > 0:
                rest = woke + self.wake_spacing_s - time.perf_counter()
                if rest > 0:
                    time.sleep(rest)
            ready = poller.poll(0.05 if live else IDLE_S)
            woke = time.perf_counter()
            if not ready and not live:
                with self._lock:  # idle: the thread ends; the next stream starts another
                    if not self._incoming and idle_since is not None:
                        self._thread = None
                        poller.close()
                        return
                idle_since = time.perf_counter()
                continue
            idle_since = None
            offset_ns = time.time_ns() - time.perf_counter_ns()
            for fd, _ in ready:
                if fd == wake:
                    with contextlib.suppress(BlockingIOError):
                        self._wake_r.recv(4096)
                    while self._incoming:
                        followed = self._incoming.popleft()
                        fd = followed[0].fileno()
                        if fd < 0:  # its caller closed it (an interrupt) before it was read
                            followed[1].fail(time.perf_counter(), cancelled=True)
                            followed[3].set()
                            continue
                        stale = live.pop(fd, None)
                        if stale is not None:
                            # the number of a socket its caller closed while it was read (an
                            # interrupt in its wait): that stream is over, unread
                            unstamped -= not stale[4]
                            stale[1].fail(time.perf_counter(), cancelled=True)
                            stale[3].set()
                        try:
                            poller.register(fd)
                        except OSError:  # closed by its caller since fileno() (an interrupt)
                            followed[1].fail(time.perf_counter(), cancelled=True)
                            followed[3].set()
                            continue
                        live[fd] = followed
                        unstamped += not followed[4]
                    continue
                sock, parser, _, over, stamped = live[fd]
                stamp: float | None = None
                try:
                    if stamped:
                        data, ancillary, _, _ = sock.recvmsg(READ_BYTES, _STAMP_BYTES)
                        stamp = _kernel_stamp(ancillary, offset_ns)
                    else:
                        data = sock.recv(READ_BYTES)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    now = time.perf_counter()
                    cancelled = parser.cancel.is_set()
                    message = one_line(f"{type(exc).__name__}: {exc}") or type(exc).__name__
                    parser.fail(now, message, cancelled=cancelled)
                else:
                    now = stamp if stamp is not None else time.perf_counter()
                    if data:
                        parser.feed(data, now)
                    elif parser.cancel.is_set():
                        parser.fail(now, cancelled=True)
                    else:
                        parser.eof(now)
                if parser.over:
                    poller.unregister(fd)
                    del live[fd]
                    unstamped -= not stamped
                    over.set()
            now = time.perf_counter()
            if now >= next_check:  # deadlines, at most every 50 ms
                next_check = now + 0.05
                for fd, (_, parser, deadline, over, stamped) in list(live.items()):
                    if now > deadline[0] or parser.cancel.is_set():
                        poller.unregister(fd)
                        del live[fd]
                        unstamped -= not stamped
                        parser.fail(now, deadline[1], cancelled=parser.cancel.is_set())
                        over.set()


_Followed = tuple[socket.socket, SseParser, tuple[float, str], threading.Event, bool]
"""A stream the reactor reads: its socket, its parser, (deadline, timeout error), the event its
caller waits on, whether the kernel stamps its reads."""


class _Poller:
    """The sockets ready to read: ``epoll`` where there is one (Linux), else ``poll``; the
    timeout in seconds. (Not :mod:`selectors`: its keys cost a microsecond a ready socket.)"""

    def __init__(self) -> None:
        if hasattr(select, "epoll"):
            self._poll: Any = select.epoll()
            self._readable, self._per_second = select.EPOLLIN, 1.0
        else:
            self._poll = select.poll()
            self._readable, self._per_second = select.POLLIN, 1000.0

    def register(self, fd: int) -> None:
        try:
            self._poll.register(fd, self._readable)
        except FileExistsError:  # the number of a closed socket, still registered
            self._poll.modify(fd, self._readable)

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd``; a socket already closed (its caller was interrupted) is gone
        from ``epoll`` by itself."""
        with contextlib.suppress(OSError, KeyError):
            self._poll.unregister(fd)

    def poll(self, timeout_s: float) -> list[tuple[int, int]]:
        ready: list[tuple[int, int]] = self._poll.poll(timeout_s * self._per_second)
        return ready

    def close(self) -> None:
        if hasattr(self._poll, "close"):
            self._poll.close()


class StreamState:
    """What one stream tells beyond the record's stamps: each output chunk's tokens (from a
    cumulative ``usage`` on the chunk itself, vLLM's ``continuous_usage_stats``), which chunks
    carried reasoning, the reasoning tokens the usage reported, each channel's text."""

    def __init__(self) -> None:
        self.counts: list[int | None] = []
        self.reasoning_only: list[bool] = []
        self.mixed = False
        self.counted = 0
        self.reported_reasoning: int | None = None
        self.usage_completion: int | None = None
        """The last ``usage.completion_tokens`` seen (the record's count once it ends)."""
        self.usage_prompt: int | None = None
        self.usage_cached: int | None = None
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
