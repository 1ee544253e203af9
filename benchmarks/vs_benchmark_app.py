"""accelscope's default sweep of ResNet-50 vs OpenVINO's own ``benchmark_app``, in one run.

benchmark_app (shipped with the openvino package) measures the same ResNet-50 at batch 8 on 2
threads: the fp32 ONNX export with f32 inference precision (and bf16 where OpenVINO's CPU plugin
reports BF16), and the int8 IR that accelscope's openvino backend builds (NNCF post-training
quantization on the same calibration batches), each with the latency and throughput hints. It
runs before and after accelscope's sweep; the best of its figures is the bar to clear.

accelscope runs its default sweep (every runtime; precisions kept or dropped by the measured
probes) with the OpenVINO hint as an axis, and reports its best accepted configuration.

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
BATCH = 8


def models(directory: Path) -> dict[str, Path]:
    """ResNet-50 from the zoo: the fp32 ONNX export and the int8 IR, both at batch 8."""
    import openvino as ov

    from accelscope.backends.onnx_export import export_onnx
    from accelscope.backends.openvino import int8_model
    from accelscope.engine.accuracy_check import calibration_batches
    from accelscope.models.loading import load_model

    model = load_model("resnet50")
    onnx = export_onnx(model, BATCH, cache_dir=directory)
    ir = directory / "resnet50-int8.xml"
    ov.save_model(int8_model(model, calibration_batches(model, BATCH), BATCH), str(ir))
    return {"fp32": onnx, "int8": ir}


def bf16_capable() -> bool:
    """Whether OpenVINO's CPU plugin reports BF16 here (else a bf16 hint runs as f32)."""
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def benchmark_app(model: Path, precision: str, hint: str, seconds: int) -> float:
    """benchmark_app's reported throughput (FPS = images/s) for one setting."""
    config = Path(tempfile.mkdtemp()) / "cpu.json"
    config.write_text(json.dumps({"CPU": {"INFERENCE_NUM_THREADS": "2"}}))
    command = [
        str(BIN / "benchmark_app"),
        *("-m", str(model), "-d", "CPU", "-shape", f"[{BATCH},3,224,224]"),
        *("-infer_precision", precision, "-hint", hint, "-t", str(seconds)),
        *("-load_config", str(config)),
    ]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    match = re.search(r"Throughput:\s+([\d.]+)\s+FPS", output)
    if match is None:
        raise SystemExit(f"could not read benchmark_app's throughput:\n{output[-2000:]}")
    return float(match.group(1))


def accelscope_sweep(store: Path) -> dict:  # type: ignore[type-arg]
    """accelscope's default bench sweep of ResNet-50 (hint as an axis), as JSON."""
    command = [
        str(BIN / "accelscope"),
        *("bench", "resnet50", "--batch", str(BATCH), "--threads", "2"),
        *("--option", "hint=latency,throughput", "--json", "--quiet", "--store", str(store)),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(completed.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = models(directory)
        precisions = ["f32", "bf16"] if bf16_capable() else ["f32"]
        settings = [("fp32", p, h) for p in precisions for h in ("latency", "throughput")]
        settings += [("int8", "f32", h) for h in ("latency", "throughput")]
        before = {s: benchmark_app(paths[s[0]], s[1], s[2], args.seconds) for s in settings}
        document = accelscope_sweep(directory / "results.db")
        after = {s: benchmark_app(paths[s[0]], s[1], s[2], args.seconds) for s in settings}
    from accelscope.result import Result

    results = [Result.from_dict(r) for r in document["results"]]
    print("| tool | configuration | images/s |")
    print("|---|---|---|")
    for when, figures in (("before", before), ("after", after)):
        for (model, precision, hint), rate in figures.items():
            print(f"| benchmark_app ({when}) | {model} model, {precision}, {hint} | {rate:.1f} |")
    for result in results:
        if result.measurement is not None:
            star = " (best)" if result.spec.key == document["best"] else ""
            rate = result.measurement.throughput_items_per_s
            print(f"| accelscope | {result.spec.label()}{star} | {rate:.1f} |")
    best_app = max([*before.values(), *after.values()])
    best = next(r for r in results if r.spec.key == document["best"])
    assert best.measurement is not None
    ours = best.measurement.throughput_items_per_s
    print()
    print(f"verdict: {document['verdict']}")
    print(
        f"accelscope best {ours:.1f} images/s ({best.spec.label()}) vs benchmark_app best "
        f"{best_app:.1f}: {ours / best_app:.2f}x"
    )
    openvino = [
        r.measurement.throughput_items_per_s
        for r in results
        if r.spec.backend == "openvino" and r.measurement is not None
    ]
    if openvino:
        same = max(openvino)
        print(
            f"same runtime: OpenVINO under accelscope {same:.1f} images/s vs benchmark_app "
            f"best {best_app:.1f}: {same / best_app:.2f}x"
        )


if __name__ == "__main__":
    main()
