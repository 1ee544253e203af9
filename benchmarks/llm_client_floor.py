"""The least CPU a Python client can spend per streamed request on this machine: the floor
under ``llm``'s client, against the same fake server as ``llm_client_cpu.py``.

The floor client does only what no client can skip: one thread, a raw ``epoll``, a
non-blocking connect and send per request, and one ``recvmsg`` (with the kernel's receive time)
per ready socket, the bytes kept and nothing parsed (a stream ends on the chunked body's last
chunk). It runs a closed loop at concurrency 80, with the wake-up spacing of ``llm``'s reader
(``--spacings-ms``: 0, wake at once; 1, at most once a millisecond), and prints its CPU per
request (user, system). What ``llm``'s client spends above this is parsing, records and
Python around them.

``--parsed`` adds, in the same rounds, the same one-thread loop with ``llm``'s own parser
(``SseParser``: the head, the framing, every event's JSON), the record and its finishing, as
``OpenAIEndpoint.stream`` does them, but no thread per request: what ``llm``'s client would cost
if it had no request threads, and so what taking them out could save.

    .venv/bin/python benchmarks/llm_client_floor.py --rounds 3 --parsed \\
        --out benchmarks/results/llm_client_floor.json
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_SERVE = """
import sys
from accelscope.testing.fake_llm_server import FakeLLMServer
with FakeLLMServer(ttft_s=0.0, itl_s={itl_s}, output_tokens={tokens}) as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""

_SO_TIMESTAMPNS = 35


def _request(host: str, port: int, tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": "fake-model",
            "prompt": "hello world " * 16,
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class _Parsed:
    """One request as ``llm``'s client reads it (``parsed``): its record, state and parser."""

    def __init__(self, endpoint: Any, tokens: int, origin_s: float) -> None:
        from accelscope.llm.records import LlmRequest
        from accelscope.llm.sse_reader import SseParser, StreamState

        request = LlmRequest(index=0, prompt="hello world " * 16, max_tokens=tokens)
        self.record = request.record(scheduled_s=0.0, sent_s=time.perf_counter() - origin_s)
        self.state = StreamState()
        self.parser = SseParser(
            self.record,
            self.state,
            origin_s=origin_s,
            chat=False,
            cancel=_NEVER,
            head=True,
        )
        body = endpoint._body(request)
        self.payload = endpoint._head(body) + body

    def read(self, data: bytes, ancillary: list[tuple[int, int, bytes]], offset_ns: int) -> bool:
        """One read; True: the stream is over (the record finished as ``stream`` does)."""
        from accelscope.llm.sse_reader import _kernel_stamp

        stamp = _kernel_stamp(ancillary, offset_ns)
        now = stamp if stamp is not None else time.perf_counter()
        if data:
            self.parser.feed(data, now)
        else:
            self.parser.eof(now)
        if not self.parser.over:
            return False
        self.parser.settle(now)
        self.state.finish(self.record)
        return True


_NEVER = threading.Event()


def floor(
    url: str, requests: int, spacing_s: float, tokens: int, *, parsed: bool = False
) -> dict[str, float]:
    """One closed-loop run at concurrency 80 (after one warm-up round of 80)."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    address = (host, int(port))
    payload = _request(host, int(port), tokens)
    poller = select.epoll()
    live: dict[int, tuple[socket.socket, list[bytes], _Parsed | None]] = {}
    endpoint: Any = None
    if parsed:
        from accelscope.llm.client import OpenAIEndpoint

        endpoint = OpenAIEndpoint(url, "fake-model")
    origin = time.perf_counter()
    errors = 0

    def start() -> None:
        stream = _Parsed(endpoint, tokens, origin) if parsed else None
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        sock.connect(address)
        sock.sendall(stream.payload if stream else payload)
        sock.setblocking(False)
        poller.register(sock.fileno(), select.EPOLLIN)
        live[sock.fileno()] = (sock, [], stream)

    def run(total: int) -> tuple[int, int]:
        nonlocal errors
        started = done = reads = wakes = 0
        woke = 0.0
        for _ in range(min(80, total)):
            start()
            started += 1
        while done < total:
            if spacing_s:
                rest = woke + spacing_s - time.perf_counter()
                if rest > 0:
                    time.sleep(rest)
            ready = poller.poll(0.05)
            woke = time.perf_counter()
            wakes += 1
            offset_ns = time.time_ns() - time.perf_counter_ns()
            for fd, _ in ready:
                sock, kept, stream = live[fd]
                data, ancillary, _, _ = sock.recvmsg(65536, 64)
                reads += 1
                if stream is not None:
                    over = stream.read(data, ancillary, offset_ns)
                    errors += over and bool(stream.record.error)
                else:
                    kept.append(data)
                    over = not data or data.endswith(b"0\r\n\r\n")
                if over:
                    poller.unregister(fd)
                    sock.close()
                    del live[fd]
                    done += 1
                    if started < total:
                        start()
                        started += 1
        return reads, wakes

    run(80)
    before = os.times()
    reads, wakes = run(requests)
    after = os.times()
    return {
        "spacing_ms": spacing_s * 1e3,
        "parsed": parsed,
        "errors": errors,
        "cpu_ms_per_request": ((after.user - before.user) + (after.system - before.system))
        / requests
        * 1e3,
        "user_ms_per_request": (after.user - before.user) / requests * 1e3,
        "system_ms_per_request": (after.system - before.system) / requests * 1e3,
        "reads_per_request": reads / requests,
        "wakes_per_request": wakes / requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spacings-ms", default="0,1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=960)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--parsed", action="store_true", help="add llm's parser, no threads")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not hasattr(select, "epoll"):
        raise SystemExit("the floor client needs Linux (epoll, SO_TIMESTAMPNS)")
    serve = _SERVE.format(itl_s=args.itl_ms / 1e3, tokens=args.tokens)
    server = subprocess.Popen(
        [sys.executable, "-c", serve], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert server.stdin is not None and server.stdout is not None
    spacings = [float(s) / 1e3 for s in args.spacings_ms.split(",")]
    rows: list[dict[str, Any]] = []
    try:
        url = server.stdout.readline().strip()
        ways = [(s, False) for s in spacings] + [(s, True) for s in spacings if args.parsed]
        for number in range(args.rounds):
            for spacing_s, parsed in ways if number % 2 == 0 else list(reversed(ways)):
                row = floor(url, args.requests, spacing_s, args.tokens, parsed=parsed)
                rows.append(row | {"round": number})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.stdin.close()
        server.wait()
    medians = {
        f"{s * 1e3:g} ms" + (", parsed" if parsed else ""): {
            key: statistics.median(
                r[key] for r in rows if r["spacing_ms"] == s * 1e3 and r["parsed"] == parsed
            )
            for key in rows[0]
            if key not in ("spacing_ms", "round", "parsed")
        }
        for s, parsed in ways
    }
    print(json.dumps(medians, indent=2))
    if args.out:
        found = {"args": vars(args), "rows": rows, "medians": medians}
        args.out.write_text(json.dumps(found, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
