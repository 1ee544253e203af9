"""Record torch.profiler traces whose window holds one-off work, on a real GPU: the quality gate's
test data (issue 41). Each case runs in a fresh process, so the CUDA context is created where the
case says, and is written gzipped beside a ``truth.json`` that says what the window holds and how
long each step took (host wall time, after a synchronize, measured around the profiled step).

| case | what the window holds |
|---|---|
| ``cold_context`` | the CUDA context created inside step 1 (the MLP moved to the GPU there) |
| ``cudnn_autotune`` | context warm; ``cudnn.benchmark=True``, the first convolutions in step 1 |
| ``compile_in_window`` | context warm; ``torch.compile``'s first call (Dynamo, Inductor, Triton) |
| ``allocator_growth`` | warm at a small batch; step 1 is the first at a batch 16x larger |
| ``one_step`` | warm; one profiled step only |
| ``cuda_graph`` | warm; a captured CUDA graph (forward, backward, optimizer) replayed a step |
| ``steady`` | warm (10 steps outside the window); five steady steps: the control |

    python benchmarks/gpu/record_oneoff_traces.py OUT_DIR [--cases a,b] [--device cuda]

Writes OUT_DIR/<case>.json.gz and OUT_DIR/truth.json; on a CPU (``--device cpu``) it proves the
plumbing only (CPU activities, no CUDA).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CASES = (
    "cold_context",
    "cudnn_autotune",
    "compile_in_window",
    "allocator_growth",
    "one_step",
    "cuda_graph",
    "steady",
)


def _model(kind: str, device: str) -> Any:
    import torch
    from torch import nn

    if kind == "conv":
        model = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
        )  # fmt: skip
    else:
        model = nn.Sequential(
            nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 10)
        )
    torch.manual_seed(0)
    return model.to(device) if device else model


def _batch(kind: str, batch: int, device: str) -> tuple[Any, Any]:
    import torch

    x = torch.randn(batch, 3, 64, 64) if kind == "conv" else torch.randn(batch, 1024)
    y = torch.randint(0, 10, (batch,))
    return x.to(device), y.to(device)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_case(case: str, out: Path, device: str) -> dict[str, Any]:
    """One case, in this process: returns its truth (what the window holds, step times)."""
    import torch
    from torch import nn

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    kind = "conv" if case in ("cudnn_autotune",) else "mlp"
    batch = 64
    loss_fn = nn.CrossEntropyLoss()
    holds = {
        "cold_context": "CUDA context creation and the model's first copy to the device in step 1",
        "cudnn_autotune": "cuDNN benchmark-mode autotuning of every convolution in step 1",
        "compile_in_window": "torch.compile's first call (Dynamo, Inductor, Triton) in step 1",
        "allocator_growth": "the allocator's growth (cudaMalloc) for a 16x larger batch in step 1",
        "one_step": "one profiled step only",
        "cuda_graph": "each step is one CUDA graph replay (forward, backward, optimizer)",
        "steady": "nothing one-off: 10 warm-up steps ran before the window",
    }[case]
    model: Any = None
    optimizer: Any = None
    if case != "cold_context":  # everything but the first case warms the context first
        torch.zeros(1, device=device)
        _sync(device)
    if case == "cudnn_autotune":
        torch.backends.cudnn.benchmark = True
    if case != "cold_context":
        model = _model(kind, device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = (None, None) if case == "cold_context" else _batch(kind, batch, device)

    def plain_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    if case in ("one_step", "steady", "allocator_growth"):
        for _ in range(10):
            plain_step()
        _sync(device)
    if case == "allocator_growth":
        torch.cuda.empty_cache() if device.startswith("cuda") else None
        x, y = _batch(kind, batch * 16, device)
    compiled: Any = None
    if case == "compile_in_window":
        compiled = torch.compile(model)
    graph: Any = None
    if case == "cuda_graph" and device.startswith("cuda"):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                plain_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        _sync(device)

    active = 1 if case == "one_step" else 5 if case == "steady" else 3
    step_s: list[float] = []
    scratch = Path(tempfile.mkdtemp(prefix="accelscope-oneoff-"))
    written: list[Path] = []

    def ready(profiler: torch.profiler.profile) -> None:
        path = scratch / "trace.json"
        profiler.export_chrome_trace(str(path))
        written.append(path)

    profiler = torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=0, warmup=0, active=active, repeat=1),
        on_trace_ready=ready,
    )
    with profiler:
        for index in range(active):
            began = time.perf_counter()
            if case == "cold_context" and index == 0:
                model = _model(kind, device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
                x, y = _batch(kind, batch, device)
            if case == "compile_in_window":
                optimizer.zero_grad(set_to_none=True)
                loss_fn(compiled(x), y).backward()
                optimizer.step()
            elif graph is not None:
                graph.replay()
            else:
                plain_step()
            _sync(device)
            step_s.append(time.perf_counter() - began)
            profiler.step()
    if not written:
        raise SystemExit(f"{case}: the profiler wrote no trace")
    document = json.loads(written[0].read_text())
    with gzip.open(out, "wt", encoding="utf-8") as sink:
        json.dump(document, sink, separators=(",", ":"))
    return {
        "case": case,
        "holds": holds,
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "steps_profiled": active,
        "step_wall_s": [round(s, 6) for s in step_s],
        "trace": out.name,
        "trace_bytes": out.stat().st_size,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: run this case here
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.one:
        truth = run_case(args.one, args.out_dir / f"{args.one}.json.gz", args.device)
        print(json.dumps(truth))
        return 0
    truths: list[dict[str, Any]] = []
    for case in args.cases.split(","):
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, __file__, str(args.out_dir), "--one", case, "--device", args.device],
            capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            truth = json.loads(lines[-1])
            truth["process_s"] = round(time.monotonic() - began, 1)
            truths.append(truth)
            print(f"{case}: ok {truth['step_wall_s']} ({truth['trace_bytes']} B)", flush=True)
        else:
            truths.append({"case": case, "failed": done.stderr.strip()[-2000:]})
            print(f"{case}: failed: {done.stderr.strip()[-500:]}", flush=True)
    (args.out_dir / "truth.json").write_text(json.dumps(truths, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
