"""Terminal rendering of ceilings and rooflines (rich tables and summary lines)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.report.format import format_bytes, ms, si_rate
from accelscope.roofline.analysis import RooflineAnalysis
from accelscope.roofline.ceilings import CPU_DTYPES, DTYPES, Ceilings

__all__ = ["ceilings_view", "roofline_view"]


def ceilings_view(found: Ceilings) -> Group:
    """Peaks per dtype (searched, naive square matmul, ISA or datasheet peak, fraction),
    bandwidth, notes. On a GPU, fp32 (IEEE) and tf32 are separate rows."""
    cpu = found.device in ("cpu", "")
    where = f"{found.device}, {found.threads} threads" if cpu else f"cuda:{found.device_index}"
    table = Table(title=f"ceilings: {found.device_name} ({where})", title_justify="left")
    ideal, of_ideal = ("ISA peak", "of ISA") if cpu else ("datasheet peak", "of datasheet")
    for column in ("dtype", "measured peak", "kernel", "naive 4096² mm", ideal, of_ideal):
        table.add_column(column, justify="left" if column in ("dtype", "kernel") else "right")
    for dtype in CPU_DTYPES if cpu else DTYPES:
        peak = found.peaks.get(dtype)
        fraction = found.fraction_of_theoretical(dtype)
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        kernel = (
            f"{peak.family} {'x'.join(map(str, peak.shape))} ({peak.path})"
            if peak
            else "not measured here"
        )
        table.add_row(
            dtype,
            si_rate(found.matmul_flops_per_s.get(dtype), unit),
            Text(kernel),
            si_rate(found.naive_flops_per_s.get(dtype), unit),
            si_rate(found.theoretical.flops_per_s.get(dtype), unit),
            "—" if fraction is None else f"{fraction:.0%}",
        )
    detail = ", ".join(
        f"{k} {format_bytes(v)}/s" for k, v in found.bandwidth_detail_bytes_per_s.items()
    )
    lines: list[RenderableType] = [
        table,
        Text(
            f"memory roof {format_bytes(found.bandwidth_bytes_per_s)}/s ({detail}; copy counts "
            "2 x N x 4 B, triad 3 x N x 4 B, write-allocate not counted)"
        ),
        Text(f"{ideal}: {found.theoretical.derivation}", style="dim"),
    ]
    if not cpu and found.fp32_math != "ieee" and "fp32" in found.matmul_flops_per_s:
        lines.append(
            Text(
                "fp32 here was measured before IEEE fp32 and TF32 were separate rows: it may be "
                "a TF32 rate (`accelscope ceilings --device cuda --refresh` measures both)",
                style="yellow",
            )
        )
    if found.by_threads:
        per = "; ".join(
            f"{t} thread(s): " + ", ".join(f"{d} {si_rate(r)}" for d, r in rates.items())
            for t, rates in sorted(found.by_threads.items())
        )
        lines.append(Text(f"by threads: {per}", style="dim"))
    lines += [Text(f"note: {note}", style="dim") for note in found.notes]
    lines.append(
        Text(
            f"measured {found.measured_at}, {found.trials} kernels in "
            f"{found.search_s:.0f} s; fingerprint {found.environment_fingerprint}",
            style="dim",
        )
    )
    return Group(*lines)


def roofline_view(profile: RooflineAnalysis, limit: int = 25) -> Group:
    """Operators by measured time (top ``limit``), then the model-level summary."""
    table = Table(
        title=f"roofline: {profile.model} {profile.backend} {profile.precision} "
        f"batch {profile.batch_size} ({profile.device}, {profile.threads} threads)",
        title_justify="left",
    )
    headers = (
        "operator",
        "dtype",
        "calls",
        "GFLOP",
        "MB",
        "FLOP/B",
        "time ms",
        "floor ms",
        "achieved",
        "attainable",
        "eff",
        "class",
    )
    for header in headers:
        table.add_column(
            header, justify="left" if header in ("operator", "dtype", "class") else "right"
        )
    ordered = sorted(profile.operators, key=lambda op: -op.measured_time_s)
    for op in ordered[:limit]:
        ai = op.intensity_flops_per_byte
        eff = op.efficiency
        flops = f"{op.flops / 1e9:,.3f}" + ("" if op.flops_counted else " ?")
        table.add_row(
            Text(op.name.removeprefix("aten::")),
            op.dtype,
            str(op.calls),
            flops,
            f"{op.bytes / 1e6:,.1f}",
            "—" if ai is None else f"{ai:,.1f}",
            ms(op.measured_time_s),
            ms(op.floor_time_s),
            si_rate(op.achieved_flops_per_s),
            si_rate(op.attainable_flops_per_s),
            "—" if eff is None else f"{eff:.0%}",
            op.bound,
        )
    lines: list[RenderableType] = [table]
    if len(ordered) > limit:
        lines.append(
            Text(f"… {len(ordered) - limit} more operators (see --json or the report)", style="dim")
        )
    lost = ", ".join(
        f"{op.name.removeprefix('aten::')} ({op.dtype}) {op.lost_time_s * 1e3:,.1f} ms"
        for op in profile.top_lost(5)
    )
    lines += [
        Text(
            f"total {profile.total_flops / 1e9:,.2f} GFLOP, {format_bytes(profile.total_bytes)} "
            f"moved (lower bound) per batch"
        ),
        Text(
            f"floor {ms(profile.floor_time_s)} ms = Σ max(FLOPs/peak, bytes/bandwidth); measured "
            f"{ms(profile.measured_time_s)} ms (un-profiled median, ±"
            f"{profile.measured_ci_rel:.1%}); measured/floor {profile.gap:,.1f}x"
        ),
        Text(
            f"MFU {profile.mfu:.1%} of the {profile.precision} peak "
            f"{si_rate(profile.model_peak_flops_per_s)}; profiled operator time "
            f"{ms(profile.profiled_time_s)} ms"
        ),
        Text(f"most time lost vs floor: {lost}"),
    ]
    if profile.uncounted:
        lines.append(
            Text(
                f"no FLOP formula (FLOPs unknown, not 0): {', '.join(profile.uncounted)}",
                style="yellow",
            )
        )
    above = profile.above_ceiling
    if above:
        names = ", ".join(f"{op.name} ({op.dtype})" for op in above)
        lines.append(
            Text(
                f"ABOVE the compute ceiling (the ceiling search missed a faster kernel; "
                f"rerun `accelscope ceilings --refresh --budget 10m`): {names}",
                style="bold red",
            )
        )
    lines += [Text(f"note: {note}", style="dim") for note in profile.notes]
    return Group(*lines)
