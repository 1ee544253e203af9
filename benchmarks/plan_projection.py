"""Projection honesty: project ResNet-50 from THIS machine to every catalog GPU that cites a
published ResNet-50 figure, two ways side by side, and print projected vs published.

- old: calibrated by the roofline profile's own EAGER run, UNFUSED floor (every operator's
  inputs and outputs cross memory), work at the profile's precision;
- new: calibrated by the fastest OPTIMISED configuration measured here (a bench result), the
  profile's work mapped to its precision and batch, FUSED floor (plan/fusion.py).

Both are ``plan``'s own code (plan.capacity.project_capacity), nothing is tuned to the answer.
By default the script measures, in a temporary store (about 3-5 minutes on 2 cores):

    accelscope roofline resnet50 --batch 8 --precision fp32 --measure-budget 5s
    accelscope bench resnet50 --batch 8 --backend compile --precision int8 \\
        --option channels_last=true --measure-budget 3s --accuracy-samples 32

    .venv/bin/python benchmarks/plan_projection.py [--store PATH] [--here c7i.large] [--json OUT]

``--store PATH`` reuses a store that already holds a resnet50 roofline run and bench run (its
newest of each), or measures into it when it does not exist; ``--here TYPE`` takes this
machine's peaks from a catalog entry instead of the roofline's theoretical ceilings.
Published figures are MLPerf Inference v3.1 Offline, INT8, TensorRT, per GPU (sources in the
catalog).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from accelscope.commands.plan.workflow import bench_figures
from accelscope.documents import RooflineProfile
from accelscope.plan.capacity import Calibration, best_calibration, project_capacity
from accelscope.plan.catalog import Instance, load_catalog
from accelscope.store.sqlite import ResultStore

MODEL = "resnet50"
ROOFLINE_ARGS = [
    "roofline",
    MODEL,
    "--batch",
    "8",
    "--precision",
    "fp32",
    "--measure-budget",
    "5s",
    "--ceilings-budget",
    "60s",
    "--quiet",
]
BENCH_ARGS = [
    "bench",
    MODEL,
    "--batch",
    "8",
    "--backend",
    "compile",
    "--precision",
    "int8",
    "--option",
    "channels_last=true",
    "--measure-budget",
    "3s",
    "--accuracy-samples",
    "32",
    "--quiet",
]


def _measure(store: Path) -> None:
    """Run the two measurements into ``store`` (the CLI, exactly as a user would)."""
    cli = str(Path(sys.executable).parent / "accelscope")
    for args in (ROOFLINE_ARGS, BENCH_ARGS):
        command = [cli, *args, "--store", str(store), "--report", str(store.parent / "r.html")]
        print("$ accelscope " + " ".join(args), flush=True)
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        tail = [line for line in done.stdout.splitlines() if line.strip()][-6:]
        print("\n".join(f"  {line}" for line in tail))
        print(f"  (exit {done.returncode}, {time.perf_counter() - started:.0f} s)", flush=True)
        if done.returncode != 0:
            sys.exit(f"measurement failed:\n{done.stderr[-2000:]}")


def _evidence(store: Path) -> tuple[RooflineProfile, list[Calibration], list[str]]:
    """The newest resnet50 roofline profile and bench results in ``store``."""
    profile: RooflineProfile | None = None
    calibrations: list[Calibration] = []
    lines: list[str] = []
    with ResultStore(store) as opened:
        for head in opened.list_runs(200):
            if head.model != MODEL or head.status != "complete":
                continue
            run = opened.get_run(head.id)
            if head.kind == "roofline" and profile is None and run.documents_of("roofline"):
                profile = RooflineProfile.from_payload(run.documents_of("roofline")[-1])
            if head.kind == "bench" and not calibrations:
                for result in run.results:
                    m = result.measurement
                    lines.append(
                        f"bench {result.spec.label()}: {result.status.value}"
                        + (f", {m.throughput_items_per_s:.1f} items/s" if m else "")
                        + (f" ({result.status_reason})" if result.status_reason else "")
                    )
                found = (f.calibration() for f in bench_figures(run.results))
                calibrations = [c for c in found if c is not None]
    if profile is None:
        sys.exit(f"no complete {MODEL} roofline run in {store}")
    return profile, calibrations, lines


def _project(
    profile: RooflineProfile,
    instance: Instance,
    here: Instance | None,
    calibration: Calibration | None,
) -> dict[str, Any]:
    estimate = project_capacity(
        profile, instance, sla_p99_s=3600.0, here=here, calibration=calibration
    )
    detail = estimate.detail
    return {
        "projected_items_per_s": float(detail["per_device_items_per_s"]),
        "floor_only_items_per_s": detail["batch_size"] / float(detail["floor_target_s"]),
        "efficiency_here": float(detail["efficiency"]),
        "floor": detail["floor"],
        "calibration": detail["calibration"],
        "precision": detail["precision"],
        "label": estimate.label,
        "assumptions": list(estimate.assumptions),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="reuse this store's resnet50 runs")
    parser.add_argument("--here", help="catalog type of this machine (spec-to-spec)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    catalog = load_catalog()
    here = catalog.get(args.here) if args.here else None
    with tempfile.TemporaryDirectory(prefix="plan-projection-") as tmp:
        store = args.store or Path(tmp) / "results.db"
        if not store.exists():
            _measure(store)
        profile, calibrations, bench_lines = _evidence(store)
    calibration = best_calibration(calibrations, profile.device)
    print(
        f"profile: {profile.model} {profile.precision} batch {profile.batch_size} eager on "
        f"{profile.device_name}: {profile.measured_time_s * 1e3:.1f} ms per batch = "
        f"{profile.batch_size / profile.measured_time_s:.1f} items/s"
    )
    print("\n".join(bench_lines) or "no bench result")
    if calibration is None:
        print("no OK bench result to calibrate with: the new method falls back to the old one")
    rows: list[dict[str, Any]] = []
    for instance in catalog.instances:
        for figure in instance.published:
            if figure.model != MODEL:
                continue
            rows.append(
                {
                    "instance": instance.type,
                    "accelerator": instance.accelerator,
                    "published_items_per_s": figure.items_per_s_per_device,
                    "published_precision": figure.precision,
                    "published_source": figure.source,
                    "old": _project(profile, instance, here, None),
                    "new": _project(profile, instance, here, calibration),
                }
            )
    if not rows:
        sys.exit("no catalog entry cites a published ResNet-50 figure")
    print(
        f"\n{'target':<14} {'published/GPU':>13} | {'old (estimate)':>15} {'error':>7} | "
        f"{'new (estimate)':>15} {'error':>7}"
    )
    for row in rows:
        published = row["published_items_per_s"]
        old, new = row["old"], row["new"]
        for method in (old, new):
            method["error"] = method["projected_items_per_s"] / published - 1
            method["floor_only_error"] = method["floor_only_items_per_s"] / published - 1
        print(
            f"{row['instance']:<14} {published:>13,.0f} | "
            f"{old['projected_items_per_s']:>15,.0f} {old['error']:>+7.0%} | "
            f"{new['projected_items_per_s']:>15,.0f} {new['error']:>+7.0%}"
        )
    first = rows[0]
    for name in ("old", "new"):
        method = first[name]
        print(
            f"{name}: {method['floor']} floor, {method['precision']}, calibrated by "
            f"{method['calibration']}: efficiency here {method['efficiency_here']:.1%} of the "
            "floor"
        )
    for row in rows:
        print(
            f"{row['instance']:<14} at the floor (efficiency 1): old "
            f"{row['old']['floor_only_items_per_s']:,.0f} ({row['old']['floor_only_error']:+.0%})"
            f", new {row['new']['floor_only_items_per_s']:,.0f} "
            f"({row['new']['floor_only_error']:+.0%})"
        )
    reference = next(a for a in first["new"]["assumptions"] if a.startswith("efficiency here"))
    print(f"reference here: {reference}")
    print("published: MLPerf Inference v3.1 closed, Offline, INT8 TensorRT, per GPU")
    if args.json:
        document = {
            "store": str(args.store) if args.store else None,
            "here": args.here,
            "rows": rows,
        }
        args.json.write_text(json.dumps(document, indent=2), "utf-8")


if __name__ == "__main__":
    main()
