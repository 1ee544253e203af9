"""How often the gate is wrong on this machine, and how often a naive gate is.

Each trial builds a baseline MLP (``--layers`` identical Linear+ReLU layers) and candidates
with extra identical layers (``--slowdowns 0,5,10``: percent of the layers' work; 0 is the A/A
test). For every (trial, slowdown), in an order rotated per trial so drift is spread:

* **naive gate**: baseline and candidate measured once each, one process each, back to back
  (1 s of samples each, like two CI jobs); "regression" when the ratio of medians exceeds the
  fixed threshold, "improvement" below its inverse;
* **accelscope gate**: :func:`accelscope.commands.compare.gate.gate` with its defaults
  (shared isolation, 6 rounds, up to 20 while inconclusive, 1 s per side and round).

Each outcome is appended to ``--out`` as one JSON line as it finishes (a killed run keeps what
it measured); the summary table is printed at the end (and with ``--summarise`` alone).

    python benchmarks/gate_calibration.py --trials 20 --slowdowns 0,5,10 --out gate.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from accelscope.commands.compare.gate import GateRequest, Variant, gate
from accelscope.compare.gate import GateThresholds
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.timer import TimerConfig
from accelscope.spec import Precision, RunSpec, TensorSpec
from accelscope.sweep.executor import LocalExecutor
from accelscope.sweep.worker import WorkerTask

MODEL = """
import torch
from torch import nn

def build():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear({width}, {width}), nn.ReLU())
                           for _ in range({layers})])
"""


def _write_model(directory: Path, layers: int, width: int) -> str:
    path = directory / f"mlp_{layers}.py"
    path.write_text(MODEL.format(layers=layers, width=width))
    return f"{path}:build"


def _naive(
    baseline: str, candidate: str, inputs: tuple[TensorSpec, ...], batch: int, threads: int
) -> float:
    env = collect_environment()
    executor = LocalExecutor(timeout_s=300)
    medians = []
    for ref in (baseline, candidate):
        spec = RunSpec(
            model=ref, backend="eager", precision=Precision.FP32, batch_size=batch, threads=threads
        )
        task = WorkerTask(
            spec=spec,
            model_ref=ref,
            environment=env,
            timer=TimerConfig(budget_s=1.0, target_rel_ci=0.001),
            inputs=inputs,
        )
        outcome = executor.run(task)
        assert outcome.result is not None and outcome.result.measurement is not None
        medians.append(outcome.result.measurement.summary.median_s)
    return medians[1] / medians[0]


def _verdict(ratio: float, threshold: float) -> str:
    if ratio > 1 + threshold:
        return "regression"
    if ratio < 1 / (1 + threshold):
        return "improvement"
    return "pass"


def measure(args: argparse.Namespace) -> None:
    width, batch, threads = args.width, args.batch, args.threads
    inputs = (TensorSpec(name="x", shape=("N", width), dtype="float32"),)
    slowdowns = [int(s) for s in args.slowdowns.split(",")]
    with tempfile.TemporaryDirectory() as tmp, open(args.out, "a", encoding="utf-8") as out:
        directory = Path(tmp)
        baseline = _write_model(directory, args.layers, width)
        candidates = {
            s: _write_model(directory, args.layers + round(args.layers * s / 100), width)
            for s in slowdowns
        }
        for trial in range(args.trials):
            order = slowdowns[trial % len(slowdowns) :] + slowdowns[: trial % len(slowdowns)]
            for slowdown in order:
                began = time.monotonic()
                naive_ratio = _naive(baseline, candidates[slowdown], inputs, batch, threads)
                naive_s = time.monotonic() - began
                request = GateRequest(
                    baseline=Variant(model=baseline, batch_size=batch, threads=threads),
                    candidate=Variant(
                        model=candidates[slowdown], batch_size=batch, threads=threads
                    ),
                    inputs=inputs,
                    thresholds=GateThresholds(max_slowdown=args.threshold),
                )
                outcome = gate(request, store_path=None)
                decision = outcome.decision
                row = {
                    "trial": trial,
                    "slowdown_pct": slowdown,
                    "naive_ratio": naive_ratio,
                    "naive_verdict": _verdict(naive_ratio, args.threshold),
                    "naive_s": naive_s,
                    "gate_status": decision.status.value,
                    "gate_ratio": decision.time.ratio,
                    "gate_low": decision.time.low,
                    "gate_high": decision.time.high,
                    "gate_rounds": decision.rounds,
                    "gate_s": outcome.wall_s,
                    "threshold": args.threshold,
                }
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(
                    f"trial {trial} +{slowdown}%: naive {naive_ratio:.3f} "
                    f"({row['naive_verdict']}), gate {decision.time.ratio:.3f} "
                    f"[{decision.time.low:.3f}, {decision.time.high:.3f}] "
                    f"{decision.status.value} in {decision.rounds} rounds, {outcome.wall_s:.0f} s",
                    flush=True,
                )


def summarise(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_level: dict[int, list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        by_level[int(row["slowdown_pct"])].append(row)
    print(
        "| injected | trials | naive: regression / improvement / pass | "
        "gate: regression / inconclusive / pass (faster) | gate median ratio | "
        "median CI half-width | median rounds | median gate time |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for level in sorted(by_level):
        group = by_level[level]
        naive: dict[str, int] = defaultdict(int)
        status: dict[str, int] = defaultdict(int)
        faster = 0
        for row in group:
            naive[str(row["naive_verdict"])] += 1
            status[str(row["gate_status"])] += 1
            faster += int(float(row["gate_high"]) < 1.0)  # type: ignore[arg-type]
        halves = [
            (math.log(float(r["gate_high"])) - math.log(float(r["gate_low"]))) / 2  # type: ignore[arg-type]
            for r in group
        ]
        print(
            f"| +{level} % | {len(group)} | {naive['regression']} / {naive['improvement']} / "
            f"{naive['pass']} | {status['regression']} / {status['inconclusive']} / "
            f"{status['pass']} ({faster}) | "
            f"{np.median([float(r['gate_ratio']) for r in group]):.3f} | "  # type: ignore[arg-type]
            f"±{np.median(halves) * 100:.1f} % | "
            f"{np.median([int(r['gate_rounds']) for r in group]):.0f} | "  # type: ignore[call-overload]
            f"{np.median([float(r['gate_s']) for r in group]):.0f} s |"  # type: ignore[arg-type]
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--slowdowns", default="0,5,10", help="percent of extra layers")
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--threshold", type=float, default=0.05)
    parser.add_argument("--out", type=Path, default=Path("gate_calibration.jsonl"))
    parser.add_argument("--summarise", action="store_true", help="only print the summary")
    args = parser.parse_args()
    if not args.summarise:
        measure(args)
    summarise(args.out)


if __name__ == "__main__":
    main()
