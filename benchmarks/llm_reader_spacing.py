"""What spacing the stream reader's wake-ups costs in timing and saves in CPU, side by side.

A fake server in its own process streams 64-token answers (``--itl-ms`` apart) and writes down
when each chunk left (``time.perf_counter``, ``CLOCK_MONOTONIC``: one clock for both processes
on Linux). A client process runs a closed loop at concurrency 80 with the reader's wake-up
spacing set to each value in turn, rounds alternating, and reports per spacing:

- the client's CPU per request (user + system, every thread; one trial of ``--requests``
  after a warm-up round, so the trial's fixed cost is spread over them),
- each chunk's stamp minus when the server sent it (p50, p99, p99.9, max): how late the
  stamp is, the kernel's receive time included,
- the share of token chunks that shared a read (and so a stamp) with the one before.

    .venv/bin/python benchmarks/llm_reader_spacing.py --spacings-ms 0,1 --rounds 5 \\
        --out benchmarks/results/llm_reader_spacing.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

_SERVE = """
import json, sys
from accelscope.testing.fake_llm_server import FakeLLMServer
with FakeLLMServer(ttft_s=0.0, itl_s={itl_s}, output_tokens={tokens}) as server:
    print(server.url, flush=True)
    sys.stdin.readline()
    sent = {{r.body["prompt"]: r.sent_s for r in server.requests if isinstance(r.body, dict)}}
    print(json.dumps(sent), flush=True)
    sys.stdin.read()
"""


def child(url: str, spacing_s: float, requests: int, tokens: int) -> None:
    """One client run: warm up, then ``requests`` at concurrency 80; stamps and CPU to stdout."""
    from accelscope.llm.client import OpenAIEndpoint
    from accelscope.llm.records import LlmRequest
    from accelscope.llm.trial import run_trial

    endpoint = OpenAIEndpoint(url, "fake-model")
    endpoint._reactor.wake_spacing_s = spacing_s
    tag = f"{spacing_s:g}-{os.getpid()}"
    work = [
        LlmRequest(index=i, prompt=f"hello world {tag} {i} " * 8, max_tokens=tokens)
        for i in range(requests + 80)
    ]
    run_trial(endpoint, work[:80], concurrency=80)
    before = os.times()
    outcome = run_trial(endpoint, work[80:], concurrency=80)
    after = os.times()
    prompts = {request.index: request.prompt for request in work}
    stamps = {
        prompts[r.index]: [outcome.origin_s + t for t in r.chunk_times_s]
        for r in outcome.records
        if not r.error
    }
    cpu_s = (after.user - before.user) + (after.system - before.system)
    print(json.dumps({"cpu_ms_per_request": cpu_s / requests * 1e3, "stamps": stamps}))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _round(spacing_s: float, args: argparse.Namespace) -> dict[str, Any]:
    serve = _SERVE.format(itl_s=args.itl_ms / 1e3, tokens=args.tokens)
    server = subprocess.Popen(
        [sys.executable, "-c", serve], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        url = server.stdout.readline().strip()
        command = [sys.executable, __file__, "--child", url, "--spacing-s", str(spacing_s)]
        command += ["--requests", str(args.requests), "--tokens", str(args.tokens)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        server.stdin.write("\n")
        server.stdin.flush()
        sent: dict[str, list[float]] = json.loads(server.stdout.readline())
    finally:
        server.stdin.close()
        server.wait()
    if done.returncode:
        raise SystemExit(f"the client failed: {done.stderr.strip()[-2000:]}")
    client = json.loads(done.stdout.strip().splitlines()[-1])
    late: list[float] = []
    shared = chunks = 0
    for prompt, stamps in client["stamps"].items():
        sent_s = sent.get(prompt, [])
        if len(sent_s) != len(stamps):
            continue  # a chunk packed with another: not this measurement's case
        late.extend(stamp - left for stamp, left in zip(stamps, sent_s, strict=True))
        shared += sum(1 for a, b in itertools.pairwise(stamps) if a == b)
        chunks += len(stamps)
    return {
        "spacing_ms": spacing_s * 1e3,
        "cpu_ms_per_request": client["cpu_ms_per_request"],
        "chunks": chunks,
        "shared_read_share": shared / max(chunks, 1),
        **{
            f"late_p{q * 100:g}_ms": _quantile(late, q) * 1e3 if late else None
            for q in (0.5, 0.99, 0.999)
        },
        "late_max_ms": max(late) * 1e3 if late else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--spacing-s", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--spacings-ms", default="0,1", help="reader wake spacings to compare")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=960)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.spacing_s, args.requests, args.tokens)
        return
    spacings = [float(s) / 1e3 for s in args.spacings_ms.split(",")]
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        order = spacings if number % 2 == 0 else list(reversed(spacings))
        for spacing_s in order:
            found = _round(spacing_s, args)
            found["round"] = number
            rounds.append(found)
            print(json.dumps(found), flush=True)
    summary = {}
    for spacing_s in spacings:
        mine = [r for r in rounds if r["spacing_ms"] == spacing_s * 1e3]
        summary[f"{spacing_s * 1e3:g} ms"] = {
            key: statistics.median(r[key] for r in mine if r[key] is not None)
            for key in mine[0]
            if key not in ("spacing_ms", "round")
        }
    print(json.dumps(summary, indent=2))
    if args.out:
        machine = {"cpu": _cpu_name(), "cpus": os.cpu_count()}
        payload = {"machine": machine, "args": vars(args), "rounds": rounds, "medians": summary}
        args.out.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
