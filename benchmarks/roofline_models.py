"""Rooflines of ResNet-50 and BERT-base, fp32 and bf16 (eager, batch 8): total FLOPs and bytes,
floor, measured time, measured/floor, MFU, top operators by time lost, and the check that no
operator beats its dtype's measured ceiling (PASS/FAIL). Uses the cached ceilings (run
benchmarks/ceilings.py first) or measures them.

    .venv/bin/python benchmarks/roofline_models.py --batch 8
"""

from __future__ import annotations

import argparse
import sys

from accelscope.commands.roofline.workflow import CeilingsRequest, ceilings
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.measurement.timer import TimerConfig
from accelscope.models.loading import load_model
from accelscope.roofline.model_profile import profile_model
from accelscope.spec import Precision


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--models", default="resnet50,bert-base")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--measure-budget", type=float, default=10.0)
    args = parser.parse_args()
    env = collect_environment()
    found = ceilings(CeilingsRequest(), store_path=None).ceilings
    print(
        f"ceilings {found.measured_at}: "
        + ", ".join(f"{d} {r / 1e12:.3f} T" for d, r in found.matmul_flops_per_s.items())
        + f", bandwidth {found.bandwidth_bytes_per_s / 1e9:.1f} GB/s"
    )
    failures = 0
    for name in args.models.split(","):
        model = load_model(name)
        for precision in args.precisions.split(","):
            profile = profile_model(
                model,
                found,
                env,
                precision=Precision(precision),
                batch_size=args.batch,
                threads=available_cores(),
                timer=TimerConfig(budget_s=args.measure_budget),
                on_phase=lambda m: print(f"  {m} ...", file=sys.stderr),
            )
            above = profile.above_ceiling
            verdict = "PASS" if not above else "FAIL"
            failures += bool(above)
            print(
                f"\n{name} {precision} batch {args.batch}: {profile.total_flops / 1e9:,.1f} "
                f"GFLOP, {profile.total_bytes / 1e6:,.0f} MB; floor "
                f"{profile.floor_time_s * 1e3:,.1f} ms, measured "
                f"{profile.measured_time_s * 1e3:,.1f} ms (±{profile.measured_ci_rel:.1%}), "
                f"measured/floor {profile.gap:,.1f}x, MFU {profile.mfu:.1%}, profiled ops "
                f"{profile.profiled_time_s * 1e3:,.1f} ms"
            )
            for op in profile.top_lost(4):
                print(
                    f"   lost {op.lost_time_s * 1e3:8.1f} ms  {op.name} ({op.dtype}) x{op.calls}"
                    f"  {op.bound}, eff {op.efficiency or 0:.0%}, achieved "
                    f"{op.achieved_flops_per_s / 1e9:,.0f} GFLOP/s"
                )
            fastest = max(
                profile.operators, key=lambda op: op.achieved_flops_per_s / op.peak_flops_per_s
            )
            print(
                f"   ceiling check {verdict}: highest achieved/peak "
                f"{fastest.achieved_flops_per_s / fastest.peak_flops_per_s:.0%} "
                f"({fastest.name} {fastest.dtype})"
                + (f"; above: {[op.name for op in above]}" if above else "")
            )
    print(f"\noverall ceiling check: {'PASS' if failures == 0 else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
