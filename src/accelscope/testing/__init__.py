"""Fakes for testing code built on accelscope without real time or real hardware.

``FakeClock`` is a manual clock; ``ScriptedWork`` is a callable that "takes" scripted durations
on that clock, so timer behaviour (warm-up, stop rule, statistics) is exactly reproducible.

``FAKE_CPU_FLAGS`` describes one CPU of each class accelscope claims to support (as
``/proc/cpuinfo`` would), ``fake_environment`` puts one in an :class:`Environment`, and
``fake_probe_table`` scripts what the precision probes measured, so every hardware-dependent
branch runs on every machine. ``fixed_environment`` is one fixed machine with a GPU, and
``fake_result`` a fully populated :class:`Result` measured on it.

The systems under test and service-time models of :mod:`accelscope.load.fakes` (``NullSUT``,
``SleepingSUT``, ``FixedService``, ...) are re-exported here, so this is the one place to find
fakes. :mod:`accelscope.testing.faults` holds backends that fail on purpose inside the worker
(segfault, hang, ``MemoryError``); it registers them when imported, so it is not imported
here: select it by name, ``--plugin accelscope.testing.faults``.
:mod:`accelscope.testing.fake_gpus` stands in for ``torch.cuda`` with fake GPUs (H100, H200,
A100, L4, T4; with or without CUDA 13's missing clock fields) and records every CUDA call, so a
test can say that a process only read device facts; :mod:`accelscope.testing.fake_workers` has
sweep workers that answer from a rate table and a fake reference worker, for sweeps on those GPUs.

``tiny_onnx_bytes`` builds a small valid ONNX graph (needs the ``onnx`` extra),
``restore_default_sigint`` is a ``preexec_fn`` for children a test interrupts, and
``assert_one_line_error`` checks the CLI's contract for bad input. ``CliRunner`` is the type
of a callable that runs the command line in process and returns a ``CliResult`` (the test
suite's ``cli`` fixture is one).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from accelscope.load.fakes import (
    BatchLinearService,
    ExponentialService,
    FaultyService,
    FixedService,
    NullSUT,
    SleepingSUT,
)

if TYPE_CHECKING:
    from pathlib import Path

    from accelscope.engine.probe import ProbeTable
    from accelscope.hardware.cpu import CpuInfo
    from accelscope.hardware.fingerprint import Environment
    from accelscope.result import Result
    from accelscope.spec import Precision

__all__ = [
    "FAKE_CPU_FLAGS",
    "BatchLinearService",
    "CliResult",
    "CliRunner",
    "ExponentialService",
    "FakeClock",
    "FaultyService",
    "FixedService",
    "NullSUT",
    "ScriptedWork",
    "SleepingSUT",
    "assert_one_line_error",
    "fake_cpu",
    "fake_environment",
    "fake_probe_table",
    "fake_result",
    "fixed_environment",
    "restore_default_sigint",
    "tiny_onnx_bytes",
]

FAKE_CPU_FLAGS: dict[str, tuple[str, str, str, str]] = {
    "sapphire-rapids": (
        "GenuineIntel",
        "Intel(R) Xeon(R) Platinum 8480+",
        "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512cd avx512bw "
        "avx512vl avx512_vnni avx_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8",
        "x86_64",
    ),
    "ice-lake": (
        "GenuineIntel",
        "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
        "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512cd avx512bw "
        "avx512vl avx512_vnni avx512_vbmi2 avx512_bitalg",
        "x86_64",
    ),
    "zen3": (
        "AuthenticAMD",
        "AMD EPYC 7R13 Processor",
        "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi1 bmi2 sha_ni vaes",
        "x86_64",
    ),
    "zen4": (
        "AuthenticAMD",
        "AMD EPYC 9R14 96-Core Processor",
        "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512cd avx512bw "
        "avx512vl avx512_vnni avx512_bf16 avx512_vbmi2",
        "x86_64",
    ),
    "graviton3": ("ARM", "ARM Neoverse-V1", "fp asimd sve asimddp bf16 i8mm sve2", "aarch64"),
    "neon-arm": ("ARM", "ARM Cortex-A72", "fp asimd evtstrm crc32 cpuid", "aarch64"),
}
"""CPU class -> (vendor id, model name, ``/proc/cpuinfo`` flags or Features, architecture)."""


class FakeClock:
    """A monotonic clock that only moves when told to (seconds)."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now_s

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (must not be negative)."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go backwards")
        self.now_s += seconds


class ScriptedWork:
    """A workload whose n-th call advances ``clock`` by the n-th scripted duration.

    ``durations_s`` is consumed in order; with ``cycle=True`` it repeats forever. ``calls``
    counts invocations, so tests can check how many calls a timer made.
    """

    def __init__(self, clock: FakeClock, durations_s: Iterable[float], cycle: bool = False):
        values = list(durations_s)
        if not values:
            raise ValueError("need at least one duration")
        self._clock = clock
        self._durations: Iterator[float] = itertools.cycle(values) if cycle else iter(values)
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        try:
            self._clock.advance(next(self._durations))
        except StopIteration:
            message = f"scripted work ran out of durations after {self.calls - 1} calls"
            raise RuntimeError(message) from None


def _cpuinfo_text(name: str) -> str:
    vendor, model, flags, arch = FAKE_CPU_FLAGS[name]
    if arch == "aarch64":
        return "".join(
            f"processor\t: {i}\nBogoMIPS\t: 243.75\nFeatures\t: {flags}\n"
            f"CPU implementer\t: 0x41\nCPU part\t: 0xd40\nmodel name\t: {model}\n\n"
            for i in range(2)
        )
    return "".join(
        f"processor\t: {i}\nvendor_id\t: {vendor}\nmodel name\t: {model}\n"
        f"physical id\t: 0\ncore id\t: {i}\nflags\t\t: {flags}\n\n"
        for i in range(2)
    )


def fake_cpu(name: str) -> CpuInfo:
    """The :class:`CpuInfo` of a CPU class in :data:`FAKE_CPU_FLAGS`, parsed from its
    ``/proc/cpuinfo`` text by the real parser (2 cores, like the test machines)."""
    from accelscope.hardware.cpu import CpuInfo, parse_cpuinfo

    parsed = parse_cpuinfo(_cpuinfo_text(name))
    return CpuInfo(
        model_name=parsed.model_name,
        vendor=parsed.vendor,
        arch=parsed.arch,
        logical_cores=parsed.logical_cores,
        physical_cores=parsed.physical_cores or parsed.logical_cores,
        usable_cores=parsed.logical_cores,
        sockets=parsed.sockets or 1,
        max_freq_mhz=None,
        l2_cache_bytes=1 << 20,
        l3_cache_bytes=32 << 20,
        isa=parsed.isa,
    )


def fake_environment(name: str) -> Environment:
    """An :class:`Environment` on the fake CPU class ``name``, without GPUs."""
    from accelscope.hardware.fingerprint import Environment

    return Environment(
        hostname=f"fake-{name}",
        os="Linux-6.1",
        python="3.11.7",
        cpu=fake_cpu(name),
        memory_bytes=24 << 30,
        gpus=(),
        libraries=(("torch", "2.13.0"),),
        torch_build=(("cuda", "none"),),
        collected_at="2026-11-23T00:00:00+00:00",
    )


def fake_probe_table(
    env: Environment, speedups: Mapping[tuple[str, Precision], float], threads: int = 2
) -> ProbeTable:
    """A probe table as if the probes measured ``speedups`` (runtime, precision) -> speedup
    over fp32 for both kernels (fp32 at 1 ms a call), stamped with the installed runtime
    versions (so a cache holding it is used as is)."""
    from accelscope.engine.probe import (
        KernelTiming,
        ProbeTable,
        ProbeVerdict,
        probe_runtime_version,
    )

    verdicts = tuple(
        ProbeVerdict(
            runtime=runtime,
            precision=precision,
            version=probe_runtime_version(runtime),
            threads=threads,
            kernels=tuple(
                KernelTiming(kernel=kernel, fp32_s=1e-3, precision_s=1e-3 / speedup)
                for kernel in ("conv", "matmul")
            ),
        )
        for (runtime, precision), speedup in speedups.items()
    )
    return ProbeTable(fingerprint=env.fingerprint(), threads=threads, verdicts=verdicts)


def fixed_environment() -> Environment:
    """One fixed machine: a 2-core Sapphire Rapids Xeon with an H200 (the tests' default)."""
    from accelscope.hardware.cpu import CpuInfo
    from accelscope.hardware.fingerprint import Environment
    from accelscope.hardware.gpu import GpuInfo

    cpu = CpuInfo(
        model_name="Intel(R) Xeon(R) Platinum 8480+",
        vendor="GenuineIntel",
        arch="x86_64",
        logical_cores=2,
        physical_cores=1,
        usable_cores=2,
        sockets=1,
        max_freq_mhz=None,
        l2_cache_bytes=2 * 1024 * 1024,
        l3_cache_bytes=None,
        isa=("amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512_bf16", "avx512f"),
    )
    gpu = GpuInfo(
        index=0,
        name="NVIDIA H200",
        memory_bytes=150_000_000_000,
        compute_capability="9.0",
        driver_version="580.1",
        cuda_runtime="12.8",
        uuid="GPU-0",
    )
    return Environment(
        hostname="box",
        os="Linux-6.1",
        python="3.11.7",
        cpu=cpu,
        memory_bytes=24 * 1024**3,
        gpus=(gpu,),
        libraries=(("numpy", "2.4.6"), ("torch", "2.13.0")),
        torch_build=(("cuda", "none"), ("mkldnn", "True")),
        collected_at="2026-11-20T22:00:00+00:00",
    )


def fake_result(environment: Environment, batch: int = 8, seed: float = 0.0) -> Result:
    """A fully populated result with awkward floats (to prove lossless round trips)."""
    from accelscope.accuracy.fidelity import Fidelity
    from accelscope.measurement.memory import MemoryPeak
    from accelscope.measurement.record import Measurement, StopReason
    from accelscope.measurement.threads import ThreadSettings
    from accelscope.result import Accuracy, Result, Status
    from accelscope.spec import Device, Precision, RunSpec

    spec = RunSpec(
        model="resnet50",
        backend="eager",
        precision=Precision.BF16,
        batch_size=batch,
        threads=2,
        device=Device.CPU,
        model_digest="zoo:resnet50:v1",
        options=(("channels_last", "true"),),
    )
    samples = tuple(0.1 + seed + i * 1e-17 + 1 / 3 for i in range(12))
    return Result(
        spec=spec,
        environment=environment,
        status=Status.OK,
        measurement=Measurement(
            samples_s=samples,
            items_per_call=batch,
            first_call_s=1.2345678901234567,
            warmup_samples_s=(0.5, 0.4),
            stop_reason=StopReason.BUDGET,
            budget_s=10.0,
        ),
        memory=MemoryPeak(
            rss_peak_bytes=123456789,
            rss_start_bytes=1000,
            rss_method="region",
            cuda_allocated_peak_bytes=None,
            cuda_reserved_peak_bytes=None,
        ),
        threads=ThreadSettings(
            requested=2, intra_op=2, inter_op=1, omp_num_threads="2", available_cores=2
        ),
        accuracy=Accuracy(
            fidelity=Fidelity(rel_l2=1e-3, max_abs=0.25, cosine=0.9999995, top1_agreement=1.0),
            metric_name="top1_accuracy",
            metric_value=0.97,
            reference_metric_value=0.975,
            metric_source="digits",
        ),
        prepare_s=0.01,
        warnings=("noisy: IQR is 12% of the median (> 10%)",),
    )


def tiny_onnx_bytes(batch: int | str = "batch", seed: int = 0) -> bytes:
    """A small valid ONNX graph, y = x @ W + b with W (16, 4) an initializer; ``batch`` is a
    symbolic (str) or fixed (int) first dimension. Needs the ``onnx`` extra."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        initializer=[weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def restore_default_sigint() -> None:
    """``preexec_fn`` for a child that a test interrupts like a terminal's Ctrl-C: a shell
    starts background jobs with SIGINT ignored and children inherit that, so a suite run in
    the background would otherwise test nothing."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def assert_one_line_error(code: int, err: str, *mentions: str) -> None:
    """Assert the command line's answer to bad input: exit code 2, no traceback, and stderr
    exactly one non-empty line, ``error: ...``, holding every one of ``mentions``."""
    assert code == 2, f"exit code {code}, stderr: {err!r}"
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}: {err!r}"
    line = lines[0]
    assert line.strip() and line.startswith("error:"), line
    for mention in mentions:
        assert mention in line, f"{mention!r} not in {line!r}"


class CliResult(NamedTuple):
    """What one in-process run of the command line gave: exit code, stdout, stderr."""

    code: int
    out: str
    err: str


class CliRunner(Protocol):
    """Runs ``accelscope *args`` in process (each argument through ``str``)."""

    def __call__(self, *args: str | Path) -> CliResult: ...
