"""A ~1 GB torch.profiler (Kineto) trace made by repeating a real H200 trace's steps, then
``accelscope doctor --trace`` and HolisticTraceAnalysis (HTA) on it: wall time and peak RSS of
each, as whole child processes (``os.wait4``'s ``ru_maxrss``).

    .venv/bin/python benchmarks/trace_big.py --hta-python .venv-hta/bin/python
        [--source tests/data/doctor-h200-traces/archetypes/launch_bound.json.gz]
        [--bytes 1e9] [--rounds 2] [--hta-limit-gib 16] [--gzip] [--keep] [--json OUT]

The trace is written to a temporary directory under /tmp and removed at the end (``--keep``
keeps it). The generator streams: it holds the source trace's events (a few MB) and writes each
copy of them as it goes. Copy k shifts every timestamp by k windows (the source's span plus
1 ms), every id that links events (``correlation``, ``External id``, flow ``id``) by k times
the source's largest id, and renumbers ``ProfilerStep#N``; metadata events are written once.
So the big trace holds the source's steps many times over, each linked as in the source, and
doctor's verdict on it is checked to be the source's.

HTA runs under an address-space limit (``--hta-limit-gib``) so that a trace it cannot hold
fails with a MemoryError instead of taking the machine; its failure is reported as such.
With ``--reader-only`` the doctor child runs only ``load_trace`` (no diagnosis) and prints
what it kept, to separate the reader's cost from the analysis.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import orjson

from doctor_vs_hta import HELPER, ROOT, ratio_range, run_measured

DEFAULT_SOURCE = (
    ROOT / "tests" / "data" / "doctor-h200-traces" / "archetypes" / "launch_bound.json.gz"
)
ACCELSCOPE = ROOT / ".venv" / "bin" / "accelscope"
PYTHON = ROOT / ".venv" / "bin" / "python"
GAP_US = 1_000.0
"""Time between two copies of the source window."""
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_ARGS = ("correlation", "External id")

READER_ONLY = r"""
import sys
from pathlib import Path
from accelscope.doctor.kineto import load_trace
t = load_trace(Path(sys.argv[1]))
print(len(t.device), len(t.host), len(t.steps), len(t.named))
"""


def _shifted(event: dict[str, Any], k: int, shift_us: float, id_span: int, steps: int) -> dict:
    out = dict(event)
    if isinstance(out.get("ts"), (int, float)):
        out["ts"] = out["ts"] + k * shift_us
    if out.get("ph") in ("s", "f", "t") and isinstance(out.get("id"), int):
        out["id"] = out["id"] + k * id_span
    name = out.get("name")
    if isinstance(name, str) and (m := _STEP.match(name)):
        out["name"] = f"ProfilerStep#{int(m.group(1)) + k * steps}"
    args = out.get("args")
    if isinstance(args, dict) and any(isinstance(args.get(a), int) for a in _ID_ARGS):
        args = dict(args)
        for a in _ID_ARGS:
            if isinstance(args.get(a), int) and args[a] >= 0:
                args[a] = args[a] + k * id_span
        out["args"] = args
    return out


def _open_out(path: Path, *, compress: bool) -> IO[bytes]:
    if compress:
        return gzip.open(path, "wb", compresslevel=1)  # type: ignore[return-value]
    return path.open("wb")


def generate(source: Path, out: Path, target_bytes: int, *, compress: bool) -> dict[str, Any]:
    """Write the big trace to ``out``; returns what was written (bytes, copies, events)."""
    data = source.read_bytes()
    document = json.loads(gzip.decompress(data) if source.name.endswith(".gz") else data)
    del data
    events = document["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    first = min(e["ts"] for e in timed)
    last = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift_us = last - first + GAP_US
    ids = [e.get("id") for e in events if isinstance(e.get("id"), int)]
    ids += [
        e["args"][a]
        for e in events
        if isinstance(e.get("args"), dict)
        for a in _ID_ARGS
        if isinstance(e["args"].get(a), int)
    ]
    id_span = max(ids, default=0) + 1
    numbers = [int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
    steps = max(numbers) - min(numbers) + 1 if numbers else 0
    metadata = [e for e in events if e.get("ph") == "M"]
    repeated = [e for e in events if e.get("ph") != "M"]
    header = {k: v for k, v in document.items() if k != "traceEvents"}
    del document, events

    written = copies = n_events = 0
    with _open_out(out, compress=compress) as raw:

        def put(data: bytes) -> None:
            nonlocal written
            raw.write(data)
            written += len(data)

        put(orjson.dumps(header)[:-1] + b',"traceEvents":[')
        put(b",".join(orjson.dumps(e) for e in metadata))
        n_events += len(metadata)
        while written < target_bytes:
            chunk = b",".join(
                orjson.dumps(_shifted(e, copies, shift_us, id_span, steps)) for e in repeated
            )
            put(b"," + chunk)
            n_events += len(repeated)
            copies += 1
        put(b"]}")
    return {
        "source": str(source.relative_to(ROOT)),
        "json_bytes": written,
        "file_bytes": out.stat().st_size,
        "copies": copies,
        "events": n_events,
        "steps_per_copy": steps,
    }


def doctor_run(trace: Path, *, reader_only: bool) -> dict[str, Any]:
    if reader_only:
        cmd = [str(PYTHON), "-c", READER_ONLY, str(trace)]
    else:
        cmd = [str(ACCELSCOPE), "doctor", "--trace", str(trace), "--json"]
    r = run_measured(cmd)
    out: dict[str, Any] = {"wall_s": r.wall_s, "peak_mib": r.peak_mib, "rc": r.rc}
    if r.rc not in (0, 1):
        out["error"] = r.stderr_tail
    elif reader_only:
        out["kept"] = r.stdout.strip()
    else:
        rank = json.loads(r.stdout)["ranks"][0]
        out["bottleneck"] = rank["verdict"].get("bottleneck")
        out["steps"] = len(rank["steps"])
        out["excluded_steps"] = len(rank["quality"]["excluded_steps"])
    return out


def hta_run(hta_python: str, helper: Path, trace: Path, limit_gib: float) -> dict[str, Any]:
    r = run_measured(
        [hta_python, str(helper), str(trace), "time-exact"],
        address_limit_bytes=int(limit_gib * 2**30),
    )
    out: dict[str, Any] = {"wall_s": r.wall_s, "peak_mib": r.peak_mib, "rc": r.rc}
    lines = r.stdout.strip().splitlines()
    try:
        out.update(json.loads(lines[-1]))
    except (IndexError, json.JSONDecodeError):
        out["ok"] = False
        out["error"] = r.stderr_tail
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="a real trace")
    parser.add_argument("--bytes", type=float, default=1e9, help="size of the JSON written")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tool, alternated")
    parser.add_argument("--hta-python", help="python of the venv holding HTA (else no HTA)")
    parser.add_argument("--hta-limit-gib", type=float, default=16.0, help="HTA's address space")
    parser.add_argument("--gzip", action="store_true", help="write .json.gz (level 1)")
    parser.add_argument("--reader-only", action="store_true", help="time load_trace alone")
    parser.add_argument("--keep", action="store_true", help="keep the generated trace")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="accelscope-trace-big-", dir="/tmp"))
    trace = tmp / ("big.pt.trace.json" + (".gz" if args.gzip else ""))
    try:
        t0 = time.perf_counter()
        made = generate(args.source, trace, int(args.bytes), compress=args.gzip)
        made["generate_s"] = time.perf_counter() - t0
        print(f"# wrote {trace}: {json.dumps(made)}", file=sys.stderr)
        source_verdict = doctor_run(args.source, reader_only=False)
        helper = tmp / "hta_helper.py"
        helper.write_text(HELPER)
        runs: dict[str, list[dict[str, Any]]] = {"accelscope": [], "hta": []}
        for r in range(args.rounds):
            order = ("accelscope", "hta") if r % 2 == 0 else ("hta", "accelscope")
            for tool in order:
                if tool == "accelscope":
                    runs[tool].append(doctor_run(trace, reader_only=args.reader_only))
                elif args.hta_python:
                    runs[tool].append(hta_run(args.hta_python, helper, trace, args.hta_limit_gib))
                else:
                    continue
                print(f"# {tool}: {json.dumps(runs[tool][-1])[:300]}", file=sys.stderr)
    finally:
        if args.keep:
            print(f"# kept {trace}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    result = {"trace": made, "source_verdict": source_verdict, "runs": runs}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    report(result)


def report(result: dict[str, Any]) -> None:
    made, runs = result["trace"], result["runs"]
    print(
        f"Trace: {made['json_bytes'] / 1e9:.2f} GB of JSON ({made['file_bytes'] / 1e9:.2f} GB on "
        f"disk), {made['events']:,} events, {made['copies']} copies of {made['source']} "
        f"({made['copies'] * made['steps_per_copy']} ProfilerSteps); written in "
        f"{made['generate_s']:.0f} s.\n"
    )
    print("| tool | runs | wall s, median (min-max) | peak RSS MiB, median (min-max) | outcome |")
    print("|---|---|---|---|---|")
    for tool, rs in runs.items():
        if not rs:
            continue
        wall = [r["wall_s"] for r in rs]
        peak = [r["peak_mib"] for r in rs]
        if tool == "accelscope":
            outcome = "; ".join(
                sorted(
                    {
                        r.get("error") or r.get("kept") or f"{r['bottleneck']}, {r['steps']} steps"
                        for r in rs
                    }
                )
            )
        else:
            outcome = "; ".join(
                sorted({"ok" if r.get("ok") else f"failed: {r.get('error', '?')}" for r in rs})
            )
        print(
            f"| {tool} | {len(rs)} | {statistics.median(wall):.1f} "
            f"({min(wall):.1f}-{max(wall):.1f}) | {statistics.median(peak):.0f} "
            f"({min(peak):.0f}-{max(peak):.0f}) | {outcome[:200]} |"
        )
    sv = result["source_verdict"]
    print(f"\nSource trace alone: {sv.get('bottleneck')}, {sv.get('steps')} steps.")
    a, h = runs["accelscope"], runs["hta"]
    if len(a) >= 2 and len(h) >= 2:
        r, lo, hi = ratio_range([x["wall_s"] for x in h], [x["wall_s"] for x in a])
        m, mlo, mhi = ratio_range([x["peak_mib"] for x in h], [x["peak_mib"] for x in a])
        print(
            f"HTA/accelscope: time {r:.2f}x ({lo:.2f}-{hi:.2f}), "
            f"memory {m:.2f}x ({mlo:.2f}-{mhi:.2f})"
        )


if __name__ == "__main__":
    main()
