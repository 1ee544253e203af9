"""A full ``accelscope bench`` sweep of one model, with the figures docs/BENCHMARKS.md quotes.

Prints every configuration (items/s, p99, speedup vs eager fp32, accuracy, status), the verdict
(best accepted configuration, its speedup from the interleaved re-measure with its 95 % CI), the
sweep's wall and measurement time, and the precision probes that decided what was measured.

    .venv/bin/python benchmarks/bench_sweep.py resnet50 --batch 8 --threads 2
    .venv/bin/python benchmarks/bench_sweep.py bert-base --batch 8 --threads 2
    .venv/bin/python benchmarks/bench_sweep.py digits-cnn --batch 32 --threads 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def run_bench(args: list[str]) -> dict:  # type: ignore[type-arg]
    accelscope = Path(sys.executable).with_name("accelscope")
    completed = subprocess.run(
        [str(accelscope), "bench", *args, "--json", "--no-store"],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise SystemExit(f"bench failed ({completed.returncode}): {completed.stderr.strip()}")
    return json.loads(completed.stdout)  # type: ignore[no-any-return]


def rows(document: dict) -> list[dict]:  # type: ignore[type-arg]
    from accelscope.result import Result

    results = [Result.from_dict(r) for r in document["results"]]
    base = next((r for r in results if r.spec.key == document["baseline"]), None)
    base_rate = base.measurement.throughput_items_per_s if base and base.measurement else None
    table = []
    for r in results:
        m = r.measurement
        fid = r.accuracy.fidelity if r.accuracy else None
        acc = ""
        if r.accuracy is not None and r.accuracy.metric_value is not None:
            acc = f"{r.accuracy.metric_name} {r.accuracy.metric_value:.2%}"
        elif fid is not None:
            agree = (
                f", top-1 agree {fid.top1_agreement:.2%}" if fid.top1_agreement is not None else ""
            )
            acc = f"relL2 {fid.rel_l2:.1e}{agree}"
        table.append(
            {
                "config": r.spec.label(),
                "items_s": m.throughput_items_per_s if m else None,
                "p99_ms": m.summary.p99_s * 1e3 if m else None,
                "speedup": (m.throughput_items_per_s / base_rate) if m and base_rate else None,
                "accuracy": acc,
                "prepare_s": r.prepare_s,
                "status": r.status.value + (f": {r.status_reason}" if r.status_reason else ""),
                "best": r.spec.key == document["best"],
            }
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="further bench flags")
    args = parser.parse_args()
    document = run_bench([args.model, *args.extra])
    print("| config | items/s | p99 ms | speedup | accuracy | prepare s | status |")
    print("|---|---|---|---|---|---|---|")
    for row in rows(document):

        def fmt(value: float | None, spec: str) -> str:
            return "—" if value is None else format(value, spec)

        star = " **(best)**" if row["best"] else ""
        cells = [
            f"{row['config']}{star}",
            fmt(row["items_s"], ".1f"),
            fmt(row["p99_ms"], ".1f"),
            fmt(row["speedup"], ".2f") + "x",
            row["accuracy"],
            fmt(row["prepare_s"], ".1f"),
            row["status"],
        ]
        print("| " + " | ".join(cells) + " |")
    print()
    print(document["verdict"])
    print(
        f"wall {document['wall_time_s']:.0f} s, measurement {document['measurement_time_s']:.0f} s"
    )
    probes = document.get("probes")
    if probes:
        print()
        print("precision probes (these decided what was measured):")
        for verdict in probes["verdicts"]:
            from accelscope.engine.probe import ProbeVerdict
            from accelscope.serialise import load

            probe = load(ProbeVerdict, verdict)
            print(f"- {'kept' if probe.keep else 'dropped'}: {probe.describe()}")


if __name__ == "__main__":
    main()
