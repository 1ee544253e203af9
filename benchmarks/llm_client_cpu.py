"""The client's CPU per streamed request, this tree against a baseline commit, interleaved.

Each measurement is a fresh process (``--child``) that runs :func:`accelscope.llm.trial.run_trial`
with closed-loop concurrency against a scripted fake server in another process (so its CPU is
not the client's), after one warm-up round, and prints the process's CPU (user + system, every
thread). Two sizes per version give the marginal CPU per request, the fixed costs (threads,
imports already paid, the warm-up) cancelling: ``(cpu(large) - cpu(small)) / (large - small)``.
Versions and sizes alternate within each round so drift on a shared machine hits both alike;
the figures are medians over the rounds with the order-statistic 95 % interval.

    git worktree add /tmp/old-client e3c5a8d
    .venv/bin/python benchmarks/llm_client_cpu.py --baseline-src /tmp/old-client/src \\
        --out benchmarks/results/llm_client_cpu.json

``--workers 1,2`` measures instead how many requests a second 1 and 2 client processes
(``llm --workers``) send on schedule: open-loop trials at rising rates (interleaved: each rate
for every worker count before the next rate), each trial's p99 send lag against the 50 ms
client-bound limit; the highest rate under it is the on-schedule rate.

    .venv/bin/python benchmarks/llm_client_cpu.py --workers 1,2 \\
        --out benchmarks/results/llm_scaleout.json
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
from accelscope.testing.llm_server import FakeLLMServer
with FakeLLMServer(ttft_s={ttft_s}, itl_s={itl_s}, output_tokens={tokens}) as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""


def child(url: str, requests: int, concurrency: int, tokens: int) -> None:
    """One measurement: warm up with ``concurrency`` requests, then time ``requests``."""
    from accelscope.llm.client import OpenAIEndpoint
    from accelscope.llm.records import LlmRequest
    from accelscope.llm.trial import run_trial

    endpoint = OpenAIEndpoint(url, "fake-model")
    work = [
        LlmRequest(index=i, prompt="hello world " * 16, max_tokens=tokens) for i in range(requests)
    ]
    run_trial(endpoint, work[:concurrency], concurrency=concurrency)
    before, wall = os.times(), time.perf_counter()
    outcome = run_trial(endpoint, work, concurrency=concurrency)
    after = os.times()
    chunks = [len(r.chunk_times_s) for r in outcome.records]
    print(
        json.dumps(
            {
                "cpu_s": (after.user - before.user) + (after.system - before.system),
                "user_s": after.user - before.user,
                "system_s": after.system - before.system,
                "wall_s": time.perf_counter() - wall,
                "errors": sum(1 for r in outcome.records if r.error),
                "chunks_per_request": sum(chunks) / len(chunks),
            }
        )
    )


def _measure(src: Path, url: str, requests: int, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, __file__, "--child", url, "--requests", str(requests)]
    command += ["--concurrency", str(args.concurrency), "--tokens", str(args.tokens)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def on_schedule(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Each worker count's trials at the rates (interleaved), and its on-schedule rate."""
    from accelscope.llm.client import OpenAIEndpoint
    from accelscope.llm.documents import Arrivals
    from accelscope.llm.harness import Harness
    from accelscope.llm.scaleout import Workers
    from accelscope.llm.summary import LAG_LIMIT_S
    from accelscope.llm.workload import Lengths, Workload

    counts = [int(c) for c in args.workers.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    rows: list[dict[str, Any]] = []
    for rate in rates:
        for count in counts:
            harness = Harness(
                target=OpenAIEndpoint(url, "fake-model"),
                workload=Workload(
                    input_tokens=Lengths(16, 16),
                    output_tokens=Lengths(args.tokens, args.tokens),
                    seed=1,
                ),
                count=max(args.small, int(rate * args.trial_s)),
                workers=Workers(count),
            )
            summary = harness.trial(Arrivals(rate_per_s=rate)).summary
            lag = summary.client_lag_s
            rows.append(
                {
                    "workers": count,
                    "rate_per_s": rate,
                    "requests": summary.requests,
                    "errors": summary.errors,
                    "error_kinds": [f"{k.count}x {k.error}" for k in summary.error_kinds],
                    "lag_p99_ms": lag.p99 * 1e3 if lag else None,
                    "client_bound": summary.client_bound,
                    "client_cpu_ms_per_request": summary.client_cpu_ms_per_request,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    best = {
        count: max(
            (
                r["rate_per_s"]
                for r in rows
                if r["workers"] == count and not r["client_bound"] and not r["errors"]
            ),
            default=None,
        )
        for count in counts
    }
    return {"lag_limit_ms": LAG_LIMIT_S * 1e3, "on_schedule_rate_per_s": best, "trials": rows}


def _median_ci(values: list[float]) -> dict[str, float]:
    from accelscope.measurement.stats import median_ci

    ordered = sorted(values)
    low, high = median_ci(ordered)
    return {"median": ordered[len(ordered) // 2], "ci_low": low, "ci_high": high}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--baseline-src", type=Path, help="the src/ of the baseline's worktree")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--small", type=int, default=240)
    parser.add_argument("--requests", type=int, default=960, help="the large size")
    parser.add_argument("--concurrency", type=int, default=80)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--workers", help="worker counts to compare, e.g. 1,2")
    parser.add_argument("--rates", default="100,200,300,400,500,600", help="req/s, rising")
    parser.add_argument("--trial-s", type=float, default=4.0, help="each trial's schedule span")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests, args.concurrency, args.tokens)
        return
    here = Path(__file__).resolve().parent.parent / "src"
    versions = {"this tree": here}
    if args.baseline_src:
        versions = {"baseline": args.baseline_src, **versions}
    serve = _SERVE.format(ttft_s=0.0, itl_s=args.itl_ms / 1000, tokens=args.tokens)
    server = subprocess.Popen(
        [sys.executable, "-c", serve],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(here)},
    )
    assert server.stdout is not None and server.stdin is not None
    url = server.stdout.readline().strip()
    if args.workers:
        try:
            document = {"setup": vars(args) | {"out": None}, **on_schedule(url, args)}
        finally:
            server.stdin.close()
            server.wait()
        print(json.dumps(document["on_schedule_rate_per_s"]))
        if args.out:
            args.out.write_text(json.dumps(document, indent=2, default=str) + "\n")
        return
    marginal: dict[str, list[float]] = {name: [] for name in versions}
    whole: dict[str, list[float]] = {name: [] for name in versions}
    raw: list[dict[str, Any]] = []
    try:
        for round_ in range(args.rounds):
            for name, src in versions.items():
                small = _measure(src, url, args.small, args)
                large = _measure(src, url, args.requests, args)
                assert small["errors"] == 0 and large["errors"] == 0, (small, large)
                per_request_s = (large["cpu_s"] - small["cpu_s"]) / (args.requests - args.small)
                marginal[name].append(per_request_s * 1e3)
                whole[name].append(large["cpu_s"] / args.requests * 1e3)
                raw.append({"round": round_, "version": name, "small": small, "large": large})
                print(
                    f"round {round_ + 1} {name}: marginal {per_request_s * 1e3:.2f} ms/request, "
                    f"whole trial {large['cpu_s'] / args.requests * 1e3:.2f} ms/request",
                    flush=True,
                )
    finally:
        server.stdin.close()
        server.wait()
    figures = {
        name: {
            "marginal_cpu_ms_per_request": _median_ci(marginal[name]),
            "trial_cpu_ms_per_request": _median_ci(whole[name]),
        }
        for name in versions
    }
    print(json.dumps(figures, indent=2))
    if args.out:
        setup = {k: v for k, v in vars(args).items() if k not in ("child", "out")}
        setup["baseline_src"] = str(args.baseline_src) if args.baseline_src else None
        document = {"setup": setup, "figures": figures, "raw": raw}
        args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
