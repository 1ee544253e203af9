"""When ``llm`` on the CPU vLLM reads a whole stream at once (TTFT = the whole reply, TPOT 0):
did the server send it in one burst, or did the client read late?

The client's reads are stamped with the kernel's receive time, so ``perf_counter() - stamp`` at
each read is how long its data waited in the socket. A late reader shows a large wait; a
server that holds its tokens and sends them together shows a small wait and fewer reads. Three
ways of running the client are alternated on one vLLM server (``.venv-vllm``: ``make vllm``):
the trial alone (``run_trial``: no ``/metrics`` scrape), and the ``llm`` workflow with and
without its scrape of the server's ``/metrics``.

    .venv/bin/python benchmarks/llm_vllm_bursts.py --rounds 3 \\
        --out benchmarks/results/llm_vllm_bursts.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.records import LlmRequest
from accelscope.llm.summary import summarise_trial
from accelscope.llm.trial import run_trial
from accelscope.testing.llm_server import VllmServe
from llm_read_lag import record_waits
from llm_vllm import _model, _ours

_waits: list[float] = []


def _trial(server: VllmServe, requests: int) -> dict[str, float | None]:
    """The trial alone: ``run_trial``, no ``/metrics`` scrape; medians as ``llm`` gives them."""
    endpoint = OpenAIEndpoint(server.url, server.model, ignore_eos=True)
    work = [LlmRequest(index=i, prompt="hello " * 60, max_tokens=32) for i in range(requests)]
    metrics = summarise_trial(run_trial(endpoint, work, concurrency=1).records).metrics
    return {
        "ttft_ms": (metrics.ttft_s.value("p50") or 0) * 1e3,
        "tpot_ms": (metrics.tpot_s.value("p50") or 0) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    record_waits(_waits)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        model = _model(Path(scratch) / "model")
        with VllmServe(model, enforce_eager=False) as server:
            _trial(server, 4)  # warm up
            ways: dict[str, Callable[[], dict[str, float | None]]] = {
                "trial, no scrape": lambda: _trial(server, args.requests),
                "llm, scraping /metrics": lambda: _ours(server, model, args.requests),
                "llm, no scrape": lambda: _ours(server, model, args.requests, scrape_metrics=False),
            }
            for number in range(args.rounds):
                for way, run in ways.items():
                    _waits.clear()
                    medians = run()
                    waits = sorted(_waits)
                    row = {
                        "round": number,
                        "way": way,
                        "ttft_p50_ms": medians["ttft_ms"],
                        "tpot_p50_ms": medians["tpot_ms"],
                        "reads_per_request": len(waits) / args.requests,
                        "wait_p50_ms": waits[len(waits) // 2] * 1e3,
                        "wait_p99_ms": waits[int(len(waits) * 0.99)] * 1e3,
                        "wait_max_ms": waits[-1] * 1e3,
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args), "rows": rows}, default=str) + "\n")


if __name__ == "__main__":
    main()
