"""Capacity at a p99 bound with and without dynamic batching: ``accelscope load`` on ResNet-50
with the best bench configuration, the figures docs/BENCHMARKS.md quotes.

One ``accelscope load --sla-p99 100ms`` run searches the batcher grid - max batch 1 (no
batching), 2, 4, 8, then the max delays for the best - so both capacities come from the same
session, side by side. ``--separate`` also runs the ``--no-batching`` command on its own.

    .venv/bin/python benchmarks/load_capacity.py                      # compile int8 channels_last
    .venv/bin/python benchmarks/load_capacity.py --from-run latest    # a stored bench run's best
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def run_load(args: list[str]) -> dict[str, Any]:
    accelscope = Path(sys.executable).with_name("accelscope")
    command = [str(accelscope), "load", *args, "--json"]
    print("$ accelscope load " + " ".join(args), flush=True)
    began = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"load failed ({completed.returncode}): {completed.stderr.strip()}")
    document: dict[str, Any] = json.loads(completed.stdout)
    document["wall_s"] = time.perf_counter() - began
    return document


def describe(document: dict[str, Any]) -> None:
    capacity = document["capacity"]
    print(
        f"  configuration {document['label']}, {len(document['trials'])} trials, "
        f"{document['wall_s']:.0f} s wall"
    )
    for policy in capacity["policies"]:
        batching = policy["batching"]
        delay_ms = batching["max_delay_s"] * 1e3
        name = f"max batch {batching['max_batch']}, max delay {delay_ms:g} ms"
        if batching["max_batch"] == 1:
            name = "no batching"
        print(
            f"  {name:<36} capacity {policy['capacity_qps']:7.1f} q/s "
            f"(offline ceiling {policy['ceiling_qps']:7.1f} q/s, {policy['trials']} trials)"
            + (f"  [{policy['note']}]" if policy["note"] else "")
        )
    best = capacity.get("capacity_trial") or {}
    if best:
        lat, queue, compute = best["latency"], best["queue"], best["compute"]
        lag_ms = best["generator_lag"]["p99_s"] * 1e3
        print(
            f"  capacity {capacity['capacity_qps']:.1f} q/s: p50 {lat['p50_s'] * 1e3:.1f} ms, "
            f"p99 {lat['p99_s'] * 1e3:.1f} ms; queue mean {queue['mean_s'] * 1e3:.1f} ms, "
            f"compute mean {compute['mean_s'] * 1e3:.1f} ms; mean batch "
            f"{best['mean_batch']:.2f}; {best['issued']} queries; lag p99 {lag_ms:.2f} ms"
        )
    for note in document["notes"]:
        print(f"  note: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--from-run", default=None, help="serve a stored bench run's best")
    parser.add_argument("--sla", default="100ms")
    parser.add_argument("--min-duration", default="10s")
    parser.add_argument("--min-queries", default="1000")
    parser.add_argument("--separate", action="store_true", help="also run --no-batching alone")
    args = parser.parse_args()
    config = (
        ["--from-run", args.from_run]
        if args.from_run
        else [
            "--backend",
            "compile",
            "--precision",
            "int8",
            "--option",
            "channels_last=true",
            "--batch",
            "8",
            "--threads",
            "2",
        ]
    )
    common = [
        args.model,
        *config,
        "--scenario",
        "server",
        "--sla-p99",
        args.sla,
        "--min-duration",
        args.min_duration,
        "--min-queries",
        args.min_queries,
        "--no-store",
        "--report",
        "/tmp/accelscope-load-capacity.html",
    ]
    document = run_load(common)
    describe(document)
    if args.separate:
        alone = run_load([*common, "--no-batching"])
        describe(alone)


if __name__ == "__main__":
    main()
