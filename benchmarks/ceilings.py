"""Measured ceilings of this machine: searched matrix peak per dtype beside the naive 4096²
matmul, as a fraction of the ISA peak; copy/triad bandwidth. Writes the ceilings cache that
``accelscope roofline`` (and benchmarks/roofline_models.py) then use.

    .venv/bin/python benchmarks/ceilings.py --budget 300
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.roofline.cache import cache_path, save_cached
from accelscope.roofline.ceilings import DTYPES
from accelscope.roofline.measure_ceilings import CeilingsPlan, measure_ceilings
from accelscope.store.sqlite import DEFAULT_STORE_PATH


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=300.0, help="search budget, seconds")
    parser.add_argument("--json", type=Path, help="also write the ceilings document here")
    args = parser.parse_args()
    env = collect_environment()
    found = measure_ceilings(
        CeilingsPlan(budget_s=args.budget),
        env,
        events=lambda m: print(f"  {m} ...", file=sys.stderr),
    )
    print(
        f"{found.device_name}: {found.threads} threads, {found.trials} kernels in "
        f"{found.search_s:.0f} s"
    )
    print(
        f"{'dtype':6} {'searched peak':>14} {'naive 4096^2':>13} {'search/naive':>12} "
        f"{'ISA peak':>11} {'of ISA':>7}  kernel"
    )
    for dtype in DTYPES:
        peak = found.matmul_flops_per_s.get(dtype)
        naive = found.naive_flops_per_s.get(dtype)
        ideal = found.theoretical.flops_per_s.get(dtype)
        kernel = found.peaks.get(dtype)
        shape = f"{kernel.family} {'x'.join(map(str, kernel.shape))}" if kernel else "-"
        print(
            f"{dtype:6} {(peak or 0) / 1e12:>11.3f} T  {(naive or 0) / 1e12:>10.3f} T "
            f"{(peak / naive if peak and naive else 0):>11.2f}x {(ideal or 0) / 1e12:>8.3f} T "
            f"{(peak / ideal if peak and ideal else 0):>6.0%}  "
            f"{shape}"
        )
    for name, rate in found.bandwidth_detail_bytes_per_s.items():
        print(f"bandwidth {name}: {rate / 1e9:.1f} GB/s")
    for t, rates in sorted(found.by_threads.items()):
        print(f"{t} thread(s): " + ", ".join(f"{d} {r / 1e12:.3f} T" for d, r in rates.items()))
    print("ISA:", found.theoretical.derivation)
    for note in found.notes:
        print("note:", note)
    path = cache_path(
        DEFAULT_STORE_PATH.parent / "ceilings", env.fingerprint(), "cpu", available_cores()
    )
    save_cached(found, path)
    print(f"cached: {path}")
    if args.json:
        args.json.write_text(json.dumps(found.model_dump(mode="json"), indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
