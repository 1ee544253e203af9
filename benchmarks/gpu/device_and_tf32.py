"""On a lent GPU machine: check what the fakes stand in for, in one short run (about 2 minutes).

    PYTHONPATH=src python3 benchmarks/gpu/device_and_tf32.py [--budget-s 240]

Steps, in priority order, each skipped when it no longer fits the budget; a digest is printed
last (and as JSON to $OUT/device_and_tf32.json when $OUT is set):

1. facts: torch/CUDA versions, whether ``get_device_properties`` still has ``clock_rate`` and
   ``memory_clock_rate`` (CUDA 13 removed them), torch's default TF32 flags, and what TF32 does to
   an fp32 convolution and matmul (relative error against float64: ~1e-3 with TF32, ~1e-6 IEEE);
2. discovery holds no context: a child process runs ``collect_environment()`` and stays alive;
   ``nvidia-smi --query-compute-apps`` must not list it (a listed pid holds a CUDA context);
3. ``accelscope ceilings --device cuda`` with a short budget: fp32 (IEEE) and tf32 rows, each a
   fraction of the datasheet figure (fp32 should be at most ~67 TFLOP/s on an H100);
4. ``accelscope measure resnet50 --device cuda --tf32 off`` and ``on``: the environment each
   result records, and the two throughputs;
5. ``--device cuda:N`` with N = the number of GPUs: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "accelscope.cli"]


def _facts() -> dict[str, Any]:
    import torch

    from accelscope.hardware.tf32 import apply_tf32, read_fp32_math

    props = torch.cuda.get_device_properties(0)
    found: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "name": props.name,
        "clock_rate_present": hasattr(props, "clock_rate"),
        "memory_clock_rate_present": hasattr(props, "memory_clock_rate"),
        "default_fp32_math": vars(read_fp32_math()),
    }
    x = torch.randn(8, 64, 56, 56, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    a, b = torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")
    exact_conv = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    exact_mm = a.double() @ b.double()
    for mode in (False, True):
        apply_tf32(mode)
        conv = torch.nn.functional.conv2d(x, w, padding=1).double()
        mm = (a @ b).double()
        found[f"tf32_{'on' if mode else 'off'}_rel_err"] = {
            "conv": float((conv - exact_conv).norm() / exact_conv.norm()),
            "matmul": float((mm - exact_mm).norm() / exact_mm.norm()),
        }
    apply_tf32(False)
    return found


_CHILD = (
    "import sys, time; from accelscope.hardware.fingerprint import collect_environment; "
    "env = collect_environment(); print(len(env.gpus), flush=True); time.sleep(30)"
)


def _discovery_holds_no_context() -> dict[str, Any]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        gpus = child.stdout.readline().strip()
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    finally:
        child.kill()
        child.wait()
    listed = any(line.split(",")[0].strip() == str(child.pid) for line in apps.splitlines())
    return {"gpus_seen": gpus, "child_holds_a_context": listed, "compute_apps": apps.strip()}


def _run(args: list[str], timeout_s: float) -> dict[str, Any]:
    began = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    return {
        "rc": done.returncode,
        "s": round(time.monotonic() - began, 1),
        "stdout": done.stdout[-4000:],
        "stderr": done.stderr[-1500:],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-s", type=float, default=240.0)
    budget = parser.parse_args().budget_s
    began = time.monotonic()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check here")
        return
    digest: dict[str, Any] = {}
    store = Path(os.environ.get("OUT", "/tmp")) / "device_and_tf32.db"

    def left() -> float:
        return budget - (time.monotonic() - began)

    digest["facts"] = _facts()
    digest["discovery"] = _discovery_holds_no_context()
    if left() > 90:
        digest["ceilings"] = _run(
            [
                *CLI,
                "ceilings",
                "--device",
                "cuda",
                "--budget",
                "60s",
                "--json",
                "--store",
                str(store),
            ],
            left(),
        )
    for mode in ("off", "on"):
        if left() > 45:
            digest[f"measure_tf32_{mode}"] = _run(
                [
                    *CLI,
                    "measure",
                    "resnet50",
                    "--device",
                    "cuda",
                    "--tf32",
                    mode,
                    "--batch",
                    "64",
                    "--budget",
                    "5s",
                    "--json",
                    "--store",
                    str(store),
                ],
                left(),
            )
    count = torch.cuda.device_count()
    digest["missing_ordinal"] = _run(
        [*CLI, "measure", "resnet50", "--device", f"cuda:{count}", "--no-store"], 60
    )
    text = json.dumps(digest, indent=1, default=str)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "device_and_tf32.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
