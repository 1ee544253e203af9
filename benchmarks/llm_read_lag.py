"""How late the client's reader reads a chunk after the kernel received it: what a stamp taken
at the read (``time.perf_counter()``) would add to TTFT and ITL, and what the kernel's receive
time (``SO_TIMESTAMPNS``, the client's stamp since 2026-11-27) leaves out.

A fake server in its own process streams 64-token answers 10 ms apart; the client runs a
closed loop at concurrency 80, and every read records ``perf_counter() - kernel stamp``. Run
quiet, then with one busy-looping process per core.

    .venv/bin/python benchmarks/llm_read_lag.py --out benchmarks/results/llm_read_lag.json
"""

from __future__ import annotations

import argparse
import json
import os
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


def record_waits(waits: list[float]) -> None:
    """From now on each kernel-stamped read of the client's reader appends to ``waits`` how
    long its data waited in the socket (``perf_counter()`` at the read minus the stamp)."""
    import accelscope.llm.sse_reader as reader

    kernel_stamp = reader._kernel_stamp

    def recorded(ancillary: list[tuple[int, int, bytes]], offset_ns: int) -> float | None:
        stamp = kernel_stamp(ancillary, offset_ns)
        if stamp is not None:
            waits.append(time.perf_counter() - stamp)
        return stamp

    reader._kernel_stamp = recorded


def _lags(url: str, requests: int, concurrency: int, tokens: int) -> dict[str, Any]:
    from accelscope.llm.client import OpenAIEndpoint
    from accelscope.llm.records import LlmRequest
    from accelscope.llm.trial import run_trial

    lags: list[float] = []
    record_waits(lags)
    endpoint = OpenAIEndpoint(url, "fake-model")
    work = [
        LlmRequest(index=i, prompt="hello world " * 16, max_tokens=tokens) for i in range(requests)
    ]
    run_trial(endpoint, work[:concurrency], concurrency=concurrency)
    lags.clear()
    run_trial(endpoint, work, concurrency=concurrency)
    lags.sort()
    n = len(lags)
    if not n:
        return {"reads": 0, "why": "no kernel receive times on this system"}
    quantiles = {f"p{q:g}_ms": lags[min(n - 1, int(q / 100 * n))] * 1e3 for q in (50, 90, 99, 99.9)}
    return {"reads": n, **quantiles, "max_ms": lags[-1] * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=960)
    parser.add_argument("--concurrency", type=int, default=80)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    serve = _SERVE.format(itl_s=args.itl_ms / 1000, tokens=args.tokens)
    server = subprocess.Popen(
        [sys.executable, "-c", serve], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    results: dict[str, Any] = {"setup": vars(args) | {"out": str(args.out)}}
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        results["quiet"] = _lags(url, args.requests, args.concurrency, args.tokens)
        spin = [sys.executable, "-c", "while True: pass"]
        spinners = [subprocess.Popen(spin) for _ in range(os.cpu_count() or 1)]
        results["busy"] = _lags(url, args.requests, args.concurrency, args.tokens)
    finally:
        for spinner in spinners:
            spinner.kill()
        server.kill()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for state in ("quiet", "busy"):
        row = results[state]
        print(
            state,
            ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
            ),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
