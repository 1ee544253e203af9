"""``accelscope tune`` on a real vLLM (the CPU build in ``.venv-vllm``), what it finds and what
it costs.

1. **tuned**: a random-weights Llama of ~100 M parameters (large enough that compute
   matters), space ``max-num-seqs`` x ``dtype`` at a fixed load (8 concurrent clients), the
   reference vLLM's own defaults; the best, the runner-up and the defaults measured again in
   alternated rounds (fresh servers): the tuned configuration's goodput at the SLO over the
   defaults', with its 95 % interval.
2. **peers' grid**: the one-trial-per-point grid the peers use (vLLM's auto_tune, ``vllm bench
   sweep``): the same space without confirmation, repeated: how often its winner changes
   (A/A), its wall time against the confirmed tune's.
3. **cost**: the tuner's own wall/CPU time and peak memory per configuration (from the stored
   documents), and how a tune's wall time grows with the space (template engine on the fake
   server, 1 to 8 configurations, so the servers cost nearly nothing: ``growth`` in process,
   ``memory`` through the real CLI, one process per size, for the tuner's own peak RSS).
   ``close``: the one-trial grid on three close batch limits at fp32.

    python benchmarks/tune_vllm.py --out benchmarks/results/tune_vllm.json [--parts ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from accelscope.commands.tune.workflow import TuneRequest, tune
from accelscope.hardware.fingerprint import collect_environment
from accelscope.llm.documents import Arrivals, Slo
from accelscope.llm.workload import Lengths, Workload
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.tune.documents import TuneRun

ENGINE_ARGS = ("--enforce-eager", "--max-model-len", "1024")
SPACE = ("max-num-seqs=1,8", "dtype=bfloat16,float32")


def _model(directory: Path) -> Path:
    """~100 M parameters: hidden 768, 14 layers, 12 heads of 64, MLP 2048."""
    return build_tiny_llama(
        directory,
        hidden=768,
        layers=14,
        heads=12,
        kv_heads=12,
        intermediate=2048,
        vocab=400,
        max_positions=1024,
    )


def _request(model: Path, **changes: Any) -> TuneRequest:
    base: dict[str, Any] = {
        "engine": "vllm",
        "model": model,
        "engine_args": ENGINE_ARGS,
        "kv_cache_gib": 2.0,
        "workload": Workload(input_tokens=Lengths(32, 32), output_tokens=Lengths(16, 16), seed=3),
        "tokenizer": model,
        "fixed": Arrivals(concurrency=8),
        "requests": 24,
        "slo": Slo.parse("ttft=20s,tpot=2s", 90.0),
        "startup_timeout_s": 900.0,
        "timeout_s": 600.0,
        "quality_threshold": 0.9,
    }
    base.update(changes)
    return TuneRequest(**base)


def _configs(run: TuneRun) -> list[dict[str, Any]]:
    return [
        {
            "key": c.key,
            "status": c.status,
            "why": c.why,
            "startup_s": c.startup_s,
            "goodput_tokens_per_s": c.goodput_tokens_per_s,
            "quality": c.quality.agreement if c.quality else None,
            "wall_s": c.wall_s,
            "tuner_cpu_s": c.tuner_cpu_s,
            "tuner_peak_rss_mib": c.tuner_peak_rss_bytes / 2**20,
        }
        for c in run.configs
    ]


def tuned(model: Path, store: Path, rounds: int) -> dict[str, Any]:
    began = time.monotonic()
    run = tune(
        _request(
            model,
            spaces=SPACE,
            confirm_rounds=rounds,
        ),
        store_path=store,
        events=lambda line: print(line, flush=True),
    ).document
    verdict = run.verdict
    return {
        "wall_s": time.monotonic() - began,
        "winner": run.winner,
        "launch": run.winner_launch,
        "verdict": verdict.text if verdict else None,
        "gain": verdict.model_dump(mode="json")["gain"] if verdict else None,
        "gain_text": verdict.gain_text if verdict else None,
        "ratio": verdict.model_dump(mode="json")["ratio"] if verdict else None,
        "configs": _configs(run),
    }


def peers_grid(model: Path, store: Path, repeats: int, close: bool) -> dict[str, Any]:
    """The one-trial grid, repeated: on the tuned run's space, or (``close``) on three close
    batch limits at fp32."""
    found = []
    for number in range(repeats):
        began = time.monotonic()
        settings: dict[str, Any] = (
            {
                "spaces": ("max-num-seqs=4,8,16",),
                "reference": "max-num-seqs=4",
                "engine_args": (*ENGINE_ARGS, "--dtype", "float32"),
            }
            if close
            else {"spaces": SPACE}
        )
        run = tune(
            _request(model, confirm_rounds=0, **settings),
            store_path=store,
            events=lambda line: print(line, flush=True),
        ).document
        found.append(
            {
                "repeat": number + 1,
                "wall_s": time.monotonic() - began,
                "winner": run.winner,
                "configs": _configs(run),
            }
        )
        print(json.dumps(found[-1]), flush=True)
    winners = [r["winner"] for r in found]
    changes = sum(1 for a, b in itertools.pairwise(winners) if a != b)
    return {"repeats": found, "winners": winners, "winner_changes": changes}


def growth(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Wall time of a tune against the size of its space, on the fake server."""
    rows = []
    fake = f"{sys.executable} -m accelscope.testing.llm_server --port {{port}} --itl-ms 2"
    for size in sizes:
        values = ",".join(str(v) for v in range(1, size + 1))
        began = time.monotonic()
        run = tune(
            TuneRequest(
                engine="template",
                model=Path("fake-model"),
                server_command=fake + " --max-running {max_running}",
                spaces=(f"max-running={values}",),
                workload=Workload(input_tokens=Lengths(16, 16), output_tokens=Lengths(16, 16)),
                fixed=Arrivals(concurrency=4),
                requests=40,
                slo=Slo.parse("ttft=1s", 90.0),
                confirm_rounds=0,
                grid_max=64,
            ),
            store_path=None,
        ).document
        wall = time.monotonic() - began
        rows.append(
            {
                "configurations": len(run.configs),
                "wall_s": wall,
                "wall_s_per_configuration": wall / len(run.configs),
                "tuner_cpu_s_per_configuration": sum(c.tuner_cpu_s for c in run.configs)
                / len(run.configs),
                "startup_s_mean": sum(c.startup_s or 0 for c in run.configs) / len(run.configs),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def memory(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """The tuner's own peak memory and wall time against the space, through the real CLI (one
    process per tune, as a user runs it): template engine on the fake server; the peak is the
    tuner process's own (``tuner_peak_rss_bytes`` of its stored documents), servers excluded."""
    rows = []
    fake = f"{sys.executable} -m accelscope.testing.llm_server --port {{port}} --itl-ms 2"
    cli = Path(sys.executable).with_name("accelscope")
    for size in sizes:
        values = ",".join(str(v) for v in range(1, size + 1))
        with tempfile.TemporaryDirectory() as scratch:
            command = [
                str(cli), "tune", "--engine", "template", "--model-dir", "fake-model",
                "--server-command", fake + " --max-running {max_running}",
                "--space", f"max-running={values}", "--concurrency", "4", "--requests", "40",
                "--input-tokens", "16", "--output-tokens", "16", "--slo", "ttft=1s",
                "--confirm-rounds", "0", "--store", str(Path(scratch) / "s.db"), "--json",
            ]  # fmt: skip
            began = time.monotonic()
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            wall = time.monotonic() - began
        configs = json.loads(done.stdout)["configs"]
        rows.append(
            {
                "configurations": len(configs),
                "wall_s": wall,
                "tuner_peak_rss_mib": max(c["tuner_peak_rss_bytes"] for c in configs) / 2**20,
                "tuner_cpu_s": sum(c["tuner_cpu_s"] for c in configs),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default="growth,memory,tuned,peers,close")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    found: dict[str, Any] = {
        "machine": collect_environment().fingerprint(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(sys.argv),
    }
    parts = args.parts.split(",")
    # Before the model is built here: a child started by fork and exec inherits this process's
    # peak RSS (Linux keeps ru_maxrss across exec), so the CLI's own peak must come first.
    if "memory" in parts:
        found["memory"] = memory((1, 4, 8))
    if "growth" in parts:
        found["growth"] = growth((1, 2, 4, 8))
    if {"tuned", "peers", "close"} & set(parts):
        with tempfile.TemporaryDirectory() as scratch:
            model = _model(Path(scratch) / "model")
            store = Path(scratch) / "store.db"
            if "tuned" in parts:
                found["tuned"] = tuned(model, store, args.rounds)
            if "peers" in parts:
                found["peers"] = peers_grid(model, store, args.repeats, close=False)
            if "close" in parts:
                found["close"] = peers_grid(model, store, args.repeats, close=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=2), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
