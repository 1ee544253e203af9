"""Does a precision pay off on this machine? Measured per runtime, not read off an ISA table.

A default sweep drops a (runtime, precision) pair only when a short probe measured its kernels
slower than the same runtime's fp32 here. Each probe times two kernels that dominate the models
accelscope benchmarks, in the runtime's own reduced-precision path and in its fp32 path,
interleaved (fp32, p, fp32, p, ...) so that machine drift cancels:

* ``conv``: 3x3 convolution, 64 -> 64 channels, 1 x 56 x 56 (a ResNet stage-1 layer), NHWC;
* ``matmul``: 256 x 768 @ 768 x 768 (a BERT-base projection over 256 tokens).

Runtimes and the kernels they exercise:

* ``torch`` (backends ``eager`` and ``compile``): bf16/fp16 tensors through ``F.conv2d`` and
  ``F.linear`` (oneDNN), int8 through the quantized engine (oneDNN/FBGEMM u8 x s8, the kernels
  inductor's int8 lowering calls);
* ``onnxruntime``: the backend's own static QDQ quantization of the two-kernel graphs;
* ``openvino``: f32 vs the bf16 inference-precision hint (the compiled model's effective
  precision is read back: a CPU without bf16 runs it as f32), int8 through FakeQuantize nodes,
  which OpenVINO's low-precision transformations execute as u8 x s8 kernels (what NNCF emits).

int8 without VNNI still runs u8 x s8 dot products (VPMADDUBSW), so it may well be fast on an
AVX2-only CPU: only a measurement can tell. The ISA table (:mod:`accelscope.hardware.fastpaths`)
stays as the explanation of *why*. Results are cached per machine fingerprint, thread count and
runtime version, like the ceilings; the probe of all three runtimes costs a few seconds.
"""

from __future__ import annotations

import functools
import json
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from accelscope.errors import exception_line
from accelscope.files import write_atomic
from accelscope.hardware.fastpaths import PrecisionSupport
from accelscope.serialise import dump, load
from accelscope.spec import Device, Precision

__all__ = [
    "KEEP_RATIO",
    "PROBED_PRECISIONS",
    "RUNTIME_OF_BACKEND",
    "KernelTiming",
    "ProbeTable",
    "ProbeVerdict",
    "measure_probes",
    "measured_support",
    "probe_runtime_version",
    "probe_table",
]

KEEP_RATIO = 0.9
"""A precision is kept while its faster kernel reaches this fraction of fp32's speed: closer
than that is within the probe's noise on a shared machine, and the sweep settles it."""

PROBED_PRECISIONS = (Precision.BF16, Precision.FP16, Precision.INT8)

RUNTIME_OF_BACKEND: dict[str, str] = {
    "eager": "torch",
    "compile": "torch",
    "onnxruntime": "onnxruntime",
    "openvino": "openvino",
}
"""Backend name -> the runtime whose kernels it runs (the probe's unit)."""

_RUNTIME_PRECISIONS: dict[str, tuple[Precision, ...]] = {
    "torch": (Precision.BF16, Precision.FP16, Precision.INT8),
    "onnxruntime": (Precision.INT8,),
    "openvino": (Precision.BF16, Precision.INT8),
}
_DISTRIBUTION = {"torch": "torch", "onnxruntime": "onnxruntime", "openvino": "openvino"}

_CONV = (1, 64, 56, 56)
_MATMUL = (256, 768, 768)
_REPS = 9
_KERNEL_BUDGET_S = 1.5
_HOPELESS = 20.0
"""Stop timing a kernel once one reduced-precision call takes this many fp32 calls' time."""


@dataclass(frozen=True, kw_only=True)
class KernelTiming:
    """Fastest seconds per call of one kernel in fp32 and in the probed precision."""

    kernel: str
    fp32_s: float
    precision_s: float

    @property
    def speedup(self) -> float:
        """fp32 time / probed precision time (> 1: the precision is faster)."""
        return self.fp32_s / self.precision_s if self.precision_s > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class ProbeVerdict:
    """The probe of one (runtime, precision): kernel timings, or why there are none."""

    runtime: str
    precision: Precision
    version: str
    threads: int
    kernels: tuple[KernelTiming, ...] = ()
    executes_as: str = ""
    """The precision the runtime reports it actually executes (``""``: as asked)."""
    note: str = ""
    error: str = ""

    @property
    def speedup(self) -> float | None:
        """The faster kernel's speedup over fp32 (``None`` when the probe failed)."""
        return max((k.speedup for k in self.kernels), default=None)

    @property
    def keep(self) -> bool:
        """False only when measured slower than fp32, or when the runtime itself reports that it
        runs this precision as another one (a failed probe screens nothing out)."""
        if self.executes_as:
            return False
        best = self.speedup
        return best is None or best >= KEEP_RATIO

    def describe(self) -> str:
        """One line with the numbers, e.g. ``int8 probe (onnxruntime): conv 2.1x, matmul 1.6x
        fp32 here``."""
        head = f"{self.precision.value} probe ({self.runtime}, {self.threads} threads)"
        if self.error:
            return f"{head} failed: {self.error}"
        parts = ", ".join(f"{k.kernel} {k.speedup:.2f}x" for k in self.kernels)
        runs_as = (
            f"; {self.runtime} runs {self.precision.value} as {self.executes_as} here"
            if self.executes_as
            else ""
        )
        note = f"; {self.note}" if self.note else ""
        return f"{head}: {parts} fp32 here{runs_as}{note}"


@dataclass(frozen=True, kw_only=True)
class ProbeTable:
    """Probe verdicts of one machine at one thread count; cached and stored as
    :func:`accelscope.serialise.dump` writes it."""

    fingerprint: str
    threads: int
    measured_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    verdicts: tuple[ProbeVerdict, ...] = ()
    probe_s: Annotated[float, Field(exclude=True)] = 0.0
    """Seconds the probes measured in this invocation took (0 when all came from the cache);
    not stored: it belongs to one invocation, not to the machine."""

    def get(self, backend: str, precision: Precision) -> ProbeVerdict | None:
        """The verdict for ``backend``'s runtime at ``precision``, if probed."""
        runtime = RUNTIME_OF_BACKEND.get(backend)
        for verdict in self.verdicts:
            if verdict.runtime == runtime and verdict.precision is precision:
                return verdict
        return None


def probe_runtime_version(runtime: str) -> str:
    """Installed version of ``runtime`` ("" when not installed): part of the cache key."""
    from importlib import metadata

    try:
        return metadata.version(_DISTRIBUTION[runtime])
    except (KeyError, metadata.PackageNotFoundError):
        return ""


def probe_pairs(runtime: str) -> tuple[Precision, ...]:
    """Precisions probed for ``runtime`` (those its backends run besides fp32)."""
    return _RUNTIME_PRECISIONS.get(runtime, ())


# --- timing ------------------------------------------------------------------------------------


def _interleaved(
    kernel: str, fp32: Callable[[], object], probed: Callable[[], object]
) -> KernelTiming:
    """Fastest of fp32/probed calls, alternated; bounded by :data:`_KERNEL_BUDGET_S`.

    The minimum, not the median: on a shared machine noise only ever adds time, and the fastest
    call of each side is the closest to what the kernel costs (``timeit``'s argument)."""
    for call in (fp32, probed):  # first calls (kernel selection, packing) are not timed
        call()
    fp32_times: list[float] = []
    probed_times: list[float] = []
    began = time.perf_counter()
    for _ in range(_REPS):
        start = time.perf_counter()
        fp32()
        middle = time.perf_counter()
        probed()
        end = time.perf_counter()
        fp32_times.append(middle - start)
        probed_times.append(end - middle)
        hopeless = probed_times[-1] > _HOPELESS * fp32_times[-1]
        if hopeless or end - began > _KERNEL_BUDGET_S:
            break
    return KernelTiming(
        kernel=kernel,
        fp32_s=min(fp32_times),
        precision_s=min(probed_times),
    )


# --- torch -------------------------------------------------------------------------------------


def _torch_engine() -> str:
    import torch

    engines = torch.backends.quantized.supported_engines
    for engine in ("x86", "onednn", "fbgemm", "qnnpack"):
        if engine in engines:
            return engine
    raise RuntimeError("torch has no quantized engine")


@dataclass(frozen=True)
class _Probed:
    timings: list[KernelTiming]
    note: str
    executes_as: str = ""


def _probe_torch(precision: Precision) -> _Probed:
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(_CONV, generator=gen).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(64, 64, 3, 3, generator=gen) * 0.05).contiguous(
        memory_format=torch.channels_last
    )
    rows, inner, cols = _MATMUL
    a = torch.randn(rows, inner, generator=gen)
    b = torch.randn(cols, inner, generator=gen) * 0.05

    def conv32() -> object:
        return F.conv2d(x, w, padding=1)

    def mm32() -> object:
        return F.linear(a, b)

    with torch.inference_mode():
        if precision in (Precision.BF16, Precision.FP16):
            dtype = torch.bfloat16 if precision is Precision.BF16 else torch.float16
            xl, wl, al, bl = (t.to(dtype) for t in (x, w, a, b))
            timings = [
                _interleaved("conv", conv32, lambda: F.conv2d(xl, wl, padding=1)),
                _interleaved("matmul", mm32, lambda: F.linear(al, bl)),
            ]
            return _Probed(timings, f"{str(dtype).removeprefix('torch.')} tensors (oneDNN)")
        engine = _torch_engine()
        previous = torch.backends.quantized.engine
        torch.backends.quantized.engine = engine
        try:
            import torch.ao.nn.quantized as nnq

            qconv = nnq.Conv2d(64, 64, 3, padding=1)  # type: ignore[no-untyped-call]
            scales = w.abs().amax(dim=(1, 2, 3)) / 127
            qw = torch.quantize_per_channel(
                w.contiguous(), scales, torch.zeros(64, dtype=torch.long), 0, torch.qint8
            )
            qconv.set_weight_bias(qw, None)
            qconv.scale, qconv.zero_point = 0.05, 128
            qx = torch.quantize_per_tensor(x, 0.03, 128, torch.quint8)
            qlin = nnq.Linear(inner, cols)  # type: ignore[no-untyped-call]
            lscales = b.abs().amax(dim=1) / 127
            qb = torch.quantize_per_channel(
                b, lscales, torch.zeros(cols, dtype=torch.long), 0, torch.qint8
            )
            qlin.set_weight_bias(qb, None)
            qlin.scale, qlin.zero_point = 0.05, 128
            qa = torch.quantize_per_tensor(a, 0.03, 128, torch.quint8)
            timings = [
                _interleaved("conv", conv32, lambda: qconv(qx)),
                _interleaved("matmul", mm32, lambda: qlin(qa)),
            ]
        finally:
            torch.backends.quantized.engine = previous
        return _Probed(timings, f"u8 x s8, torch quantized engine {engine!r}")


# --- ONNX Runtime ------------------------------------------------------------------------------


def _onnx_graphs(workdir: Path) -> dict[str, tuple[Path, str, Any]]:
    """The two kernels as fp32 ONNX files: name -> (path, input name, sample input)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    rows, inner, cols = _MATMUL
    specs: dict[str, tuple[Any, Any, list[int], list[int]]] = {
        "conv": (
            helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
            (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32),
            list(_CONV),
            [1, 64, _CONV[2], _CONV[3]],
        ),
        "matmul": (
            helper.make_node("MatMul", ["x", "w"], ["y"]),
            (rng.standard_normal((inner, cols)) * 0.05).astype(np.float32),
            [rows, inner],
            [rows, cols],
        ),
    }
    graphs: dict[str, tuple[Path, str, Any]] = {}
    for name, (node, weight, in_shape, out_shape) in specs.items():
        graph = helper.make_graph(
            [node],
            name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
            [numpy_helper.from_array(weight, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        path = workdir / f"{name}.onnx"
        onnx.save(model, str(path))
        graphs[name] = (path, "x", rng.standard_normal(in_shape).astype(np.float32))
    return graphs


def _probe_onnxruntime(precision: Precision, threads: int) -> _Probed:
    import onnxruntime as ort

    from accelscope.backends.onnxruntime import quantize_onnx

    def session(path: Path) -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    timings = []
    with tempfile.TemporaryDirectory(prefix="accelscope-probe-") as tmp:
        workdir = Path(tmp)
        for name, (path, input_name, sample) in _onnx_graphs(workdir).items():
            calibration = [{input_name: sample}]
            quantized_dir = workdir / f"q-{name}"
            quantized_dir.mkdir()
            int8_path = quantize_onnx(path, quantized_dir, "static", calibration)
            fp32, int8 = session(path), session(int8_path)
            feed = {input_name: sample}
            timings.append(
                _interleaved(
                    name,
                    functools.partial(fp32.run, None, feed),
                    functools.partial(int8.run, None, feed),
                )
            )
    return _Probed(timings, "static QDQ u8 x s8, the backend's own quantization")


# --- OpenVINO ----------------------------------------------------------------------------------


def _openvino_model(kernel: str, int8: bool) -> Any:
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    rows, inner, cols = _MATMUL
    shape = list(_CONV) if kernel == "conv" else [rows, inner]
    param = ops.parameter(shape, ov.Type.f32, name="x")
    if kernel == "conv":
        weight = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    else:
        weight = (rng.standard_normal((inner, cols)) * 0.05).astype(np.float32)
    source: Any = param
    weights: Any = ops.constant(weight)
    if int8:
        low, high = ops.constant(np.float32(-4.0)), ops.constant(np.float32(4.0))
        source = ops.fake_quantize(param, low, high, low, high, 256)
        limit = float(np.abs(weight).max())
        wlow, whigh = ops.constant(np.float32(-limit)), ops.constant(np.float32(limit))
        weights = ops.fake_quantize(weights, wlow, whigh, wlow, whigh, 255)
    if kernel == "conv":
        out = ops.convolution(source, weights, [1, 1], [1, 1], [1, 1], [1, 1])
    else:
        out = ops.matmul(source, weights, False, False)
    return ov.Model([out], [param], kernel), rng.standard_normal(shape).astype(np.float32)


def _type_name(value: Any) -> str:
    """An OpenVINO element type as its short name (``f32``, ``bf16``)."""
    to_string = getattr(value, "to_string", None)
    return str(to_string() if callable(to_string) else value).lower()


def _probe_openvino(precision: Precision, threads: int) -> _Probed:
    import openvino as ov

    core = ov.Core()
    executes_as = ""
    timings = []

    def compiled(kernel: str, hint: str, int8: bool) -> tuple[Any, Any]:
        model, sample = _openvino_model(kernel, int8)
        config = {
            "INFERENCE_PRECISION_HINT": hint,
            "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY",
        }
        return core.compile_model(model, "CPU", config), sample

    for kernel in ("conv", "matmul"):
        fp32, sample = compiled(kernel, "f32", False)
        if precision is Precision.BF16:
            probed, _ = compiled(kernel, "bf16", False)
            effective = _type_name(probed.get_property("INFERENCE_PRECISION_HINT"))
            if effective != "bf16":
                executes_as = effective
        else:
            probed, _ = compiled(kernel, "f32", True)
        fp32_request, probed_request = fp32.create_infer_request(), probed.create_infer_request()
        timings.append(
            _interleaved(
                kernel,
                functools.partial(fp32_request.infer, [sample]),
                functools.partial(probed_request.infer, [sample]),
            )
        )
    what = "bf16 inference-precision hint" if precision is Precision.BF16 else "FakeQuantize u8xs8"
    return _Probed(timings, what, executes_as)


_PROBES: dict[str, Callable[[Precision, int], _Probed]] = {
    "torch": lambda precision, _threads: _probe_torch(precision),
    "onnxruntime": _probe_onnxruntime,
    "openvino": _probe_openvino,
}


def measure_probes(pairs: Iterable[tuple[str, Precision]], threads: int) -> list[ProbeVerdict]:
    """Probe each (runtime, precision) at ``threads`` threads, in this process.

    A probe that raises becomes a verdict with ``error`` set (which screens nothing out).
    """
    import torch

    from accelscope.measurement.threads import pinned_threads

    verdicts = []
    with pinned_threads(threads):
        for runtime, precision in pairs:
            base = ProbeVerdict(
                runtime=runtime,
                precision=precision,
                version=probe_runtime_version(runtime),
                threads=threads,
            )
            try:
                with torch.inference_mode(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # deprecation chatter of quantized tensors
                    probed = _PROBES[runtime](precision, threads)
            except Exception as exc:  # noqa: BLE001 - a runtime may fail in any way; recorded
                verdicts.append(replace(base, error=exception_line(exc, named=True, limit=200)))
                continue
            verdicts.append(
                replace(
                    base,
                    kernels=tuple(probed.timings),
                    executes_as=probed.executes_as,
                    note=probed.note,
                )
            )
    return verdicts


def measure_probes_json(pairs_json: str, threads: int) -> str:
    """:func:`measure_probes` across a process boundary (JSON in, JSON out)."""
    pairs = [(runtime, Precision(value)) for runtime, value in json.loads(pairs_json)]
    return json.dumps([dump(v) for v in measure_probes(pairs, threads)])


def needed_pairs(backends: Sequence[tuple[str, Precision]]) -> list[tuple[str, Precision]]:
    """The distinct (runtime, precision) pairs that ``(backend, precision)`` pairs need probed,
    in first-seen order; backends without a probe and fp32 need none."""
    out: list[tuple[str, Precision]] = []
    for backend, precision in backends:
        runtime = RUNTIME_OF_BACKEND.get(backend)
        if runtime is None or precision not in probe_pairs(runtime):
            continue
        if (runtime, precision) not in out:
            out.append((runtime, precision))
    return out


# --- cache and isolation -----------------------------------------------------------------------

PROBE_TIMEOUT_S = 120.0
"""A probe run that has not finished by then is abandoned (its pairs are then not screened)."""


def cache_path(cache_dir: Path, fingerprint: str, threads: int) -> Path:
    """Where the probe verdicts of one machine at one thread count are cached."""
    return cache_dir / f"probes-{fingerprint}-t{threads}.json"


def _load_cached(path: Path) -> list[ProbeVerdict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [load(ProbeVerdict, v) for v in data.get("verdicts", [])]
    except (OSError, ValueError, KeyError, TypeError):
        return []  # a missing or damaged cache is measured again


def _save_cached(table: ProbeTable, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(dump(table), indent=1))
    except OSError:
        pass  # an unwritable cache costs a re-probe next time, nothing else


def _measure_isolated(
    pairs: list[tuple[str, Precision]], threads: int, timeout_s: float
) -> list[ProbeVerdict]:
    """:func:`measure_probes` in a spawned process, so a runtime that crashes or hangs cannot
    take the caller with it; failures become verdicts with ``error`` set."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    payload = json.dumps([[runtime, precision.value] for runtime, precision in pairs])
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        text = pool.submit(measure_probes_json, payload, threads).result(timeout=timeout_s)
        return [load(ProbeVerdict, v) for v in json.loads(text)]
    except FutureTimeout:
        reason = f"the probe did not finish within {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001 - a crashed probe process (BrokenProcessPool, ...)
        reason = f"the probe process failed ({exception_line(exc, named=True, limit=200)})"
    finally:
        for process in list(getattr(pool, "_processes", {}).values()):
            process.kill()  # a hung probe must not outlive its timeout
        pool.shutdown(wait=False, cancel_futures=True)
    return [
        ProbeVerdict(
            runtime=runtime,
            precision=precision,
            version=probe_runtime_version(runtime),
            threads=threads,
            error=reason,
        )
        for runtime, precision in pairs
    ]


def probe_table(
    pairs: Sequence[tuple[str, Precision]],
    *,
    fingerprint: str,
    threads: int,
    cache_dir: Path,
    refresh: bool = False,
    timeout_s: float = PROBE_TIMEOUT_S,
    measure: Callable[[list[tuple[str, Precision]], int, float], list[ProbeVerdict]] = (
        _measure_isolated
    ),
) -> ProbeTable:
    """Verdicts for ``pairs`` at ``threads``: from the cache when the runtime's version still
    matches (and ``refresh`` is off), the rest measured now (``measure`` is the seam tests
    replace) and added to the cache. Failed probes are not cached."""
    path = cache_path(cache_dir, fingerprint, threads)
    cached = {} if refresh else {(v.runtime, v.precision): v for v in _load_cached(path)}
    fresh: dict[tuple[str, Precision], ProbeVerdict] = {}
    for key in pairs:
        verdict = cached.get(key)
        if verdict is None or verdict.error or verdict.version != probe_runtime_version(key[0]):
            fresh[key] = verdict or ProbeVerdict(
                runtime=key[0], precision=key[1], version="", threads=threads
            )
    began = time.perf_counter()
    measured = measure(list(fresh), threads, timeout_s) if fresh else []
    probe_s = time.perf_counter() - began if fresh else 0.0
    merged = {**cached, **{(v.runtime, v.precision): v for v in measured}}
    table = ProbeTable(
        fingerprint=fingerprint,
        threads=threads,
        verdicts=tuple(merged[key] for key in pairs if key in merged),
        probe_s=probe_s,
    )
    if measured:
        keep = {key: v for key, v in merged.items() if not v.error}
        _save_cached(
            ProbeTable(fingerprint=fingerprint, threads=threads, verdicts=tuple(keep.values())),
            path,
        )
    return table


def measured_support(
    support: Sequence[PrecisionSupport], table: ProbeTable, backend: str = "eager"
) -> tuple[PrecisionSupport, ...]:
    """The ISA fast-path verdicts with ``backend``'s measured probes deciding ``fast`` on the CPU:
    the probe's numbers lead the reason, the ISA explanation follows."""
    out = []
    for item in support:
        verdict = table.get(backend, item.precision) if item.device is Device.CPU else None
        if verdict is None or verdict.error:
            out.append(item)
            continue
        reason = f"{'measured' if verdict.keep else 'measured slower'}: {verdict.describe()}"
        out.append(replace(item, fast=verdict.keep, reason=f"{reason}; {item.reason}"))
    return tuple(out)
