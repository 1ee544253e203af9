"""``--device cuda:N``: parsing, the ordinal in a configuration's identity, and the check that
refuses a GPU this machine does not have (fake GPUs: no GPU needed).

Covers: accelscope.spec, accelscope.hardware.gpu."""

from __future__ import annotations

import pytest

from accelscope.errors import BadInputError, NotAvailableError
from accelscope.hardware.fingerprint import collect_environment
from accelscope.hardware.gpu import check_device
from accelscope.spec import Device, DeviceRef, Precision, RunSpec, parse_device_ref, parse_switches
from accelscope.testing.fake_gpus import H100_SXM, L4, FakeGpus


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu", DeviceRef(Device.CPU)),
        ("cuda", DeviceRef(Device.CUDA, 0)),
        ("CUDA:0", DeviceRef(Device.CUDA, 0)),
        ("cuda:3", DeviceRef(Device.CUDA, 3)),
        (" cuda:12 ", DeviceRef(Device.CUDA, 12)),
    ],
)
def test_devices_parse(text: str, expected: DeviceRef) -> None:
    assert parse_device_ref(text) == expected
    assert parse_device_ref(str(expected)) == expected


@pytest.mark.parametrize(
    ("text", "mention"),
    [
        ("tpu", "unknown device"),
        ("cuda:", "CUDA ordinal"),
        ("cuda:one", "CUDA ordinal"),
        ("cuda:-1", "CUDA ordinal"),
        ("cpu:1", "cpu takes no index"),
    ],
)
def test_bad_devices_are_one_line(text: str, mention: str) -> None:
    with pytest.raises(BadInputError, match=mention):
        parse_device_ref(text)


def test_switches_parse() -> None:
    assert parse_switches("on") == (True,) and parse_switches("OFF") == (False,)
    assert parse_switches("off,on,off") == (False, True)
    assert parse_switches(["true", "no"]) == (True, False)
    with pytest.raises(BadInputError, match="--tf32 'maybe': give on or off"):
        parse_switches("maybe", "--tf32")


def _spec(**fields: object) -> RunSpec:
    values: dict[str, object] = dict(
        model="m", backend="eager", precision=Precision.FP32, batch_size=8, threads=2
    )
    values.update(fields)
    return RunSpec(**values)  # type: ignore[arg-type]


def test_the_ordinal_and_tf32_are_identity_only_when_set() -> None:
    """Keys stored before either existed stay the keys of the same configurations."""
    plain = _spec(device=Device.CUDA)
    assert "device_index" not in plain.to_dict() and "tf32" not in plain.to_dict()
    second = _spec(device=Device.CUDA, device_index=1)
    tf32 = _spec(device=Device.CUDA, tf32=True)
    assert len({plain.key, second.key, tf32.key}) == 3
    for spec in (plain, second, tf32):
        assert RunSpec.from_dict(spec.to_dict()) == spec
    assert plain.label() == "eager/fp32/b8/t2"
    assert second.label() == "eager/fp32/b8/t2/cuda:1"
    assert tf32.label() == "eager/tf32/b8/t2" and tf32.precision_label == "tf32"
    assert _spec(precision=Precision.BF16, tf32=True).precision_label == "bf16+tf32"
    assert second.device_ref == DeviceRef(Device.CUDA, 1)
    with pytest.raises(BadInputError, match="cpu takes no index"):
        _spec(device_index=1)


def test_check_device_names_the_gpus_there_are() -> None:
    with FakeGpus([H100_SXM, L4]) as gpus:
        env = collect_environment()
    assert [(g.index, g.name) for g in env.gpus] == [(0, H100_SXM.name), (1, L4.name)]
    assert not gpus.touched_device  # discovery reads device facts only
    check_device(DeviceRef(Device.CUDA, 1), env.gpus)
    check_device(DeviceRef(Device.CPU), ())
    with pytest.raises(BadInputError) as missing:
        check_device(DeviceRef(Device.CUDA, 2), env.gpus)
    assert missing.value.message == (
        "device cuda:2 does not exist: 2 CUDA device(s) visible "
        "(cuda:0 NVIDIA H100 80GB HBM3, cuda:1 NVIDIA L4)"
    )
    with pytest.raises(NotAvailableError, match="no CUDA device found"):
        check_device(DeviceRef(Device.CUDA), ())


def test_fake_gpus_put_everything_back() -> None:
    import torch

    before = (torch.cuda.is_available, torch.cuda.get_device_properties, torch.version.cuda)
    with FakeGpus() as gpus:
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        with pytest.raises(RuntimeError, match="would initialise CUDA"):
            torch.zeros(1).to("cuda")  # C++ asks torch.cuda._lazy_init first
    assert gpus.touched_device and "_lazy_init" in gpus.calls
    assert (torch.cuda.is_available, torch.cuda.get_device_properties, torch.version.cuda) == before
    assert collect_environment().gpus == () or torch.cuda.is_available()
