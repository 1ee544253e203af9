"""The GPU facts the other steps rest on, read in one process; prints one JSON object.

    PYTHONPATH=src python3 benchmarks/gpu/facts.py

Run by benchmarks/gpu/validate.py (step ``facts``), or alone. Every part is guarded: one that
fails records its error and the rest still run. What it reads:

- torch, its CUDA, the GPU's properties, and whether ``clock_rate``, ``memory_clock_rate`` and
  ``memory_bus_width`` still exist (CUDA 13 removed them from ``cudaDeviceProp``);
- TF32: torch's default flags, and the relative error (against float64) of an fp32 convolution
  and matmul under the defaults, with TF32 off and with TF32 on (~1e-6 IEEE, ~1e-4..1e-3 TF32);
- two ceilings measured directly (METHOD.md): a device-to-device copy (bytes read + written)
  and an 8192^3 bf16 matmul on random data, each the median of timed repeats (CUDA events);
- NVML: driver and CUDA driver versions, the energy counter and its update period, GPM support,
  and the return code of each GPM metric over a window of matmul load (raw pynvml), then
  accelscope's own NvmlSource over the same kind of window (what doctor and audit read).
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

GPM_METRICS = (
    "SM_UTIL",
    "SM_OCCUPANCY",
    "GRAPHICS_UTIL",
    "ANY_TENSOR_UTIL",
    "HMMA_TENSOR_UTIL",
    "DFMA_TENSOR_UTIL",
    "IMMA_TENSOR_UTIL",
    "DRAM_BW_UTIL",
    "FP32_UTIL",
    "FP16_UTIL",
    "FP64_UTIL",
    "INTEGER_UTIL",
)
"""GPM metrics whose return codes are recorded (``NVML_GPM_METRIC_<name>``)."""


def guarded(found: dict[str, Any], key: str, part: Callable[[], Any]) -> None:
    """``found[key] = part()``, or ``{"error": ...}`` when it raises."""
    try:
        found[key] = part()
    except Exception as exc:  # noqa: BLE001 - a failed part is a recorded fact
        found[key] = {"error": f"{type(exc).__name__}: {exc}", "where": _where()}


def _where() -> str:
    frames = traceback.extract_tb(sys.exc_info()[2])
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def device_properties(torch: Any) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    found: dict[str, Any] = {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sms": props.multi_processor_count,
        "total_memory_bytes": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
        "device_count": torch.cuda.device_count(),
    }
    for name in ("clock_rate", "memory_clock_rate", "memory_bus_width"):
        found[f"{name}_present"] = hasattr(props, name)
        found[name] = getattr(props, name, None)
    return found


def tf32_errors(torch: Any) -> dict[str, Any]:
    from accelscope.hardware.tf32 import apply_tf32, read_fp32_math

    found: dict[str, Any] = {"default_fp32_math": vars(read_fp32_math())}
    guarded(
        found,
        "default_flags",
        lambda: {
            "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        },
    )
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(8, 64, 56, 56, device="cuda", generator=generator)
    w = torch.randn(64, 64, 3, 3, device="cuda", generator=generator)
    a = torch.randn(2048, 2048, device="cuda", generator=generator)
    b = torch.randn(2048, 2048, device="cuda", generator=generator)
    exact_conv = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    exact_mm = a.double() @ b.double()

    def errors() -> dict[str, float]:
        conv = torch.nn.functional.conv2d(x, w, padding=1).double()
        mm = (a @ b).double()
        return {
            "conv": float((conv - exact_conv).norm() / exact_conv.norm()),
            "matmul": float((mm - exact_mm).norm() / exact_mm.norm()),
        }

    found["rel_err_default"] = errors()  # torch's defaults, untouched
    for mode in (False, True):
        apply_tf32(mode)
        found[f"rel_err_tf32_{'on' if mode else 'off'}"] = errors()
    apply_tf32(False)
    return found


def _time_ms(torch: Any, work: Callable[[], Any], repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        work()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def two_ceilings(torch: Any) -> dict[str, Any]:
    """A 1 GiB device-to-device copy (read + write counted) and an 8192^3 bf16 matmul."""
    n = 1 << 28  # 2^28 fp32 = 1 GiB
    buffers = [torch.rand(n, device="cuda"), torch.empty(n, device="cuda")]
    copy_ms = _time_ms(torch, lambda: buffers[1].copy_(buffers[0]), repeats=10)
    buffers.clear()
    torch.cuda.empty_cache()
    side = 8192
    a = torch.randn(side, side, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(side, side, device="cuda", dtype=torch.bfloat16)
    mm_ms = _time_ms(torch, lambda: a @ b, repeats=10)
    return {
        "copy_bytes_per_s": 2 * n * 4 / (copy_ms / 1e3),
        "copy_ms": copy_ms,
        "bf16_matmul_flops_per_s": 2 * side**3 / (mm_ms / 1e3),
        "bf16_matmul_ms": mm_ms,
        "method": "median of 10 (CUDA events) after 3 warm-ups; random data",
    }


class MatmulLoad:
    """bf16 matmuls queued for about ``seconds`` (the GPU busy while NVML is read)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def run(self, seconds: float) -> None:
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            for _ in range(20):
                self.a @ self.a
            self.torch.cuda.synchronize()


def nvml_facts(torch: Any | None) -> dict[str, Any]:
    import pynvml as nvml

    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    found: dict[str, Any] = {"driver": text(nvml.nvmlSystemGetDriverVersion())}
    guarded(found, "cuda_driver", lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion_v2()))
    guarded(found, "name", lambda: text(nvml.nvmlDeviceGetName(handle)))
    guarded(found, "power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3)
    guarded(
        found,
        "max_clocks_mhz",
        lambda: {
            "sm": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
            "memory": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM),
        },
    )
    guarded(found, "mig_mode", lambda: list(nvml.nvmlDeviceGetMigMode(handle)))
    guarded(found, "compute_mode", lambda: int(nvml.nvmlDeviceGetComputeMode(handle)))
    guarded(found, "energy", _energy)
    guarded(found, "gpm", lambda: _gpm(nvml, handle, torch))
    guarded(found, "accelscope_nvml_source", lambda: _nvml_source(torch))
    return found


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"


def _energy() -> dict[str, Any]:
    from accelscope.hardware.energy import nvml_energy_meter

    meter = nvml_energy_meter(index=0)
    found: dict[str, Any] = {"available": meter.available, "reason": meter.reason}
    if meter.available:
        found["update_period_s"] = meter.probe_update_period(max_s=1.0)
        found["source"] = meter.source
        meter.close()
    return found


def _gpm(nvml: Any, handle: Any, torch: Any | None) -> dict[str, Any]:
    support = nvml.nvmlGpmQueryDeviceSupport(handle)
    found: dict[str, Any] = {"supported": bool(getattr(support, "isSupportedDevice", 0))}
    if not found["supported"]:
        return found
    wanted = [(m, getattr(nvml, f"NVML_GPM_METRIC_{m}", None)) for m in GPM_METRICS]
    wanted = [(m, code) for m, code in wanted if code is not None]
    load = MatmulLoad(torch) if torch is not None else None
    first, second = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    try:
        nvml.nvmlGpmSampleGet(handle, first)
        if load is not None:
            load.run(1.0)
        else:
            time.sleep(1.0)
        nvml.nvmlGpmSampleGet(handle, second)
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1, request.sample2 = first, second
        for i, (_, code) in enumerate(wanted):
            request.metrics[i].metricId = code
        nvml.nvmlGpmMetricsGet(request)
        found["metrics_under_bf16_load"] = {
            name: {
                "return_code": int(getattr(request.metrics[i], "nvmlReturn", 0)),
                "value": float(request.metrics[i].value),
            }
            for i, (name, _) in enumerate(wanted)
        }
    finally:
        nvml.nvmlGpmSampleFree(first)
        nvml.nvmlGpmSampleFree(second)
    return found


def _nvml_source(torch: Any | None) -> dict[str, Any]:
    from accelscope.hardware.telemetry import NvmlSource

    source = NvmlSource(indices=(0,))
    source.sample()
    if torch is not None:
        MatmulLoad(torch).run(1.0)
    else:
        time.sleep(1.0)
    sample = source.sample()
    found = {
        "status": source.status,
        "sm_status": source.sm_status,
        "notes": list(source.notes),
        "sample_under_bf16_load": vars(sample[0]) if sample else None,
    }
    source.close()
    return found


def discovery_holds_no_context() -> dict[str, Any]:
    """accelscope's GPU discovery in a child that stays alive: nvidia-smi must not list it."""
    import subprocess

    child_code = (
        "import time; from accelscope.hardware.fingerprint import collect_environment; "
        "env = collect_environment(); print(len(env.gpus), flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", child_code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        gpus = child.stdout.readline().strip()
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        ).stdout
    finally:
        child.kill()
        child.wait()
    listed = any(line.split(",")[0].strip() == str(child.pid) for line in apps.splitlines())
    return {"gpus_seen": gpus, "child_holds_a_context": listed, "compute_apps": apps.strip()}


def main() -> None:
    found: dict[str, Any] = {"python": platform.python_version()}
    began = time.monotonic()
    torch: Any | None = None
    try:
        import torch as torch_module

        torch = torch_module
        found["torch"] = torch.__version__
        found["torch_cuda"] = torch.version.cuda
        found["cuda_available"] = torch.cuda.is_available()
    except Exception as exc:  # noqa: BLE001
        found["torch"] = {"error": f"{type(exc).__name__}: {exc}"}
    cuda = bool(torch is not None and found.get("cuda_available"))
    if "--discovery" in sys.argv:
        # before this process makes a CUDA context of its own (it would be listed too)
        guarded(found, "discovery", discovery_holds_no_context)
    if cuda:
        assert torch is not None
        guarded(found, "device", lambda: device_properties(torch))
        guarded(found, "tf32", lambda: tf32_errors(torch))
        guarded(found, "ceilings", lambda: two_ceilings(torch))
    guarded(found, "nvml", lambda: nvml_facts(torch if cuda else None))
    found["seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps(found, default=str))


if __name__ == "__main__":
    main()
