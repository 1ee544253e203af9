"""Hand-made roofline ceilings for the roofline tests (the analysis, the CLI and the report)."""

from __future__ import annotations

from accelscope.roofline.ceilings import Ceilings, KernelPeak, Theoretical

PEAK = 1e12  # FLOP/s
BANDWIDTH = 1e10  # B/s -> ridge at 100 FLOP/byte


def make_ceilings(**overrides: object) -> Ceilings:
    values: dict[str, object] = dict(
        device="cpu",
        device_name="Test CPU",
        environment_fingerprint="f" * 16,
        measured_at="2026-11-21T00:00:00+00:00",
        threads=2,
        matmul_flops_per_s={"fp32": PEAK, "bf16": 4 * PEAK},
        bandwidth_bytes_per_s=BANDWIDTH,
        bandwidth_detail_bytes_per_s={"copy": 0.9 * BANDWIDTH, "triad": BANDWIDTH},
        theoretical=Theoretical(
            flops_per_s={"fp32": 2 * PEAK, "bf16": 8 * PEAK}, derivation="2 cores x ..."
        ),
        peaks={
            "fp32": KernelPeak(
                family="mm", shape=(64, 64, 64), threads=2, flops_per_s=PEAK, path="torch.mm"
            )
        },
        by_threads={1: {"fp32": PEAK / 2}, 2: {"fp32": PEAK, "bf16": 4 * PEAK}},
    )
    values.update(overrides)
    return Ceilings(**values)  # type: ignore[arg-type]
