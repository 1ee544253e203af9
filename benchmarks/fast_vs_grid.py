"""``--strategy fast`` vs ``--strategy grid`` on the same sweep, one after the other in one run.

Reports each strategy's best configuration and throughput, the measurement time (timer time:
first calls, warm-up and samples) and the wall time, and the ratios fast/grid.

    .venv/bin/python benchmarks/fast_vs_grid.py resnet50 --batch 8 --threads 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def sweep(model: str, strategy: str, extra: list[str]) -> dict:  # type: ignore[type-arg]
    accelscope = Path(sys.executable).with_name("accelscope")
    command = [
        str(accelscope),
        "bench",
        model,
        "--strategy",
        strategy,
        *extra,
        "--json",
        "--no-store",
        "--quiet",
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(completed.stdout)  # type: ignore[no-any-return]


def best_rate(document: dict) -> tuple[str, float]:  # type: ignore[type-arg]
    from accelscope.result import Result

    best = next(
        Result.from_dict(r)
        for r in document["results"]
        if r["spec"] and Result.from_dict(r).spec.key == document["best"]
    )
    assert best.measurement is not None
    return best.spec.label(), best.measurement.throughput_items_per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("extra", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    grid = sweep(args.model, "grid", args.extra)
    fast = sweep(args.model, "fast", args.extra)
    print("| strategy | best | items/s | measurement s | wall s |")
    print("|---|---|---|---|---|")
    for name, document in (("grid", grid), ("fast", fast)):
        label, rate = best_rate(document)
        print(
            f"| {name} | {label} | {rate:.1f} | {document['measurement_time_s']:.1f} | "
            f"{document['wall_time_s']:.0f} |"
        )
    ratio_rate = best_rate(fast)[1] / best_rate(grid)[1]
    ratio_time = fast["measurement_time_s"] / grid["measurement_time_s"]
    ratio_wall = fast["wall_time_s"] / grid["wall_time_s"]
    from accelscope.result import Result

    grid_rates = {
        Result.from_dict(r).spec.label(): Result.from_dict(r).measurement for r in grid["results"]
    }
    chosen = grid_rates.get(best_rate(fast)[0])
    quality = chosen.throughput_items_per_s / best_rate(grid)[1] if chosen else float("nan")
    print()
    print(
        f"fast/grid: best throughput {ratio_rate:.3f}, measurement time {ratio_time:.2f}, "
        f"wall time {ratio_wall:.2f}; grid's own figure for fast's choice / grid's best: "
        f"{quality:.3f}"
    )


if __name__ == "__main__":
    main()
