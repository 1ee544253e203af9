"""The stream reader behind the client's CPU budget: the chunked framing and the SSE lines are
cut by hand (``llm.sse_reader``), so a body split at any byte, or packed into one read, must
give the record one read per chunk gives."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelscope.llm.records import LlmRequest, RequestRecord
from accelscope.llm.sse_reader import Reactor, SseParser, StreamState, enable_kernel_stamps


def _event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


_EVENTS = [
    _event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
    _event({"choices": [{"index": 0, "delta": {"reasoning": " think"}}]}),
    b": a comment line\n\n",
    _event({"choices": [{"index": 0, "delta": {"content": " caf\u00e9"}}]}),
    _event(
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]}
    ),
    _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    _event(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 5,
                "completion_tokens": 3,
                "completion_tokens_details": {"reasoning_tokens": 1},
            },
        }
    ),
    b"data: [DONE]\n\n",
]
_BODY = b"".join(_chunk(e) for e in _EVENTS) + b"0\r\n\r\n"


def _parser(*, chat: bool = True, chunked: bool = True, origin_s: float = 0.0) -> SseParser:
    """A parser of one stream into a fresh record (``parser.record``) and state."""
    record = LlmRequest(index=0, prompt="p", max_tokens=3).record(scheduled_s=0.0, sent_s=0.0)
    return SseParser(
        record,
        StreamState(),
        origin_s=origin_s,
        chat=chat,
        chunked=chunked,
        length=None,
        cancel=threading.Event(),
    )


def _read(pieces: list[bytes]) -> tuple[RequestRecord, SseParser]:
    parser = _parser()
    record, state = parser.record, parser.state
    for at, piece in enumerate(pieces):
        if parser.feed(piece, float(at + 1)):
            break
    else:
        parser.eof(float(len(pieces) + 1))
    state.finish(record)
    return record, parser


def test_one_read_per_chunk_reads_every_channel() -> None:
    record, parser = _read([_chunk(e) for e in _EVENTS] + [b"0\r\n\r\n"])
    assert parser.done and not record.error
    assert record.chunk_times_s == [2.0, 4.0, 5.0]  # reasoning, content, tool call
    assert (record.first_token_s, record.first_content_s, record.last_token_s) == (2.0, 4.0, 5.0)
    assert (record.output_tokens, record.prompt_tokens, record.reasoning_tokens) == (3, 5, 1)
    assert "".join(parser.state.answer) == " café"  # the answer alone, as the next turn needs


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(_BODY) - 1), unique=True, max_size=40))
def test_a_body_split_at_any_bytes_reads_the_same(cuts: list[int]) -> None:
    cuts = sorted(cuts)
    pieces = [_BODY[a:b] for a, b in zip([0, *cuts], [*cuts, len(_BODY)], strict=True)]
    whole, _ = _read([_BODY])
    split, parser = _read(pieces)
    assert not split.error and parser.done
    assert len(split.chunk_times_s) == 3
    # the same counts and channels; stamps only where the reads fell
    for name in ("output_tokens", "prompt_tokens", "reasoning_tokens", "chunk_tokens"):
        assert getattr(split, name) == getattr(whole, name)
    assert split.first_token_s <= split.first_content_s <= split.last_token_s  # type: ignore[operator]


def test_a_body_cut_before_its_last_chunk_is_an_error_as_http_client_says() -> None:
    record, _ = _read([_BODY[: len(_BODY) // 2]])
    assert record.error.startswith("IncompleteRead")


def test_malformed_data_is_the_records_error() -> None:
    record, _ = _read([_chunk(b"data: {not json\n\n")])
    assert record.error == "malformed SSE data: {not json"
    record, _ = _read([_chunk(b"data: [1, 2]\n\n")])
    assert record.error == "malformed SSE data: not a JSON object"
    record, _ = _read([_chunk(b'data: {"a": 1} trailing\n\n')])
    assert record.error.startswith("malformed SSE data")


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    return client, peer


@pytest.mark.parametrize("stamped", [True, False])
def test_a_read_is_stamped_when_its_data_arrived_not_when_it_was_read(stamped: bool) -> None:
    # the kernel's receive time (SO_TIMESTAMPNS, Linux): data that waited in the socket keeps
    # the time it came, so a reader that wakes late does not move the stamp
    client, peer = _tcp_pair()
    with client, peer:
        on = enable_kernel_stamps(client) if stamped else False
        if stamped and not on:
            pytest.skip("this kernel gives no receive times")  # not Linux: the fallback below
        parser = _parser(chat=False, chunked=False)
        record = parser.record
        event = {"choices": [{"index": 0, "text": " a", "finish_reason": "stop"}]}
        sent = time.perf_counter()
        peer.sendall(_event(event) + b"data: [DONE]\n\n")
        time.sleep(0.2)  # what is measured: the data sits in the socket 200 ms before it is read
        read_from = time.perf_counter()
        client.setblocking(False)
        Reactor().follow(client, parser, time.perf_counter() + 5, "timeout", stamped=on)
    assert not record.error and parser.done
    assert record.first_token_s is not None
    if stamped:
        assert sent - 0.01 <= record.first_token_s < read_from - 0.15
    else:
        assert record.first_token_s >= read_from


def test_a_read_is_never_stamped_before_the_one_it_follows() -> None:
    # the first bytes come with the headers, stamped when read; the rest carry the kernel's
    # receive time, which in a burst is earlier: the stamps stay in order (TPOT never < 0)
    pieces = [_chunk(e) for e in _EVENTS] + [b"0\r\n\r\n"]
    parser = _parser()
    record = parser.record
    stamps = [9.0, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5]
    for piece, stamp in zip(pieces, stamps, strict=False):
        if parser.feed(piece, stamp):
            break
    assert record.chunk_times_s == sorted(record.chunk_times_s) == [9.0, 9.0, 9.0]


def _fields(record: RequestRecord, parser: SseParser) -> tuple[object, ...]:
    return (
        record.error,
        record.chunk_times_s,
        record.first_token_s,
        record.first_content_s,
        record.last_token_s,
        record.output_tokens,
        record.prompt_tokens,
        record.reasoning_tokens,
        record.chunk_tokens,
        parser.done,
        parser.ended_s,
        parser.state.streamed,
    )


_TEXT = st.text(alphabet=st.sampled_from(["a", " ", "\u00e9", "\n", '"', "\\", "\U0001f600"]))
_DELTA = st.fixed_dictionaries(
    {},
    optional={
        "content": st.one_of(st.none(), _TEXT),
        "reasoning": _TEXT,
        "reasoning_content": _TEXT,
        "tool_calls": st.lists(
            st.fixed_dictionaries({"function": st.fixed_dictionaries({"arguments": _TEXT})}),
            max_size=2,
        ),
    },
)
_USAGE = st.fixed_dictionaries(
    {"completion_tokens": st.integers(0, 2**70)},
    optional={"prompt_tokens": st.integers(0, 99)},
)
_PAYLOAD = st.one_of(
    st.builds(
        lambda delta, finish, usage: json.dumps(
            {
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **({"usage": usage} if usage else {}),
            }
        ).encode(),
        _DELTA,
        st.sampled_from([None, "stop"]),
        st.one_of(st.none(), _USAGE),
    ),
    st.sampled_from(
        [
            # a lone surrogate, NaN: orjson refuses them, json.loads reads them
            b'{"choices": [{"delta": {"content": "\\ud800"}}]}',
            b'{"choices": [], "usage": {"completion_tokens": NaN}}',
            b"[1, 2]",
            b"{not json",
            b'{"a": 1} {"b": 2}',
            b'{"\\u0065rror": {"message": "escaped key"}}',
            b"\xff\xfe",
        ]
    ),
)
_LINE = st.tuples(
    st.sampled_from([b"data: ", b"data:", b"  data: ", b": comment ", b"event: x"]),
    _PAYLOAD,
    st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n", b"\n\n\n"]),
).map(lambda t: t[0] + t[1] + t[2])


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=8), st.data())
def test_a_chunk_kept_back_reads_as_the_same_chunk_parsed_at_once(
    lines: list[bytes], data: st.DataObject
) -> None:
    # one read a chunk: most are kept back and read on the fast path (one ``data:`` line a
    # chunk); the same chunks, each read in two pieces of one stamp, take the general path
    # (the framing, then the lines): the records must be identical, stamps included
    chunks = [_chunk(line) for line in lines] + [b"0\r\n\r\n"]
    fast, reference = _parser(origin_s=0.5), _parser(origin_s=0.5)
    ended_fast = ended_reference = False
    for at, chunk in enumerate(chunks):
        stamp = float(at + 1)
        if not ended_fast:
            ended_fast = fast.feed(chunk, stamp)
        if not ended_reference:
            cut = data.draw(st.integers(1, len(chunk) - 1), label="cut")
            ended_reference = reference.feed(chunk[:cut], stamp) or reference.feed(
                chunk[cut:], stamp
            )
    if not ended_fast:
        fast.eof(99.0)
    if not ended_reference:
        reference.eof(99.0)
    for parser in (fast, reference):
        parser.state.finish(parser.record)
    assert _fields(fast.record, fast) == _fields(reference.record, reference)


def test_json_the_fast_parser_refuses_is_read_as_the_standard_library_reads_it() -> None:
    # orjson parses the events; what it refuses and json.loads takes (a lone surrogate, NaN)
    # is read by json.loads, so no stream that parsed before fails now
    record, parser = _read(
        [
            _chunk(b'data: {"choices": [{"delta": {"content": "a\\ud800"}}]}\n\n'),
            _chunk(b'data: {"choices": [], "usage": {"completion_tokens": NaN}}\n\n'),
            _chunk(b"data: [DONE]\n\n"),
            b"0\r\n\r\n",
        ]
    )
    assert not record.error and parser.done
    assert parser.state.answer == ["a\ud800"]
    assert record.output_tokens is None  # NaN is no count


def test_a_socket_its_interrupted_caller_closed_does_not_stop_the_reader() -> None:
    # a caller interrupted in its wait (Ctrl-C) closes its socket while the reader still holds
    # it: epoll forgets the socket by itself, its number comes back for the next socket, and
    # the reader must go on reading that next stream
    reactor = Reactor()
    first, first_peer = _tcp_pair()
    first.setblocking(False)
    closed = _parser(chat=False, chunked=False)
    waiting = threading.Thread(
        target=reactor.follow, args=(first, closed, time.perf_counter() + 60, "timeout")
    )
    waiting.start()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        # the moment: the reader has taken the socket (a close at any point from here, before
        # or after its registration, ends the stream cancelled; no deadline is reached)
        while reactor._thread is None or reactor._incoming:
            time.sleep(0.001)
        number = first.fileno()
        first.close()
        second = socket.create_connection(listener.getsockname())  # the lowest free number
        second_peer, _ = listener.accept()
    with second, second_peer, first_peer:
        assert second.fileno() == number
        second.setblocking(False)
        parser = _parser(chat=False, chunked=False)
        event = {"choices": [{"index": 0, "text": " a", "finish_reason": "stop"}]}
        second_peer.sendall(_event(event) + b"data: [DONE]\n\n")
        reactor.follow(second, parser, time.perf_counter() + 5, "timeout")
    waiting.join(timeout=5)
    assert not waiting.is_alive() and closed.over and closed.record.cancelled
    assert not parser.record.error and parser.done and len(parser.record.chunk_times_s) == 1
