"""``llm --workers ray:2`` against the real vLLM: a 2-node local Ray cluster sends one arrival
schedule, and the stored percentiles must equal a recomputation from the stored raw samples.

The run is the CLI's, as a user types it (``RAY_ADDRESS`` naming the cluster); the check reads
the stored run back, recomputes every trial's summary from its stored records
(:func:`accelscope.llm.summary.summarise_trial`) and compares each percentile of TTFT, TPOT, ITL
and E2E (the stored records keep microseconds, so equal means within 2 us). It also says which
node sent how many requests and each trial's p99 send lag.

    .venv/bin/python benchmarks/llm_ray_vllm.py --rates 4,8 --requests 120 \\
        --out benchmarks/results/llm_ray_vllm.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from accelscope.llm.documents import LlmTrial
from accelscope.llm.summary import summarise_trial
from accelscope.store.sqlite import ResultStore
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.testing.ray_cluster import LocalRayCluster
from accelscope.testing.real_llm_servers import VllmServe

METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
QUANTILES = ("p50", "p90", "p99")


def _check(trial: LlmTrial) -> dict[str, Any]:
    again = summarise_trial(trial.records, slo=None, duration_s=trial.summary.duration_s)
    rows: dict[str, Any] = {}
    worst = 0.0
    for name in METRICS:
        for q in QUANTILES:
            stored = trial.summary.metrics.get(name).value(q)
            recomputed = again.metrics.get(name).value(q)
            rows[f"{name}.{q}"] = {"stored": stored, "recomputed": recomputed}
            if stored is not None and recomputed is not None:
                worst = max(worst, abs(stored - recomputed))
    lags = sorted(r.sent_s - r.scheduled_s for r in trial.records)
    return {
        "load": trial.label,
        "completed": trial.summary.completed,
        "errors": trial.summary.errors,
        "requests": len(trial.records),
        "send_lag_p99_s": lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else None,
        "max_abs_diff_s": worst,
        "equal": worst <= 2e-6,
        "percentiles": rows,
        "notes": trial.notes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="4,8", help="offered req/s, comma-separated")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--input-tokens", default="64")
    parser.add_argument("--output-tokens", default="32")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    accelscope = str(Path(sys.executable).with_name("accelscope"))
    with tempfile.TemporaryDirectory(prefix="llm-ray-vllm-") as work:
        root = Path(work)
        model = build_tiny_llama(root / "tiny", heads=2, kv_heads=1)
        store = root / "runs.db"
        with (
            VllmServe(model, log_path=root / "vllm.log") as server,
            LocalRayCluster(["node_a", "node_b"]) as cluster,
        ):
            command = [
                accelscope, "llm", server.url, "--model", server.model,
                "--rate", args.rates, "--requests", str(args.requests),
                "--input-tokens", args.input_tokens, "--output-tokens", args.output_tokens,
                "--ignore-eos", "--seed", "1", "--workers", "ray:2", "--store", str(store),
            ]  # fmt: skip
            env = {**os.environ, "RAY_ADDRESS": cluster.address}
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.stderr.write(done.stdout + done.stderr)
                return done.returncode
        with ResultStore(store) as opened:
            run = opened.get_run("latest")
            trials = [
                LlmTrial.from_payload(t, "the stored trial") for t in run.documents_of("llm-trial")
            ]
        result = {
            "command": " ".join(command[1:]),
            "workers": run.settings.get("workers"),
            "trials": [_check(t) for t in trials],
            "stdout_tail": done.stdout[-3000:],
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for row in result["trials"]:
        print(
            f"{row['load']}: {row['requests']} requests, {row['completed']} completed, "
            f"{row['errors']} errors, "
            f"p99 send lag {row['send_lag_p99_s']:.4f} s, max |stored - recomputed| "
            f"{row['max_abs_diff_s']:.2e} s: {'equal' if row['equal'] else 'DIFFERENT'}"
        )
    return 0 if all(row["equal"] for row in result["trials"]) else 1


if __name__ == "__main__":
    sys.exit(main())
