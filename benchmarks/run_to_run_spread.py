"""Run-to-run spread of one fixed workload: ResNet-50, eager fp32, batch 8, 5 separate runs.

Each run is a fresh ``accelscope measure`` process (model build, warm-up, adaptive sampling),
so the spread includes everything a user re-running the command would see.

    .venv/bin/python benchmarks/run_to_run_spread.py [--runs 5] [--model resnet50] [--batch 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def one_run(model: str, batch: int, budget: str) -> dict[str, float | str | int]:
    """One fresh process; returns its median throughput, CI, IQR ratio and stop reason."""
    accelscope = Path(sys.executable).with_name("accelscope")
    command = [
        str(accelscope),
        "measure",
        model,
        "--batch",
        str(batch),
        "--precision",
        "fp32",
        "--budget",
        budget,
        "--no-store",
        "--json",
    ]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(output)["results"][0]
    from accelscope.measurement.record import Measurement
    from accelscope.serialise import load

    measurement = load(Measurement, result["measurement"])
    summary = measurement.summary
    return {
        "items_per_s": measurement.throughput_items_per_s,
        "median_ms": summary.median_s * 1e3,
        "p99_ms": summary.p99_s * 1e3,
        "ci_pct": summary.median_ci_rel * 100,
        "iqr_pct": summary.iqr_ratio * 100,
        "samples": summary.count,
        "stop": measurement.stop_reason.value,
        "first_call_s": measurement.first_call_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--budget", default="10s")
    args = parser.parse_args()
    runs = [one_run(args.model, args.batch, args.budget) for _ in range(args.runs)]
    print("| run | items/s | median ms | p99 ms | median CI ± | IQR/median | samples | stop |")
    print("|---|---|---|---|---|---|---|---|")
    for index, run in enumerate(runs, 1):
        print(
            f"| {index} | {run['items_per_s']:.2f} | {run['median_ms']:.1f} | "
            f"{run['p99_ms']:.1f} | {run['ci_pct']:.1f} % | {run['iqr_pct']:.1f} % | "
            f"{run['samples']} | {run['stop']} |"
        )
    rates = [float(run["items_per_s"]) for run in runs]
    middle = statistics.median(rates)
    spread = (max(rates) - min(rates)) / middle * 100
    print()
    print(
        f"throughput across {len(runs)} runs: median {middle:.2f} items/s, "
        f"min {min(rates):.2f}, max {max(rates):.2f}, spread (max-min)/median {spread:.1f} %, "
        f"stdev/median {statistics.stdev(rates) / middle * 100:.1f} %"
    )


if __name__ == "__main__":
    main()
