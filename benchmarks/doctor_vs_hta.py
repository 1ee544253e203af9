"""Compares ``accelscope doctor --trace`` with HolisticTraceAnalysis (HTA) on every real GPU trace
in tests/data/doctor-h200-traces/ and tests/data/public-traces/ (recorded by others on A100s, a
V100 and an MI250: HTA's own test data): idle and compute shares, then time and peak memory of
each tool as a whole process.

    .venv/bin/python benchmarks/doctor_vs_hta.py --hta-python .venv-hta/bin/python
        [--rounds 5] [--timed N] [--timing-only] [--only launch_bound] [--json OUT]

HTA lives in its own virtual environment (``python3 -m venv .venv-hta && .venv-hta/bin/pip
install HolisticTraceAnalysis``); it runs here as a subprocess of that interpreter.

What is compared, per trace:

* accelscope: ``ranks[0].verdict`` of ``accelscope doctor --trace TRACE --json`` (the steady
  steps only; the quality gate sets outlier steps aside) and the same shares over ALL steps of
  ``ranks[0].steps`` weighted by ``step_s``, and over all steps but the last (HTA's default
  window drops the last ProfilerStep).
* HTA ``get_temporal_breakdown()``, three ways: (1) stock, as a user gets it (defaults: the
  kernels launched in the last ProfilerStep are dropped, and ns timestamps are rounded to whole
  microseconds); (2) ``HTA_DISABLE_NS_ROUNDING=1`` (HTA's own switch), still without the last
  step; (3) no rounding and ``include_last_profiler_step=True`` - the window closest to
  accelscope's all-steps one. Plus ``get_idle_time_breakdown()`` on (2).

Time and peak memory: each tool as a whole child process (``os.wait4``: wall time and
``ru_maxrss``), alternated A,B,B,A,... per trace; HTA runs its temporal breakdown with
``HTA_DISABLE_NS_ROUNDING=1`` (``time-exact``: stock HTA's rounding fails an assertion on some of
these traces, and a failed run is not a like-for-like time). Medians with bootstrap 95 % intervals
of the ratio of medians.

Definitions: HTA idle = 1 - union of all GPU activity (kernels, memcpy, memset) over the window
from the first GPU event's start to the last one's end; HTA compute = union of the kernels whose
name is not memcpy/memset/communication over that window. accelscope idle = 1 - busy over the
ProfilerStep windows; accelscope's kernel share (``compute_share``) counts every kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "doctor-h200-traces"
PUBLIC = ROOT / "tests" / "data" / "public-traces"
ACCELSCOPE = ROOT / ".venv" / "bin" / "accelscope"

HELPER = r"""
import json, logging, os, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
path, mode = sys.argv[1], sys.argv[2]


def one_line(e):
    import traceback
    text = " ".join(str(e).split())
    if not text and e.__traceback__ is not None:  # a bare assert: name the line that failed
        text = (traceback.extract_tb(e.__traceback__)[-1].line or "").strip()
    if len(text) > 120:
        text = text[:60] + " ... " + text[-50:]
    return type(e).__name__ + (": " + text if text else "")


def load(include_last):
    from hta.trace_analysis import TraceAnalysis
    return TraceAnalysis(trace_files={0: path}, include_last_profiler_step=include_last)


def temporal(ta):
    df = ta.get_temporal_breakdown(visualize=False)
    row = df.iloc[0]
    return {k: float(row[k]) for k in df.columns if k != "rank"}


def variant(include_last, extra=False):
    try:
        ta = load(include_last)
    except Exception as e:
        return {"error": "load: " + one_line(e)}
    try:
        out = temporal(ta)
    except Exception as e:
        out = {"error": one_line(e) or "error"}
    if extra:
        try:
            idle = ta.get_idle_time_breakdown(visualize=False)[0]
            total = float(idle["idle_time"].sum()) or 1.0
            out["idle_categories"] = {
                str(c): float(idle[idle["idle_category"] == c]["idle_time"].sum()) / total
                for c in idle["idle_category"].unique()
            }
        except Exception as e:
            out["idle_categories_error"] = one_line(e)
    return out


import hta.configs.env_options as opts  # noqa: E402
ENV = opts.HTA_DISABLE_NS_ROUNDING_ENV
if mode in ("time", "time-exact"):  # one load, the temporal breakdown (stock or exact)
    if mode == "time-exact":
        os.environ[ENV] = "1"
    r = variant(False)
    print(json.dumps({"ok": "error" not in r, **({"error": r["error"]} if "error" in r else {})}))
    sys.exit(0)
import importlib.metadata as md  # noqa: E402
result = {"version": md.version("HolisticTraceAnalysis")}
os.environ.pop(ENV, None)
result["stock"] = variant(False)
os.environ[ENV] = "1"
result["exact"] = variant(False, extra=True)
result["exact_all"] = variant(True)
print(json.dumps(result))
"""


def traces(only: list[str] | None) -> list[Path]:
    found = sorted(TRACES.glob("*.trace.json.gz"))
    found += sorted((TRACES / "archetypes").glob("*.json.gz"))
    found += sorted((TRACES / "oneoff").glob("*.json.gz"))
    found += sorted(PUBLIC.glob("*.json.gz"))
    if only:
        found = [p for p in found if any(o in p.name for o in only)]
    return found


def label(p: Path) -> str:
    name = p.name.removesuffix(".gz").removesuffix(".json").removesuffix(".trace")
    return name if p.parent in (TRACES, PUBLIC) else f"{p.parent.name}/{name}"


def weighted(steps: list[dict], key: str) -> float:
    total = sum(s["step_s"] for s in steps)
    return sum(s[key] * s["step_s"] for s in steps) / total if total else float("nan")


def accelscope_shares(trace: Path) -> dict:
    proc = subprocess.run(
        [str(ACCELSCOPE), "doctor", "--trace", str(trace), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode not in (0, 1):  # 1: a finding fired
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:160]}"}
    rank = json.loads(proc.stdout)["ranks"][0]
    v = rank["verdict"]
    steps = rank["steps"]
    out = {
        "bottleneck": v.get("bottleneck"),
        "steady": {
            "idle": v["idle_share"],
            "busy": v["busy_share"],
            "compute": v["compute_share"],
            "copy": v["copy_share"],
        },
        "excluded_steps": rank["quality"]["excluded_steps"],
        "n_steps": len(steps),
        "step_s": [s["step_s"] for s in steps],
    }
    for name, sel in (("all", steps), ("all_but_last", steps[:-1])):
        if not sel:
            out[name] = None
            continue
        out[name] = {
            "idle": weighted(sel, "idle_share"),
            "busy": weighted(sel, "busy_share"),
            "compute": weighted(sel, "compute_busy_share"),
            "copy": weighted(sel, "copy_busy_share"),
        }
    return out


def hta_shares(hta_python: str, helper: Path, trace: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HTA_DISABLE_NS_ROUNDING"}
    proc = subprocess.run(
        [hta_python, str(helper), str(trace), "compare"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:160]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Measured:
    """One child process: wall time, peak resident memory, exit code and output."""

    wall_s: float
    peak_mib: float
    rc: int
    stdout: str
    stderr_tail: str


def run_measured(
    cmd: list[str], env: dict | None = None, *, address_limit_bytes: int | None = None
) -> Measured:
    """Run ``cmd`` as a child and measure it alone: ``os.wait4`` returns this child's own
    rusage (``ru_maxrss``, KiB on Linux), not the maximum over every child so far.
    ``address_limit_bytes`` caps its address space (RLIMIT_AS): past it, allocations fail."""

    def limit() -> None:
        if address_limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_limit_bytes, address_limit_bytes))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, preexec_fn=limit)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stderr = err.read().decode(errors="replace").strip().splitlines()
        return Measured(
            wall_s=wall,
            peak_mib=usage.ru_maxrss / 1024,
            rc=proc.returncode,
            stdout=out.read().decode(errors="replace"),
            stderr_tail=(stderr or [""])[-1][:200],
        )


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, int]:
    """Wall seconds and peak RSS (MiB) of the whole process."""
    m = run_measured(cmd, env)
    return m.wall_s, m.peak_mib, m.rc


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def pts(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{100 * (a - b):+.1f}"


def ratio_range(a: list[float], b: list[float], n: int = 2000) -> tuple[float, float, float]:
    """Median ratio a/b and a bootstrap 95 % interval of the ratio of medians."""
    rng = random.Random(0)
    boots = []
    for _ in range(n):
        ra = [rng.choice(a) for _ in a]
        rb = [rng.choice(b) for _ in b]
        boots.append(statistics.median(ra) / statistics.median(rb))
    boots.sort()
    return (
        statistics.median(a) / statistics.median(b),
        boots[int(0.025 * n)],
        boots[int(0.975 * n) - 1],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hta-python", required=True, help="python of the venv holding HTA")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds per tool")
    parser.add_argument("--timed", type=int, default=100, help="time the N largest traces")
    parser.add_argument(
        "--timing-only", action="store_true", help="skip the share comparison, time only"
    )
    parser.add_argument("--only", action="append", help="substring of a trace name")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument(
        "--report", type=Path, help="print the tables of a --json file, run nothing"
    )
    args = parser.parse_args()
    if args.report:
        saved = json.loads(args.report.read_text())
        report(saved["rows"], saved["timing"], saved["hta_version"])
        return

    files = traces(args.only)
    with tempfile.TemporaryDirectory() as tmp:
        helper = Path(tmp) / "hta_helper.py"
        helper.write_text(HELPER)
        rows = []
        version = None
        for trace in [] if args.timing_only else files:
            t0 = time.perf_counter()
            a = accelscope_shares(trace)
            h = hta_shares(args.hta_python, helper, trace)
            version = version or h.get("version")
            rows.append({"trace": label(trace), "bytes": trace.stat().st_size, "as": a, "hta": h})
            print(f"# {label(trace)}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)

        # time and memory, whole processes, alternated, on the largest traces
        largest = sorted(files, key=lambda p: p.stat().st_size, reverse=True)[: args.timed]
        timing = []
        hta_env = {k: v for k, v in os.environ.items() if k != "HTA_DISABLE_NS_ROUNDING"}
        for trace in largest:
            runs: dict[str, list[tuple[float, float, int]]] = {"as": [], "hta": []}
            hta_ok = []
            for r in range(args.rounds):
                order = ("as", "hta") if r % 2 == 0 else ("hta", "as")
                for tool in order:
                    if tool == "as":
                        cmd = [str(ACCELSCOPE), "doctor", "--trace", str(trace), "--json"]
                        runs["as"].append(timed(cmd))
                    else:
                        cmd = [args.hta_python, str(helper), str(trace), "time-exact"]
                        m = run_measured(cmd, hta_env)
                        runs["hta"].append((m.wall_s, m.peak_mib, m.rc))
                        hta_ok.append('"ok": true' in m.stdout)
            timing.append(
                {
                    "trace": label(trace),
                    "bytes": trace.stat().st_size,
                    "runs": runs,
                    "hta_ok": all(hta_ok),
                }
            )
            print(f"# timed {label(trace)}", file=sys.stderr)

    if args.json:
        args.json.write_text(json.dumps({"hta_version": version, "rows": rows, "timing": timing}))
    report(rows, timing, version)


def failed(error: str) -> str:
    text = " ".join(error.split())
    return "HTA failed: " + (text if len(text) <= 64 else text[:36] + " ... " + text[-24:])


def hta_cell(v: dict | None) -> tuple[str, float | None, float | None]:
    if not v or "error" in v:
        return failed((v or {}).get("error", "?")), None, None
    idle, comp = v["idle_time_pctg"] / 100, v["compute_time_pctg"] / 100
    return f"{pct(idle)} / {pct(comp)}", idle, comp


def report(rows: list[dict], timing: list[dict], version: str | None) -> None:
    print(f"HTA {version}\n")
    print(
        "Shares in % of the window; idle / compute. accelscope compute = kernel share (all "
        "kernels); HTA compute excludes memcpy/memset/communication kernels.\n"
    )
    print(
        "| trace | steps (set aside) | accelscope steady | accelscope all steps "
        "| HTA stock | HTA exact, all steps | Δ idle | Δ compute | HTA non-compute "
        "| HTA idle: host / kernel wait |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    biggest: list[tuple[float, str, str]] = []
    for row in rows:
        a, h = row["as"], row["hta"]
        if "error" in a:
            print(f"| {row['trace']} | accelscope failed: {a['error']} |||||||||")
            continue
        st, al = a["steady"], a["all"]
        steady = f"{pct(st['idle'])} / {pct(st['compute'])}"
        allsteps = f"{pct(al['idle'])} / {pct(al['compute'])}"
        if "error" in h:
            stock = exact = failed(h["error"])
            di = dc = nc = cats = "n/a"
        else:
            stock, _, _ = hta_cell(h.get("stock"))
            exact, hi, hc = hta_cell(h.get("exact_all"))
            di, dc = pts(al["idle"], hi), pts(al["compute"], hc)
            ea = h.get("exact_all") or {}
            nc = pct(ea["non_compute_time_pctg"] / 100) if "error" not in ea else "n/a"
            c = (h.get("exact") or {}).get("idle_categories") or {}
            cats = f"{pct(c.get('host_wait'))} / {pct(c.get('kernel_wait'))}" if c else "n/a"
            if hi is not None:
                biggest.append((abs(al["idle"] - hi), "idle", row["trace"]))
                biggest.append((abs(al["compute"] - hc), "compute", row["trace"]))
        excl = ",".join(map(str, a["excluded_steps"])) or "-"
        print(
            f"| {row['trace']} | {a['n_steps']} ({excl}) | {steady} | {allsteps} | {stock} "
            f"| {exact} | {di} | {dc} | {nc} | {cats} |"
        )
    if biggest:
        d, what, trace = max(biggest)
        print(f"\nLargest difference: {100 * d:.1f} points ({what}, {trace})")

    print("\nHTA stock vs accelscope over the same steps (all but the last):\n")
    print("| trace | accelscope all but last | HTA stock | Δ idle | Δ compute |")
    print("|---|---|---|---|---|")
    for row in rows:
        a, h = row["as"], row["hta"]
        if "error" in a or "error" in h or a.get("all_but_last") is None:
            continue
        ab = a["all_but_last"]
        cell, hi, hc = hta_cell(h.get("stock"))
        print(
            f"| {row['trace']} | {pct(ab['idle'])} / {pct(ab['compute'])} | {cell} "
            f"| {pts(ab['idle'], hi)} | {pts(ab['compute'], hc)} |"
        )

    print(
        "\nTime and peak memory, whole processes, alternated; median (min-max) of the rounds; "
        "ratios: median ratio with a bootstrap 95 % interval.\n"
    )
    print(
        "| trace (gz KiB) | accelscope s | HTA s | HTA/accelscope time (95 %) "
        "| accelscope MiB | HTA MiB | HTA/accelscope memory (95 %) | HTA ran |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for t in timing:
        ra, rh = t["runs"]["as"], t["runs"]["hta"]
        at, ht = [x[0] for x in ra], [x[0] for x in rh]
        am, hm = [x[1] for x in ra], [x[1] for x in rh]
        r, lo, hi = ratio_range(ht, at)
        rm, mlo, mhi = ratio_range(hm, am)

        def cell(xs: list[float], fmt: str) -> str:
            return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"

        ran = {True: "ok", False: "failed", None: "?"}[t.get("hta_ok")]
        print(
            f"| {t['trace']} ({t['bytes'] // 1024}) | {cell(at, '.2f')} | {cell(ht, '.2f')} "
            f"| {r:.2f}x ({lo:.2f}-{hi:.2f}) | {cell(am, '.0f')} | {cell(hm, '.0f')} "
            f"| {rm:.2f}x ({mlo:.2f}-{mhi:.2f}) | {ran} |"
        )


if __name__ == "__main__":
    main()
