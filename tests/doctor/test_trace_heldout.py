"""Held-out cases for ``accelscope doctor --trace``, written from the specification alone.

Each trace is built by a small simulator of what torch 2.x's ``prof.export_chrome_trace()``
writes on a CUDA machine (Kineto JSON): host ``cpu_op``/``user_annotation``/``cuda_runtime``
events on the process's pid, GPU ``kernel``/``gpu_memcpy``/``gpu_memset``/``gpu_user_annotation``
events on pid = device and tid = stream, ``ac2g`` flow events joining each runtime call to its
GPU record by correlation id, metadata records and the top-level keys Kineto adds. The simulator
keeps a host clock and one clock per stream, so the GPU runs in order, never before its launch,
and a synchronising call waits for the stream to drain: the idle gaps fall where they would.
The builder also records the true union of GPU-busy intervals per step, which the tests use as
the ground truth for the printed shares.

Covers: accelscope.doctor.kineto, accelscope.doctor.device_timeline, accelscope.doctor.rules,
accelscope.commands.doctor.trace_mode, accelscope.commands.doctor.trace_view.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from accelscope.testing import CliRunner, assert_one_line_error

HOST_PID = 31337
HOST_TID = 31337
LOADER_TID = 31402
T0 = 1_718_000_000_000.0  # microseconds, like Kineto's absolute timestamps

# Realistic kernel names, as CUPTI reports them.
ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)"
)
RELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
    "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
    "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
    "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
    "const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
)
NORM_REDUCE = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >"
    "(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, unsigned int, "
    "float, 4>)"
)
SGEMM = "ampere_sgemm_128x64_tn"
GEMM_TF32 = (
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
GEMM_BF16 = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cluster1x2x1_"
    "warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
)
SGD_FOREACH = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
    "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
    "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)"
)
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"

CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaMalloc": 20,
    "cudaFree": 22,
    "cudaHostAlloc": 29,
}


def _merge(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``intervals``."""
    total = 0.0
    end = float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@dataclass
class Kineto:
    """A tiny simulator writing a torch.profiler (Kineto) Chrome trace."""

    device: int = 0
    device_name: str = "NVIDIA H200"
    rank: int | None = None
    world_size: int = 1
    events: list[dict[str, Any]] = field(default_factory=list)
    now: float = T0 + 50.0  # host clock, us
    streams: dict[int, float] = field(default_factory=dict)  # stream -> free at, us
    correlation: int = 1000
    external: int = 1
    gpu_busy: list[tuple[float, float, str]] = field(default_factory=list)  # (a, b, kind)
    steps: list[tuple[float, float]] = field(default_factory=list)
    _open: list[dict[str, Any]] = field(default_factory=list)
    _step_gpu: list[tuple[float, float, str]] = field(default_factory=list)

    # --- host side -------------------------------------------------------------------------
    def _host(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": HOST_PID,
            "tid": args.pop("_tid", HOST_TID),
            "ts": round(ts, 3),
            "dur": round(dur, 3),
            "args": args,
        }
        self.events.append(ev)
        return ev

    def begin(self, name: str, cat: str = "cpu_op") -> dict[str, Any]:
        """Open a host range (an operator or a user annotation) at the host clock."""
        self.external += 1
        args: dict[str, Any] = {"External id": self.external, "Record function id": 0}
        if cat == "cpu_op":
            args.update({"Sequence number": self.external, "Fwd thread id": 0})
        ev = self._host(cat, name, self.now, 0.0, **args)
        self._open.append(ev)
        return ev

    def end(self) -> None:
        ev = self._open.pop()
        ev["dur"] = round(self.now - ev["ts"], 3)

    def python(self, us: float) -> None:
        """The host running Python (no event: torch does not record it without stacks)."""
        self.now += us

    def op(self, name: str, us: float) -> None:
        """A host operator that launches nothing."""
        self.begin(name)
        self.now += us
        self.end()

    def _runtime(self, name: str, ts: float, dur: float, correlation: int | None) -> None:
        args: dict[str, Any] = {"External id": self.external, "cbid": CBID.get(name, 0)}
        if correlation is not None:
            args["correlation"] = correlation
        self._host("cuda_runtime", name, ts, dur, **args)

    def _gpu(
        self,
        cat: str,
        name: str,
        stream: int,
        dur: float,
        launched_at: float,
        correlation: int,
        kind: str,
        extra: dict[str, Any],
    ) -> tuple[float, float]:
        start = max(launched_at + 2.5, self.streams.get(stream, 0.0))
        end = start + dur
        self.streams[stream] = end
        args: dict[str, Any] = {
            "External id": self.external,
            "queued": 0,
            "device": self.device,
            "context": 1,
            "stream": stream,
            "correlation": correlation,
        }
        args.update(extra)
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.device,
                "tid": stream,
                "ts": round(start, 3),
                "dur": round(dur, 3),
                "args": args,
            }
        )
        self.events.append(
            {
                "ph": "s",
                "id": correlation,
                "pid": HOST_PID,
                "tid": HOST_TID,
                "ts": round(launched_at, 3),
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": correlation,
                "pid": self.device,
                "tid": stream,
                "ts": round(start, 3),
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
        self.gpu_busy.append((start, end, kind))
        self._step_gpu.append((start, end, kind))
        return start, end

    def kernel(
        self,
        name: str,
        gpu_us: float,
        launch_us: float = 4.0,
        stream: int = 7,
        grid: tuple[int, int, int] = (1024, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
    ) -> None:
        """``cudaLaunchKernel`` on the host; the kernel runs once the stream is free."""
        self.correlation += 1
        launched = self.now
        self._runtime("cudaLaunchKernel", launched, launch_us, self.correlation)
        self.now += launch_us
        kind = "nccl" if name.startswith("nccl") else "compute"
        self._gpu(
            "kernel",
            name,
            stream,
            gpu_us,
            launched,
            self.correlation,
            kind,
            {
                "registers per thread": 32,
                "shared memory": 0,
                "blocks per SM": round(grid[0] / 132, 6),
                "warps per SM": round(grid[0] * block[0] / 32 / 132, 6),
                "grid": list(grid),
                "block": list(block),
                "est. achieved occupancy %": 100,
            },
        )

    def launch_op(self, op: str, kernel: str, gpu_us: float, host_us: float = 8.0) -> None:
        """An aten operator that launches one kernel: dispatch, then cudaLaunchKernel."""
        self.begin(op)
        self.now += host_us / 2
        self.kernel(kernel, gpu_us, launch_us=host_us / 2)
        self.end()

    def sync(self, name: str = "cudaStreamSynchronize", stream: int = 7) -> None:
        """A synchronising call: returns once ``stream`` (every stream for the device-wide
        one) has drained."""
        start = self.now
        if name == "cudaDeviceSynchronize":
            drained = max(self.streams.values(), default=start)
        else:
            drained = self.streams.get(stream, start)
        done = max(start + 2.0, drained + 3.0)
        self._runtime(name, start, done - start, None)
        self.now = done

    def memcpy(
        self,
        direction: str,
        nbytes: int,
        gbps: float,
        host_mem: str = "Pageable",
        stream: int = 7,
        blocking: bool = True,
        staging_us: float = 0.0,
    ) -> None:
        """``cudaMemcpyAsync`` and its GPU copy record. A pageable copy (and any DtoH one
        that the host reads) keeps the host inside the call until the copy is done;
        ``staging_us`` is host time inside the call before the DMA starts (the driver
        copying pageable memory into its pinned staging buffer)."""
        self.correlation += 1
        launched = self.now
        gpu_us = nbytes / (gbps * 1e3)
        if direction == "HtoD":
            name = f"Memcpy HtoD ({host_mem} -> Device)"
        else:
            name = f"Memcpy DtoH (Device -> {host_mem})"
        _, end = self._gpu(
            "gpu_memcpy",
            name,
            stream,
            gpu_us,
            launched + staging_us,
            self.correlation,
            "h2d" if direction == "HtoD" else "d2h",
            {"bytes": nbytes, "memory bandwidth (GB/s)": round(gbps, 4)},
        )
        host_end = end + 4.0 if blocking else launched + 6.0
        self._runtime("cudaMemcpyAsync", launched, host_end - launched, self.correlation)
        self.now = host_end

    def memset(self, nbytes: int, gpu_us: float, stream: int = 7) -> None:
        self.correlation += 1
        launched = self.now
        self._runtime("cudaMemsetAsync", launched, 4.0, self.correlation)
        self.now += 4.0
        self._gpu(
            "gpu_memset",
            "Memset (Device)",
            stream,
            gpu_us,
            launched,
            self.correlation,
            "memset",
            {"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / gpu_us / 1e3, 4)},
        )

    def runtime_call(self, name: str, us: float) -> None:
        """A runtime call with no GPU record (cudaMalloc, cudaFree, cudaHostAlloc)."""
        self._runtime(name, self.now, us, None)
        self.now += us

    # --- composite host actions ------------------------------------------------------------
    def item(self, bytes_: int = 4) -> None:
        """``tensor.item()``: aten::item > aten::_local_scalar_dense > a DtoH copy that the
        host waits for, then cudaStreamSynchronize."""
        self.begin("aten::item")
        self.now += 3.0
        self.begin("aten::_local_scalar_dense")
        self.now += 4.0
        self.memcpy("DtoH", bytes_, 0.002, host_mem="Pageable")
        self.sync()
        self.now += 2.0
        self.end()
        self.now += 1.0
        self.end()

    def to_device(
        self,
        nbytes: int,
        gbps: float,
        host_mem: str,
        blocking: bool = True,
        staging_us: float = 0.0,
        stream: int = 7,
    ) -> None:
        """``batch.to("cuda")``: aten::to > aten::_to_copy > aten::copy_ > cudaMemcpyAsync."""
        self.begin("aten::to")
        self.now += 2.0
        self.begin("aten::_to_copy")
        self.op("aten::empty_strided", 6.0)
        self.begin("aten::copy_")
        self.now += 3.0
        self.memcpy(
            "HtoD",
            nbytes,
            gbps,
            host_mem=host_mem,
            blocking=blocking,
            staging_us=staging_us,
            stream=stream,
        )
        self.now += 2.0
        self.end()
        self.end()
        self.end()

    def dataloader(self, us: float, multiprocess: bool = True) -> None:
        it = "_MultiProcessingDataLoaderIter" if multiprocess else "_SingleProcessDataLoaderIter"
        self.begin(f"enumerate(DataLoader)#{it}.__next__", cat="user_annotation")
        self.now += us
        self.end()

    def optimizer_step(self, n_params: int = 4, annotate: bool = True) -> None:
        if annotate:
            self.begin("Optimizer.step#SGD.step", cat="user_annotation")
        self.begin("aten::_foreach_add_")
        self.now += 6.0
        self.kernel(SGD_FOREACH, 12.0 * n_params)
        self.end()
        if annotate:
            self.end()

    def zero_grad(self) -> None:
        self.begin("Optimizer.zero_grad#SGD.zero_grad", cat="user_annotation")
        self.now += 12.0
        self.end()

    # --- steps ------------------------------------------------------------------------------
    def step_begin(self, n: int, annotate: bool = True) -> None:
        self._step_gpu = []
        self._step_start = self.now
        self._step_n = n
        self._step_annotated = annotate
        if annotate:
            self.begin(f"ProfilerStep#{n}", cat="user_annotation")

    def step_end(self) -> None:
        if self._step_annotated:
            self.end()
            # torch 2.x also projects the step's range onto the GPU's stream
            gpu = [(a, b) for a, b, _ in self._step_gpu]
            if gpu:
                a = min(x for x, _ in gpu)
                b = max(y for _, y in gpu)
                self.events.append(
                    {
                        "ph": "X",
                        "cat": "gpu_user_annotation",
                        "name": f"ProfilerStep#{self._step_n}",
                        "pid": self.device,
                        "tid": 7,
                        "ts": round(a, 3),
                        "dur": round(b - a, 3),
                        "args": {"External id": self.external, "device": self.device},
                    }
                )
        self.steps.append((self._step_start, self.now))

    # --- ground truth ------------------------------------------------------------------------
    def share(self, step: int, kinds: tuple[str, ...] | None = None) -> float:
        """The true union of GPU-busy time of ``kinds`` within step ``step``, over the step."""
        a, b = self.steps[step]
        clipped = [
            (max(x, a), min(y, b))
            for x, y, k in self.gpu_busy
            if (kinds is None or k in kinds) and y > a and x < b
        ]
        return _merge(clipped) / (b - a)

    def mean_share(self, kinds: tuple[str, ...] | None = None) -> float:
        return sum(self.share(i, kinds) for i in range(len(self.steps))) / len(self.steps)

    # --- output -----------------------------------------------------------------------------
    def document(self) -> dict[str, Any]:
        end = self.now + 20.0
        meta: list[dict[str, Any]] = [
            {
                "name": "process_name",
                "ph": "M",
                "ts": T0,
                "pid": HOST_PID,
                "tid": 0,
                "args": {"name": "python3"},
            },
            {
                "name": "process_labels",
                "ph": "M",
                "ts": T0,
                "pid": HOST_PID,
                "tid": 0,
                "args": {"labels": "CPU"},
            },
            {
                "name": "process_sort_index",
                "ph": "M",
                "ts": T0,
                "pid": HOST_PID,
                "tid": 0,
                "args": {"sort_index": HOST_PID},
            },
            {
                "name": "thread_name",
                "ph": "M",
                "ts": T0,
                "pid": HOST_PID,
                "tid": HOST_TID,
                "args": {"name": "thread 31337 (python3)"},
            },
            {
                "name": "process_name",
                "ph": "M",
                "ts": T0,
                "pid": self.device,
                "tid": 0,
                "args": {"name": "python3"},
            },
            {
                "name": "process_labels",
                "ph": "M",
                "ts": T0,
                "pid": self.device,
                "tid": 0,
                "args": {"labels": f"GPU {self.device}"},
            },
        ]
        for stream in sorted(self.streams):
            meta.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "ts": T0,
                    "pid": self.device,
                    "tid": stream,
                    "args": {"name": f"stream {stream} "},
                }
            )
        tail: list[dict[str, Any]] = [
            {
                "ph": "X",
                "cat": "Trace",
                "ts": T0,
                "dur": round(end - T0, 3),
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0},
            },
            {
                "name": "Iteration Start: PyTorch Profiler",
                "ph": "i",
                "s": "g",
                "pid": "Traces",
                "tid": "Trace PyTorch Profiler",
                "ts": T0,
            },
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": end},
        ]
        doc: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [
                {
                    "id": self.device,
                    "name": self.device_name,
                    "totalGlobalMem": 150_121_545_728,
                    "computeMajor": 9,
                    "computeMinor": 0,
                    "maxThreadsPerBlock": 1024,
                    "maxThreadsPerMultiprocessor": 2048,
                    "regsPerBlock": 65536,
                    "warpSize": 32,
                    "sharedMemPerBlock": 49152,
                    "numSms": 132,
                    "sharedMemPerMultiprocessor": 233472,
                }
            ],
            "cupti_version": 24,
            "cuda_runtime_version": 12080,
            "cuda_driver_version": 12080,
            "trace_id": "7F2A6C1E0B5D4E2F9A3C8B1D0E6F5A4C",
            "traceEvents": meta + self.events + tail,
            "traceName": f"/tmp/tb/host_{HOST_PID}.1718000000000.pt.trace.json",
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1_717_000_000_000_000_000,
        }
        if self.rank is not None:
            doc["distributedInfo"] = {
                "backend": "nccl",
                "rank": self.rank,
                "world_size": self.world_size,
                "pg_count": 1,
                "pg_config": [],
                "nccl_version": "2.21.5",
            }
        return doc

    def write(self, path: Path) -> Path:
        text = json.dumps(self.document())
        if path.name.endswith(".gz"):
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        return path


# --- the loops ------------------------------------------------------------------------------
def forward_backward(t: Kineto, layers: int, gemm: str, gemm_us: float, ew_us: float) -> None:
    """Eager forward and backward of ``layers`` linear+relu blocks (3 GEMMs a layer)."""
    for _ in range(layers):
        t.begin("aten::linear")
        t.op("aten::t", 3.0)
        t.launch_op("aten::addmm", gemm, gemm_us, host_us=10.0)
        t.end()
        t.launch_op("aten::relu", RELU, ew_us)
    t.launch_op("aten::mse_loss", ELEMENTWISE, ew_us)
    t.begin("autograd::engine::evaluate_function: AddmmBackward0")
    for _ in range(layers):
        t.launch_op("aten::threshold_backward", RELU, ew_us)
        t.launch_op("aten::mm", gemm, gemm_us, host_us=9.0)
        t.launch_op("aten::mm", gemm, gemm_us, host_us=9.0)
    t.end()


def item_per_parameter_loop(steps: int = 3, params: int = 150, python_us: float = 12.0) -> Kineto:
    """Logs every parameter's gradient norm with ``.item()`` each step: ~150 readbacks.
    ``python_us`` is the Python between readbacks (a dict store; a logger call costs more)."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(25.0, multiprocess=False)
        forward_backward(t, layers=4, gemm=GEMM_TF32, gemm_us=20.0, ew_us=4.0)
        t.optimizer_step(n_params=8)
        for _ in range(params):
            t.python(python_us)
            t.launch_op("aten::linalg_vector_norm", NORM_REDUCE, 2.5, host_us=12.0)
            t.item()
        t.zero_grad()
        t.step_end()
    return t


def synchronize_timing_loop(steps: int = 3, ops: int = 120) -> Kineto:
    """Times every layer with ``torch.cuda.synchronize()`` + ``time.perf_counter()``."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(20.0)
        for _ in range(ops):
            t.launch_op("aten::addmm", GEMM_TF32, 10.0, host_us=10.0)
            t.sync("cudaDeviceSynchronize")
            t.python(14.0)  # perf_counter, dict update
        t.item()
        t.step_end()
    return t


def pageable_copy_loop(steps: int = 3, nbytes: int = 154_140_672) -> Kineto:
    """Copies a 154 MB batch from pageable host memory every step, then a short model."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(40.0, multiprocess=False)
        t.to_device(nbytes, 12.0, "Pageable")  # ~12.8 ms, the host blocked meanwhile
        forward_backward(t, layers=3, gemm=GEMM_TF32, gemm_us=160.0, ew_us=40.0)
        t.optimizer_step(n_params=6)
        t.item()
        t.python(1200.0)  # logging, metrics on the host
        t.zero_grad()
        t.step_end()
    return t


def pageable_staging_loop(steps: int = 3, nbytes: int = 154_140_672) -> Kineto:
    """Pageable copies whose host call stages the data for ~6 ms before the DMA's 5 ms."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(40.0, multiprocess=False)
        t.to_device(nbytes, 30.0, "Pageable", staging_us=6_000.0)
        forward_backward(t, layers=2, gemm=GEMM_TF32, gemm_us=150.0, ew_us=20.0)
        t.optimizer_step()
        t.item()
        t.step_end()
    return t


def pinned_copy_loop(steps: int = 3, nbytes: int = 154_140_672) -> Kineto:
    """Pinned copies, but issued in line with compute: nothing overlaps them."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(40.0)
        t.to_device(nbytes, 48.0, "Pinned", blocking=False)  # ~3.2 ms on the GPU
        t.sync()  # a later .item() or synchronize waits for the copy: nothing to overlap
        forward_backward(t, layers=2, gemm=GEMM_TF32, gemm_us=90.0, ew_us=20.0)
        t.optimizer_step(n_params=4)
        t.item()
        t.step_end()
    return t


def pinned_overlapped_loop(steps: int = 3, nbytes: int = 38_535_168) -> Kineto:
    """Pinned, non_blocking copies of the next batch on a side stream, under the compute."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(30.0)
        t.to_device(nbytes, 48.0, "Pinned", blocking=False)  # ~0.8 ms on stream 7
        forward_backward(t, layers=4, gemm=GEMM_TF32, gemm_us=700.0, ew_us=20.0)
        # the prefetcher copies the next batch on stream 24 while the GEMMs run
        t.to_device(nbytes * 4, 48.0, "Pinned", blocking=False, stream=24)
        t.optimizer_step(n_params=6)
        t.item()
        t.step_end()
    return t


def dataloader_starved_loop(steps: int = 3) -> Kineto:
    """Each step waits ~30 ms for the next batch; the GPU's work is ~3 ms."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(30_000.0)
        t.to_device(8 * 3 * 224 * 224 * 4, 45.0, "Pinned", blocking=False)
        forward_backward(t, layers=4, gemm=SGEMM, gemm_us=220.0, ew_us=25.0)
        t.optimizer_step()
        t.item()
        t.step_end()
    return t


def dataloader_hidden_loop(steps: int = 3) -> Kineto:
    """Fetches the next batch (15 ms) while the GPU runs this step's ~20 ms of GEMMs."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        forward_backward(t, layers=4, gemm=SGEMM, gemm_us=1600.0, ew_us=30.0)
        t.optimizer_step()
        t.dataloader(15_000.0)
        t.item()
        t.step_end()
    return t


def launch_bound_loop(steps: int = 2, kernels: int = 700) -> Kineto:
    """Thousands of 3 us kernels, each launch taking ~9 us on the host: 6 us gaps."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(20.0, multiprocess=False)
        for i in range(kernels):
            t.launch_op("aten::add" if i % 2 else "aten::mul", ELEMENTWISE, 3.0, host_us=9.0)
        t.optimizer_step()
        t.item()
        t.step_end()
    return t


def python_launch_bound_loop(steps: int = 2, kernels: int = 800) -> Kineto:
    """A Python-heavy model of tiny ops: ~7 us of Python between 5 us operators, 3 us
    kernels. The GPU runs dry while the host is in Python between launches."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(20.0, multiprocess=False)
        for i in range(kernels):
            t.python(7.0)
            t.launch_op("aten::mul" if i % 2 else "aten::add", ELEMENTWISE, 3.0, host_us=5.0)
        t.optimizer_step()
        t.item()
        t.step_end()
    return t


def device_bound_loop(steps: int = 3, gemm: str = SGEMM) -> Kineto:
    """Big GEMMs queued ahead of the host; the host then waits inside loss.item()."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(30.0)
        t.to_device(2 << 20, 45.0, "Pinned", blocking=False)
        forward_backward(t, layers=6, gemm=gemm, gemm_us=1500.0, ew_us=30.0)
        t.optimizer_step(n_params=12)
        t.item()  # waits ~27 ms of queued GEMMs: the GPU is busy meanwhile
        t.python(900.0)
        t.zero_grad()
        t.step_end()
    return t


def tiny_kernels_busy_loop(steps: int = 2, kernels: int = 900) -> Kineto:
    """A GPU kept 'busy' back to back by tiny 1-block kernels queued ahead of the host."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(10.0, multiprocess=False)
        for _ in range(kernels):
            t.begin("aten::add_")
            t.kernel(ELEMENTWISE, 6.0, launch_us=2.0, grid=(1, 1, 1), block=(64, 1, 1))
            t.end()
        t.item()
        t.step_end()
    return t


def two_streams_loop(steps: int = 3) -> Kineto:
    """Compute on stream 7 and a second compute stream 20, overlapping almost entirely."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(30.0)
        for _ in range(12):
            t.launch_op("aten::mm", GEMM_BF16, 900.0, host_us=10.0)
            t.begin("aten::mm")
            t.now += 5.0
            t.kernel(GEMM_BF16, 850.0, launch_us=5.0, stream=20)
            t.end()
        t.optimizer_step()
        t.sync("cudaDeviceSynchronize")
        t.item()
        t.step_end()
    return t


def runaway_kernel_trace() -> Kineto:
    """A healthy loop in which one kernel record has a corrupt, 40 s duration (a CUPTI
    timestamp glitch): it must be clipped to the step, never a share above 100 %."""
    t = device_bound_loop(steps=3, gemm=GEMM_BF16)
    kernels = [e for e in t.events if e.get("cat") == "kernel"]
    kernels[5]["dur"] = 40_000_000.0
    return t


def allocator_loop(steps: int = 3) -> Kineto:
    """Every step frees and re-allocates large buffers: cudaFree/cudaMalloc with an idle GPU."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(20.0, multiprocess=False)
        forward_backward(t, layers=2, gemm=GEMM_TF32, gemm_us=150.0, ew_us=20.0)
        t.item()
        for _ in range(6):
            t.begin("aten::empty")
            t.runtime_call("cudaFree", 900.0)
            t.runtime_call("cudaMalloc", 1400.0)
            t.end()
        t.optimizer_step()
        t.item()
        t.step_end()
    return t


def nccl_bound_loop(steps: int = 3) -> Kineto:
    """A data-parallel step dominated by the gradient all-reduce (NCCL kernels)."""
    t = Kineto(rank=0, world_size=8)
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(30.0)
        forward_backward(t, layers=2, gemm=SGEMM, gemm_us=120.0, ew_us=15.0)
        for _ in range(4):
            t.begin("nccl:all_reduce", cat="user_annotation")
            t.kernel(NCCL_ALLREDUCE, 2600.0, launch_us=8.0, stream=20, grid=(16, 1, 1))
            t.end()
        t.sync("cudaDeviceSynchronize")
        t.optimizer_step()
        t.item()
        t.step_end()
    return t


def mixed_loop(steps: int = 3) -> Kineto:
    """No single cause reaches 40 %: some input wait, some readbacks, some launching."""
    t = Kineto()
    for n in range(steps):
        t.step_begin(n + 2)
        t.dataloader(2_600.0)
        forward_backward(t, layers=4, gemm=GEMM_TF32, gemm_us=220.0, ew_us=20.0)
        t.optimizer_step()
        t.item()
        for _ in range(40):
            t.python(20.0)
            t.launch_op("aten::linalg_vector_norm", NORM_REDUCE, 3.0, host_us=10.0)
            t.item()
        for _ in range(200):
            t.launch_op("aten::add", ELEMENTWISE, 2.0, host_us=10.0)
        t.item()
        t.step_end()
    return t


def optimizer_annotated_loop(optimizer_steps: int = 5) -> Kineto:
    """No prof.step(): no ProfilerStep#N, only the optimizer's own annotations."""
    t = Kineto()
    for n in range(optimizer_steps):
        t.step_begin(n, annotate=False)
        t.dataloader(30.0)
        forward_backward(t, layers=6, gemm=GEMM_TF32, gemm_us=1500.0, ew_us=30.0)
        t.optimizer_step(n_params=12)
        t.item()
        t.step_end()
    return t


def unannotated_window() -> Kineto:
    """Neither ProfilerStep nor optimizer annotations: an inference loop under a profiler."""
    t = Kineto()
    for n in range(3):
        t.step_begin(n, annotate=False)
        t.begin("aten::linear")
        t.kernel(GEMM_BF16, 3_000.0)
        t.end()
        t.item()
        t.step_end()
    return t


def rank_trace(rank: int, gemm_us: float) -> Kineto:
    t = Kineto(rank=rank, world_size=2, device=rank)
    for n in range(3):
        t.step_begin(n + 2)
        t.dataloader(30.0)
        forward_backward(t, layers=3, gemm=GEMM_BF16, gemm_us=gemm_us, ew_us=20.0)
        t.begin("nccl:all_reduce", cat="user_annotation")
        t.kernel(NCCL_ALLREDUCE, 150.0, launch_us=8.0, stream=20, grid=(16, 1, 1))
        t.end()
        t.optimizer_step()
        t.item()
        t.step_end()
    return t


# --- helpers ---------------------------------------------------------------------------------
PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")


def run_json(cli: CliRunner, path: Path, *extra: str) -> dict[str, Any]:
    code, out, err = cli("doctor", "--trace", path, "--json", *extra)
    assert code == 0, (code, out, err)
    data = json.loads(out)
    assert isinstance(data, dict), data
    return data


def run_text(cli: CliRunner, path: Path, *extra: str) -> str:
    code, out, err = cli("doctor", "--trace", path, *extra)
    assert code == 0, (code, out, err)
    return out


def only_rank(data: dict[str, Any]) -> dict[str, Any]:
    assert len(data["ranks"]) == 1, data["ranks"]
    rank: dict[str, Any] = data["ranks"][0]
    return rank


def verdict(data: dict[str, Any]) -> dict[str, Any]:
    v: dict[str, Any] = only_rank(data)["verdict"]
    return v


def ranked(v: dict[str, Any]) -> dict[str, float]:
    return {name: share for name, share in v["ranked"]}


def flat(text: str) -> str:
    return " ".join(text.split())


def assert_shares_bounded(data: dict[str, Any]) -> None:
    """No part exceeds its step: every share of every rank and step is within [0, 1] and
    the exclusive causes sum to at most the step."""
    for rank in data["ranks"]:
        v = rank["verdict"]
        for key in ("busy_share", "compute_share", "copy_share", "idle_share"):
            assert 0.0 <= v[key] <= 1.0 + 1e-9, (key, v[key])
        assert sum(share for _, share in v["ranked"]) <= 1.0 + 1e-6, v["ranked"]
        for step in rank["steps"]:
            for key in ("busy_share", "compute_busy_share", "copy_busy_share", "idle_share"):
                assert 0.0 <= step[key] <= 1.0 + 1e-9, (key, step)
            assert sum(step["shares"].values()) <= 1.0 + 1e-6, step["shares"]


def assert_printed_percent_bounded(text: str) -> None:
    values = [float(v) for v in PERCENT.findall(text)]
    assert values, text
    assert max(values) <= 100.0, [v for v in values if v > 100.0]


def assert_no_precision_advice(data: dict[str, Any], text: str) -> None:
    v = verdict(data)
    advice = (v["headline"] + " " + v["advice"]).lower()
    for word in ("bf16", "fp16", "fp8", "autocast"):
        assert word not in advice, advice
        assert word not in text.lower(), text


# --- the cases --------------------------------------------------------------------------------
def test_item_per_parameter_readbacks_are_sync_bound(cli: CliRunner, tmp_path: Path) -> None:
    """Ground truth from an H200: ~150 .item() a step, GPU busy ~13 % -> sync-bound."""
    t = item_per_parameter_loop()
    path = t.write(tmp_path / "item.json")
    data = run_json(cli, path)
    v = verdict(data)
    truth = t.mean_share()
    assert 0.10 <= truth <= 0.20
    assert v["busy_share"] == pytest.approx(truth, abs=0.02)
    assert v["bottleneck"] == "sync", v["ranked"]
    assert ranked(v)["sync"] >= 0.40
    assert "N steps" in v["advice"] and "on the device" in v["advice"], v["advice"]
    text = run_text(cli, path)
    assert_no_precision_advice(data, text)
    assert_shares_bounded(data)
    assert_printed_percent_bounded(text)


def test_item_readbacks_with_logging_python_between_are_sync_bound(
    cli: CliRunner, tmp_path: Path
) -> None:
    """The same loop logging each norm (writer.add_scalar: ~28 us of Python a parameter).
    Every idle gap starts while the host is inside aten::item / cudaStreamSynchronize:
    attributed gap by gap to what the host was doing when the GPU ran dry, it is a
    readback. Must be sync-bound (the H200 ground truth), never mixed or compute."""
    t = item_per_parameter_loop(python_us=28.0)
    data = run_json(cli, t.write(tmp_path / "item_logging.json"))
    v = verdict(data)
    assert v["busy_share"] == pytest.approx(t.mean_share(), abs=0.02)
    assert v["bottleneck"] == "sync", v["ranked"]
    # the GPU ran dry at a readback in every gap: the readbacks own (nearly) all the idle
    assert ranked(v)["sync"] >= 0.8 * v["idle_share"], v["ranked"]


def test_synchronize_per_layer_timing_is_sync_bound(cli: CliRunner, tmp_path: Path) -> None:
    """torch.cuda.synchronize() after every layer to time it: each idle gap opens while the
    host sits in cudaDeviceSynchronize, so the readback/sync cause owns the idle."""
    t = synchronize_timing_loop()
    data = run_json(cli, t.write(tmp_path / "sync_timing.json"))
    v = verdict(data)
    assert v["busy_share"] == pytest.approx(t.mean_share(), abs=0.02)
    assert v["idle_share"] > 0.6
    assert v["bottleneck"] == "sync", v["ranked"]
    assert ranked(v)["sync"] >= 0.8 * v["idle_share"], v["ranked"]


def test_pageable_154mb_copy_is_pageable_copies(cli: CliRunner, tmp_path: Path) -> None:
    """Ground truth from an H200: HtoD pageable memcpy ~78 % of the step, kernels ~10 %."""
    t = pageable_copy_loop()
    path = t.write(tmp_path / "pageable.json")
    data = run_json(cli, path)
    v = verdict(data)
    h2d = t.mean_share(("h2d",))
    assert 0.74 <= h2d <= 0.82
    assert v["bottleneck"] == "h2d_pageable", v["ranked"]
    assert ranked(v)["h2d_pageable"] == pytest.approx(h2d, abs=0.03)
    assert v["copy_share"] == pytest.approx(h2d, abs=0.03)
    assert v["compute_share"] == pytest.approx(t.mean_share(("compute",)), abs=0.02)
    assert v["compute_share"] < 0.2
    advice = v["advice"]
    assert "pin_memory" in advice and "non_blocking" in advice and "uint8" in advice, advice
    text = run_text(cli, path)
    assert_no_precision_advice(data, text)
    assert_printed_percent_bounded(text)


def test_pageable_copy_staging_time_counts_as_the_copy(cli: CliRunner, tmp_path: Path) -> None:
    """The GPU idles while the driver stages pageable memory inside cudaMemcpyAsync (under
    aten::copy_): that idle is the host->device copy's, not launch or other."""
    t = pageable_staging_loop()
    data = run_json(cli, t.write(tmp_path / "staging.json"))
    v = verdict(data)
    calls = [
        e
        for e in t.events
        if e["name"] == "cudaMemcpyAsync" and e["dur"] > 1000 and e["cat"] == "cuda_runtime"
    ]
    call_share = sum(e["dur"] for e in calls) / sum(b - a for a, b in t.steps)
    assert call_share > 0.6
    assert v["bottleneck"] == "h2d_pageable", v["ranked"]
    assert ranked(v)["h2d_pageable"] == pytest.approx(call_share, abs=0.05)


def test_pinned_copies_not_overlapped(cli: CliRunner, tmp_path: Path) -> None:
    t = pinned_copy_loop()
    path = t.write(tmp_path / "pinned.json")
    data = run_json(cli, path)
    v = verdict(data)
    assert v["bottleneck"] == "h2d_pinned", v["ranked"]
    assert ranked(v)["h2d_pinned"] == pytest.approx(t.mean_share(("h2d",)), abs=0.03)
    assert "on the device" in v["advice"] and "uint8" in v["advice"], v["advice"]
    assert_no_precision_advice(data, run_text(cli, path))


def test_pinned_copies_overlapped_with_compute_are_not_the_bottleneck(
    cli: CliRunner, tmp_path: Path
) -> None:
    """Copies on a side stream under the GEMMs cost nothing: compute takes priority."""
    t = pinned_overlapped_loop()
    data = run_json(cli, t.write(tmp_path / "overlapped.json"))
    v = verdict(data)
    assert t.mean_share(("compute",)) >= 0.85
    assert v["bottleneck"] == "compute", v["ranked"]
    assert ranked(v)["h2d_pinned"] < 0.10
    assert_shares_bounded(data)


def test_dataloader_starved_loop_is_input_bound(cli: CliRunner, tmp_path: Path) -> None:
    t = dataloader_starved_loop()
    data = run_json(cli, t.write(tmp_path / "starved.json"))
    v = verdict(data)
    assert v["bottleneck"] == "dataloader", v["ranked"]
    assert ranked(v)["dataloader"] == pytest.approx(1 - t.mean_share(), abs=0.03)
    assert "workers" in v["advice"], v["advice"]


def test_dataloader_wait_hidden_behind_gpu_work_is_not_input_bound(
    cli: CliRunner, tmp_path: Path
) -> None:
    """15 ms in the DataLoader while 20 ms of queued GEMMs run: the GPU never waits for it."""
    t = dataloader_hidden_loop()
    data = run_json(cli, t.write(tmp_path / "hidden.json"))
    v = verdict(data)
    assert v["bottleneck"] == "compute", v["ranked"]
    assert ranked(v)["dataloader"] < 0.05
    # fp32 SIMT GEMMs set the pace: lower precision is the advice here
    assert "bf16" in v["advice"], v["advice"]


def test_launch_bound_loop(cli: CliRunner, tmp_path: Path) -> None:
    """Thousands of 3 us kernels with 6 us gaps under cudaLaunchKernel."""
    t = launch_bound_loop()
    path = t.write(tmp_path / "launch.json")
    data = run_json(cli, path)
    v = verdict(data)
    assert v["busy_share"] == pytest.approx(t.mean_share(), abs=0.02)
    assert v["bottleneck"] == "launch", v["ranked"]
    assert ranked(v)["launch"] >= 0.55
    assert "CUDA graphs" in v["advice"] and "torch.compile" in v["advice"], v["advice"]
    assert "batch" in v["advice"], v["advice"]
    assert_no_precision_advice(data, run_text(cli, path))


def test_python_between_tiny_ops_is_launch_bound(cli: CliRunner, tmp_path: Path) -> None:
    """The GPU runs dry while the host runs Python between two aten operators: that is
    'launching and Python (launch-bound)', not an unexplained 'other'."""
    t = python_launch_bound_loop()
    data = run_json(cli, t.write(tmp_path / "python_launch.json"))
    v = verdict(data)
    assert v["busy_share"] == pytest.approx(t.mean_share(), abs=0.02)
    assert v["bottleneck"] == "launch", v["ranked"]
    # every gap opens with the host in Python between two launches: launch owns the idle
    assert ranked(v)["launch"] >= 0.8 * v["idle_share"], v["ranked"]
    assert ranked(v)["other"] < 0.1, v["ranked"]


def test_device_bound_fp32_gemms(cli: CliRunner, tmp_path: Path) -> None:
    """Big fp32 GEMMs cover ~95 % of the step; the host waits in loss.item() meanwhile,
    which is GPU compute, not a sync cost."""
    t = device_bound_loop()
    path = t.write(tmp_path / "device.json")
    data = run_json(cli, path)
    v = verdict(data)
    truth = t.mean_share(("compute",))
    assert 0.93 <= truth <= 0.98
    assert v["compute_share"] == pytest.approx(truth, abs=0.02)
    assert v["bottleneck"] == "compute", v["ranked"]
    assert ranked(v)["sync"] < 0.05
    assert "bf16" in v["advice"] and "torch.compile" in v["advice"], v["advice"]
    assert v["sm_active"] is None
    text = run_text(cli, path)
    assert "GPM SM active not measured" in flat(text)
    assert_printed_percent_bounded(text)


def test_device_bound_with_high_sm_activity(cli: CliRunner, tmp_path: Path) -> None:
    path = device_bound_loop().write(tmp_path / "device.json")
    data = run_json(cli, path, "--sm-active", "0.9")
    v = verdict(data)
    assert v["bottleneck"] == "compute", v["ranked"]
    assert v["sm_active"] == pytest.approx(0.9)
    assert "bf16" in v["advice"], v["advice"]


def test_covered_by_kernels_at_10pct_sm_active_is_underfilled(
    cli: CliRunner, tmp_path: Path
) -> None:
    """Kernels cover the step but GPM says SM active 10 %: under-filled, never bf16."""
    path = device_bound_loop().write(tmp_path / "device.json")
    data = run_json(cli, path, "--sm-active", "0.1")
    v = verdict(data)
    assert v["bottleneck"] == "underfilled", v["ranked"]
    advice = v["advice"]
    assert "batch" in advice and "CUDA graph" in advice, advice
    assert "fuse" in advice.lower() or "fusion" in advice.lower(), advice
    text = run_text(cli, path, "--sm-active", "0.1")
    assert_no_precision_advice(data, text)


def test_sm_active_between_20_and_50_is_not_device_bound(cli: CliRunner, tmp_path: Path) -> None:
    """Kernels cover the step but SM active is 35 %: neither compute-bound (needs >= 50 %)
    nor under-filled (needs < 20 %), and never bf16 advice."""
    path = device_bound_loop().write(tmp_path / "device.json")
    data = run_json(cli, path, "--sm-active", "0.35")
    v = verdict(data)
    assert v["bottleneck"] not in ("compute", "underfilled"), v
    assert_no_precision_advice(data, run_text(cli, path, "--sm-active", "0.35"))


def test_tiny_kernels_back_to_back_are_underfilled(cli: CliRunner, tmp_path: Path) -> None:
    t = tiny_kernels_busy_loop()
    path = t.write(tmp_path / "tiny.json")
    data = run_json(cli, path, "--sm-active", "0.05", "--gpu-util", "1.0")
    v = verdict(data)
    assert v["busy_share"] >= 0.95
    assert v["bottleneck"] == "underfilled", v["ranked"]
    text = run_text(cli, path, "--sm-active", "0.05", "--gpu-util", "1.0")
    assert_no_precision_advice(data, text)


def test_two_overlapping_streams_count_once(cli: CliRunner, tmp_path: Path) -> None:
    """Kernels on streams 7 and 20 overlap (their sum is ~190 % of the step)."""
    t = two_streams_loop()
    path = t.write(tmp_path / "streams.json")
    summed = sum(b - a for a, b, _ in t.gpu_busy) / sum(b - a for a, b in t.steps)
    assert summed > 1.5
    data = run_json(cli, path)
    v = verdict(data)
    assert v["busy_share"] == pytest.approx(t.mean_share(), abs=0.02)
    assert v["busy_share"] <= 1.0
    assert_shares_bounded(data)
    assert_printed_percent_bounded(run_text(cli, path))


def test_runaway_kernel_record_is_clipped_to_the_step(cli: CliRunner, tmp_path: Path) -> None:
    path = runaway_kernel_trace().write(tmp_path / "runaway.json")
    data = run_json(cli, path)
    assert_shares_bounded(data)
    assert_printed_percent_bounded(run_text(cli, path))


def test_nccl_dominated_step_is_not_compute(cli: CliRunner, tmp_path: Path) -> None:
    """All-reduce kernels are GPU-busy but not compute: never device-bound, never bf16."""
    t = nccl_bound_loop()
    path = t.write(tmp_path / "nccl.json")
    data = run_json(cli, path)
    v = verdict(data)
    assert t.mean_share(("nccl",)) > 0.85
    assert v["bottleneck"] == "communication", v["ranked"]
    assert v["compute_share"] < 0.2
    assert_no_precision_advice(data, run_text(cli, path))


def test_allocator_stalls(cli: CliRunner, tmp_path: Path) -> None:
    data = run_json(cli, allocator_loop().write(tmp_path / "alloc.json"))
    v = verdict(data)
    assert v["bottleneck"] == "allocator", v["ranked"]


def test_no_dominant_cause_is_mixed_with_ranked_shares(cli: CliRunner, tmp_path: Path) -> None:
    data = run_json(cli, mixed_loop().write(tmp_path / "mixed.json"))
    v = verdict(data)
    shares = [share for _, share in v["ranked"]]
    assert max(shares) < 0.40
    assert v["bottleneck"] == "mixed", v["ranked"]
    assert shares == sorted(shares, reverse=True)
    top = v["ranked"][0][0]
    assert top in v["headline"], v["headline"]


def test_optimizer_annotations_define_the_steps(cli: CliRunner, tmp_path: Path) -> None:
    """No ProfilerStep#N: 5 Optimizer.step#SGD.step annotations give 4 spans between them."""
    t = optimizer_annotated_loop()
    path = t.write(tmp_path / "optim.json")
    assert not any(e["name"].startswith("ProfilerStep") for e in t.events)
    data = run_json(cli, path)
    rank = only_rank(data)
    assert "optimizer" in rank["step_source"].lower(), rank["step_source"]
    assert len(rank["steps"]) == 4
    mean_step = sum(b - a for a, b in t.steps) / len(t.steps) / 1e6
    assert rank["mean_step_s"] == pytest.approx(mean_step, rel=0.05)
    assert "optimizer" in flat(run_text(cli, path)).lower()


def test_no_annotations_is_one_span(cli: CliRunner, tmp_path: Path) -> None:
    t = unannotated_window()
    path = t.write(tmp_path / "window.json")
    data = run_json(cli, path)
    rank = only_rank(data)
    assert len(rank["steps"]) == 1
    assert "whole" in rank["step_source"].lower(), rank["step_source"]
    window = (t.steps[-1][1] - t.steps[0][0]) / 1e6
    assert rank["mean_step_s"] == pytest.approx(window, rel=0.05)
    assert "whole window" in flat(run_text(cli, path))


def test_json_gz_gives_the_same_diagnosis(cli: CliRunner, tmp_path: Path) -> None:
    t = item_per_parameter_loop(steps=2)
    plain = run_json(cli, t.write(tmp_path / "host_1.pt.trace.json"))
    gz = run_json(cli, t.write(tmp_path / "host_1.pt.trace.json.gz"))
    assert verdict(gz)["bottleneck"] == verdict(plain)["bottleneck"] == "sync"
    assert verdict(gz)["ranked"] == verdict(plain)["ranked"]


def test_rank_directory_names_the_slowest(cli: CliRunner, tmp_path: Path) -> None:
    """tensorboard_trace_handler's files: one per rank; rank 1's GEMMs take 1.6x as long.
    The file names sort rank 1 first (a smaller pid), so the order of files cannot be it."""
    logdir = tmp_path / "tb"
    logdir.mkdir()
    rank_trace(0, 800.0).write(logdir / "node-a_5200.1718000000000.pt.trace.json")
    rank_trace(1, 1280.0).write(logdir / "node-a_4900.1718000000001.pt.trace.json.gz")
    data = run_json(cli, logdir)
    assert len(data["ranks"]) == 2
    slow = max(data["ranks"], key=lambda r: r["mean_step_s"])
    assert "4900" in slow["source"], slow["source"]
    assert data["slowest"] == slow["rank"]
    assert_shares_bounded(data)
    text = flat(run_text(cli, logdir))
    assert "slowest" in text


def test_busy_share_is_printed_beside_nvml_and_gpm(cli: CliRunner, tmp_path: Path) -> None:
    path = two_streams_loop().write(tmp_path / "streams.json")
    data = run_json(cli, path, "--gpu-util", "0.97", "--sm-active", "0.45")
    v = verdict(data)
    assert v["nvml_utilisation"] == pytest.approx(0.97)
    assert v["sm_active"] == pytest.approx(0.45)
    text = run_text(cli, path, "--gpu-util", "0.97", "--sm-active", "0.45")
    lines = [line for line in text.splitlines() if "GPU busy" in line]
    assert lines, text
    assert any("97%" in line and "45%" in line and "NVML" in line for line in lines), lines
    plain = run_text(cli, path)
    lines = [line for line in plain.splitlines() if "GPU busy" in line]
    assert any(line.count("not measured") == 2 for line in lines), lines


def test_what_ifs_need_the_script(cli: CliRunner, tmp_path: Path) -> None:
    path = launch_bound_loop(steps=1, kernels=200).write(tmp_path / "t.json")
    data = run_json(cli, path)
    assert "script" in data["what_ifs"].lower(), data["what_ifs"]
    text = flat(run_text(cli, path)).lower()
    assert "what-if" in text and "script" in text


def test_report_writes_html(cli: CliRunner, tmp_path: Path) -> None:
    path = pageable_copy_loop(steps=2).write(tmp_path / "pageable.json")
    report = tmp_path / "report.html"
    code, out, err = cli("doctor", "--trace", path, "--report", report)
    assert code == 0, (out, err)
    html = report.read_text()
    assert "<html" in html.lower()
    assert "pageable" in html.lower()


# --- bad traces ------------------------------------------------------------------------------
def _cpu_only(path: Path) -> None:
    doc = item_per_parameter_loop(steps=1, params=5).document()
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if e.get("cat") not in gpu_cats and e.get("cat") != "ac2g" and e.get("pid") != 0
    ]
    path.write_text(json.dumps(doc))


def _truncated(path: Path) -> None:
    text = json.dumps(item_per_parameter_loop(steps=1, params=5).document())
    path.write_text(text[: len(text) * 2 // 3])


def _truncated_gz(path: Path) -> None:
    blob = gzip.compress(json.dumps(item_per_parameter_loop(steps=1, params=5).document()).encode())
    path.write_bytes(blob[: len(blob) // 2])


def _empty_events(path: Path) -> None:
    doc = Kineto().document()
    doc["traceEvents"] = []
    path.write_text(json.dumps(doc))


def _no_trace_events(path: Path) -> None:
    doc = Kineto().document()
    del doc["traceEvents"]
    path.write_text(json.dumps(doc))


BAD_TRACES = {
    "cpu-only": ("cpu_only.pt.trace.json", _cpu_only),
    "truncated": ("truncated.pt.trace.json", _truncated),
    "truncated-gz": ("truncated.pt.trace.json.gz", _truncated_gz),
    "not-json": ("notes.json", lambda p: p.write_text("ProfilerStep#2 took 14 ms\n")),
    "empty-events": ("empty.json", _empty_events),
    "no-trace-events": ("nokey.json", _no_trace_events),
    "json-list": ("list.json", lambda p: p.write_text("[1, 2, 3]")),
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_bad_trace_is_one_line_exit_2(cli: CliRunner, tmp_path: Path, case: str) -> None:
    name, make = BAD_TRACES[case]
    path = tmp_path / name
    make(path)
    code, _out, err = cli("doctor", "--trace", path)
    assert_one_line_error(code, err)
    code, _out, err = cli("doctor", "--trace", path, "--json")
    assert_one_line_error(code, err)


def test_missing_trace_is_one_line_exit_2(cli: CliRunner, tmp_path: Path) -> None:
    code, _out, err = cli("doctor", "--trace", tmp_path / "nope.pt.trace.json")
    assert_one_line_error(code, err)


def test_profiler_step_found_by_name_whatever_its_category(cli: CliRunner, tmp_path: Path) -> None:
    """Older torch/Kineto builds (1.x) file ProfilerStep#N under cpu_op, not under
    user_annotation; the step annotation is the name, and it is present."""
    t = launch_bound_loop(steps=3, kernels=150)
    for e in t.events:
        if e["name"].startswith("ProfilerStep#") and e["cat"] == "user_annotation":
            e["cat"] = "cpu_op"
    rank = only_rank(run_json(cli, t.write(tmp_path / "old.json")))
    assert rank["step_source"] == "ProfilerStep", rank["step_source"]
    assert [s["index"] for s in rank["steps"]] == [2, 3, 4]
