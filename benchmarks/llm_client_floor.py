"""The least CPU a Python client can spend per streamed request on this machine: the floor
under ``llm``'s client, against the same fake server as ``llm_client_cpu.py``.

The floor client does only what no client can skip: one thread, a raw ``epoll``, a
non-blocking connect and send per request, and one ``recvmsg`` (with the kernel's receive time)
per ready socket, the bytes kept and nothing parsed (a stream ends on the chunked body's last
chunk). It runs a closed loop at concurrency 80, with the wake-up spacing of ``llm``'s reader
(``--spacings-ms``: 0, wake at once; 1, at most once a millisecond), and prints its CPU per
request (user, system). What ``llm``'s client spends above this is parsing, records and
Python around them.

    .venv/bin/python benchmarks/llm_client_floor.py --rounds 3 \\
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


def floor(url: str, requests: int, spacing_s: float, tokens: int) -> dict[str, float]:
    """One closed-loop run at concurrency 80 (after one warm-up round of 80)."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    address = (host, int(port))
    payload = _request(host, int(port), tokens)
    poller = select.epoll()
    live: dict[int, tuple[socket.socket, list[bytes]]] = {}

    def start() -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        sock.connect(address)
        sock.sendall(payload)
        sock.setblocking(False)
        poller.register(sock.fileno(), select.EPOLLIN)
        live[sock.fileno()] = (sock, [])

    def run(total: int) -> tuple[int, int]:
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
            for fd, _ in ready:
                sock, kept = live[fd]
                data, _, _, _ = sock.recvmsg(65536, 64)
                reads += 1
                kept.append(data)
                if not data or data.endswith(b"0\r\n\r\n"):
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
        for number in range(args.rounds):
            for spacing_s in spacings if number % 2 == 0 else list(reversed(spacings)):
                row = floor(url, args.requests, spacing_s, args.tokens) | {"round": number}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.stdin.close()
        server.wait()
    medians = {
        f"{s * 1e3:g} ms": {
            key: statistics.median(r[key] for r in rows if r["spacing_ms"] == s * 1e3)
            for key in rows[0]
            if key not in ("spacing_ms", "round")
        }
        for s in spacings
    }
    print(json.dumps(medians, indent=2))
    if args.out:
        found = {"args": vars(args), "rows": rows, "medians": medians}
        args.out.write_text(json.dumps(found, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
