"""Record a short torch.profiler trace of a training script, unmodified: what the GPU validation
keeps of each doctor archetype (examples/doctor/gpu/) so CI replays it through
``accelscope doctor --trace`` on a CPU forever after.

The script runs as ``__main__`` (``runpy``) under ``torch.profiler.profile`` with CPU and CUDA
activities; a global optimizer step hook advances the profiler's schedule, so each training
step becomes a ``ProfilerStep#N`` span, as a user's own ``prof.step()`` would make it. The
schedule skips ``--wait`` steps, warms up one, records ``--active`` (3 by default: a trace of a
launch-bound loop is ~1 MB a step), writes the Chrome/Kineto JSON gzipped, and ends the run.

    python benchmarks/gpu/record_trace.py OUT.json.gz SCRIPT [SCRIPT ARGS...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import runpy
import sys
import tempfile
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook


class _Recorded(Exception):
    """Raised from the step hook once the active steps are written: ends the script."""


def record(out: Path, script: Path, script_args: list[str], *, wait: int, active: int) -> int:
    """Run ``script`` until ``active`` steps are recorded; returns the steps it ran."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    written: list[Path] = []
    scratch = Path(tempfile.mkdtemp(prefix="accelscope-trace-"))

    def ready(profiler: torch.profiler.profile) -> None:
        path = scratch / "trace.json"
        profiler.export_chrome_trace(str(path))
        written.append(path)

    profiler = torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=wait, warmup=1, active=active, repeat=1),
        on_trace_ready=ready,
        record_shapes=False,
        with_stack=False,
    )
    steps = 0

    def after_step(*_: object) -> None:
        nonlocal steps
        steps += 1
        profiler.step()
        if written:
            raise _Recorded

    handle = register_optimizer_step_post_hook(after_step)
    sys.argv = [str(script), *script_args]
    sys.path[0] = str(script.parent)
    try:
        with profiler:
            runpy.run_path(str(script), run_name="__main__")
    except _Recorded:
        pass
    finally:
        handle.remove()
    if not written:
        raise SystemExit(f"{script}: ended after {steps} optimizer steps, before the trace")
    document = json.loads(written[0].read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt", encoding="utf-8") as sink:
        json.dump(document, sink, separators=(",", ":"))
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("out", type=Path)
    parser.add_argument("script", type=Path)
    parser.add_argument("--wait", type=int, default=3, help="steps skipped first (warm-up)")
    parser.add_argument("--active", type=int, default=3, help="steps recorded")
    args, script_args = parser.parse_known_args()
    steps = record(args.out, args.script, script_args, wait=args.wait, active=args.active)
    size_kib = args.out.stat().st_size / 1024
    print(f"{args.out}: {args.active} steps recorded of {steps} run, {size_kib:.0f} KiB")


if __name__ == "__main__":
    main()
