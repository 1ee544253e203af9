"""Leave-one-out over the published table: error and 80 % interval coverage of the projection,
per workload class and per accelerator family, both ways of leaving out (a row alone; a row
with the rest of its system's rows on that benchmark, the default and the honest one).

The same code the tests hold (tests/plan/projection/test_projection_validation.py); this script
prints the tables for docs/BENCHMARKS.md and docs/plan.md, and optionally the holdouts as JSON.

    .venv/bin/python benchmarks/plan_published_loo.py [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from accelscope.plan.projection.calibration import shipped_calibration
from accelscope.plan.projection.validation import (
    Holdout,
    leave_one_out,
    summarise,
    summary_table,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write every holdout here")
    args = parser.parse_args()
    calibration = shipped_calibration()
    model = calibration.model
    print(
        f"{len(calibration.rows)} published rows calibrated, {len(calibration.left_out)} left "
        f"out (no datasheet: {sorted({r.accelerator for r, _ in calibration.left_out})})"
    )
    print(
        "spreads (log scale): "
        + ", ".join(f"{k} {v:.3f}" for k, v in sorted(model.sigma.items()))
        + f"; tau family {model.tau_family:.3f}, tau family x class {model.tau_class:.3f}"
    )
    dump: dict[str, list[dict[str, object]]] = {}
    for mode in ("system", "row"):
        started = time.perf_counter()
        holdouts: list[Holdout] = leave_one_out(calibration, mode=mode)
        took = time.perf_counter() - started
        print(f"\n### leave out: {mode} ({len(holdouts)} rows, {took:.1f} s)\n")
        print(summary_table("all", summarise(holdouts)))
        print()
        print(summary_table("workload class", summarise(holdouts, lambda h: h.workload_class)))
        print()
        print(summary_table("family", summarise(holdouts, lambda h: h.family)))
        dump[mode] = [
            {**dataclasses.asdict(h), "error": h.error, "covered": h.covered} for h in holdouts
        ]
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))


if __name__ == "__main__":
    main()
