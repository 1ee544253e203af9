"""How long an audit of a large export takes and how much memory it needs.

Generates the fixture fleet (accelscope.testing.fleet) repeated ``--copies`` times (8 physical
GPUs, 10 devices with the MIG instances, per copy) for 7 days at ``--step``, writes it as one
``query_range`` answer series by series (the generator never holds the whole file), then runs
``accelscope audit --from FILE --no-store --json`` in a fresh process, timed, with its peak RSS
(``ru_maxrss`` of the child). ``--copies 125`` is 1,000 GPUs.

    python benchmarks/audit_scale.py --copies 125 --step 60 --out audit_scale.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accelscope.audit.telemetry import query_range_answer
from accelscope.testing.fleet import fleet


def write_export(path: Path, copies: int, step_s: float) -> tuple[int, int]:
    """Write the export; (series, samples)."""
    count = samples = 0
    with path.open("w", encoding="utf-8") as out:
        out.write('{"status":"success","data":{"resultType":"matrix","result":[')
        first = True
        for copy in range(copies):
            for s in fleet(scale=1, step_s=step_s, seed=copy):
                if s.field == "node_cpu_seconds_total" and copy:
                    continue
                labels = dict(s.labels)
                for key in ("Hostname", "hostname", "UUID", "node"):
                    if key in labels and copy:  # another host: its own GPUs and pods
                        labels[key] = f"{labels[key]}-{copy}"
                item = query_range_answer([type(s)(s.field, labels, s.times_s, s.values)])
                text = json.dumps(item["data"]["result"][0], separators=(",", ":"))
                out.write(("" if first else ",") + text)
                first = False
                count += 1
                samples += s.times_s.size
        out.write("]}}")
    return count, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=125)
    parser.add_argument("--step", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        export = Path(directory) / "export.json"
        began = time.perf_counter()
        series, samples = write_export(export, args.copies, args.step)
        written_s = time.perf_counter() - began
        size = export.stat().st_size
        command = [
            str(Path(sys.executable).with_name("accelscope")),
            "audit",
            "--from",
            str(export),
            "--no-store",
            "--json",
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, check=False)
        audit_s = time.perf_counter() - began
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if done.returncode != 0:
            raise SystemExit(done.stderr.decode()[-2000:])
        document = json.loads(done.stdout)
    report = {
        "copies": args.copies,
        "gpus": args.copies * 8,
        "devices": len(document["devices"]),
        "useful_share": document["totals"]["useful_share"],
        "step_s": args.step,
        "series": series,
        "samples": samples,
        "export_bytes": size,
        "write_s": written_s,
        "audit_wall_s": audit_s,
        "audit_peak_rss_bytes": peak_kib * 1024,
        "peak_rss_before_bytes": before * 1024,
        "actions": len(document["actions"]),
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(report, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
