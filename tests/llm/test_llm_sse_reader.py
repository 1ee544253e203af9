"""The answer's head read by the stream reader (plain HTTP has no ``http.client`` since the
reader reads the status line and headers too): every way an answer can be other than a
stream becomes the record's one-line error, split at any byte; and chunks kept back unparsed
until a read that can end the stream keep their own stamps."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelscope.llm.records import LlmRequest, RequestRecord
from accelscope.llm.sse_reader import MAX_HEAD_BYTES, SseParser, StreamState, parse_head


def _parser() -> SseParser:
    record = LlmRequest(index=0, prompt="p", max_tokens=3).record(scheduled_s=0.0, sent_s=0.0)
    return SseParser(
        record, StreamState(), origin_s=0.0, chat=False, cancel=threading.Event(), head=True
    )


def _read(pieces: list[bytes], *, eof: bool = True) -> tuple[RequestRecord, SseParser]:
    """Each piece one read, stamped 1, 2, ...; the connection ends after the last (``eof``)."""
    parser = _parser()
    for at, piece in enumerate(pieces):
        if parser.feed(piece, float(at + 1)):
            break
    else:
        if eof:
            parser.eof(float(len(pieces) + 1))
    parser.state.finish(parser.record)
    return parser.record, parser


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _event(text: str, *, finish: str | None = None) -> bytes:
    choice = {"index": 0, "text": text, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
_NOT_FOUND = json.dumps({"error": {"message": "The model `x` does not exist.", "code": 404}})
_ANSWERS = {
    "json 404, Content-Length": (
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(_NOT_FOUND)
        + _NOT_FOUND.encode(),
        "HTTP 404: The model `x` does not exist.",
    ),
    "text 503, chunked": (
        b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
        + _chunk(b"the server is ")
        + _chunk(b"unwell")
        + b"0\r\n\r\n",
        "HTTP 503: the server is unwell",
    ),
    "500 until the connection ends": (
        b"HTTP/1.0 500 Internal Server Error\r\n\r\nboom",
        "HTTP 500: boom",
    ),
    "500 with no body": (
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
        "HTTP 500: Internal Server Error",
    ),
    "an HTML page": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n\r\n<html>",
        "not a streaming OpenAI response (Content-Type text/html)",
    ),
    "no Content-Type": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        "not a streaming OpenAI response (Content-Type none)",
    ),
    "not HTTP": (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "BadStatusLine: 'SSH-2.0-OpenSSH_9.2'"),
    "closed before a byte": (b"", "RemoteDisconnected: Remote end closed connection without"),
    "closed inside the head": (b"HTTP/1.1 200 OK\r\nContent-Ty", "RemoteDisconnected"),
    "a bad Content-Length": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: many\r\n\r\n",
        "the answer's Content-Length is not a number",
    ),
}


@pytest.mark.parametrize("name", list(_ANSWERS))
def test_an_answer_that_is_not_a_stream_is_one_line_of_error(name: str) -> None:
    answer, error = _ANSWERS[name]
    record, parser = _read([answer] if answer else [])
    assert parser.over and record.error.startswith(error), record.error
    assert "\n" not in record.error and record.first_token_s is None


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(_ANSWERS)), st.data())
def test_the_same_error_wherever_the_reads_split_the_answer(name: str, data: st.DataObject) -> None:
    answer, _ = _ANSWERS[name]
    whole, _ = _read([answer] if answer else [])
    if len(answer) < 2:
        return
    cuts = sorted(data.draw(st.lists(st.integers(1, len(answer) - 1), unique=True, max_size=12)))
    pieces = [answer[a:b] for a, b in zip([0, *cuts], [*cuts, len(answer)], strict=True)]
    split, _ = _read(pieces)
    assert split.error == whole.error


def test_an_interim_answer_is_skipped_for_the_stream_after_it() -> None:
    body = _chunk(_event(" a")) + _chunk(_event(" b", finish="stop")) + _chunk(b"data: [DONE]\n\n")
    record, parser = _read([b"HTTP/1.1 100 Continue\r\n\r\n" + _SSE_HEAD + body])
    assert not record.error and parser.done
    assert record.chunk_times_s == [1.0, 1.0]


def test_headers_that_never_end_are_an_error_not_a_wait() -> None:
    record, parser = _read(
        [b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (MAX_HEAD_BYTES // 6)], eof=False
    )
    assert parser.over and record.error == f"the answer's headers exceed {MAX_HEAD_BYTES} bytes"


def test_chunks_kept_back_keep_the_stamp_of_the_read_that_brought_them() -> None:
    # one whole chunk a read is parsed only with a read that can end the stream ([DONE], the
    # last chunk, an error event, the connection's end): each token keeps its own read's stamp
    reads = [_SSE_HEAD, *(_chunk(_event(f" t{i}")) for i in range(5))]
    reads += [_chunk(_event("", finish="length")), _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]
    record, parser = _read(reads)
    assert not record.error and parser.done
    assert record.chunk_times_s == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert parser.ended_s == 8.0


def test_a_malformed_chunk_kept_back_ends_the_stream_at_its_own_read() -> None:
    reads = [_SSE_HEAD, _chunk(_event(" a")), _chunk(b"data: {not json\n\n"), _chunk(_event(" b"))]
    record, parser = _read(reads)  # the connection ends after the last read
    assert record.error == "malformed SSE data: {not json"
    assert record.chunk_times_s == [2.0]
    assert parser.ended_s == 3.0  # the malformed read's stamp, not the connection's end


def test_the_head_parser_reads_framing_and_type() -> None:
    head = parse_head(b"HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: Chunked\r\ncontent-type: x")
    assert not isinstance(head, str)
    assert (head.status, head.chunked, head.length, head.content_type) == (200, True, None, "x")
    head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 12")
    assert not isinstance(head, str) and (head.chunked, head.length) == (False, 12)
    assert parse_head(b"HTTP/1.1 abc OK").startswith("BadStatusLine")  # type: ignore[union-attr]


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=200),
    st.sampled_from([b"", b"HTTP/1.1 ", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 \xb2\xb2\xb2 OK\r\n"]),
)
def test_any_bytes_for_a_head_end_the_stream_with_an_error_never_an_exception(
    noise: bytes, start: bytes
) -> None:
    record, parser = _read([start + noise + b"\r\n\r\n" + noise])
    assert parser.over
    if record.error:
        assert "\n" not in record.error


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=120), max_size=6), st.booleans())
def test_any_bytes_after_a_stream_head_are_parsed_or_an_error_never_an_exception(
    reads: list[bytes], chunked: bool
) -> None:
    head = _SSE_HEAD if chunked else b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    record, parser = _read([head, *reads])
    assert parser.over
    assert "\n" not in record.error
