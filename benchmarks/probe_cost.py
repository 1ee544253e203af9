"""What the precision probes cost, first time and cached, and what they measured here.

Runs every probe accelscope has (torch bf16/fp16/int8, ONNX Runtime int8, OpenVINO bf16/int8),
in a spawned process as ``bench`` does, into an empty cache; then the same request again, which
must come from the cache. Repeats ``--rounds`` times (fresh cache each round) and prints each
verdict, so the noise of the probes themselves is visible.

    .venv/bin/python benchmarks/probe_cost.py [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from accelscope.engine.probe import probe_pairs, probe_runtime_version, probe_table
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.threads import available_cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=available_cores())
    args = parser.parse_args()
    env = collect_environment()
    pairs = [
        (runtime, precision)
        for runtime in ("torch", "onnxruntime", "openvino")
        if probe_runtime_version(runtime)
        for precision in probe_pairs(runtime)
    ]
    print(f"machine: {env.cpu.model_name} ({' '.join(env.cpu.isa)}), {args.threads} threads")
    firsts, cached = [], []
    for round_index in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            began = time.perf_counter()
            table = probe_table(
                pairs, fingerprint=env.fingerprint(), threads=args.threads, cache_dir=Path(tmp)
            )
            firsts.append(time.perf_counter() - began)
            began = time.perf_counter()
            again = probe_table(
                pairs, fingerprint=env.fingerprint(), threads=args.threads, cache_dir=Path(tmp)
            )
            cached.append(time.perf_counter() - began)
            assert again.probe_s == 0 and again.verdicts == table.verdicts
        print(f"\nround {round_index + 1}: first {firsts[-1]:.1f} s, cached {cached[-1]:.3f} s")
        for verdict in table.verdicts:
            print(f"- {'kept' if verdict.keep else 'dropped'}: {verdict.describe()}")
    print(
        f"\nfirst time: median {statistics.median(firsts):.1f} s (min {min(firsts):.1f}, "
        f"max {max(firsts):.1f}); cached: median {statistics.median(cached) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
