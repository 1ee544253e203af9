"""``--device cuda[:N]`` and ``--tf32`` on every command that runs a model, through the real
command line on fake GPUs: the flags reach the requests, and a GPU the machine does not have is
one line, exit 2, before anything is loaded, measured or written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelscope.cli import main
from accelscope.spec import Device
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fake_gpus import H100_SXM, FakeGpus

INPUT = ("--input", "x:N,4")


@pytest.fixture
def factory(tmp_path: Path) -> str:
    path = tmp_path / "tiny.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 3)\n")
    return f"{path}:make"


@pytest.fixture
def one_gpu() -> Iterator[FakeGpus]:
    with FakeGpus([H100_SXM]) as gpus:
        yield gpus


def _commands(factory: str, script: Path) -> dict[str, list[str]]:
    return {
        "measure": ["measure", factory, *INPUT, "--budget", "1s"],
        "bench": ["bench", factory, *INPUT, "--backend", "eager"],
        "load": ["load", factory, *INPUT, "--rate", "5", "--min-duration", "1s"],
        "roofline": ["roofline", factory, *INPUT],
        "ceilings": ["ceilings"],
        "doctor": ["doctor", str(script)],
    }


@pytest.mark.parametrize("command", ["measure", "bench", "load", "roofline", "ceilings", "doctor"])
def test_a_gpu_that_does_not_exist_is_refused_before_any_work(
    command: str, factory: str, tmp_path: Path, cli: CliRunner, one_gpu: FakeGpus
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    store = tmp_path / "s" / "r.db"
    args = [*_commands(factory, script)[command], "--device", "cuda:1", "--store", str(store)]
    code, _, err = cli(*args)
    assert_one_line_error(code, err, "cuda:1")
    assert "1" in err and ("does not exist" in err or "not available" in err)
    assert not store.parent.exists()
    assert not one_gpu.touched_device, one_gpu.calls


@pytest.mark.parametrize(
    ("flags", "mention"),
    [
        (["--device", "cuda:x"], "CUDA ordinal"),
        (["--device", "cpu:1"], "cpu takes no index"),
        (["--device", "tpu"], "unknown device"),
        (["--tf32", "maybe"], "--tf32 'maybe': give on or off"),
        (["--tf32", "off,on"], "--tf32 takes one value here"),
    ],
)
def test_bad_flags_are_one_line(
    flags: list[str], mention: str, factory: str, tmp_path: Path, cli: CliRunner
) -> None:
    code, _, err = cli("measure", factory, *INPUT, *flags, "--store", str(tmp_path / "s" / "r.db"))
    assert_one_line_error(code, err, mention)
    assert not (tmp_path / "s").exists()


def test_tf32_on_the_cpu_is_refused(factory: str, tmp_path: Path, cli: CliRunner) -> None:
    store = str(tmp_path / "s" / "r.db")
    for args in (["bench", factory, *INPUT], ["roofline", factory, *INPUT]):
        code, _, err = cli(*args, "--tf32", "on", "--store", store)
        assert_one_line_error(code, err, "--tf32 on needs --device cuda")
    code, _, err = cli("measure", factory, *INPUT, "--tf32", "on", "--store", store)
    assert_one_line_error(code, err, "TF32 is a CUDA tensor-core mode")
    assert not (tmp_path / "s").exists()


class _Called(Exception):
    def __init__(self, request: Any) -> None:
        super().__init__("called")
        self.request = request


def _request(monkeypatch: pytest.MonkeyPatch, module: str, function: str, *args: str) -> Any:
    """Run ``accelscope ARGS`` up to the workflow call; return the request it was given."""
    import importlib

    def capture(request: Any, **kwargs: Any) -> None:
        raise _Called(request)

    monkeypatch.setattr(importlib.import_module(module), function, capture)
    with pytest.raises(_Called) as called:
        main(["--debug", *args])
    return called.value.request


def test_the_flags_reach_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = ("--device", "cuda:1")
    measure = _request(
        monkeypatch,
        "accelscope.commands.measure.workflow",
        "measure",
        "measure",
        *gpu,
        "--tf32",
        "on",
    )
    assert (measure.device, measure.device_index, measure.tf32) == (Device.CUDA, 1, True)
    bench = _request(
        monkeypatch,
        "accelscope.commands.bench.workflow",
        "bench",
        "bench",
        *gpu,
        "--tf32",
        "off,on",
    )
    assert (bench.device, bench.device_index, bench.tf32) == (Device.CUDA, 1, (False, True))
    load = _request(
        monkeypatch, "accelscope.commands.load.workflow", "load", "load", "m", *gpu, "--tf32", "on"
    )
    assert (load.device, load.device_index, load.tf32) == (Device.CUDA, 1, True)
    roofline = _request(
        monkeypatch, "accelscope.commands.roofline.workflow", "roofline", "roofline", "m", *gpu
    )
    assert (roofline.device, roofline.device_index, roofline.tf32) == (Device.CUDA, 1, False)
    ceilings = _request(
        monkeypatch, "accelscope.commands.roofline.workflow", "ceilings", "ceilings", *gpu
    )
    assert (ceilings.device, ceilings.device_index) == (Device.CUDA, 1)
    plain = _request(
        monkeypatch,
        "accelscope.commands.measure.workflow",
        "measure",
        "measure",
        "--device",
        "cuda",
    )
    assert (plain.device, plain.device_index, plain.tf32) == (Device.CUDA, 0, False)


def test_a_config_file_gives_the_same_device(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[bench]\ndevice = "cuda:2"\ntf32 = "off,on"\n')
    from_file = _request(
        monkeypatch, "accelscope.commands.bench.workflow", "bench", "bench", "--config", str(config)
    )
    from_flags = _request(
        monkeypatch,
        "accelscope.commands.bench.workflow",
        "bench",
        "bench",
        "--device",
        "cuda:2",
        "--tf32",
        "off,on",
    )
    assert from_file == from_flags and from_file.device_index == 2


def test_gate_refuses_a_gpu_ordinal_it_would_not_measure_on(cli: CliRunner, tmp_path: Path) -> None:
    """gate measures both sides on the first visible GPU: ``cuda:1`` is refused, naming the
    way to choose that GPU, before anything is measured or stored."""
    store = tmp_path / "s" / "r.db"
    code, _, err = cli("gate", "digits-cnn", "--device", "cuda:1", "--store", str(store))
    assert_one_line_error(code, err, "--device cuda:1", "CUDA_VISIBLE_DEVICES=1")
    assert not store.parent.exists()
