"""GPU discovery through faked torch.cuda, NVML and nvidia-smi (no GPU needed)."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest
import torch

from accelscope.hardware import gpu as gpu_mod
from accelscope.hardware.gpu import GpuInfo, discover_gpus, driver_version
from accelscope.serialise import dump, load

H200_BYTES = 150_754_820_096


def fake_props(name: str, total: int, major: int, minor: int, uuid: str | None) -> Any:
    return types.SimpleNamespace(
        name=name, total_memory=total, major=major, minor=minor, uuid=uuid, multi_processor_count=1
    )


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """torch.cuda reports an H200 and an A100; returns the indices properties were asked for."""
    asked: list[int] = []
    props = [
        fake_props("NVIDIA H200", H200_BYTES, 9, 0, "5e2f0c1a-1111-2222-3333-444455556666"),
        fake_props("NVIDIA A100-SXM4-80GB", 85_899_345_920, 8, 0, None),
    ]

    def get_props(index: int) -> Any:
        asked.append(index)
        return props[index]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", get_props)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(gpu_mod, "driver_version", lambda: "570.86.15")
    return asked


def test_discovers_each_device_with_its_properties(two_gpus: list[int]) -> None:
    gpus = discover_gpus()
    assert two_gpus == [0, 1]
    assert gpus[0] == GpuInfo(
        index=0,
        name="NVIDIA H200",
        memory_bytes=H200_BYTES,
        compute_capability="9.0",
        driver_version="570.86.15",
        cuda_runtime="12.8",
        uuid="GPU-5e2f0c1a-1111-2222-3333-444455556666",
    )
    assert gpus[1].compute_capability == "8.0" and gpus[1].uuid is None
    assert gpus[0].sm == "sm_90" and gpus[0].cc_tuple == (9, 0)


def test_one_broken_device_does_not_hide_the_others(
    two_gpus: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = fake_props("NVIDIA L4", 23_034_331_136, 8, 9, None)

    def get_props(index: int) -> Any:
        if index == 0:
            raise RuntimeError("CUDA error: unknown error")
        return good

    monkeypatch.setattr(torch.cuda, "get_device_properties", get_props)
    gpus = discover_gpus()
    assert [(g.index, g.name) for g in gpus] == [(1, "NVIDIA L4")]


def test_cpu_only_never_touches_device_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    touched: list[str] = []  # recorded, not raised: discover_gpus swallows exceptions

    def record(what: str, value: Any) -> Any:
        def call(*_args: object) -> Any:
            touched.append(what)
            return value

        return call

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", record("device_count", 1))
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", record("props", fake_props("X", 1, 9, 0, None))
    )
    monkeypatch.setattr(gpu_mod, "driver_version", record("driver", "1.0"))
    assert discover_gpus() == ()
    assert touched == []


def test_this_machine_without_cuda_gives_empty_tuple() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert discover_gpus() == ()


def test_broken_cuda_runtime_gives_empty_tuple(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> bool:
        raise RuntimeError("The NVIDIA driver on your system is too old")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    assert discover_gpus() == ()


def test_missing_torch_gives_empty_tuple(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    assert discover_gpus() == ()


def install_fake_pynvml(monkeypatch: pytest.MonkeyPatch, version: object, fail: bool) -> list[str]:
    calls: list[str] = []
    fake = types.ModuleType("pynvml")

    def init() -> None:
        calls.append("init")
        if fail:
            raise RuntimeError("NVMLError_LibraryNotFound")

    def get_version() -> object:
        calls.append("version")
        return version

    fake.nvmlInit = init  # type: ignore[attr-defined]
    fake.nvmlSystemGetDriverVersion = get_version  # type: ignore[attr-defined]
    fake.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return calls


@pytest.mark.parametrize("version", ["570.86.15", b"570.86.15"])
def test_driver_version_via_nvml(monkeypatch: pytest.MonkeyPatch, version: object) -> None:
    calls = install_fake_pynvml(monkeypatch, version, fail=False)
    monkeypatch.setattr("accelscope.hardware.gpu.shutil.which", lambda _name: None)
    assert driver_version() == "570.86.15"
    assert calls == ["init", "version", "shutdown"]


def test_driver_version_falls_back_to_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_pynvml(monkeypatch, None, fail=True)
    seen: dict[str, Any] = {}

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen["cmd"], seen["timeout"] = cmd, kwargs.get("timeout")
        return subprocess.CompletedProcess(cmd, 0, stdout="550.54.15\n550.54.15\n", stderr="")

    monkeypatch.setattr("accelscope.hardware.gpu.shutil.which", lambda _name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr("accelscope.hardware.gpu.subprocess.run", fake_run)
    assert driver_version() == "550.54.15"
    assert seen["cmd"][1:] == ["--query-gpu=driver_version", "--format=csv,noheader"]
    assert seen["timeout"] is not None and seen["timeout"] <= 5


@pytest.mark.parametrize(
    "outcome",
    [
        subprocess.TimeoutExpired(["nvidia-smi"], 2.0),
        OSError("exec format error"),
        subprocess.CompletedProcess(["nvidia-smi"], 9, stdout="", stderr="NVML failed"),
    ],
)
def test_driver_version_none_when_nvidia_smi_fails(
    monkeypatch: pytest.MonkeyPatch, outcome: object
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)

    def fake_run(cmd: list[str], **_kwargs: Any) -> object:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr("accelscope.hardware.gpu.shutil.which", lambda _name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr("accelscope.hardware.gpu.subprocess.run", fake_run)
    assert driver_version() is None


def test_driver_version_none_without_nvml_or_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr("accelscope.hardware.gpu.shutil.which", lambda _name: None)
    assert driver_version() is None


def test_gpuinfo_round_trip_and_unknown_capability() -> None:
    info = GpuInfo(
        index=0,
        name="NVIDIA H200",
        memory_bytes=H200_BYTES,
        compute_capability="9.0",
        driver_version=None,
        cuda_runtime="12.8",
        uuid="GPU-abc",
    )
    assert load(GpuInfo, dump(info)) == info
    odd = GpuInfo(index=1, name="mystery", memory_bytes=1, compute_capability="gfx942")
    assert odd.cc_tuple is None and odd.sm == "sm_?"
