"""Fakes for testing code built on accelscope without real time or real hardware.

``FakeClock`` is a manual clock; ``ScriptedWork`` is a callable that "takes" scripted durations
on that clock, so timer behaviour (warm-up, stop rule, statistics) is exactly reproducible.

``FAKE_CPUS`` describes one CPU of each class accelscope claims to support (as
``/proc/cpuinfo`` would), ``fake_environment`` puts one in an :class:`Environment`, and
``fake_probe_table`` scripts what the precision probes measured, so every hardware-dependent
branch runs on every machine.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelscope.engine.probe import ProbeTable
    from accelscope.hardware.cpu import CpuInfo
    from accelscope.hardware.fingerprint import Environment
    from accelscope.spec import Precision

__all__ = [
    "FAKE_CPU_FLAGS",
    "FakeClock",
    "ScriptedWork",
    "fake_cpu",
    "fake_environment",
    "fake_probe_table",
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
