"""The stream parser's own CPU per chunk, this tree against a baseline commit, in a tight loop:
``SseParser`` fed a 64-token completions stream one chunk a read (what the reader does with a
kept-back chunk and its replay), with no socket, no server and no thread. Each version runs in a
fresh process (``--child``, its ``src`` first on the path); versions alternate round by round,
and the figure is each round's median of ``--repeats`` streams (thread CPU), then the median
over rounds. Live, with a server and the kernel on the same cores, every chunk costs 2-3x this.

    git worktree add /tmp/base-client 23a46d1
    .venv/bin/python benchmarks/llm_parser_cost.py --baseline-src /tmp/base-client/src --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def _chunk(index: int, tokens: int) -> bytes:
    finish = "length" if index == tokens - 1 else None
    event = {
        "id": "cmpl-b93ce85de69b43d3ba13a7b08d3c467a",
        "object": "text_completion",
        "created": 1795835806,
        "model": "fake-model",
        "choices": [{"index": 0, "text": f" tok{index}", "finish_reason": finish}],
        "usage": {"prompt_tokens": 32, "completion_tokens": index + 1, "total_tokens": 33 + index},
    }
    data = b"data: " + json.dumps(event).encode() + b"\n\n"
    return b"%x\r\n" % len(data) + data + b"\r\n"


def child(repeats: int, tokens: int) -> None:
    from accelscope.llm.records import LlmRequest
    from accelscope.llm.sse_reader import SseParser, StreamState

    chunks = [_chunk(i, tokens) for i in range(tokens)]
    last = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    request = LlmRequest(index=0, prompt="p", max_tokens=tokens)
    cancel = threading.Event()
    costs = []
    for _ in range(repeats):
        started = time.thread_time()
        record = request.record(scheduled_s=0.0, sent_s=0.0)
        parser = SseParser(
            record, StreamState(), origin_s=0.0, chat=False, chunked=True, cancel=cancel
        )
        for at, chunk in enumerate(chunks):
            parser.feed(chunk, float(at))
        parser.feed(last, float(tokens))
        costs.append((time.thread_time() - started) / tokens)
        assert parser.done and not record.error and len(record.chunk_times_s) == tokens
    print(json.dumps({"us_per_chunk": statistics.median(costs) * 1e6}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.repeats, args.tokens)
        return
    here = Path(__file__).resolve().parents[1] / "src"
    versions = {"baseline": args.baseline_src, "this tree": here}
    found: dict[str, list[float]] = {name: [] for name in versions}
    for number in range(args.rounds):
        order = list(versions) if number % 2 == 0 else list(reversed(versions))
        for name in order:
            command = [sys.executable, __file__, "--child", "--repeats", str(args.repeats)]
            command += ["--tokens", str(args.tokens), "--baseline-src", str(args.baseline_src)]
            out = subprocess.run(
                command,
                env={**os.environ, "PYTHONPATH": str(versions[name])},
                capture_output=True,
                text=True,
                check=True,
            )
            found[name].append(json.loads(out.stdout.strip().splitlines()[-1])["us_per_chunk"])
            print(f"round {number + 1} {name}: {found[name][-1]:.2f} us a chunk", flush=True)
    medians = {name: statistics.median(values) for name, values in found.items()}
    print(json.dumps(medians, indent=2))
    if args.out:
        args.out.write_text(
            json.dumps(
                {"args": vars(args), "rounds": found, "medians": medians}, indent=2, default=str
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
