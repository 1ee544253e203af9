"""NvmlSource against the fake NVML: each GPM metric's own return code, memory v2 with its
fallback to v1, the GPU selection, MIG instances and the energy counter in each sample."""

from __future__ import annotations

import pytest

from accelscope.hardware.telemetry import NvmlSource
from accelscope.testing import FakeClock
from accelscope.testing.nvml import FakeNvml

GIB = 2**30


def test_a_refused_gpm_metric_is_not_measured_never_zero() -> None:
    nvml = FakeNvml(gpm=True, refused_metrics=(FakeNvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,))
    source = NvmlSource(nvml)
    (gpu,) = source.sample()
    assert gpu.sm_active_percent == pytest.approx(61.5)
    assert gpu.tensor_active_percent is None  # the call succeeded; this metric did not
    assert gpu.gr_active_percent == pytest.approx(80.0)
    assert gpu.dram_active_percent == pytest.approx(25.0)
    source.sample()
    (note,) = [n for n in source.notes if "tensor" in n]  # said once, not per sample
    assert "refused (NVML return 3)" in note and "not measured" in note


def test_a_nan_gpm_metric_is_a_gap_and_the_sample_stays_json() -> None:
    """An H100's driver answered NaN (with success) for a GPM metric while the GPU idled: the
    doctor then could not store its telemetry document. NaN is a gap, never a figure."""
    import json

    nvml = FakeNvml(gpm=True, nan_metrics=(FakeNvml.NVML_GPM_METRIC_DRAM_BW_UTIL,))
    source = NvmlSource(nvml)
    (gpu,) = source.sample()
    assert gpu.dram_active_percent is None
    assert gpu.sm_active_percent == pytest.approx(61.5)
    json.dumps(gpu.__dict__, allow_nan=False)


def test_memory_v2_leaves_out_the_driver_reservation() -> None:
    source = NvmlSource(FakeNvml())
    (gpu,) = source.sample()
    assert gpu.memory_used_bytes == GIB // 2  # v1 would say 1 GiB: reservation included
    assert gpu.memory_total_bytes == 16 * GIB
    assert not [n for n in source.notes if "memory" in n]


def test_memory_falls_back_to_v1_once_and_says_so() -> None:
    source = NvmlSource(FakeNvml(memory_v2=False))
    first, second = source.sample()[0], source.sample()[0]
    assert first.memory_used_bytes == second.memory_used_bytes == GIB
    (note,) = [n for n in source.notes if "memory v2" in n]
    assert "includes the driver's reservation" in note


def test_gpu_selection_and_missing_indices() -> None:
    nvml = FakeNvml(gpus=("NVIDIA H100 80GB HBM3",) * 3)
    source = NvmlSource(nvml, indices=(0, 2, 5))
    assert source.count == 3 and source.missing == (5,)
    assert [g.index for g in source.sample()] == [0, 2]
    assert source.status == "measured: NVML, 2 GPU(s)"


def test_mig_instances_are_sampled_one_by_one() -> None:
    nvml = FakeNvml(
        gpus=("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"), mig={0: ("3g.40gb", "1g.10gb")}
    )
    source = NvmlSource(nvml, mig=True)
    assert [(m.parent_index, m.gpu_instance_id, m.profile) for m in source.instances] == [
        (0, 1, "3g.40gb"),
        (0, 2, "1g.10gb"),
    ]
    assert "2 MIG instance(s)" in source.status
    samples = source.sample()
    whole = {s.index: s for s in samples if s.gpu_instance_id is None}
    instances = {s.gpu_instance_id: s for s in samples if s.gpu_instance_id is not None}
    # MIG on: utilisation is not supported (None, not 0); power and energy are the GPU's
    assert whole[0].utilisation_percent is None and whole[0].power_w == pytest.approx(350.0)
    assert whole[0].sm_active_percent is None  # GPM is read per instance there
    assert whole[1].utilisation_percent == 87 and whole[1].sm_active_percent == pytest.approx(61.5)
    first = instances[1]
    assert first.index == 0 and first.mig_profile == "3g.40gb"
    assert first.utilisation_percent is None and first.power_w is None and first.energy_mj is None
    assert first.sm_active_percent == pytest.approx(20.0)  # nvmlGpmMigSampleGet, instance 1
    assert instances[2].tensor_active_percent == pytest.approx(20.0)
    assert first.memory_total_bytes == 40 * GIB and first.memory_used_bytes == GIB
    assert any("MIG mode" in n for n in source.notes)
    source.close()
    assert nvml.shutdown


def test_without_mig_sampling_a_mig_gpu_is_one_device() -> None:
    source = NvmlSource(FakeNvml(mig={0: ("7g.80gb",)}))
    (gpu,) = source.sample()
    assert gpu.utilisation_percent is None and gpu.gpu_instance_id is None


def test_each_sample_reads_the_energy_counter() -> None:
    clock = FakeClock()
    nvml = FakeNvml(clock=clock, power_w=400.0, energy_update_period_s=0.1)
    source = NvmlSource(nvml)
    before = source.sample()[0].energy_mj
    clock.advance(1.0)
    after = source.sample()[0].energy_mj
    assert before is not None and after is not None and after - before == 400_000  # 400 J
    assert NvmlSource(FakeNvml(energy=False)).sample()[0].energy_mj is None


def test_nvml_that_does_not_initialise_says_why() -> None:
    source = NvmlSource(FakeNvml(init_error="Driver Not Loaded"))
    assert source.status == "not available: NVML did not initialise (Driver Not Loaded)"
    assert source.sample() == ()


class _OldBinding:
    """An older nvidia-ml-py: no DRAM GPM constant and no memory v2."""

    def __init__(self, inner: FakeNvml) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name in ("NVML_GPM_METRIC_DRAM_BW_UTIL", "nvmlMemory_v2"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_an_older_binding_reads_what_it_can() -> None:
    source = NvmlSource(_OldBinding(FakeNvml()))
    (gpu,) = source.sample()
    assert gpu.sm_active_percent == pytest.approx(61.5)  # the other metrics still read
    assert gpu.dram_active_percent is None
    assert gpu.memory_used_bytes == GIB  # v1
    assert any("no memory v2" in n for n in source.notes)
