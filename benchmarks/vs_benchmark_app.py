"""accelscope's best ResNet-50 configuration vs OpenVINO's own ``benchmark_app``, in one run.

benchmark_app (shipped with the openvino package) measures the same ResNet-50 exported to ONNX
at batch 8 on 2 threads, with bf16 and f32 inference precision and both performance hints; it
runs before and after accelscope's sweep, and the best of its figures is the bar to clear.

    .venv/bin/python benchmarks/vs_benchmark_app.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent


def export_resnet50(directory: Path) -> Path:
    """ResNet-50 from the zoo, exported to ONNX at a fixed batch of 8."""
    from accelscope.backends.onnx_export import export_onnx
    from accelscope.models.loading import load_model

    return export_onnx(load_model("resnet50"), 8, cache_dir=directory)


def benchmark_app(onnx: Path, precision: str, hint: str, seconds: int) -> float:
    """benchmark_app's reported throughput (FPS = images/s) for one setting."""
    config = Path(tempfile.mkdtemp()) / "cpu.json"
    config.write_text(json.dumps({"CPU": {"INFERENCE_NUM_THREADS": "2"}}))
    command = [str(BIN / "benchmark_app"), "-m", str(onnx), "-d", "CPU", "-shape", "[8,3,224,224]",
               "-infer_precision", precision, "-hint", hint, "-t", str(seconds),
               "-load_config", str(config)]  # fmt: skip
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    match = re.search(r"Throughput:\s+([\d.]+)\s+FPS", output)
    if match is None:
        raise SystemExit(f"could not read benchmark_app's throughput:\n{output[-2000:]}")
    return float(match.group(1))


def accelscope_sweep() -> dict:  # type: ignore[type-arg]
    """accelscope bench over the contenders (compile int8/bf16, OpenVINO bf16), as JSON."""
    command = [str(BIN / "accelscope"), "bench", "resnet50", "--batch", "8", "--threads", "2",
               "--backend", "eager,compile,openvino", "--precision", "fp32,bf16,int8",
               "--option", "channels_last=true", "--option", "hint=latency,throughput",
               "--json", "--no-store", "--quiet"]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(completed.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        onnx = export_resnet50(Path(directory))
        settings = [(p, h) for p in ("bf16", "f32") for h in ("latency", "throughput")]
        before = {s: benchmark_app(onnx, *s, args.seconds) for s in settings}
        document = accelscope_sweep()
        after = {s: benchmark_app(onnx, *s, args.seconds) for s in settings}
    from accelscope.result import Result

    results = [Result.from_dict(r) for r in document["results"]]
    print("| tool | configuration | images/s |")
    print("|---|---|---|")
    for (precision, hint), rate in before.items():
        print(f"| benchmark_app (before) | {precision}, {hint} | {rate:.1f} |")
    for (precision, hint), rate in after.items():
        print(f"| benchmark_app (after) | {precision}, {hint} | {rate:.1f} |")
    for result in results:
        if result.measurement is not None:
            star = " (best)" if result.spec.key == document["best"] else ""
            rate = result.measurement.throughput_items_per_s
            print(f"| accelscope | {result.spec.label()}{star} | {rate:.1f} |")
    best_app = max([*before.values(), *after.values()])
    best = next(r for r in results if r.spec.key == document["best"])
    assert best.measurement is not None
    ours = best.measurement.throughput_items_per_s
    openvino = [r.measurement.throughput_items_per_s for r in results
                if r.spec.backend == "openvino" and r.measurement is not None]  # fmt: skip
    print()
    print(f"accelscope best {ours:.1f} images/s ({best.spec.label()}) vs benchmark_app best "
          f"{best_app:.1f}: {ours / best_app:.2f}x")  # fmt: skip
    if openvino:
        same = max(openvino)
        print(f"same runtime: OpenVINO under accelscope {same:.1f} images/s vs benchmark_app "
              f"best {best_app:.1f}: {same / best_app:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
