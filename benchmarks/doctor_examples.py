"""Runs ``accelscope doctor`` on each shipped example (examples/doctor/) with the what-ifs the
findings point to, and prints the bottleneck and the measured what-ifs (items/s speedup vs the
re-measured baseline, 95 % bounds). The input-bound example's target: a what-if at >= 1.8x.

    .venv/bin/python benchmarks/doctor_examples.py [--steps 30] [--warmup 5] [--threads 1]
        [--only input_bound]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from accelscope.doctor.diagnose import DoctorPlan, run_doctor
from accelscope.doctor.launcher import Launcher
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.threads import available_cores

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "doctor"
NAMES = ("input_bound", "sync_bound", "batch1_inference", "compute_bound")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--what-if", default="auto")
    parser.add_argument("--only", choices=NAMES, action="append")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="OMP_NUM_THREADS for the script (0: its default); on a shared "
        "machine, 1 keeps other processes from stalling multi-threaded ops",
    )
    args = parser.parse_args()
    child_env = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}
    env = collect_environment()
    for name in args.only or NAMES:
        plan = DoctorPlan(
            script=EXAMPLES / f"{name}.py",
            warmup=args.warmup,
            steps=args.steps,
            what_if=args.what_if,
        )
        launcher = Launcher(stdout=-3, env=child_env)  # -3: DEVNULL, the examples' prints
        result = run_doctor(
            plan,
            launcher,
            support=env.precision_support(),
            cores=available_cores(),
            memory_bytes=env.memory_bytes,
        )
        d = result.diagnosis
        print(f"\n== {name}: bottleneck {d.bottleneck}")
        print(f"   {d.headline}")
        b = d.breakdown
        print("   shares: " + ", ".join(f"{k} {v:.0%}" for k, v in b.shares.items() if v >= 0.01))
        for w in result.what_ifs:
            if w.speedup is not None:
                high = "inf" if w.speedup_high is None else f"{w.speedup_high:.2f}"
                print(
                    f"   {w.label:<42} {w.items_per_s.median if w.items_per_s else 0:>10.1f} "
                    f"items/s  {w.speedup:.2f}x [{w.speedup_low:.2f}-{high}] {w.caveat}"
                )
            else:
                print(f"   {w.label:<42} {w.status}: {w.reason}")
        print(f"   {result.recommendation}")
        for note in d.notes:
            print(f"   note: {note}")


if __name__ == "__main__":
    main()
