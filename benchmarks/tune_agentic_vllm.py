"""``accelscope tune --agentic`` on the real CPU vLLM: the winner's prefix cache set against the
best a cache of the server's size could do on the same sessions, and the eviction cliff named
beside the winner when it stands past it.

The workload is ``examples/agentic/trajectories.jsonl`` (24 sessions with tool waits, the
recorded answers sent back) at a fixed concurrency; the space is the KV cache's size in blocks
(vLLM's ``--num-gpu-blocks-override``, 128 tokens a block on the CPU build) and, optionally,
``max-num-seqs``: a small cache evicts the sessions' shared prefixes at that concurrency, a large
one keeps them. The model is the tiny random Llama of
:func:`~accelscope.testing.llm_model.build_tiny_llama`, built here; the tune goes through the
real CLI (the ``accelscope`` beside this Python), as a user runs it, with its own store; the command
line, the CLI's output and the stored tune run's winner and cache figures are written to
``--out``.

    .venv/bin/python benchmarks/tune_agentic_vllm.py \\
        --out benchmarks/results/tune_agentic_vllm.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from accelscope.llm.engines import find_vllm
from accelscope.testing.llm_model import build_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
TRAJECTORIES = ROOT / "examples" / "agentic" / "trajectories.jsonl"


def _cache(config: dict[str, Any]) -> dict[str, Any] | None:
    """The configuration's agentic step as stored: its gate and its cache against the optimum."""
    step = ((config.get("point") or {}).get("summary") or {}).get("agentic")
    if not step or not step.get("cache"):
        return None
    gate = step["gate"]
    return {"valid": gate["valid"], "gate": [f["text"] for f in gate["failures"]]} | step["cache"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--blocks", default="80,640", help="num-gpu-blocks-override values")
    parser.add_argument("--context", type=int, default=8192, help="max_model_len, tokens")
    parser.add_argument("--slo", default="ttft=2s,tpot=100ms")
    parser.add_argument("--confirm-rounds", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    install = find_vllm(None)
    with tempfile.TemporaryDirectory() as scratch:
        model = build_tiny_llama(
            Path(scratch) / "tiny", heads=2, kv_heads=1, max_positions=args.context
        )
        store = Path(scratch) / "store.db"
        cli = str(Path(sys.executable).parent / "accelscope")
        command = [
            cli,
            "tune",
            "--engine",
            "vllm",
            "--model-dir",
            str(model),
            "--vllm-python",
            str(install.python),
            "--engine-args",
            f"--enforce-eager --enable-prefix-caching --max-model-len {args.context}",
            "--space",
            f"num-gpu-blocks-override={args.blocks}",
            "--reference",
            f"num-gpu-blocks-override={args.blocks.split(',')[0]}",
            "--agentic",
            str(TRAJECTORIES),
            "--agentic-answers",
            "recorded",
            "--concurrency",
            str(args.concurrency),
            "--slo",
            args.slo,
            "--confirm-rounds",
            str(args.confirm_rounds),
            "--store",
            str(store),
        ]
        print("$", shlex.join(command), flush=True)
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
        wall_s = time.monotonic() - started
        print(done.stdout)
        print(done.stderr, file=sys.stderr)
        shown = subprocess.run(
            [cli, "runs", "show", "latest", "--store", str(store)],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        print(shown.stdout)
        found = subprocess.run(
            [cli, "runs", "show", "latest", "--store", str(store), "--json"],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        document = json.loads(found.stdout) if found.returncode == 0 else None
    result: dict[str, Any] = {
        "args": vars(args) | {"out": str(args.out) if args.out else None},
        "command": shlex.join(["accelscope", *command[1:]]),
        "exit_code": done.returncode,
        "wall_s": wall_s,
        "output": done.stdout,
        "errors": done.stderr[-4000:],
    }
    if isinstance(document, dict):
        payloads = [(d["kind"], d["payload"]) for d in document.get("documents", [])]
        tune = next((p for kind, p in reversed(payloads) if kind == "tune"), {})
        result["shown"] = shown.stdout
        for key in ("winner", "verdict", "notes", "warnings"):
            result[key] = tune.get(key)
        result["configs"] = [
            {
                "key": c.get("key"),
                "role": c.get("role"),
                "phase": c.get("phase"),
                "status": c.get("status"),
                "good_output_tokens_per_s": c.get("goodput_tokens_per_s"),
                "cache": _cache(c),
            }
            for kind, c in payloads
            if kind == "tune-config"
        ]
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
