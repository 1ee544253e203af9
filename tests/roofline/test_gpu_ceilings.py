"""The CUDA ceilings through fakes: IEEE fp32 and TF32 as separate rows (each measured under its
own TF32 setting), the device ordinal, datasheet peaks (also without the clock fields CUDA 13
removed), and cached documents from before fp32 and TF32 were told apart.

Covers: accelscope.roofline.ceilings, accelscope.roofline.measure_ceilings,
accelscope.roofline.theoretical, accelscope.roofline.cache, accelscope.hardware.tf32."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from accelscope.documents import normalise_dtype
from accelscope.errors import BadInputError, NotAvailableError
from accelscope.hardware.fingerprint import Environment
from accelscope.hardware.tf32 import Fp32Math, read_fp32_math, restore_fp32_math, tf32_mode
from accelscope.roofline import measure_ceilings as mc
from accelscope.roofline.analysis import build_operators
from accelscope.roofline.cache import cache_path, save_cached
from accelscope.roofline.ceilings import Ceilings, KernelPeak, Theoretical
from accelscope.roofline.counting import OpRecord
from accelscope.roofline.kernel_search import Candidate
from accelscope.roofline.kernels import Kernel, families, kernel_flops
from accelscope.roofline.measure_ceilings import CeilingsPlan, measure_ceilings
from accelscope.roofline.theoretical import datasheet_for, theoretical_gpu
from accelscope.spec import Device
from accelscope.testing import FakeClock, fixed_environment
from accelscope.testing.fake_gpus import H100_SXM, H100_SXM_CUDA12, L4, FakeGpu, FakeGpus

H100_PEAKS = {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "int8": 1979e12}


class FakeGpuKernels:
    """Kernels whose call time follows a rate table; a convolution's fp32 runs at the TF32 rate
    when TF32 is allowed (what cuDNN does by default), a matrix product's only when asked."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.seen: list[tuple[str, str, str, str]] = []  # dtype, family, device, fp32 math

    def rate(self, dtype: str, family: str, math: str) -> float:
        if dtype in ("fp32", "tf32"):
            return 400e12 if math == "tf32" else 50e12
        return {"bf16": 700e12, "fp16": 700e12, "int8": 1200e12}[dtype]

    def build(self, candidate: Candidate, dtype: str, device: str) -> Kernel | None:
        math = read_fp32_math()
        conv_math = math.conv if candidate.family.startswith("conv") else math.matmul
        self.seen.append((dtype, candidate.family, device, conv_math))
        flops = kernel_flops(candidate)
        seconds = flops / self.rate(dtype, candidate.family, conv_math)

        def call() -> None:
            self.clock.advance(seconds)

        call()
        return Kernel(call, flops, f"fake {candidate.family}")


def _environment(environment: Environment, *names: str) -> Environment:
    gpu = environment.gpus[0]
    gpus = tuple(replace(gpu, index=i, name=name) for i, name in enumerate(names))
    return replace(environment, gpus=gpus)


def _measure(plan: CeilingsPlan, env: Environment, kernels: FakeGpuKernels) -> Ceilings:
    return measure_ceilings(
        plan,
        env,
        builder=kernels.build,
        clock=kernels.clock,
        streams=lambda n, device: {"copy": 3.0e12},
        theoretical=Theoretical(flops_per_s=H100_PEAKS, derivation="datasheet (fake)"),
    )


def test_fp32_is_ieee_and_tf32_is_its_own_row() -> None:
    """With torch's defaults (IEEE products, TF32 convolutions) the fp32 search would keep a
    TF32 convolution rate; here every fp32 kernel runs with TF32 off and every tf32 one with
    it on, so the two rows hold what they say."""
    kernels = FakeGpuKernels(FakeClock())
    plan = CeilingsPlan(device="cuda", budget_s=2.0, dtypes=("fp32", "tf32"), min_time_s=0.0)
    with tf32_mode(False):  # whatever the suite left, set back afterwards
        restore_fp32_math(Fp32Math(matmul="ieee", conv="tf32"))  # torch's default state
        before = read_fp32_math()
        found = _measure(plan, _environment(fixed_environment(), "NVIDIA H100 80GB HBM3"), kernels)
        assert read_fp32_math() == before  # set back after the search
    maths = {(dtype, math) for dtype, _, _, math in kernels.seen}
    assert maths == {("fp32", "ieee"), ("tf32", "tf32")}
    assert found.matmul_flops_per_s["fp32"] == pytest.approx(50e12)
    assert found.matmul_flops_per_s["tf32"] == pytest.approx(400e12)
    assert found.fp32_math == "ieee" and found.device == "cuda" and found.device_index == 0
    assert list(found.matmul_flops_per_s) == ["fp32", "tf32"]  # display order
    assert found.fraction_of_theoretical("fp32") == pytest.approx(50 / 67)
    assert not any("datasheet peak" in note for note in found.notes)


def test_every_cuda_dtype_by_default_and_none_of_them_tf32_on_a_cpu() -> None:
    assert CeilingsPlan(device="cuda").dtypes == ("fp32", "tf32", "bf16", "fp16", "int8")
    assert CeilingsPlan(device="cpu").dtypes == ("fp32", "bf16", "fp16", "int8")
    with pytest.raises(BadInputError, match="a CPU has no TF32"):
        CeilingsPlan(device="cpu", dtypes=("tf32",))
    with pytest.raises(BadInputError, match="CUDA ordinal"):
        CeilingsPlan(device="cpu", device_index=1)
    assert families("tf32", "cpu") == () and families("tf32", "cuda:0") == families("fp32", "cuda")


def test_the_device_ordinal_reaches_every_kernel_and_the_document() -> None:
    kernels = FakeGpuKernels(FakeClock())
    seen_streams: list[str] = []
    env = _environment(fixed_environment(), "NVIDIA L4", "NVIDIA H100 80GB HBM3")
    plan = CeilingsPlan(
        device="cuda", budget_s=1.0, dtypes=("bf16",), min_time_s=0.0, device_index=1
    )
    found = measure_ceilings(
        plan,
        env,
        builder=kernels.build,
        clock=kernels.clock,
        streams=lambda n, device: seen_streams.append(device) or {"copy": 3e12},
        theoretical=Theoretical(),
    )
    assert {device for _, _, device, _ in kernels.seen} == {"cuda:1"}
    assert seen_streams == ["cuda:1"]
    assert found.device_name == "NVIDIA H100 80GB HBM3" and found.device_index == 1
    assert found.threads == 0 and found.by_threads == {}


def test_a_peak_above_the_datasheet_is_explained() -> None:
    notes = mc._above_isa_notes(
        {
            "fp32": KernelPeak(
                family="conv3x3_nhwc", shape=(8, 256, 14), threads=0, flops_per_s=9e13
            )
        },
        Theoretical(flops_per_s={"fp32": 6.7e13}),
        "cuda",
    )
    assert len(notes) == 1 and "> datasheet peak" in notes[0] and "Winograd" in notes[0]


# ------------------------------------------------------------------------------ theoretical


def test_datasheet_peaks_need_no_clock() -> None:
    """torch built for CUDA 13 reports no clock: a known GPU still has its datasheet peaks."""
    ideal = theoretical_gpu("NVIDIA H100 80GB HBM3", "9.0", 132, None, None, None)
    assert ideal.flops_per_s["bf16"] == pytest.approx(989.5e12)  # 1979 with sparsity, halved
    assert ideal.flops_per_s["tf32"] == pytest.approx(494.5e12)
    assert ideal.flops_per_s["fp32"] == pytest.approx(67e12)  # IEEE, the CUDA cores
    assert ideal.bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert "H100 SXM datasheet" in ideal.derivation
    assert "nvidia.com/en-us/data-center/h100" in ideal.derivation


def test_datasheet_wins_over_the_boost_clock() -> None:
    """The driver's maximum boost (1980 MHz) would give 1.07 PFLOP/s bf16 for an H200; the
    datasheet's 989.5 TFLOP/s is at the clock it assumes."""
    ideal = theoretical_gpu("NVIDIA H200", "9.0", 132, 1_980_000, 3_201_000, 6144)
    assert ideal.flops_per_s["bf16"] == pytest.approx(989.5e12)
    assert ideal.bandwidth_bytes_per_s == pytest.approx(4.8e12)


@pytest.mark.parametrize(
    ("name", "product"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA B200", None),
    ],
)
def test_datasheets_are_found_by_the_words_of_the_name(name: str, product: str | None) -> None:
    sheet = datasheet_for(name)
    assert (sheet.product if sheet else None) == product


def test_a_partition_gets_its_share_of_the_sms() -> None:
    mig = theoretical_gpu("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "9.0", 60, None, None, None)
    assert mig.flops_per_s["bf16"] == pytest.approx(989.5e12 * 60 / 132)
    assert "60/132 SMs" in mig.derivation


def test_without_a_datasheet_the_reported_clock_or_not_known() -> None:
    ada = theoretical_gpu("NVIDIA L40", "8.9", 142, 2_490_000, 2_250_000, 384)
    assert ada.flops_per_s["bf16"] == pytest.approx(142 * 2.49e9 * 1024)
    assert ada.flops_per_s["tf32"] == pytest.approx(142 * 2.49e9 * 512)
    assert "maximum SM clock the driver reports" in ada.derivation
    assert ada.bandwidth_bytes_per_s == pytest.approx(2 * 2.25e9 * 384 / 8)
    cuda13 = theoretical_gpu("NVIDIA L40", "8.9", 142, None, None, None)
    assert cuda13.flops_per_s == {} and cuda13.bandwidth_bytes_per_s is None
    assert "not known" in cuda13.derivation and "CUDA 13" in cuda13.derivation
    blackwell = theoretical_gpu("NVIDIA B200", "10.0", 148, 1_965_000, None, None)
    assert blackwell.flops_per_s == {} and "no per-SM table for sm_10.0" in blackwell.derivation


def test_device_properties_without_clock_fields_do_not_crash() -> None:
    unknown = FakeGpu(
        name="NVIDIA RTX Test",
        total_memory=1 << 34,
        major=8,
        minor=9,
        multi_processor_count=100,
        uuid="00000000-1111-2222-3333-444455556666",
    )
    with FakeGpus([H100_SXM, unknown, H100_SXM_CUDA12]) as gpus:
        name, h100 = mc._gpu_theoretical(0)
        _, rtx = mc._gpu_theoretical(1)
        _, cuda12 = mc._gpu_theoretical(2)
        l2 = mc._gpu_l2_bytes(2)
    assert name == "NVIDIA H100 80GB HBM3" and h100.flops_per_s["tf32"] == pytest.approx(494.5e12)
    assert rtx.flops_per_s == {} and "not known" in rtx.derivation
    assert cuda12.flops_per_s == h100.flops_per_s  # the datasheet, not the boost clock
    assert l2 == 50 << 20
    assert not gpus.touched_device  # reading properties only


def test_the_l4_fake_matches_its_datasheet_row() -> None:
    ideal = theoretical_gpu(L4.name, "8.9", L4.multi_processor_count, None, None, None)
    assert ideal.flops_per_s["fp32"] == pytest.approx(30.3e12)
    assert ideal.bandwidth_bytes_per_s == pytest.approx(0.3e12)


# ------------------------------------------------------------------ documents and the cache


def _cuda_ceilings(**overrides: object) -> Ceilings:
    values: dict[str, object] = {
        "device": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "matmul_flops_per_s": {"fp32": 3.0e14, "bf16": 7.0e14},
        "bandwidth_bytes_per_s": 3.0e12,
    }
    values.update(overrides)
    return Ceilings(**values)  # type: ignore[arg-type]


def test_cuda_documents_from_before_tf32_measure_fp32_again() -> None:
    """A CUDA document stored before TF32 got its own row may hold a TF32 convolution rate as
    "fp32": it still loads, and a command needing fp32 or tf32 measures them again."""
    stored = _cuda_ceilings().model_dump(mode="json")
    for key in ("fp32_math", "device_index", "measured_dtypes"):
        stored.pop(key)
    old = Ceilings.from_payload(stored)
    assert old.fp32_math == "" and old.device_index == 0
    assert old.missing(("fp32", "bf16")) == ("fp32",)
    assert old.missing(("fp32", "tf32", "bf16", "fp16", "int8")) == ("fp32", "tf32")
    new = _cuda_ceilings(fp32_math="ieee", measured_dtypes=("fp32", "tf32", "bf16"))
    assert new.missing(("fp32", "tf32", "bf16")) == ()
    cpu = Ceilings.from_payload({**stored, "device": "cpu"})
    assert cpu.missing(("fp32", "bf16")) == ()  # a CPU's fp32 was always IEEE


def test_tf32_is_a_dtype_of_its_own() -> None:
    assert normalise_dtype("tf32") == "tf32" and normalise_dtype("float32") == "fp32"


def test_each_gpu_has_its_cache_file(tmp_path: Path) -> None:
    assert cache_path(tmp_path, "f" * 16, "cuda", 0).name == "ffffffffffffffff-cuda.json"
    assert cache_path(tmp_path, "f" * 16, "cuda", 0, 1).name == "ffffffffffffffff-cuda1.json"
    assert cache_path(tmp_path, "f" * 16, "cpu", 2).name == "ffffffffffffffff-cpu-t2.json"


def test_the_ceilings_command_remeasures_an_old_fp32(tmp_path: Path) -> None:
    from accelscope.commands.roofline.workflow import CeilingsRequest, ceilings

    env = _environment(fixed_environment(), "NVIDIA H100 80GB HBM3")
    old = _cuda_ceilings(measured_dtypes=("fp32", "bf16", "fp16", "int8"))
    save_cached(old, cache_path(tmp_path, env.fingerprint(), "cuda", 0))
    asked: list[tuple[str, ...]] = []

    def measure(plan: CeilingsPlan, environment: Environment, **kwargs: object) -> Ceilings:
        asked.append(plan.dtypes)
        assert plan.device == "cuda" and plan.device_index == 0
        found = _cuda_ceilings(
            fp32_math="ieee",
            matmul_flops_per_s={"fp32": 5.0e13, "tf32": 4.0e14},
            measured_dtypes=plan.dtypes,
        )
        extend = kwargs.get("extend")
        return mc._extended(extend, found) if isinstance(extend, Ceilings) else found

    outcome = ceilings(
        CeilingsRequest(Device.CUDA, dtypes=("fp32", "tf32", "bf16")),
        store_path=None,
        cache_dir=tmp_path,
        environment=env,
        measure=measure,
    )
    assert asked == [("fp32", "tf32")] and outcome.extended
    merged = outcome.ceilings
    assert merged.fp32_math == "ieee"
    assert merged.matmul_flops_per_s == {"fp32": 5.0e13, "bf16": 7.0e14, "tf32": 4.0e14}


def test_a_missing_gpu_ordinal_is_refused_before_measuring(tmp_path: Path) -> None:
    from accelscope.commands.roofline.workflow import CeilingsRequest, ceilings

    env = _environment(fixed_environment(), "NVIDIA H100 80GB HBM3")

    def measure(*args: object, **kwargs: object) -> Ceilings:
        raise AssertionError("nothing may be measured")

    with pytest.raises(BadInputError, match=r"cuda:2 does not exist: 1 CUDA device\(s\) visible"):
        ceilings(
            CeilingsRequest(Device.CUDA, device_index=2),
            store_path=tmp_path / "r.db",
            cache_dir=tmp_path,
            environment=env,
            measure=measure,
        )
    with pytest.raises(NotAvailableError, match="no CUDA device"):
        ceilings(
            CeilingsRequest(Device.CUDA),
            store_path=None,
            cache_dir=tmp_path,
            environment=replace(env, gpus=()),
            measure=measure,
        )
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------- the roofline


def test_with_tf32_on_fp32_operators_get_the_tf32_roof() -> None:
    ceilings = _cuda_ceilings(
        fp32_math="ieee", matmul_flops_per_s={"fp32": 5e13, "tf32": 4e14, "bf16": 7e14}
    )
    records = [
        OpRecord(
            name="aten::mm",
            category="matmul",
            dtype=dtype,
            flops=1e9,
            read_bytes=1,
            written_bytes=1,
        )
        for dtype in ("fp32", "bf16")
    ]
    ieee = build_operators(records, [1e-3, 1e-3], ceilings)
    tf32 = build_operators(records, [1e-3, 1e-3], ceilings, tf32=True)
    assert [(op.peak_dtype, op.peak_flops_per_s) for op in ieee] == [
        ("fp32", 5e13),
        ("bf16", 7e14),
    ]
    assert [(op.peak_dtype, op.peak_flops_per_s) for op in tf32] == [
        ("tf32", 4e14),
        ("bf16", 7e14),
    ]
    without = ceilings.model_copy(update={"matmul_flops_per_s": {"fp32": 5e13}})
    no_row = build_operators(records[:1], [1e-3], without, tf32=True)
    assert no_row[0].peak_dtype == "fp32"  # no tf32 row: fp32 stands in


def _render(found: Ceilings) -> str:
    from rich.console import Console

    from accelscope.commands.roofline.view import ceilings_view

    console = Console(width=200, record=True)
    console.print(ceilings_view(found))
    return console.export_text()


def test_the_view_shows_both_rows_against_the_datasheet() -> None:
    found = _cuda_ceilings(
        fp32_math="ieee",
        device_index=1,
        matmul_flops_per_s={"fp32": 5.0e13, "tf32": 4.0e14, "bf16": 7.0e14},
        theoretical=theoretical_gpu("NVIDIA H100 80GB HBM3", "9.0", 132, None, None, None),
    )
    text = _render(found)
    assert "(cuda:1)" in text and "datasheet peak" in text and "ISA" not in text
    assert _rows(text) == ["fp32", "tf32", "bf16", "fp16", "int8"]
    assert "75%" in text and "81%" in text  # 50/67 and 400/494.5
    assert "may be a TF32 rate" not in text
    old = _render(_cuda_ceilings())
    assert "may be a TF32 rate" in old


def test_a_cpu_view_has_no_tf32_row() -> None:
    from roofline_helpers import make_ceilings

    text = _render(make_ceilings())
    assert "ISA peak" in text and _rows(text) == ["fp32", "bf16", "fp16", "int8"]


def _rows(text: str) -> list[str]:
    """The dtype column of a rendered table."""
    return [line.split()[1] for line in text.splitlines() if line.startswith("│")]
