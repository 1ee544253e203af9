"""Agent trajectories replayed as jobs on the real CPU vLLM with prefix caching on: per
concurrency step the validity gate, jobs/hour at an SLO with its interval, TTFT against
context, and the measured prefix-cache hit rate against the optimum of the same sessions, with
the eviction cliff named when measured / optimal falls below ``CLIFF_BOUND``.

The server (``.venv-vllm``: ``make vllm``) serves a tiny random Llama
(:func:`~accelscope.testing.llm_model.build_tiny_llama`, its BPE tokenizer of 400 tokens, so a
word is several tokens) with a context of ``--context`` tokens and its KV cache held to
``--kv-blocks`` blocks (vLLM's ``--num-gpu-blocks-override``; 128 tokens a block on the CPU
build), so the cache is small enough for the sessions of a high concurrency to evict each
other. The recorded answers are sent back (``--agentic-answers recorded``), so every prompt is
the file's and the optimum describes what was sent. The server is started once and always
stopped. The validity gate runs as in any ``llm`` run: on a busy 2-core machine that also runs
the server, the steps whose client fell behind its schedule are named invalid, with no figure.

    .venv/bin/python benchmarks/llm_agentic_vllm.py --concurrency 1,2,8 \\
        --out benchmarks/results/llm_agentic_vllm.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from accelscope.commands.llm.view import llm_view
from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.documents import Slo
from accelscope.llm.agentic import AgenticWorkload
from accelscope.llm.documents import Interval, LlmRun
from accelscope.llm.prefix_optimum import CLIFF_BOUND
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.testing.real_llm_servers import VllmServe

ROOT = Path(__file__).resolve().parents[1]
TRAJECTORIES = ROOT / "examples" / "agentic" / "trajectories.jsonl"


def _interval(value: Interval | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {"value": value.value, "low": value.low, "high": value.high, "why": value.why}


def _rows(document: LlmRun) -> list[dict[str, Any]]:
    """One row per concurrency step: the gate, the jobs and the cache against its optimum."""
    rows = []
    for trial in document.trials:
        step = trial.summary.agentic
        if step is None:
            continue
        jobs, cache = step.jobs, step.cache
        rows.append(
            {
                "step": trial.label,
                "valid": step.gate.valid,
                "gate": [f.text for f in step.gate.failures],
                "turns": step.gate.turns,
                "errors": step.gate.errors,
                "overflowed": step.gate.overflowed,
                "jobs": None
                if jobs is None
                else {
                    "completed": jobs.completed,
                    "met_slo": jobs.met_slo,
                    "of": jobs.jobs,
                    "duration_s": jobs.duration_s,
                    "job_latency_p50_s": _interval(jobs.job_latency_p50_s),
                    "completed_jobs_per_hour": _interval(jobs.completed_jobs_per_hour),
                    "jobs_per_hour_at_slo": _interval(jobs.jobs_per_hour_at_slo),
                    "ttft_by_context": [
                        {
                            "tokens": [b.low_tokens, b.high_tokens],
                            "turns": b.turns,
                            "ttft_p50_ms": b.ttft_p50_s.value * 1e3,
                            "ci_ms": [
                                None if b.ttft_p50_s.low is None else b.ttft_p50_s.low * 1e3,
                                None if b.ttft_p50_s.high is None else b.ttft_p50_s.high * 1e3,
                            ],
                        }
                        for b in jobs.ttft_by_context
                    ],
                },
                "cache": None if cache is None else cache.model_dump(mode="json"),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="2,4,8", help="steps, e.g. 2,4,8")
    parser.add_argument("--slo", default="ttft=2s,tpot=100ms")
    parser.add_argument("--context", type=int, default=8192, help="max_model_len, tokens")
    parser.add_argument("--kv-blocks", type=int, default=80, help="KV blocks of 128 tokens")
    parser.add_argument("--sessions", type=int, default=None, help="per step (default: all)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    steps = tuple(int(c) for c in args.concurrency.split(","))
    workload = AgenticWorkload.from_file(
        TRAJECTORIES, answers="recorded", sessions_per_trial=args.sessions
    )
    with tempfile.TemporaryDirectory() as scratch:
        model = build_tiny_llama(
            Path(scratch) / "tiny", heads=2, kv_heads=1, max_positions=args.context
        )
        with VllmServe(
            model,
            prefix_caching=True,
            max_model_len=args.context,
            extra_args=["--num-gpu-blocks-override", str(args.kv_blocks)],
            log_path=Path(scratch) / "vllm.log",
        ) as server:
            outcome = llm(
                LlmRequestSettings(
                    url=server.url,
                    model=server.model,
                    api="chat",
                    workload=workload,
                    concurrencies=steps,
                    slo=Slo.parse(args.slo),
                    ignore_eos=True,
                    report_path=Path(scratch) / "report.html",
                ),
                store_path=Path(scratch) / "store.db",
                events=lambda line: print(line, flush=True),
            )
    document = outcome.document
    Console(width=200).print(llm_view(document))
    cliff = document.eviction_cliff
    result = {
        "args": vars(args),
        "cliff_bound": CLIFF_BOUND,
        "server_config": None
        if document.server_config is None
        else document.server_config.model_dump(mode="json"),
        "cliff": None if cliff is None else cliff.model_dump(mode="json"),
        "steps": _rows(document),
    }
    print(json.dumps(result, default=str), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, default=str, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
