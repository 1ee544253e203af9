"""``accelscope llm`` on a real vLLM (the CPU build in ``.venv-vllm``: ``make vllm``).

1. **peer**: accelscope's client and vLLM's own ``vllm bench serve`` on the same server,
   alternated round by round, concurrency 1, 64 input / 32 output tokens, ``--ignore-eos``:
   median TTFT and TPOT of each, and their ratio per round (paired, 95 % CI over rounds).
2. **prefix**: a multi-turn run (sessions of 4 turns, 150 new tokens a turn: more than one
   128-token KV block) with prefix caching on, then off (the server restarted between, same
   seed): TTFT by turn and the server's hit rate.
3. **client**: the client's own CPU per request for single-turn, multi-turn and trace
   workloads against an instant fake server (so the client is all that costs).

    python benchmarks/llm_vllm.py --out benchmarks/results/llm_vllm.json --parts peer,prefix
"""

from __future__ import annotations

import argparse
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
from accelscope.llm.documents import LlmRun
from accelscope.llm.engines import find_vllm, vllm_environment
from accelscope.llm.trace import TraceWorkload
from accelscope.llm.workload import Lengths, SessionWorkload, Workload
from accelscope.measurement.stats import paired_ratio
from accelscope.serialise import dump
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.testing.llm_server import FakeLLMServer, VllmServe


def _model(directory: Path) -> Path:
    """The 6.7 M-parameter random Llama of ../shared/VLLM-CPU.md (hidden 320, 5 layers)."""
    return build_tiny_llama(
        directory, hidden=320, layers=5, heads=5, kv_heads=5, intermediate=864, vocab=400
    )


def _ours(
    server: VllmServe, model: Path, requests: int, *, scrape_metrics: bool = True
) -> dict[str, float | None]:
    run = llm(
        LlmRequestSettings(
            url=server.url,
            model=server.model,
            concurrencies=(1,),
            requests=requests,
            workload=Workload(input_tokens=Lengths(64, 64), output_tokens=Lengths(32, 32)),
            tokenizer=model,
            ignore_eos=True,
            scrape_metrics=scrape_metrics,
        ),
        store_path=None,
    ).document
    metrics = run.trials[0].summary.metrics
    return {
        "ttft_ms": (metrics.ttft_s.value("p50") or 0) * 1e3,
        "ttft_sent_ms": (metrics.ttft_sent_s.value("p50") or 0) * 1e3,
        "tpot_ms": (metrics.tpot_s.value("p50") or 0) * 1e3,
    }


_VLLM_BENCH = """
import argparse, json, sys
from vllm.benchmarks.serve import add_cli_args, main
parser = argparse.ArgumentParser()
add_cli_args(parser)
args = parser.parse_args(sys.argv[1:])
result = main(args)
keys = ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "completed")
print("RESULT " + json.dumps({k: result.get(k) for k in keys}))
"""


def _theirs(server: VllmServe, model: Path, requests: int, seed: int) -> dict[str, float | None]:
    install = find_vllm()
    command = [
        str(install.python), "-c", _VLLM_BENCH,
        "--backend", "openai", "--base-url", server.url, "--endpoint", "/v1/completions",
        "--model", server.model, "--tokenizer", str(model), "--dataset-name", "random",
        "--random-input-len", "64", "--random-output-len", "32", "--num-prompts", str(requests),
        "--max-concurrency", "1", "--request-rate", "inf", "--ignore-eos", "--seed", str(seed),
        "--disable-tqdm",
    ]  # fmt: skip
    answer = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **vllm_environment(install)},
        check=False,
    )
    for line in answer.stdout.splitlines():
        if line.startswith("RESULT "):
            found = json.loads(line[7:])
            return {"ttft_ms": found["median_ttft_ms"], "tpot_ms": found["median_tpot_ms"]}
    raise RuntimeError(f"vllm bench serve failed: {answer.stderr[-1500:]}")


def peer(rounds: int, requests: int) -> dict[str, Any]:
    """Alternated rounds of both clients on one server."""
    with tempfile.TemporaryDirectory() as scratch:
        model = _model(Path(scratch) / "model")
        with VllmServe(model, enforce_eager=False) as server:
            _ours(server, model, 4)  # warm the server and the client's imports
            rows = []
            for number in range(rounds):
                order = ["ours", "vllm"] if number % 2 == 0 else ["vllm", "ours"]
                row: dict[str, Any] = {"round": number + 1, "order": order}
                for tool in order:
                    row[tool] = (
                        _ours(server, model, requests)
                        if tool == "ours"
                        else _theirs(server, model, requests, seed=number)
                    )
                print(json.dumps(row), flush=True)
                rows.append(row)
            startup = server.startup_s
    found: dict[str, Any] = {"rounds": rows, "startup_s": startup}
    for metric in ("ttft_ms", "tpot_ms"):
        estimate = paired_ratio(
            [r["vllm"][metric] for r in rows], [r["ours"][metric] for r in rows]
        )
        found[f"{metric}_ours_over_vllm"] = dump(estimate)
    return found


def prefix(sessions: int, turns: int) -> dict[str, Any]:
    """The same multi-turn run with prefix caching on, then off (a new server)."""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        model = _model(Path(scratch) / "model")
        for caching in (True, False):
            with VllmServe(model, prefix_caching=caching) as server:
                run: LlmRun = llm(
                    LlmRequestSettings(
                        url=server.url,
                        model=server.model,
                        concurrencies=(2,),
                        workload=SessionWorkload(
                            sessions_per_trial=sessions,
                            turns=Lengths(turns, turns),
                            input_tokens=Lengths(150, 150),
                            output_tokens=Lengths(32, 32),
                            seed=11,
                        ),
                        tokenizer=model,
                        ignore_eos=True,
                    ),
                    store_path=None,
                ).document
            trial = run.trials[0]
            cache = trial.server_metrics.prefix_cache
            reuse = trial.summary.prefix_reuse
            found["on" if caching else "off"] = {
                "turns": [
                    {
                        "turn": t.turn,
                        "ttft_p50_ms": (t.ttft_s.value("p50") or 0) * 1e3,
                        "ttft_p90_ms": (t.ttft_s.value("p90") or 0) * 1e3,
                        "prompt_tokens_mean": t.prompt_tokens_mean,
                        "reusable_tokens_mean": t.reusable_prefix_tokens_mean,
                    }
                    for t in trial.summary.turns
                ],
                "hit_rate": cache.hit_rate if cache else None,
                "expected_share": reuse.expected_share if reuse else None,
                "notes": run.notes,
            }
            print(json.dumps({"caching": caching, **found["on" if caching else "off"]}), flush=True)
    return found


def client(requests: int) -> dict[str, Any]:
    """CPU seconds the client spends per request, per workload kind, on an instant server."""
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "trace.jsonl"
        trace.write_text(
            "\n".join(
                json.dumps(
                    {
                        "timestamp": i * 20,
                        "input_length": 256,
                        "output_length": 32,
                        "hash_ids": [i % 7, 100 + i],
                    }
                )
                for i in range(requests)
            ),
            encoding="utf-8",
        )
        single = Workload(input_tokens=Lengths(256, 256), output_tokens=Lengths(32, 32))
        sessions = SessionWorkload(
            sessions_per_trial=requests // 4,
            turns=Lengths(4, 4),
            input_tokens=Lengths(64, 64),
            output_tokens=Lengths(32, 32),
        )
        workloads: list[tuple[str, Any, dict[str, Any]]] = [
            ("single-turn", single, {"rates": (50.0,)}),
            ("multi-turn (4 turns)", sessions, {"rates": (12.5,)}),
            ("trace", TraceWorkload.from_file(trace, block_tokens=128), {"speeds": (1.0,)}),
        ]
        with FakeLLMServer(ttft_s=0.0, itl_s=0.0) as server:
            for name, workload, load in workloads:
                run = llm(
                    LlmRequestSettings(
                        url=server.url,
                        model=server.model,
                        workload=workload,
                        requests=requests if name != "multi-turn (4 turns)" else requests // 4,
                        **load,
                    ),
                    store_path=None,
                ).document
                summary = run.trials[0].summary
                rows.append(
                    {
                        "workload": name,
                        "requests": summary.requests,
                        "client_cpu_ms_per_request": (summary.client_cpu_s_per_request or 0) * 1e3,
                        "client_cpu_cores": summary.client_cpu_cores,
                        "lag_p99_ms": (summary.client_lag_s.p99 if summary.client_lag_s else 0)
                        * 1e3,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    return {"rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default="peer,prefix,client")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    env = collect_environment()
    found: dict[str, Any] = {
        "machine": env.fingerprint(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(sys.argv),
    }
    parts = args.parts.split(",")
    if "client" in parts:
        found["client"] = client(400)
    if "peer" in parts:
        found["peer"] = peer(args.rounds, args.requests)
    if "prefix" in parts:
        found["prefix"] = prefix(8, 4)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=2), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
