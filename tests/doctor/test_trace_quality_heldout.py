"""Held-out cases for the trace quality gate of ``accelscope doctor --trace``, from the spec alone.

Traces are built in code by a small simulator of a torch.profiler (Kineto) Chrome trace: host
``cpu_op``/``cuda_runtime``/``user_annotation`` events, GPU ``kernel``/``gpu_memcpy`` events on
one stream that runs in order and never before its launch, ``ProfilerStep#N`` step marks. Each
case plants one kind of one-off work (context creation, compile, cuDNN autotune, allocator
growth, an outlier step) or a defect (few steps, unrecorded graph kernels, negative durations)
and checks that the gate names it and that the verdict comes from the steady steps only.

Covers: accelscope.doctor.trace_quality.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from accelscope.commands.doctor.trace_mode import TraceRequest, diagnose_trace
from accelscope.testing import CliRunner, assert_one_line_error

PID, TID = 4242, 4242
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)"
)
CONV = (
    "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_"
    "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
)
CONV_TRIAL = "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>"


class Sim:
    """A host clock, one GPU stream, and the events a Kineto trace holds."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.now = 1_700_000_000_000.0  # µs, absolute like Kineto
        self.gpu_free = 0.0
        self.corr = 100

    def x(self, cat: str, name: str, ts: float, dur: float, pid: int = PID, **args: Any) -> None:
        tid = args.get("stream", TID)  # a device event's thread is its stream
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}
        self.events.append(ev | {"ts": ts, "dur": dur, "args": args})

    def device(self, cat: str, name: str, gpu_us: float, after: float, corr: int) -> float:
        start = max(after + 3.0, self.gpu_free)
        self.gpu_free = start + gpu_us
        self.x(cat, name, start, gpu_us, pid=0, stream=7, correlation=corr)
        return self.gpu_free

    def launch(self, op: str = "aten::add", kernel: str = ADD, gpu_us: float = 5.0,
               host_us: float = 20.0) -> None:  # fmt: skip
        """An operator that launches one kernel (dispatch, then cudaLaunchKernel)."""
        self.corr += 1
        call = self.now + host_us * 0.5
        self.x("cpu_op", op, self.now, host_us)
        self.x("cuda_runtime", "cudaLaunchKernel", call, host_us * 0.4, correlation=self.corr)
        self.device("kernel", kernel, gpu_us, call, self.corr)
        self.now += host_us

    def runtime(self, name: str, us: float, op: str | None = None, corr: int | None = None) -> None:
        """A runtime call with no device record, inside ``op`` when given."""
        if op:
            self.x("cpu_op", op, self.now, us + 4.0)
        self.x("cuda_runtime", name, self.now + 2.0, us, **({"correlation": corr} if corr else {}))
        self.now += us + 4.0

    def sync(self) -> None:
        """``loss.item()``: the host waits in cudaStreamSynchronize for the stream to drain."""
        done = max(self.now + 5.0, self.gpu_free + 3.0)
        self.x("cpu_op", "aten::item", self.now, done - self.now + 2.0)
        self.x("cuda_runtime", "cudaStreamSynchronize", self.now + 1.0, done - self.now - 1.0)
        self.now = done + 2.0

    def to_device(self, mbytes: float, gbps: float, memory: str = "Pageable",
                  cold_call: str | None = None, cold_us: float = 0.0) -> None:  # fmt: skip
        """``batch.to("cuda")``; a cold first call spends ``cold_us`` in ``cold_call`` first
        (context creation inside the first ``aten::to``)."""
        t0 = self.now
        if cold_call:
            self.x("cuda_runtime", cold_call, t0 + 1.0, cold_us)
            self.now += cold_us + 2.0
        self.corr += 1
        call = self.now + 3.0
        end = self.device(
            "gpu_memcpy", f"Memcpy HtoD ({memory} -> Device)", mbytes * 1e3 / gbps, call, self.corr
        )
        host_end = end + 3.0 if memory == "Pageable" else call + 8.0
        self.x("cpu_op", "aten::copy_", self.now, host_end - self.now + 1.0)
        self.x("cuda_runtime", "cudaMemcpyAsync", call, host_end - call, correlation=self.corr)
        self.now = host_end + 2.0
        self.x("cpu_op", "aten::to", t0, self.now - t0)

    def busy(self, name: str, us: float, cat: str = "user_annotation") -> None:
        """Host work recorded only as a named range (a compile): no CUDA call, GPU idle."""
        self.x(cat, name, self.now, us)
        self.now += us + 1.0

    @contextmanager
    def step(self, n: int) -> Iterator[None]:
        start = self.now
        yield
        self.now += 10.0
        self.x("user_annotation", f"ProfilerStep#{n}", start, self.now - start)
        self.now += 5.0

    def write(self, path: Path) -> Path:
        doc = {"schemaVersion": 1, "deviceProperties": [{"name": "NVIDIA H200"}]}
        data = json.dumps(doc | {"traceEvents": self.events}).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


def launch_step(sim: Sim, n: int, launches: int = 100, host_us: float = 20.0) -> None:
    """A launch-bound step: tiny kernels behind 20 µs of Python and dispatch each, one item()."""
    with sim.step(n):
        for _ in range(launches):
            sim.launch(host_us=host_us)
        sim.sync()


def launch_loop(tmp_path: Path, steps: int = 5, first: int = 0) -> Sim:
    sim = Sim()
    for i in range(steps):
        launch_step(sim, first + i, host_us=20.0 * (1.0 + 0.06 * (i % 3)))  # a little jitter
    return sim


def loop(extra: Callable[[Sim, int], object], steps: int = 5, launches: int = 100) -> Sim:
    """``steps`` launch-bound steps, ``extra(sim, i)`` run at the start of each."""
    sim = Sim()
    for i in range(steps):
        with sim.step(i):
            extra(sim, i)
            for _ in range(launches):
                sim.launch()
            sim.sync()
    return sim


def diagnose(sim: Sim, tmp_path: Path, name: str = "trace.json.gz") -> Any:
    return diagnose_trace(TraceRequest(path=sim.write(tmp_path / name))).ranks[0]


def kinds(rank: Any) -> set[str]:
    return {f.kind for f in rank.quality.flags}


def flags_at(rank: Any, step: int) -> list[Any]:
    return [f for f in rank.quality.flags if f.step == step]


def test_a_steady_launch_bound_loop_passes_the_gate_and_keeps_its_verdict(tmp_path: Path) -> None:
    rank = diagnose(launch_loop(tmp_path), tmp_path, "steady.json")
    assert rank.quality.flags == ()
    assert rank.quality.steady == (0, 1, 2, 3, 4)
    assert rank.quality.excluded == ()
    assert rank.verdict.bottleneck == "launch"


@pytest.mark.parametrize("name", ["warm.json", "warm.json.gz"])
def test_a_warm_up_step_fifty_times_the_others_is_set_aside(tmp_path: Path, name: str) -> None:
    sim = Sim()
    launch_step(sim, 0, host_us=1000.0)  # first calls: 50x slower, no event says why
    for i in range(1, 5):
        launch_step(sim, i)
    rank = diagnose(sim, tmp_path, name)
    assert rank.quality.excluded == (0,)
    assert rank.quality.steady == (1, 2, 3, 4)
    assert flags_at(rank, 0), rank.quality.flags
    assert "few_steps" not in kinds(rank)
    assert rank.verdict.bottleneck == "launch"


def test_one_step_dominated_by_context_creation_is_not_diagnosed(tmp_path: Path) -> None:
    cold = "cudaDeviceGetStreamPriorityRange"  # lazy CUDA init inside the first aten::to
    sim = loop(lambda sim, i: sim.to_device(1.0, 20.0, "Pinned", cold, 20e6), 1, launches=50)
    rank = diagnose(sim, tmp_path)
    one_off = [f for f in rank.quality.flags if f.kind == "one_off"]
    assert one_off, rank.quality.flags
    assert "context" in one_off[0].message.lower()
    assert one_off[0].seconds == pytest.approx(20.0, rel=0.1)
    assert rank.quality.steady == ()
    assert rank.verdict.bottleneck == "not_diagnosed"
    advice = f"{rank.verdict.advice} {rank.quality.advice}"
    assert "schedule(" in advice and "warmup=" in advice and "active=" in advice, advice


def test_compile_in_step_zero_of_four_is_named_and_the_other_three_diagnosed(
    tmp_path: Path,
) -> None:
    def compile_first(sim: Sim, i: int) -> None:
        if i == 0:
            sim.busy("entire_frame_compile", 6e6)
            sim.busy("backend_compile", 4e6)
            sim.busy("compile_fx.<locals>.fw_compiler_base", 3e6)

    sim = loop(compile_first, steps=4)
    rank = diagnose(sim, tmp_path)
    assert rank.quality.excluded == (0,)
    assert rank.quality.steady == (1, 2, 3)
    assert "few_steps" not in kinds(rank)
    assert any("compil" in f.message.lower() for f in flags_at(rank, 0)), rank.quality.flags
    assert rank.verdict.bottleneck == "launch"


def test_a_recompile_in_the_middle_step_is_set_aside_too(tmp_path: Path) -> None:
    def recompile(sim: Sim, i: int) -> None:
        if i == 2:
            sim.busy("entire_frame_compile", 2.5e6)
            sim.busy("compile_fx.<locals>.fw_compiler_base", 1.5e6)

    sim = loop(recompile)
    rank = diagnose(sim, tmp_path)
    assert rank.quality.excluded == (2,)
    assert rank.quality.steady == (0, 1, 3, 4)
    assert any("compil" in f.message.lower() for f in flags_at(rank, 2)), rank.quality.flags
    assert rank.verdict.bottleneck == "launch"


def test_two_outlier_steps_are_both_set_aside(tmp_path: Path) -> None:
    sim = Sim()
    for i in range(7):
        launch_step(sim, i, host_us=600.0 if i in (0, 4) else 20.0)
    rank = diagnose(sim, tmp_path)
    assert rank.quality.excluded == (0, 4)
    assert rank.quality.steady == (1, 2, 3, 5, 6)
    assert flags_at(rank, 0) and flags_at(rank, 4)
    assert rank.verdict.bottleneck == "launch"


def test_three_scheduled_steps_with_no_outlier_are_enough(tmp_path: Path) -> None:
    # schedule(wait=1, warmup=1, active=3): the trace holds ProfilerStep#2..#4
    rank = diagnose(launch_loop(tmp_path, steps=3, first=2), tmp_path)
    assert "few_steps" not in kinds(rank)
    assert rank.quality.steady == (2, 3, 4)
    assert rank.quality.excluded == ()
    assert rank.verdict.bottleneck == "launch"


def test_two_steps_are_too_few(tmp_path: Path) -> None:
    rank = diagnose(launch_loop(tmp_path, steps=2), tmp_path)
    assert "few_steps" in kinds(rank)
    assert rank.quality.steady == (0, 1)


def test_too_few_counts_steady_steps_not_all_steps(tmp_path: Path) -> None:
    def compile_first(sim: Sim, i: int) -> None:
        if i == 0:
            sim.busy("entire_frame_compile", 5e6)

    sim = loop(compile_first, steps=3)
    rank = diagnose(sim, tmp_path)
    assert rank.quality.excluded == (0,)
    assert rank.quality.steady == (1, 2)
    assert "few_steps" in kinds(rank)
    assert rank.verdict.bottleneck == "launch"  # the steps that remain are still diagnosed


def test_graph_launches_without_their_kernels_are_flagged(tmp_path: Path) -> None:
    def graph(sim: Sim, i: int) -> None:
        sim.corr += 1
        sim.runtime("cudaGraphLaunch", 15.0, corr=sim.corr)  # its kernels never recorded
        sim.gpu_free = sim.now + 5000.0  # the graph runs 5 ms on the GPU, unseen

    sim = loop(graph, launches=50)
    rank = diagnose(sim, tmp_path)
    flags = [f for f in rank.quality.flags if f.kind == "graphs_unrecorded"]
    assert flags and "graph" in flags[0].message.lower()


def test_graph_launches_with_their_kernels_recorded_are_not_flagged(tmp_path: Path) -> None:
    def graph(sim: Sim, i: int) -> None:
        sim.corr += 1
        call = sim.now + 2.0
        sim.runtime("cudaGraphLaunch", 15.0, corr=sim.corr)
        for _ in range(20):  # CUPTI files a graph's kernels under its launch's correlation
            sim.device("kernel", ADD, 40.0, call, sim.corr)

    sim = loop(graph, launches=0)
    rank = diagnose(sim, tmp_path)
    assert "graphs_unrecorded" not in kinds(rank)


def test_a_loop_of_unrecorded_graphs_is_flagged_and_not_blamed_on_the_wait(tmp_path: Path) -> None:
    def graph(sim: Sim, i: int) -> None:
        sim.to_device(1.0, 20.0, "Pinned")  # static_input.copy_(batch)
        sim.corr += 1
        sim.runtime("cudaGraphLaunch", 12.0, corr=sim.corr)
        sim.gpu_free = sim.now + 5000.0  # the graph really runs 5 ms, unseen

    sim = loop(graph, launches=0)
    rank = diagnose(sim, tmp_path)
    assert "graphs_unrecorded" in kinds(rank)
    # the host waits on device work the trace does not show: not a readback problem
    assert rank.verdict.bottleneck != "sync", rank.verdict.headline


def test_negative_durations_are_flagged(tmp_path: Path) -> None:
    sim = launch_loop(tmp_path)
    sim.x("kernel", ADD, sim.now - 500.0, -40.0, pid=0, stream=7, correlation=1)
    sim.x("cuda_runtime", "cudaLaunchKernel", sim.now - 900.0, -3.0)
    rank = diagnose(sim, tmp_path)
    flags = [f for f in rank.quality.flags if f.kind == "bad_timestamps"]
    assert len(flags) == 1
    assert "negative" in flags[0].message.lower() and "2" in flags[0].message


def test_pageable_loop_with_a_cold_first_copy_is_named_from_the_steady_steps(
    tmp_path: Path,
) -> None:
    def copy(sim: Sim, i: int) -> None:
        cold = ("cuInit", 3e6) if i == 0 else (None, 0.0)
        sim.to_device(32.0, 3.0, "Pageable", *cold)

    sim = loop(copy, launches=20)
    rank = diagnose(sim, tmp_path)
    assert rank.quality.excluded == (0,)
    named = [f for f in flags_at(rank, 0) if f.kind == "one_off"]
    assert named and "context" in named[0].message.lower(), rank.quality.flags
    assert named[0].seconds == pytest.approx(3.0, rel=0.15)
    assert rank.verdict.bottleneck == "h2d_pageable"


@pytest.mark.parametrize("timed", [False, True], ids=["host_search", "timed_trials"])
def test_cudnn_autotuning_in_the_first_convolution_is_named(tmp_path: Path, timed: bool) -> None:
    def conv(sim: Sim, i: int) -> None:
        t0 = sim.now
        if i == 0 and timed:  # cudnnFind: each algorithm run, timed with events, waited for
            for _ in range(30):
                sim.launch("aten::cudnn_convolution", CONV_TRIAL, gpu_us=8000.0)
                sim.runtime("cudaEventRecord", 3.0)
                sim.runtime("cudaEventSynchronize", sim.gpu_free + 3.0 - sim.now)
        sim.now += 240e3 if i == 0 and not timed else 0.0  # heuristics, GPU idle
        sim.launch("aten::cudnn_convolution", CONV, gpu_us=200.0, host_us=30.0)
        for k, op in enumerate(("aten::conv2d", "aten::convolution", "aten::cudnn_convolution")):
            sim.x("cpu_op", op, t0 + k, sim.now - t0 - 2 * k)  # the first one: 240 ms

    sim = loop(conv)
    rank = diagnose(sim, tmp_path)
    assert rank.quality.excluded == (0,)
    text = " ".join(f.message.lower() for f in flags_at(rank, 0))
    assert "cudnn" in text or "autotun" in text, rank.quality.flags
    assert rank.verdict.bottleneck == "launch"


def test_first_step_allocator_growth_is_named_not_the_bottleneck(tmp_path: Path) -> None:
    def grow(sim: Sim, i: int) -> None:
        for _ in range(40 if i == 0 else 0):
            sim.runtime("cudaMalloc", 8000.0, op="aten::empty_strided")

    sim = loop(grow)
    rank = diagnose(sim, tmp_path)
    assert rank.quality.excluded == (0,)
    text = " ".join(f.message.lower() for f in flags_at(rank, 0))
    assert "alloc" in text, rank.quality.flags
    assert rank.verdict.bottleneck == "launch"


def test_host_time_no_event_explains_is_flagged_and_never_the_verdict(tmp_path: Path) -> None:
    def stall(sim: Sim, i: int) -> None:
        sim.now += 2e6 if i == 2 else 0.0  # 2 s, no event, GPU idle (an unprofiled compile)

    sim = loop(stall)
    rank = diagnose(sim, tmp_path)
    assert any(f.kind == "unexplained_host" and f.step == 2 for f in rank.quality.flags)
    assert 2 in rank.quality.excluded
    assert rank.verdict.bottleneck == "launch"


def _cold_compile(tmp_path: Path) -> Sim:
    def compile_first(sim: Sim, i: int) -> None:
        if i == 0:
            sim.busy("entire_frame_compile", 8e6)

    return loop(compile_first)


def _pageable(tmp_path: Path) -> Sim:
    return loop(lambda sim, i: sim.to_device(16.0, 3.0), steps=4, launches=1)


@pytest.mark.parametrize("build", [launch_loop, _cold_compile, _pageable])
def test_shares_are_fractions(tmp_path: Path, build: Callable[[Path], Sim]) -> None:
    rank = diagnose(build(tmp_path), tmp_path)
    shares = [share for _, share in rank.verdict.ranked]
    assert shares and all(0.0 <= s <= 1.0 + 1e-9 for s in shares), rank.verdict.ranked
    assert sum(shares) <= 1.0 + 1e-6


def cli_json(path: Path) -> dict[str, Any]:
    """``accelscope doctor --trace PATH --json`` in a fresh interpreter: its first rank."""
    cmd = [sys.executable, "-m", "accelscope.cli", "doctor", "--trace", str(path), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rank: dict[str, Any] = json.loads(done.stdout)["ranks"][0]
    return rank


def test_cli_json_holds_the_quality_section(tmp_path: Path) -> None:
    rank = cli_json(_cold_compile(tmp_path).write(tmp_path / "cold.json.gz"))
    quality = rank["quality"]
    assert quality["excluded_steps"] == [0]
    assert quality["steady_steps"] == [1, 2, 3, 4]
    assert any(f["step"] == 0 and "compil" in f["message"].lower() for f in quality["flags"])
    assert {"kind", "message", "step", "seconds"} <= set(quality["flags"][0])
    assert rank["verdict"]["bottleneck"] == "launch"


def test_cli_json_not_diagnosed_carries_the_schedule_advice(tmp_path: Path) -> None:
    sim = loop(lambda sim, i: sim.busy("entire_frame_compile", 9e6), steps=1, launches=1)
    rank = cli_json(sim.write(tmp_path / "one.json"))
    assert rank["verdict"]["bottleneck"] == "not_diagnosed"
    assert rank["quality"]["steady_steps"] == []
    assert "schedule(" in json.dumps(rank["quality"]["advice"]) + rank["verdict"]["advice"]


def test_terminal_output_names_the_step_set_aside(tmp_path: Path, cli: CliRunner) -> None:
    path = _cold_compile(tmp_path).write(tmp_path / "cold.json")
    code, out, _ = cli("doctor", "--trace", path)
    assert code == 0
    low = out.lower()
    assert "set aside" in low or "excluded" in low, out
    assert re.search(r"(step\s*#?\s*0\b|profilerstep#0)", low), out
    assert "compil" in low


@pytest.mark.parametrize("content", [b"not a trace at all", b'{"traceEvents": [{"ph": "X"'])
def test_a_bad_trace_file_is_a_one_line_error(
    tmp_path: Path, cli: CliRunner, content: bytes
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    code, _, err = cli("doctor", "--trace", path)
    assert_one_line_error(code, err, "bad.json")
