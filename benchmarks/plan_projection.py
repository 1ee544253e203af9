"""Projection honesty: project ResNet-50 from THIS machine's roofline measurement to every
catalog GPU that cites a published ResNet-50 figure, and print projected vs published.

The roofline profile comes from (first that applies):
  --profile FILE          a roofline payload JSON (contracts.md; `accelscope runs show ID --json`
                          exports work too)
  --run ID --store PATH   a stored roofline run
  (default)               a fresh `accelscope roofline` measurement (workflows.roofline), in a
                          temporary store, at --precision and --batch

    .venv/bin/python benchmarks/plan_projection.py [--precision bf16] [--batch 32]
        [--here c7i.large] [--profile FILE | --run ID --store PATH] [--json OUT]

The projection is per device (one GPU): floor_target / (floor_here / measured_here), with spec
peaks on both sides (here: --here's catalog entry, else the profile's theoretical ceilings).
Published figures are MLPerf Offline INT8 TensorRT at the submitter's batch; the profile runs
at --precision, so a second column maps the matmul/conv work onto the target's int8 peak
(same bytes): both are shown, neither is tuned to the answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from accelscope.plan.capacity import project_capacity
from accelscope.plan.catalog import load_catalog
from accelscope.plan.documents import Operator, RooflineProfile


def _fresh_profile(precision: str, batch: int, budget_s: float) -> dict[str, Any]:
    from accelscope.spec import Precision
    from accelscope.workflows.roofline import RooflineRequest, roofline

    with tempfile.TemporaryDirectory(prefix="plan-projection-") as tmp:
        request = RooflineRequest(model="resnet50", precision=Precision(precision),
                                  batch_size=batch, measure_budget_s=budget_s,
                                  ceilings_budget_s=60.0,
                                  report_path=Path(tmp) / "roofline.html")  # fmt: skip
        outcome = roofline(request, store_path=Path(tmp) / "r.db", cache_dir=Path(tmp))
        payload: dict[str, Any] = outcome.profile.to_dict()
    return payload


def _stored_profile(run_id: str, store: Path) -> dict[str, Any]:
    from accelscope.store.sqlite import ResultStore

    with ResultStore(store) as opened:
        documents = opened.get_run(run_id).documents_of("roofline")
    if not documents:
        sys.exit(f"run {run_id} holds no roofline document")
    return documents[-1]


def _as_int8(profile: RooflineProfile) -> RooflineProfile:
    """The same work with every dtype with compute mapped to int8 (bytes unchanged)."""
    ops = tuple(Operator(o.name, "int8" if o.flops > 0 else o.dtype, o.flops, o.bytes,
                         o.measured_time_s) for o in profile.operators)  # fmt: skip
    return dataclasses.replace(profile, operators=ops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--run")
    parser.add_argument("--store", type=Path, default=Path(".accelscope/results.db"))
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--budget", type=float, default=5.0, help="measure budget, s")
    parser.add_argument("--here", help="catalog type of this machine (spec-to-spec)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.profile:
        payload = json.loads(args.profile.read_text(encoding="utf-8"))
        source = f"profile file {args.profile}"
    elif args.run:
        payload, source = _stored_profile(args.run, args.store), f"stored run {args.run}"
    else:
        payload = _fresh_profile(args.precision, args.batch, args.budget)
        source = "fresh roofline measurement (workflows.roofline)"
    if isinstance(payload.get("documents"), list):
        payload = next(d["payload"] for d in payload["documents"] if d["kind"] == "roofline")
    profile = RooflineProfile.from_payload(payload, source)
    catalog = load_catalog()
    here = catalog.get(args.here) if args.here else None
    print(
        f"profile: {profile.model} {profile.precision} batch {profile.batch_size} on "
        f"{profile.device_name} ({source}); measured {profile.measured_time_s * 1e3:.1f} ms "
        f"per batch = {profile.batch_size / profile.measured_time_s:.1f} items/s here"
    )
    rows = []
    for instance in catalog.instances:
        for figure in instance.published:
            if figure.model != "resnet50":
                continue
            published = figure.items_per_s_per_device
            row: dict[str, Any] = {"instance": instance.type, "accelerator": instance.accelerator,
                                   "published_items_per_s": published,
                                   "published_precision": figure.precision,
                                   "published_source": figure.source}  # fmt: skip
            for name, prof in (("as_profiled", profile), ("int8_mapped", _as_int8(profile))):
                estimate = project_capacity(prof, instance, sla_p99_s=3600.0, here=here)
                projected = float(estimate.detail["per_device_items_per_s"])
                floor_only = prof.batch_size / float(estimate.detail["floor_target_s"])
                row[name] = {"projected_items_per_s": projected,
                             "error": projected / published - 1,
                             "floor_only_items_per_s": floor_only,
                             "floor_only_error": floor_only / published - 1,
                             "efficiency_here": estimate.detail["efficiency"]}  # fmt: skip
            rows.append(row)
    print(
        f"{'target':<14} {'published/GPU':>14} {'projected (estimate)':>22} {'error':>8} "
        f"{'int8-mapped (estimate)':>24} {'error':>8}"
    )
    for row in rows:
        a, b = row["as_profiled"], row["int8_mapped"]
        print(
            f"{row['instance']:<14} {row['published_items_per_s']:>14,.0f} "
            f"{a['projected_items_per_s']:>22,.0f} {a['error']:>+8.0%} "
            f"{b['projected_items_per_s']:>24,.0f} {b['error']:>+8.0%}"
        )
    for row in rows:
        floor = row["as_profiled"]
        print(
            f"{row['instance']:<14} at the roofline floor (efficiency 1, no calibration): "
            f"{floor['floor_only_items_per_s']:,.0f} items/s ({floor['floor_only_error']:+.0%})"
        )
    print("published: MLPerf Inference v3.1 Offline, INT8 TensorRT (sources in the catalog); "
          f"efficiency here {rows[0]['as_profiled']['efficiency_here']:.1%} of the floor" if rows
          else "no catalog entry cites a published ResNet-50 figure")  # fmt: skip
    if args.json:
        document = {"source": source, "rows": rows, "profile": payload}
        args.json.write_text(json.dumps(document, indent=2), "utf-8")


if __name__ == "__main__":
    main()
