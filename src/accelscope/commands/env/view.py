"""``accelscope env``: the machine's facts and its measured precision probes."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.engine.probe import ProbeTable
from accelscope.hardware.fingerprint import Environment
from accelscope.report.format import format_bytes

__all__ = ["environment_view"]


def environment_view(env: Environment, probes: ProbeTable | None = None) -> RenderableType:
    """The machine fingerprint, the precisions the ISA table calls fast here and, with
    ``probes``, what the probes measured (those decide what a sweep measures)."""
    cpu = env.cpu
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("CPU", f"{cpu.model_name} ({cpu.vendor}, {cpu.arch})")
    facts.add_row(
        "cores",
        f"{cpu.physical_cores} physical, {cpu.logical_cores} logical, "
        f"{cpu.usable_cores} usable by this process, {cpu.sockets} socket(s)",
    )
    if cpu.max_freq_mhz:
        facts.add_row("max clock", f"{cpu.max_freq_mhz:.0f} MHz")
    caches = [
        f"L{n} {format_bytes(b)}"
        for n, b in ((2, cpu.l2_cache_bytes), (3, cpu.l3_cache_bytes))
        if b
    ]
    if caches:
        facts.add_row("cache", ", ".join(caches))
    facts.add_row("ISA", " ".join(cpu.isa) or "(none recognised)")
    facts.add_row("memory", format_bytes(env.memory_bytes))
    for gpu in env.gpus:
        facts.add_row(
            f"GPU {gpu.index}",
            f"{gpu.name}, {format_bytes(gpu.memory_bytes)}, {gpu.sm}, "
            f"driver {gpu.driver_version or '?'}, CUDA {gpu.cuda_runtime or '?'}",
        )
    if not env.gpus:
        facts.add_row("GPU", "none found")
    facts.add_row("python", env.python)
    facts.add_row("libraries", ", ".join(f"{n} {v}" for n, v in env.libraries))
    facts.add_row("torch build", ", ".join(f"{k}={v}" for k, v in env.torch_build))
    facts.add_row("fingerprint", env.fingerprint())
    paths = Table(title="precision fast paths", title_justify="left")
    for header in ("device", "precision", "fast path", "unit", "why"):
        paths.add_column(header)
    for support in env.precision_support():
        paths.add_row(
            support.device.value,
            support.precision.value,
            Text("yes", style="green") if support.fast else Text("no", style="yellow"),
            support.unit,
            support.reason,
        )
    parts: list[RenderableType] = [facts, Text(""), paths]
    if probes is not None:
        measured = Table(
            title=f"measured precision probes ({probes.threads} threads; these decide)",
            title_justify="left",
        )
        for header in ("runtime", "precision", "kept", "conv", "matmul", "note"):
            measured.add_column(header)
        for verdict in probes.verdicts:
            speed = {k.kernel: f"{k.speedup:.2f}x fp32" for k in verdict.kernels}
            note = verdict.error or "; ".join(
                n
                for n in (verdict.note, verdict.executes_as and f"runs as {verdict.executes_as}")
                if n
            )
            measured.add_row(
                verdict.runtime,
                verdict.precision.value,
                Text("yes", style="green") if verdict.keep else Text("no", style="yellow"),
                speed.get("conv", "—"),
                speed.get("matmul", "—"),
                note,
            )
        parts.extend([Text(""), measured])
    return Group(*parts)
