"""What ``accelscope llm`` measures, and how far its own client can be trusted.

1. **Exactness** against the scripted fake server (``accelscope.testing.llm_server``): TTFT,
   TPOT, ITL and E2E medians next to the script, one token per chunk and four.
2. **Client overhead**: the send lag (sent - scheduled) and the client's CPU at rising rates
   against an instant fake server, so a user knows when the client, not the server, is the
   limit.
3. **transformers serve on this CPU**, with and without continuous batching, side by side:
   each server's capacity at the SLO (the search), then fixed-rate trials interleaved A, B,
   A, B ... with the TPOT and TTFT ratios' bootstrap CIs over the pooled requests.
4. **A peer tool** (GuideLLM, from its own venv, ``--guidellm PATH``) on the same server at a
   low fixed rate: its TTFT and TPOT medians next to ours, with each tool's definitions.

    python benchmarks/llm_serving.py --out benchmarks/results/llm_serving.json \\
        --guidellm /tmp/peer/bin/guidellm
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.hardware.fingerprint import collect_environment
from accelscope.llm.documents import LlmRun, LlmTrial
from accelscope.llm.summary import Slo
from accelscope.llm.workload import Lengths, Workload
from accelscope.measurement.stats import bootstrap_ratio
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.testing.llm_server import FakeLLMServer, TransformersServe


def _run(settings: LlmRequestSettings) -> LlmRun:
    return llm(settings, store_path=None).document


def _medians(trial: LlmTrial) -> dict[str, float | None]:
    metrics = trial.summary.metrics
    return {
        k: metrics.get(k).value("p50")
        for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "stream_tail_s")
    }


def exactness() -> list[dict[str, Any]]:
    """Scripted TTFT 100 ms, ITL 20 ms, 32 tokens; 1 and 4 tokens per chunk; 2 req/s."""
    rows = []
    for per_chunk in (1, 4):
        with FakeLLMServer(ttft_s=0.1, itl_s=0.02, tokens_per_chunk=per_chunk) as server:
            document = _run(
                LlmRequestSettings(
                    url=server.url,
                    model=server.model,
                    rates=(2.0,),
                    requests=60,
                    workload=Workload(output_tokens=Lengths(32, 32)),
                    scrape_metrics=False,
                )
            )
        got = _medians(document.trials[0])
        script = {
            "ttft_s": 0.1 + 0.02 * (per_chunk - 1),
            "tpot_s": (0.02 * 31 - 0.02 * (per_chunk - 1)) / 31,
            "itl_s": 0.02 * per_chunk,
            "e2e_s": 0.1 + 0.02 * 31,
        }
        rows.append({"tokens_per_chunk": per_chunk, "measured": got, "script": script})
        print(json.dumps(rows[-1]), flush=True)
    return rows


_SERVE_FAKE = """
import sys, time
from accelscope.testing.llm_server import FakeLLMServer
with FakeLLMServer(ttft_s=0.0, itl_s=0.0) as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""


def client_overhead(rates: list[float], requests: int) -> list[dict[str, Any]]:
    """Lag and client CPU against an instant server (4 tokens, no delays) running in another
    process, so the client's CPU is its own."""
    rows = []
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVE_FAKE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    url = process.stdout.readline().strip()
    try:
        for rate in rates:
            document = _run(
                LlmRequestSettings(
                    url=url,
                    model="fake-model",
                    rates=(rate,),
                    requests=requests,
                    workload=Workload(input_tokens=Lengths(16, 16), output_tokens=Lengths(4, 4)),
                    scrape_metrics=False,
                )
            )
            summary = document.trials[0].summary
            lag = summary.client_lag_s
            rows.append(
                {
                    "rate_per_s": rate,
                    "completed": summary.completed,
                    "errors": summary.errors,
                    "lag_p50_s": lag.p50 if lag else None,
                    "lag_p99_s": lag.p99 if lag else None,
                    "client_bound": summary.client_bound,
                    "client_cpu_cores": summary.client_cpu_cores,
                    "client_cpu_s_per_request": summary.client_cpu_s_per_request,
                    "achieved_requests_per_s": summary.throughput.requests_per_s
                    if summary.throughput
                    else None,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        process.stdin.close()
        process.wait(timeout=30)
    return rows


def _serve_settings(server: TransformersServe, **changes: Any) -> LlmRequestSettings:
    base: dict[str, Any] = {
        "url": server.url,
        "model": server.model,
        "workload": Workload(input_tokens=Lengths(32, 32), output_tokens=Lengths(16, 16)),
        "scrape_metrics": False,
        "timeout_s": 120.0,
    }
    base.update(changes)
    return LlmRequestSettings(**base)


def serve_side_by_side(
    model_dir: Path,
    slo: Slo,
    rate: float,
    rounds: int,
    requests: int,
    trials: int,
    capacity_start: float,
) -> dict[str, Any]:
    """Capacity with and without continuous batching, then interleaved fixed-rate trials."""
    found: dict[str, Any] = {"slo": slo.label, "capacity": {}, "interleaved": {}}
    with (
        TransformersServe(model_dir) as static,
        TransformersServe(model_dir, continuous_batching=True) as batched,
    ):
        servers = {"static": static, "continuous": batched}
        for name, server in servers.items():
            document = _run(
                _serve_settings(
                    server,
                    slo=slo,
                    capacity="rate",
                    capacity_start=capacity_start,
                    capacity_trials=trials,
                    requests=requests,
                )
            )
            capacity = document.capacity
            assert capacity is not None  # a --capacity run always has one
            found["capacity"][name] = {
                "capacity_req_per_s": capacity.capacity,
                "good_output_tokens_per_s": capacity.good_output_tokens_per_s,
                "points": [point.model_dump(mode="json") for point in capacity.points],
            }
            print(name, json.dumps(found["capacity"][name]), flush=True)
        samples: dict[str, dict[str, list[float]]] = {
            n: {"ttft_s": [], "tpot_s": []} for n in servers
        }
        for round_ in range(rounds):
            for name, server in servers.items():
                document = _run(_serve_settings(server, rates=(rate,), requests=requests // 2))
                trial = document.trials[0]
                for metric in ("tpot_s", "ttft_s"):
                    median = trial.summary.metrics.get(metric).value("p50")
                    if median is None:
                        raise RuntimeError(f"{name}, round {round_}: no {metric} measured")
                    samples[name][metric].append(median)
                print(round_, name, json.dumps(_medians(trial)), flush=True)
        for metric in ("ttft_s", "tpot_s") if rounds else ():
            estimate = bootstrap_ratio(samples["static"][metric], samples["continuous"][metric])
            found["interleaved"][metric] = {
                "static_trial_medians": samples["static"][metric],
                "continuous_trial_medians": samples["continuous"][metric],
                "ratio_continuous_over_static": estimate.ratio,
                "ci95": [estimate.low, estimate.high],
            }
        found["interleaved"]["rate_per_s"] = rate
        found["interleaved"]["rounds"] = rounds
    return found


def peer(
    model_dir: Path, guidellm: Path, rate: float, requests: int, rounds: int
) -> dict[str, Any]:
    """GuideLLM and accelscope alternately on the same server at a low constant rate (both
    tools' constant arrivals: GuideLLM 0.8.1's poisson profile does not pace), first on the
    scripted fake server, then on ``transformers serve``. GuideLLM's ITL (mean gap, first
    token excluded) is vLLM's and our TPOT; its own TPOT includes the first token."""
    sys.path.insert(0, str(Path(__file__).parent))
    from llm_peer import run_guidellm  # benchmarks/llm_peer.py

    workload = Workload(input_tokens=Lengths(32, 32), output_tokens=Lengths(16, 16))
    found: dict[str, Any] = {}
    for name in ("fake", "transformers-serve"):
        rows: dict[str, list[dict[str, Any]]] = {"accelscope": [], "guidellm": []}
        with contextlib.ExitStack() as stack:
            server: FakeLLMServer | TransformersServe = stack.enter_context(
                FakeLLMServer(ttft_s=0.1, itl_s=0.02)
                if name == "fake"
                else TransformersServe(model_dir)
            )
            out = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            for round_ in range(rounds):
                ours = _run(
                    LlmRequestSettings(
                        url=server.url,
                        model=server.model,
                        rates=(rate,),
                        burstiness=0.01,
                        requests=requests,
                        workload=workload,
                        tokenizer=model_dir,
                        scrape_metrics=False,
                    )
                )
                trial = ours.trials[0]
                rows["accelscope"].append(
                    {
                        **_medians(trial),
                        "ttft_sent_s": trial.summary.metrics.ttft_sent_s.value("p50"),
                    }
                )
                theirs = run_guidellm(
                    guidellm,
                    url=server.url,
                    model=server.model,
                    tokenizer_dir=model_dir,
                    rate_per_s=rate,
                    requests=requests,
                    prompt_tokens=32,
                    output_tokens=16,
                    out_dir=out / f"round{round_}",
                    send_ignore_eos=name == "fake",
                    worker_processes=2,
                )
                rows["guidellm"].append(theirs)
                print(name, round_, json.dumps(rows["accelscope"][-1]), flush=True)
                print(
                    name,
                    round_,
                    json.dumps({k: v for k, v in theirs.items() if k.endswith("_s")}),
                    flush=True,
                )
        found[name] = rows
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="exactness,client,serve,peer")
    parser.add_argument("--client-rates", default="25,50,100,200,400")
    parser.add_argument("--client-requests", type=int, default=400)
    parser.add_argument("--slo", default="ttft=1s,tpot=150ms")
    parser.add_argument("--slo-percentile", type=float, default=90.0)
    parser.add_argument("--rate", type=float, default=2.0, help="interleaved fixed rate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=80)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--capacity-start", type=float, default=2.0)
    parser.add_argument("--guidellm", type=Path, default=None)
    parser.add_argument("--peer-rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    report: dict[str, Any] = {
        "cpu": collect_environment().cpu.model_name,
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(sys.argv),
    }
    with tempfile.TemporaryDirectory() as directory:
        model_dir = build_tiny_llama(
            Path(directory) / "tiny-llama",
            hidden=256,
            layers=4,
            heads=8,
            kv_heads=4,
            intermediate=688,
        )
        if "exactness" in parts:
            report["exactness"] = exactness()
        if "client" in parts:
            rates = [float(r) for r in args.client_rates.split(",")]
            report["client"] = client_overhead(rates, args.client_requests)
        if "serve" in parts:
            report["serve"] = serve_side_by_side(
                model_dir,
                Slo.parse(args.slo, args.slo_percentile),
                args.rate,
                args.rounds,
                args.requests,
                args.trials,
                args.capacity_start,
            )
        if "peer" in parts and args.guidellm is not None:
            report["peer"] = peer(model_dir, args.guidellm, 2.0, 20, args.peer_rounds)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
